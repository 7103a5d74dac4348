"""Shared fixtures: the reference data the tests compare with.

tests/data/reference (see its README.md) holds seeded tiny Qwen3.5 checkpoints, what optimum-intel exported from
them, golden MTP outputs and real published configs. It is part of the repository: a file missing there is a plain
failure. $IRSURGEON_REFERENCE points the tests at another copy of the same layout (e.g. a regenerated one).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).parent), str(ROOT)]  # the helpers package (tests/), the lab package (the root)
REFERENCE = ROOT / "tests" / "data" / "reference"
REFERENCE_ENV = "IRSURGEON_REFERENCE"


def reference_dir() -> Path:
    return Path(os.environ.get(REFERENCE_ENV) or REFERENCE)


@pytest.fixture(scope="session")
def reference() -> Path:
    return reference_dir()


@pytest.fixture(scope="session")
def ckpt(reference):
    """ckpt("qwen35-dense") -> path of a reference checkpoint."""
    return lambda name: reference / "ckpt" / name


@pytest.fixture(scope="session")
def export(reference):
    """export("dense-fp16") -> path of an optimum-intel reference export."""
    return lambda name: reference / "export" / name


@pytest.fixture(scope="session")
def golden(reference):
    """golden("dense-fp16") -> path of the golden MTP outputs of that export."""
    return lambda name: reference / "golden" / f"{name}.npz"
