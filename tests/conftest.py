"""Shared fixtures: the reference data the tests compare with, and the fixtures more than one test module uses.

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


# ---- fixtures more than one test module uses ----

def fd_path(fd: int) -> str:
    return os.path.realpath(f"/proc/self/fd/{fd}")


@pytest.fixture
def advised(monkeypatch) -> list[tuple[str, int, int]]:
    """Every WILLNEED hint given: (file, offset, length)."""
    seen: list[tuple[str, int, int]] = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            seen.append((fd_path(fd), offset, length))
        return real(fd, offset, length, advice)
    monkeypatch.setattr(os, "posix_fadvise", record)
    return seen


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, int, int]]:
    """Every positional read the process makes: (file, offset, length)."""
    seen: list[tuple[str, int, int]] = []
    real_preadv, real_pread = os.preadv, os.pread

    def preadv(fd, buffers, offset, *rest):
        n = real_preadv(fd, buffers, offset, *rest)
        seen.append((fd_path(fd), offset, n))
        return n

    def pread(fd, n, offset):
        data = real_pread(fd, n, offset)
        seen.append((fd_path(fd), offset, len(data)))
        return data
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(os, "pread", pread)
    return seen


@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A synthesized qwen35-moe target, its fused checkpoint, and the same tensors one per expert."""
    from helpers.checkpoints import read_tensors, split_per_expert, write_variant
    from irsurgeon.families.qwen35_mtp import FAMILY
    out = tmp_path_factory.mktemp("moe")
    made = FAMILY.synth("qwen35-moe", out / "made", 4, False)
    per_expert = write_variant(made["ckpt"], out / "per-expert", split_per_expert(read_tensors(made["ckpt"])))
    return made["target"], made["ckpt"], per_expert
