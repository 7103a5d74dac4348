"""A bundled fixture pair's target patched in-process (the CLI, as a user runs it), and a fault put at a write of the
staged draft's .bin (irsurgeon.ir.streamed.Tail's writes, counted on a probe patch first)."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from helpers.cli import invoke
from lab.families import FIXTURE_PAIRS
from irsurgeon.ir import streamed

QWEN_HEAD_BIN = "openvino_mtp_model.bin"
QWEN_HEAD_XML = "openvino_mtp_model.xml"


def copy_target(tmp_path: Path, key: str = "qwen3_5") -> Path:
    target = tmp_path / f"{key}-target"
    shutil.copytree(FIXTURE_PAIRS[key][0], target)
    return target


def patch(target: Path, key: str = "qwen3_5", *extra):
    return invoke("patch", target, "--checkpoint", FIXTURE_PAIRS[key][1], *extra)


def on_tail_write(monkeypatch, tmp_path, at: int, act) -> None:
    """act() at Tail's `at`-th write (-1: its last, counted on a probe patch), before the write."""
    real, calls = streamed.Tail._write, []
    monkeypatch.setattr(streamed.Tail, "_write", lambda self, piece: calls.append(1) or real(self, piece))
    assert patch(copy_target(tmp_path / "probe")).exit_code == 0
    n, count = (len(calls) if at == -1 else at), []

    def write(self, piece):
        count.append(1)
        if len(count) == n:
            act()
        return real(self, piece)
    monkeypatch.setattr(streamed.Tail, "_write", write)


def failing_tail_write(monkeypatch, tmp_path, at: int) -> None:
    """Tail's `at`-th write (-1: its last) fails with ENOSPC."""
    def no_space():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    on_tail_write(monkeypatch, tmp_path, at, no_space)
