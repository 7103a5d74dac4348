"""Every value echoed from a file or server is one safe terminal line: escaped and cut (irsurgeon.text)."""
from __future__ import annotations

import shutil

import pytest

from helpers.checkpoints import read_tensors, write_variant
from helpers.cli import invoke
from helpers.demo import DEMO_CKPT, DEMO_TARGET
from helpers.dirsnap import snapshot
from irsurgeon.text import LINE, RUN, shown


@pytest.mark.parametrize("raw, want", [
    ("a\nError: all good", "a\\x0aError: all good"),
    ("evil\u202etxt.exe", "evil\\u202etxt.exe"),
    ("tab\there\r", "tab\\x09here\\x0d"),
    ("nul\x00byte", "nul\\x00byte"),
    ("zero\u200bwidth \u2028sep", "zero\\u200bwidth \\u2028sep"),
    ("ümlaut and 中文 stay", "ümlaut and 中文 stay"),
])
def test_unsafe_characters_are_escaped(raw, want):
    assert shown(raw) == want


def test_long_runs_are_cut_with_their_length():
    name = "x" * 1_000_000
    out = shown(f"tensor {name} is bad")
    assert out == f"tensor {'x' * RUN}...(1000000 chars) is bad"
    words = shown(" ".join(["word"] * 10_000))
    assert len(words) <= LINE + 40 and words.endswith(f"...({len(' '.join(['word'] * 10_000))} chars)")


@pytest.mark.parametrize("name", ["mtp.evil\nError: all good", "mtp.\u202eevil", "mtp." + "n" * 1_000_000,
                                  "mtp.nul\x00name"])
def test_a_hostile_tensor_name_is_one_safe_error_line(tmp_path, name):
    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    tensors = read_tensors(DEMO_CKPT)
    tensors[name] = tensors["mtp.norm.weight"]
    bad = write_variant(DEMO_CKPT, tmp_path / "ckpt", tensors)
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", bad)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output[:2000]
    assert "\n" not in name or "\\x0aError: all good" in lines[0]
    assert len(lines[0]) < 1000 and "\u202e" not in lines[0] and "\x00" not in lines[0], lines[0][:300]
    assert snapshot(target) == before
