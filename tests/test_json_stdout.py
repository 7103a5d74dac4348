"""--json prints one JSON document on stdout and nothing else, also when nncf compresses (its rich progress bar,
written to sys.stdout, used to precede the document: `patch --json --weight-format int4`, `build-mtp --json
--weight-format int4`); the progress goes to stderr."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab import forkrun
from lab.families import FAMILIES, FIXTURE_PAIRS
from helpers.cli import result_of
from helpers.tiers import every_nth

ROOT = Path(__file__).resolve().parents[1]


def cli(*args) -> forkrun.Ran:
    """`python -m irsurgeon.cli ARGS` in a process of its own (lab.forkrun: nncf is imported there, as in a fresh
    one), stdout and stderr apart."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return forkrun.completed(forkrun.module("irsurgeon.cli"), args, env, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("family", every_nth(FAMILIES, 4))  # nncf's output is every family's: the rest extended
def test_patch_json_with_nncf_is_one_document(family, tmp_path):
    source, ckpt = FIXTURE_PAIRS[family.key]
    target = shutil.copytree(source, tmp_path / "t")
    proc = cli("patch", target, "--checkpoint", ckpt, "--weight-format", "int8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = result_of(proc.stdout)  # the whole of stdout: one document
    assert doc["written"] and "Applying Weight Compression" not in proc.stderr  # no bar into a pipe or a log


def test_nncf_progress_bar_goes_to_a_terminal_stderr_only(tmp_path):
    """stderr a terminal (a pseudo-terminal here): nncf's bar is shown there, and stdout is still one document."""
    import os
    import pty

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint", str(ckpt),
                                 "--weight-format", "int8", "--json"], stdout=subprocess.PIPE, stderr=follower,
                                cwd=ROOT)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end closed: the process is done with it
                break
            if not chunk:
                break
            said += chunk
        out = proc.stdout.read().decode()
        assert proc.wait(timeout=300) == 0, said[-2000:]
    finally:
        os.close(leader)
    assert result_of(out)["written"] and b"Applying Weight Compression" in said


@pytest.mark.extended  # the same nncf output as patch's above, from build-mtp: CI's `make test-extended`
def test_build_mtp_json_int4_is_one_document(tmp_path):
    _, ckpt = FIXTURE_PAIRS["qwen3_5"]
    proc = cli("build-mtp", ckpt, "-o", tmp_path / "head", "--weight-format", "int4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert result_of(proc.stdout)["weight_format"] == "int4"
