"""The read-ahead hint patch gives the kernel for a local checkpoint (irsurgeon.weights.prefetch), every family:

    what        exactly the tensors the patch then reads whole: none it reads a few rows of (the identity check's
                embedding rows) or not at all, judged against the reads the patch really makes
    when        started before the target is judged; not for --dry-run, nor for a repo id
    faults      a checkpoint the flow refuses only ends the hint: no error of its own, no thread left blocked, the
                patch's error line and exit code as without it
    inputs      every weight format, the synth kinds, FP8 and per-expert layouts, a single .safetensors file, and
                links that loop
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers.cli import invoke, one_error
from lab.dirsnap import snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS, fixture_pair
from lab.hostile_forms import fifo
from irsurgeon.families import registry
from irsurgeon.flows import patch as patch_module
from irsurgeon.weights import prefetch
from irsurgeon.weights.safetensors_io import SafetensorsFile
from helpers.tiers import every_nth

ROOT = Path(__file__).resolve().parents[1]


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
    not hinted). The checkpoint is a private copy: a read-ahead thread another test's patch left running on the
    bundled files (a daemon, never joined) may still give its hints while this one runs, and they must not count."""
    target, _ = fixture_pair(family, tmp_path)
    ckpt = copy_ckpt(FIXTURE_PAIRS[family.key][1], tmp_path)
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
    own = {path for path, _, _ in tensor_extents(ckpt).values()}
    hinted_total = sum(n for path, _, n in advised if path in own)
    assert all(path in own for path, _, _ in advised if path.startswith(str(tmp_path)))
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


# --- more inputs: every weight format, synth kinds, FP8 and per-expert layouts, one file, link loops -----------------

@pytest.mark.parametrize("family, fmt", every_nth([(f, fmt) for f in registry.FAMILIES for fmt in ("f32", "int8", "int4",
                                                                                          "auto")],
                                                  3, ids=lambda p: f"{p[0].key}-{p[1]}"))  # each family, each format
def test_hint_is_exactly_what_is_read_whole_for_every_weight_format(family, fmt, tmp_path, monkeypatch, advised,
                                                                     reads):
    target, ckpt = fixture_pair(family, tmp_path)
    monkeypatch.setattr(prefetch, "start", lambda builder, source: prefetch.advise(builder, source))
    r = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", fmt)
    assert r.exit_code == 0, r.output
    whole = set()
    problems = []
    for name, (path, lo, hi) in tensor_extents(ckpt).items():
        got = covered(reads, path, lo, hi)
        if got == hi - lo:
            whole.add(name)
        hinted = covered(advised, path, lo, hi)
        if hinted not in (0, hi - lo) or (hinted > 0) != (name in whole):
            problems.append((name, hinted, hi - lo, got))
    assert problems == []


def copy_ckpt(fixture: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in fixture.iterdir():
        (ckpt / f.name).write_bytes(f.read_bytes())
    return ckpt


def loop(path: Path) -> None:
    """path: one of two links pointing at each other (ELOOP; Path.resolve raises RuntimeError on 3.11)."""
    other = path.with_name(path.name + ".loop")
    os.symlink(other.name, path)
    os.symlink(path.name, other)


def config_loop(ckpt: Path) -> None:
    (ckpt / "config.json").unlink()
    loop(ckpt / "config.json")


def index_shard_loop(ckpt: Path) -> None:
    import json
    (ckpt / "model.safetensors").rename(ckpt / "model-00001-of-00001.safetensors")
    from irsurgeon.weights.safetensors_io import SafetensorsFile
    f = SafetensorsFile(ckpt / "model-00001-of-00001.safetensors")
    names = list(f.tensors)
    f.close()
    wm = {n: "model-00001-of-00001.safetensors" for n in names}
    wm[names[-1]] = "loop.safetensors"
    loop(ckpt / "loop.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))


@pytest.mark.parametrize("form", [config_loop, index_shard_loop], ids=["config loop", "index shard loop"])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_link_loop_only_ends_the_hint(family, form, tmp_path):
    """A config.json or a shard that is a loop of links: Path.resolve's RuntimeError (Python 3.11) does not escape."""
    _, fixture = fixture_pair(family, tmp_path)
    ckpt = copy_ckpt(fixture, tmp_path)
    form(ckpt)
    prefetch.advise(family.recipe(), ckpt)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_that_is_a_link_loop_is_one_line_and_no_thread_traceback(family, tmp_path):
    """Real CLI, real thread: one Error line naming the loop, no traceback from the hint's thread."""
    target, fixture = fixture_pair(family, tmp_path)
    ckpt = copy_ckpt(fixture, tmp_path)
    config_loop(ckpt)
    cmd = [sys.executable, "-m", "irsurgeon", "patch", str(target), "--checkpoint", str(ckpt),
           "--weight-format", "f16"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "Exception in thread" not in r.stderr and r.returncode == 1, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "a loop of links" in r.stderr, r.stderr


def check_hint_matches_reads(target, ckpt, fmt, advised, reads, monkeypatch, extra=()):
    monkeypatch.setattr(prefetch, "start", lambda builder, source: prefetch.advise(builder, source))
    r = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", fmt, *extra)
    assert r.exit_code == 0, r.output
    assert advised, "no hint"
    problems = []
    for name, (path, lo, hi) in tensor_extents(ckpt).items():
        got = covered(reads, path, lo, hi)
        hinted = covered(advised, path, lo, hi)
        if hinted not in (0, hi - lo) or (hinted > 0) != (got == hi - lo):
            problems.append((name, "hinted", hinted, "of", hi - lo, "read", got))
    assert problems == []


SYNTH = ["qwen35", "qwen35-moe"]


@pytest.mark.parametrize("which", SYNTH)
def test_hint_on_synth_fixtures(which, tmp_path, monkeypatch, advised, reads):
    src = ROOT / "fixtures" / "synth" / which
    target = tmp_path / "target"
    shutil.copytree(src / "target", target)
    check_hint_matches_reads(target, src / "ckpt", "f16", advised, reads, monkeypatch)


@pytest.mark.parametrize("variant", ["fp8-bf16-scale", "fp8-moe", "moe-per-expert", "moe-per-expert-fp8"])
def test_hint_on_fp8_and_per_expert_layouts(variant, tmp_path, monkeypatch, advised, reads):
    from helpers.checkpoints import fp8_config, fp8_tensors, read_tensors, split_per_expert, write_variant
    which = "qwen35-moe" if "moe" in variant else "qwen35"
    src = ROOT / "fixtures" / "synth" / which
    target = tmp_path / "target"
    shutil.copytree(src / "target", target)
    tensors = read_tensors(src / "ckpt")
    if "per-expert" in variant:
        tensors = split_per_expert(tensors)
    edit = None
    if "fp8" in variant:
        tensors, edit = fp8_tensors(tensors, block=(16, 16)), fp8_config(block=(16, 16))
    ckpt = write_variant(src / "ckpt", tmp_path / "ckpt", tensors, edit)
    check_hint_matches_reads(target, ckpt, "f16", advised, reads, monkeypatch, ("--allow-foreign-checkpoint",))


@pytest.mark.parametrize("family", FAMILIES)
def test_single_safetensors_file_source_gets_the_hint(family, tmp_path, monkeypatch):
    """A checkpoint given as its one .safetensors file is patched, and gets the hint as a folder does."""
    target, ckpt = fixture_pair(family, tmp_path)
    started = []
    monkeypatch.setattr(prefetch, "start", lambda builder, source: started.append(source))
    r = invoke("patch", target, "--checkpoint", ckpt / "model.safetensors", "--weight-format", "f16")
    assert r.exit_code == 0, r.output
    assert started, "no hint for a single-file checkpoint"
