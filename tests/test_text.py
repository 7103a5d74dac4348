"""Every value echoed from a file or server is one safe terminal line: escaped and cut (irsurgeon.core.text)."""
from __future__ import annotations

import shutil

import pytest

from helpers.checkpoints import read_tensors, write_variant
from helpers.cli import invoke
from lab.demo import DEMO_CKPT, DEMO_TARGET
from lab.dirsnap import snapshot
from irsurgeon.core.text import LINE, RUN, shown


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


def test_a_nul_byte_in_a_shard_name_is_one_line(tmp_path):
    import json

    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"mtp.fc.weight":
                                                                                  "model\x00.safetensors"}}))
    result = invoke("patch", target, "--checkpoint", ckpt)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "holds a control character" in lines[0], result.output
    assert "unexpected" not in lines[0] and "\\x00" in lines[0]


def test_an_index_resolves_each_shard_once_whatever_its_size(tmp_path, monkeypatch):
    """Linear in the index: 200 000 names over 2 shards check 2 shard paths (benchmarks/bench_index.py times 1 M)."""
    import json

    from irsurgeon.weights import checkpoint as ck

    for s in ("a.safetensors", "b.safetensors"):
        (tmp_path / s).write_bytes(b"")
    wm = {f"model.layers.{i}.w": ("a", "b")[i % 2] + ".safetensors" for i in range(200_000)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    calls = []
    real = ck._inside
    monkeypatch.setattr(ck, "_inside", lambda *a: calls.append(a[1]) or real(*a))
    opened = ck.Checkpoint.open(tmp_path, tmp_path / "config.json")
    assert len(opened.shard_of) == 200_000
    assert sorted(calls) == ["a.safetensors", "b.safetensors", "model.safetensors.index.json"]  # the index itself once
