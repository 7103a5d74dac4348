"""The read-ahead hint patch gives the kernel for a local checkpoint (irsurgeon.weights.prefetch), every family:

    what        exactly the tensors the patch then reads whole: none it reads a few rows of (the identity check's
                embedding rows) or not at all, judged against the reads the patch really makes
    when        started before the target is judged; not for --dry-run, nor for a repo id
    faults      a checkpoint the flow refuses only ends the hint: no error of its own, no thread left blocked, the
                patch's error line and exit code as without it
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from helpers.cli import invoke, one_error
from lab.dirsnap import snapshot
from lab.families import FAMILIES, fixture_pair
from lab.hostile_forms import fifo
from irsurgeon.flows import patch as patch_module
from irsurgeon.weights import prefetch
from irsurgeon.weights.safetensors_io import SafetensorsFile


def covered(spans: list[tuple[str, int, int]], path: str, lo: int, hi: int) -> int:
    """How many bytes of path's [lo, hi) the spans cover."""
    marks = sorted((max(lo, o), min(hi, o + n)) for p, o, n in spans if p == path and o < hi and o + n > lo)
    total, end = 0, lo
    for a, b in marks:
        a = max(a, end)
        if b > a:
            total, end = total + b - a, b
    return total


def tensor_extents(ckpt: Path) -> dict[str, tuple[str, int, int]]:
    """name -> (file, first byte, end) of every tensor in the checkpoint's safetensors files, from their headers."""
    out = {}
    for shard in sorted(ckpt.glob("*.safetensors")):
        f = SafetensorsFile(shard)
        try:
            out.update({n: (os.path.realpath(shard), f.data_start + t.begin, f.data_start + t.end)
                        for n, t in f.tensors.items()})
        finally:
            f.close()
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_the_hint_names_exactly_the_tensors_the_patch_reads_whole(family, tmp_path, monkeypatch, advised, reads):
    """Run the real patch with the hint made in line: every tensor the patch reads whole was hinted, and every hinted
    byte belongs to a tensor it reads whole (the qwen demo's embedding, of which the identity check reads rows, is
    not hinted)."""
    target, ckpt = fixture_pair(family, tmp_path)
    monkeypatch.setattr(prefetch, "start", lambda builder, source: prefetch.advise(builder, source))
    assert invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16").exit_code == 0
    assert advised, "no hint given"
    whole, partial = set(), set()
    for name, (path, lo, hi) in tensor_extents(ckpt).items():
        got = covered(reads, path, lo, hi)
        (whole if got == hi - lo else partial if got else set()).add(name)
        hinted = covered(advised, path, lo, hi)
        assert hinted in (0, hi - lo), f"{name}: hinted in part ({hinted} of {hi - lo} bytes)"
        assert (hinted > 0) == (name in whole), f"{name}: hinted {hinted > 0}, read whole {name in whole}"
    hinted_total = sum(n for _, _, n in advised)
    assert hinted_total == sum(hi - lo for n, (_, lo, hi) in tensor_extents(ckpt).items() if n in whole)
    if family.key == "qwen3_5":
        assert partial == {"model.language_model.embed_tokens.weight"}  # rows for the identity check, not hinted


@pytest.mark.parametrize("family", FAMILIES)
def test_patch_starts_the_hint_before_it_judges_the_target(family, tmp_path, monkeypatch):
    target, ckpt = fixture_pair(family, tmp_path)
    order: list[str] = []
    monkeypatch.setattr(prefetch, "start", lambda builder, source: order.append(f"hint {Path(source)}"))
    real = patch_module.inspect
    monkeypatch.setattr(patch_module, "inspect", lambda *a: (order.append("inspect"), real(*a))[1])
    assert invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16").exit_code == 0
    assert order == [f"hint {ckpt}", "inspect"]
    order.clear()
    assert invoke("patch", target, "--checkpoint", ckpt, "--force", "--dry-run").exit_code == 0
    assert order == ["inspect"]  # a dry run reads no weights: no hint


def broken_forms(ckpt: Path) -> dict[str, callable]:
    weights = ckpt / "model.safetensors"
    return {
        "config not JSON": lambda: (ckpt / "config.json").write_text("{not json"),
        "config a FIFO": lambda: fifo(ckpt / "config.json"),
        "weights a FIFO": lambda: fifo(weights),
        "header garbage": lambda: weights.write_bytes(b"\xff" * 64),
        "index naming a missing shard": lambda: (
            weights.unlink(),
            (ckpt / "model.safetensors.index.json").write_text(json.dumps(
                {"weight_map": {"mtp.fc.weight": "model-00001-of-00002.safetensors"}}))),
    }


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("form", list(broken_forms(Path("."))))
def test_a_checkpoint_the_flow_refuses_only_ends_the_hint(family, form, tmp_path, monkeypatch, advised):
    """The hint on a broken checkpoint returns at once without raising or hinting; the patch says the same line,
    exits the same way and changes nothing, with the hint and without it."""
    target, fixture = fixture_pair(family, tmp_path)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in fixture.iterdir():
        (ckpt / f.name).write_bytes(f.read_bytes())
    broken_forms(ckpt)[form]()
    done = threading.Event()
    thread = threading.Thread(target=lambda: (prefetch.advise(family.recipe(), ckpt), done.set()), daemon=True)
    thread.start()
    assert done.wait(10), "the hint is blocked"
    assert advised == []
    before = snapshot(target)
    failed, hints = [], []
    monkeypatch.setattr(threading, "excepthook", lambda args: failed.append(args.exc_value))
    real_start = prefetch.start
    monkeypatch.setattr(prefetch, "start", lambda builder, source: hints.append(real_start(builder, source)))
    with_hint = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    for hint in filter(None, hints):  # the patch does not wait for its hint: its end (any error) is awaited here
        hint.join(10)
        assert not hint.is_alive(), "the hint is blocked"
    monkeypatch.setattr(prefetch, "start", lambda builder, source: None)
    without = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    assert with_hint.exit_code == without.exit_code != 0
    assert one_error(with_hint) == one_error(without)
    assert snapshot(target) == before and failed == []
