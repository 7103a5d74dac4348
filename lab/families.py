"""Every registered draft family's test inputs: the bundled pair (target + checkpoint) and synthesized pairs of
any seed (Family.synth), so a guarantee test parametrized over the registry attacks a new family the day it lands.

    FIXTURE_PAIRS[key]       the committed tiny pair of the family: fixtures/<key>/target and fixtures/<key>/ckpt
    synth_pair(fam, d, s)    (target, checkpoint) written by the family's own synth hook under d with seed s;
                             two seeds give two models of one geometry: a foreign checkpoint for the other's target
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from irsurgeon.families import registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
# By convention, never by list: a family's bundled pair is fixtures/<its key>/target and fixtures/<its key>/ckpt
# (tests/test_house.py fails for a registered family without one, and for a pair folder no family registers).
FIXTURE_PAIRS = {f.key: (FIXTURES / f.key / "target", FIXTURES / f.key / "ckpt") for f in registry.FAMILIES}
WRITABLE = registry.writable()  # every name any family writes: what the flows pass to a transaction
FAMILIES = [pytest.param(f, id=f.key) for f in registry.FAMILIES]


def fixture_pair(family, tmp: Path) -> tuple[Path, Path]:
    """A writable copy of the family's bundled target, and its checkpoint (read only)."""
    target, ckpt = FIXTURE_PAIRS[family.key]
    copy = tmp / f"{family.key}-target"
    shutil.copytree(target, copy)
    return copy, ckpt


def synth_pair(family, out: Path, seed: int) -> tuple[Path, Path]:
    parts = family.synth(next(iter(family.synth_kinds)), out, seed, False)
    return parts["target"], parts["ckpt"]
