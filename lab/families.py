"""Every registered draft family's test inputs: the bundled pair (target + checkpoint) and synthesized pairs of
any seed (Family.synth), so a guarantee test parametrized over the registry attacks a new family the day it lands.

    FIXTURE_PAIRS[key]       the committed tiny pair of the family (fixtures/...)
    synth_pair(fam, d, s)    (target, checkpoint) written by the family's own synth hook under d with seed s;
                             two seeds give two models of one geometry: a foreign checkpoint for the other's target
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from irsurgeon.families import registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_PAIRS = {
    "qwen3_5": (ROOT / "fixtures" / "demo" / "target", ROOT / "fixtures" / "demo" / "ckpt"),
    "gemma4": (ROOT / "fixtures" / "gemma4" / "target", ROOT / "fixtures" / "gemma4" / "assistant"),
    "dflash": (ROOT / "fixtures" / "dflash" / "target", ROOT / "fixtures" / "dflash" / "ckpt"),
}
FAMILIES = [pytest.param(f, id=f.key) for f in registry.FAMILIES]


def fixture_pair(family, tmp: Path) -> tuple[Path, Path]:
    """A writable copy of the family's bundled target, and its checkpoint (read only)."""
    target, ckpt = FIXTURE_PAIRS[family.key]
    copy = tmp / f"{family.key}-target"
    shutil.copytree(target, copy)
    return copy, ckpt


def synth_pair(family, out: Path, seed: int) -> tuple[Path, Path]:
    parts = family.synth(family.synth_kinds[0], out, seed, False)
    return parts["target"], parts["ckpt"]
