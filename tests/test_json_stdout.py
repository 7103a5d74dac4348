"""--json prints one JSON document on stdout and nothing else, also when nncf compresses (its rich progress bar,
written to sys.stdout, used to precede the document: `patch --json --weight-format int4`, `build-mtp --json
--weight-format int4`); the progress goes to stderr."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.families import FAMILIES, FIXTURE_PAIRS
from helpers.cli import result_of

ROOT = Path(__file__).resolve().parents[1]


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "irsurgeon.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


@pytest.mark.parametrize("family", FAMILIES)
def test_patch_json_with_nncf_is_one_document(family, tmp_path):
    source, ckpt = FIXTURE_PAIRS[family.key]
    target = shutil.copytree(source, tmp_path / "t")
    proc = cli("patch", target, "--checkpoint", ckpt, "--weight-format", "int8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = result_of(proc.stdout)  # the whole of stdout: one document
    assert doc["written"] and "Applying Weight Compression" in proc.stderr


def test_build_mtp_json_int4_is_one_document(tmp_path):
    _, ckpt = FIXTURE_PAIRS["qwen3_5"]
    proc = cli("build-mtp", ckpt, "-o", tmp_path / "head", "--weight-format", "int4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert result_of(proc.stdout)["weight_format"] == "int4"
