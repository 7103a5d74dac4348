"""Shared fixtures: where the reference data lives, and how a test that needs it behaves without it.

The reference (`../shared/reference`, or $IRSURGEON_REFERENCE) holds seeded tiny Qwen3.5 checkpoints and what
optimum-intel exported from them. A test that needs it skips with the reason when it is absent, except under
CI=true, where it fails: CI must never pass by skipping.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the helpers package

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_ENV = "IRSURGEON_REFERENCE"


def reference_dir() -> Path:
    return Path(os.environ.get(REFERENCE_ENV, ROOT.parent / "shared" / "reference"))


def need(path: Path, what: str) -> Path:
    """Return path if it exists; otherwise skip (fail under CI=true) naming what is missing."""
    if path.exists():
        return path
    message = f"{what} not found at {path} (set {REFERENCE_ENV} to the reference directory)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def reference() -> Path:
    return need(reference_dir(), "reference data")


@pytest.fixture(scope="session")
def ckpt(reference):
    """ckpt("qwen35-dense") -> path of a reference checkpoint."""
    return lambda name: need(reference / "ckpt" / name, f"reference checkpoint {name}")


@pytest.fixture(scope="session")
def export(reference):
    """export("dense-fp16") -> path of an optimum-intel reference export."""
    return lambda name: need(reference / "export" / name, f"reference export {name}")


@pytest.fixture(scope="session")
def golden(reference):
    return lambda name: need(reference / "golden" / f"{name}.npz", f"golden file {name}")
