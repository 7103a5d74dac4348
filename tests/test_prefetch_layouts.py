"""The read-ahead hint (irsurgeon.weights.prefetch) on more inputs than tests/test_prefetch.py: every weight format,
the synth kinds, FP8 and per-expert layouts, a single .safetensors file, and links that loop."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import invoke
from lab.families import FAMILIES, fixture_pair
from irsurgeon.weights import prefetch
from test_prefetch import covered, tensor_extents

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("fmt", ["f32", "int8", "int4", "auto"])
@pytest.mark.parametrize("family", FAMILIES)
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
