"""Fixtures the Qwen3.5 MTP family's test files share."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers.checkpoints import read_tensors, split_per_expert, write_variant
from irsurgeon.families.qwen35_mtp import FAMILY


@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A synthesized qwen35-moe target, its fused checkpoint, and the same tensors one per expert."""
    out = tmp_path_factory.mktemp("moe")
    made = FAMILY.synth("qwen35-moe", out / "made", 4, False)
    per_expert = write_variant(made["ckpt"], out / "per-expert", split_per_expert(read_tensors(made["ckpt"])))
    return made["target"], made["ckpt"], per_expert
