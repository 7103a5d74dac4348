"""Attacks on the streamed f16 patch (irsurgeon.draft.stream.Stream's f16 placeholders, weights.spec.half_row_reader,
the retry after NotHalf in draft.save.stage_ir) and on the writes now made on Tail's worker thread
(irsurgeon.ir.streamed.Tail._put), each stating a rule of docs/reliability.md or of those modules' docstrings:
the draft written is the one the f16 build holding every matrix makes; bad input or a fault is one `Error:` line
with the target untouched; Ctrl-C is `Error: interrupted`; no thread, descriptor or stream is left behind.

Most cases patch the bundled DFlash pair in-process with a checkpoint derived from synth.draft_tensors(3) (the
fixture's own tensors), one matrix perturbed so it does not fit f16.
"""
from __future__ import annotations

import errno
import itertools
import os
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke, one_error
from helpers.drafts import graph, layers, weight_data
from helpers.leftovers import CLEAN, house_threads, left_behind
from irsurgeon.flows.standalone import save_draft
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft import build as draft_build, load as draft_load, save as draft_save, stream as draft_stream
from irsurgeon.core.errors import IRError
from irsurgeon.families.dflash import synth
from irsurgeon.families.dflash.model import RECIPE
from irsurgeon.families.registry import FAMILIES
from irsurgeon.ir import streamed
from irsurgeon.commit.journal_format import STAGE_DIR, staged
from irsurgeon.weights import spec
from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors
from helpers.cli import PATCH_INTERRUPTED

TARGET, CKPT = FIXTURE_PAIRS["dflash"]
DRAFT_XML = "dflash_draft/openvino_model.xml"
DRAFT_BIN = "dflash_draft/openvino_model.bin"


# --- helpers ----------------------------------------------------------------------------------------------------------

def copy_target(tmp_path: Path, key: str = "dflash") -> Path:
    target = tmp_path / f"{key}-target"
    shutil.copytree(FIXTURE_PAIRS[key][0], target)
    return target


def write_ckpt(tmp_path: Path, tensors: dict, name: str = "ckpt", config: Path = CKPT / "config.json",
               dtype: str | None = None) -> Path:
    """tensors as a checkpoint beside `config`; dtype "BF16"/"F16": every tensor stored so."""
    ckpt = tmp_path / name
    ckpt.mkdir()
    dtypes = None
    if dtype == "BF16":
        dtypes = {n: "BF16" for n in tensors}
        tensors = {n: f32_to_bf16(t) for n, t in tensors.items()}
    elif dtype == "F16":
        with np.errstate(over="ignore"):
            tensors = {n: t.astype(np.float16) for n, t in tensors.items()}
    write_safetensors(ckpt / "model.safetensors", tensors, dtypes)
    shutil.copy(config, ckpt / "config.json")
    return ckpt


def dflash_ckpt(tmp_path: Path, changes: dict, dtype: str | None = None, name: str = "ckpt") -> Path:
    tensors = synth.draft_tensors(3)
    for tensor, change in changes.items():
        change(tensors[tensor])
    return write_ckpt(tmp_path, tensors, name, dtype=dtype)


def beyond_last(w):  # in the last block: found once the matrix was written
    w.reshape(-1)[-1] = 1e6


def beyond_first(w):  # in the first block: found before the rest is read
    w.reshape(-1)[0] = -2e5


def mostly_tiny(w):
    w[...] = np.float32(3e-7) * np.sign(w + 0.5)


def nan_tail(w):
    w.reshape(-1)[-3:] = np.nan


def streamed_order() -> list[str]:
    """The DFlash draft's streamed matrices in the order stage_ir writes them."""
    cfg, weights, ckpt = draft_load.load_with(RECIPE, CKPT, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, "f16", recipe=RECIPE, stream=ckpt.close)
    stream = draft_stream.stream_of(model)
    names = list(stream.blocks)
    stream.close()
    return names


def saved(key: str, ckpt: Path, path: Path, fmt: str = "f16", allow_nonfinite: bool = False) -> ov.Model:
    """The draft built holding every weight (no stream), saved by openvino, read back."""
    family = next(f for f in FAMILIES if f.key == key).recipe()
    cfg, weights, opened = draft_load.load_with(family, ckpt, allow_nonfinite=allow_nonfinite, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, fmt, recipe=family)
    opened.close()
    draft_save.name_anonymous_nodes(model)
    ov.save_model(model, path, compress_to_fp16=False)
    return ov.Core().read_model(path)


def demotions(monkeypatch) -> list[str]:
    got: list[str] = []
    real = draft_stream.Stream.demote
    monkeypatch.setattr(draft_stream.Stream, "demote", lambda self, model, name: got.append(name) or
                        real(self, model, name))
    return got


def assert_same_draft(target: Path, key: str, ckpt: Path, tmp_path: Path, allow_nonfinite: bool = False) -> None:
    family = next(f for f in FAMILIES if f.key == key)
    ours = ov.Core().read_model(target / family.layout.draft_xml)
    theirs = saved(key, ckpt, tmp_path / "saved.xml", allow_nonfinite=allow_nonfinite)
    assert layers(ours) == layers(theirs)
    assert weight_data(ours) == weight_data(theirs)


def patch(target: Path, ckpt: Path, *extra):
    return invoke("patch", target, "--checkpoint", ckpt, *extra)


# --- NotHalf: first, last, two matrices, mid-matrix, other stored dtypes ----------------------------------------------

ORDER = streamed_order()


@pytest.mark.parametrize("which", ["first", "last", "two"])
def test_a_matrix_that_does_not_fit_f16_anywhere_in_the_order_is_built_as_the_whole_build_builds_it(
        tmp_path, monkeypatch, which):
    """Rule: NotHalf in the first matrix written, the last, or in two of them (two retries): the draft is the f16
    build's (those matrices f32), each demoted once, nothing left behind."""
    picks = {"first": [ORDER[0]], "last": [ORDER[-1]], "two": [ORDER[1], ORDER[-2]]}[which]
    demoted = demotions(monkeypatch)
    ckpt = dflash_ckpt(tmp_path, {n: beyond_last for n in picks})
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert all(f"warning: tensor {n}: values in" in result.output for n in picks), result.output
    assert demoted == picks
    assert_same_draft(target, "dflash", ckpt, tmp_path)
    assert left_behind(target, ckpt) == CLEAN


def test_a_matrix_found_not_to_fit_in_its_first_block_of_many_is_built_as_the_whole_build_builds_it(
        tmp_path, monkeypatch):
    """Rule: with blocks and pieces far smaller than a matrix (its first block vetoes it while the worker still
    has earlier pieces queued), the draft is still the whole build's."""
    monkeypatch.setattr(spec, "BLOCK", 64)
    monkeypatch.setattr(streamed, "PIECE", 96)
    name = ORDER[len(ORDER) // 2]
    demoted = demotions(monkeypatch)
    ckpt = dflash_ckpt(tmp_path, {name: beyond_first, ORDER[-1]: mostly_tiny})
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert demoted == [name, ORDER[-1]]
    assert_same_draft(target, "dflash", ckpt, tmp_path)
    assert left_behind(target, ckpt) == CLEAN


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32"])
def test_every_stored_dtype_streams_into_the_whole_builds_draft(tmp_path, monkeypatch, dtype):
    """Rule: the streamed f16 draft equals the whole build's for bf16, f16 and f32 checkpoints; an f32 one holding
    a value beyond f16 (and a bf16 one: bf16 reaches 3e38) keeps that matrix f32 as the whole build does."""
    demoted = demotions(monkeypatch)
    changes = {} if dtype == "F16" else {ORDER[2]: beyond_last}
    ckpt = dflash_ckpt(tmp_path, changes, dtype=dtype)
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert demoted == list(changes)
    assert_same_draft(target, "dflash", ckpt, tmp_path)
    assert left_behind(target, ckpt) == CLEAN


def test_an_f16_checkpoint_of_subnormals_is_kept_f32_as_the_whole_build_keeps_it(tmp_path, monkeypatch):
    """Rule: an f16-stored matrix of f16 subnormals (exact in f16, yet >= 75% below f16's normal range: openvino's
    rule keeps it f32) is decided as the whole build decides it."""
    demoted = demotions(monkeypatch)
    ckpt = dflash_ckpt(tmp_path, {ORDER[3]: lambda w: w.__setitem__(..., np.float32(2.0 ** -20) * np.sign(w))},
                       dtype="F16")
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert_same_draft(target, "dflash", ckpt, tmp_path)
    assert demoted in ([], [ORDER[3]]) and left_behind(target, ckpt) == CLEAN


# --- NaN: refused by default, built as the whole build builds it with --allow-nonfinite ------------------------------

def test_a_nan_in_the_first_streamed_matrix_is_one_line_and_nothing_changes(tmp_path):
    ckpt = dflash_ckpt(tmp_path, {ORDER[0]: nan_tail})
    target = copy_target(tmp_path)
    before = snapshot(target)
    error = one_error(patch(target, ckpt, "--weight-format", "f16"))
    assert f"tensor {ORDER[0]}: holds 3 NaN or Inf values" in error, error
    assert snapshot(target) == before and left_behind(target, ckpt) == CLEAN


def test_allow_nonfinite_with_nan_in_streamed_matrices_writes_the_whole_builds_draft(tmp_path, monkeypatch):
    """Rule: --allow-nonfinite builds NaN matrices as the whole build does (f32, NaN kept), the others f16."""
    demoted = demotions(monkeypatch)
    ckpt = dflash_ckpt(tmp_path, {ORDER[0]: nan_tail, ORDER[-1]: nan_tail})
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "f16", "--allow-nonfinite")
    assert result.exit_code == 0, result.output
    assert demoted == [ORDER[0], ORDER[-1]]
    assert_same_draft(target, "dflash", ckpt, tmp_path, allow_nonfinite=True)
    assert left_behind(target, ckpt) == CLEAN


# --- Gemma 4: the tied embedding (gather and lm_head) -----------------------------------------------------------------

def fixture_ckpt(tmp_path: Path, key: str, changes: dict, dtype: str | None = None) -> Path:
    """A family's bundled checkpoint (one shard) with `changes` made, stored as `dtype` (default: float32)."""
    from irsurgeon.weights.safetensors_io import SafetensorsFile
    src = FIXTURE_PAIRS[key][1]
    f = SafetensorsFile(src / "model.safetensors")
    try:
        tensors = {n: f.get(n) for n in f.tensors}
    finally:
        f.close()
    for name, change in changes.items():
        change(tensors[name])
    return write_ckpt(tmp_path, tensors, config=src / "config.json", dtype=dtype)


@pytest.mark.parametrize("change", [beyond_last, mostly_tiny], ids=["beyond", "mostly tiny"])
def test_gemma4s_tied_embedding_that_does_not_fit_f16_is_built_as_the_whole_build_builds_it(tmp_path, monkeypatch,
                                                                                          change):
    """Rule: the Gemma 4 assistant's embedding (also its lm_head, tied) not fitting f16: every consumer of the one
    placeholder is given the f32 weight; the draft is the whole build's."""
    demoted = demotions(monkeypatch)
    ckpt = fixture_ckpt(tmp_path, "gemma4", {"model.embed_tokens.weight": change})
    target = copy_target(tmp_path, "gemma4")
    result = patch(target, ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert_same_draft(target, "gemma4", ckpt, tmp_path)
    assert len(demoted) <= 1 and left_behind(target, ckpt) == CLEAN


# --- a fused MoE layout: the stored tensor is named otherwise than the graph's weight ---------------------------------

@pytest.fixture(scope="module")
def fused_moe(tmp_path_factory) -> Path:
    from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
    from irsurgeon.weights.safetensors_io import SafetensorsFile
    d = tmp_path_factory.mktemp("moe")
    write_checkpoint(d / "src", SynthSpec(num_experts=4, top_k=2, expert_size=32, shared_expert_size=24), seed=11)
    tensors = {}
    for path in sorted((d / "src").glob("*.safetensors")):
        f = SafetensorsFile(path)
        try:
            tensors.update({n: f.get(n) for n in f.tensors})
        finally:
            f.close()
    tensors["mtp.layers.0.mlp.experts.down_proj"].reshape(-1)[-1] = 1e6  # a fused (Whole) 3-D stack: streamed
    return write_ckpt(d, tensors, "beyond", config=d / "src" / "config.json")


def test_a_fused_expert_stack_that_does_not_fit_f16_is_demoted_by_its_graph_name(tmp_path, fused_moe):
    """Broke (fixed): NotHalf named the stored tensor (mtp.layers.0.mlp.experts.down_proj) while the placeholder
    is the graph's weight (....down_proj.weight): Stream.demote's lookup raised StopIteration out of stage_ir
    (a traceback). Rule: the draft is the whole build's, the stack kept f32."""
    from irsurgeon.families.qwen35_mtp.model import RECIPE as QWEN
    cfg, weights, ckpt = draft_load.load_with(QWEN, fused_moe, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, "f16", recipe=QWEN, stream=ckpt.close, warn=lambda _: None)
    assert "mtp.layers.0.mlp.experts.down_proj.weight" in draft_stream.stream_of(model).blocks
    ours = save_draft(model, tmp_path / "ours")
    cfg, weights, ckpt = draft_load.load_with(QWEN, fused_moe, warn=lambda _: None)
    whole = draft_build.build_model(cfg, weights, "f16", recipe=QWEN, warn=lambda _: None)
    ckpt.close()
    theirs = save_draft(whole, tmp_path / "theirs")
    a, b = (ov.Core().read_model(p) for p in (ours, theirs))
    assert layers(a) == layers(b) and weight_data(a) == weight_data(b)
    assert weight_data(a)["mtp.layers.0.mlp.experts.down_proj.weight"][0] == "<Type: 'float32'>"
    assert draft_stream._STREAMS == {} and house_threads() == []


# --- the checkpoint changed between the build and the stage -----------------------------------------------------------

def between_build_and_stage(monkeypatch, act) -> None:
    """act() just before the DFlash flow stages its draft (the matrices not read yet)."""
    from irsurgeon.families.dflash import patch as flow
    real = flow.stage_ir

    def stage_ir(*a, **k):
        act()
        return real(*a, **k)
    monkeypatch.setattr(flow, "stage_ir", stage_ir)


def test_a_checkpoint_truncated_before_its_matrices_are_streamed_is_one_line_and_nothing_changes(tmp_path,
                                                                                                 monkeypatch):
    ckpt = dflash_ckpt(tmp_path, {})
    shard = ckpt / "model.safetensors"
    between_build_and_stage(monkeypatch, lambda: os.truncate(shard, shard.stat().st_size // 2))
    target = copy_target(tmp_path)
    before = snapshot(target)
    error = one_error(patch(target, ckpt, "--weight-format", "f16"))
    assert "model.safetensors" in error and "truncated" in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


def rewrite_same_size(shard: Path, tensors: dict) -> None:
    """The shard's bytes replaced by another checkpoint of the same header (every value changed), size kept."""
    other = shard.with_name("other.safetensors")
    write_safetensors(other, tensors)
    assert other.stat().st_size == shard.stat().st_size
    with open(shard, "r+b") as f:
        f.write(other.read_bytes())
    other.unlink()


def test_a_checkpoint_rewritten_between_the_build_and_the_stage_is_refused_or_one_checkpoints_draft(tmp_path,
                                                                                                    monkeypatch):
    """Rule: the draft written is one checkpoint's (the whole build of the checkpoint as it was, or as it became),
    or the patch is refused with one line."""
    ckpt = dflash_ckpt(tmp_path, {}, name="ckpt")
    old = write_ckpt(tmp_path, synth.draft_tensors(3), "old")
    newer = synth.draft_tensors(4)
    new = write_ckpt(tmp_path, newer, "new")
    between_build_and_stage(monkeypatch, lambda: rewrite_same_size(ckpt / "model.safetensors", newer))
    target = copy_target(tmp_path)
    before = snapshot(target)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert left_behind(target, ckpt) == CLEAN
    if result.exit_code != 0:
        one_error(result)
        assert snapshot(target) == before
        return
    ours = weight_data(ov.Core().read_model(target / DRAFT_XML))
    assert ours in (weight_data(saved("dflash", old, tmp_path / "a.xml")),
                    weight_data(saved("dflash", new, tmp_path / "b.xml")))


# --- faults on the worker thread ----------------------------------------------------------------------------------

class FaultyFile:
    """The .bin's file object, its `at`-th write (on whichever thread) raising `error`; the rest passed through."""

    def __init__(self, real, at: int, error: BaseException, seen: list):
        self.real, self.at, self.error, self.seen = real, at, error, seen

    def write(self, data):
        self.seen.append(threading.current_thread().name)
        if len(self.seen) == self.at:
            raise self.error
        return self.real.write(data)

    def __getattr__(self, name):
        return getattr(self.real, name)


def faulty_tail(monkeypatch, at: int, error: BaseException, tail: int | None = None) -> list[str]:
    """Every Tail's file object made a FaultyFile, writes counted across Tails (the retry's too); with `tail`, only
    that Tail's (0 the first, 1 the retry after a demotion), counted within it: a save given up at a demotion stops
    its writer with pieces still queued, so how many of its writes ran is the threads' timing, not the input's."""
    seen: list[str] = []
    made = itertools.count()  # which Tail this is
    real = streamed.Tail.__init__

    def init(self, bin_file):
        counted = next(made) == tail or tail is None
        real(self, FaultyFile(bin_file, at, error, seen) if counted else bin_file)
    monkeypatch.setattr(streamed.Tail, "__init__", init)
    return seen


def count_writes(monkeypatch, tmp_path, ckpt: Path, tail: int | None = None) -> int:
    seen = faulty_tail(monkeypatch, 0, OSError(), tail)
    assert patch(copy_target(tmp_path / "probe"), ckpt, "--weight-format", "f16").exit_code == 0
    monkeypatch.undo()
    return len(seen)


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 1024)  # the dflash matrices: 4 pieces each


@pytest.mark.parametrize("at", [1, "middle", "last"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_a_write_error_on_the_worker_is_one_line_naming_the_bin_and_nothing_changes(tmp_path, monkeypatch,
                                                                                   small_pieces, at, code):
    """Rule: a write that fails on Tail's worker thread (the first, one in the middle, the last: raised at settle)
    is one line naming the .bin and the reason; the target as before, no staging folder, nothing left behind."""
    ckpt = dflash_ckpt(tmp_path, {})
    n = {1: 1, "middle": None, "last": None}[at] or count_writes(monkeypatch, tmp_path, ckpt)
    monkeypatch.setattr(streamed, "PIECE", 1024)
    n = n // 2 if at == "middle" else n
    seen = faulty_tail(monkeypatch, n, OSError(code, os.strerror(code)))
    target = copy_target(tmp_path)
    before = snapshot(target)
    error = one_error(patch(target, ckpt, "--weight-format", "f16"))
    assert seen[n - 1].startswith("irsurgeon-write")  # the fault was on the worker
    assert f"{STAGE_DIR}/{staged(DRAFT_BIN)} (the new {DRAFT_BIN}): cannot write it: {os.strerror(code)}" \
        in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


def test_a_write_error_in_the_save_after_a_demotion_is_one_line_and_nothing_changes(tmp_path, monkeypatch,
                                                                                   small_pieces):
    """Rule: the retry's writes fail as the first save's would: one line naming the .bin, nothing changed."""
    ckpt = dflash_ckpt(tmp_path, {ORDER[-1]: beyond_last})
    total = count_writes(monkeypatch, tmp_path, ckpt, tail=1)  # the retry's writes: the same in every run
    assert total > 3, total  # the demotion made a retry
    monkeypatch.setattr(streamed, "PIECE", 1024)
    seen = faulty_tail(monkeypatch, total - 3, OSError(errno.EIO, os.strerror(errno.EIO)), tail=1)
    target = copy_target(tmp_path)
    before = snapshot(target)
    error = one_error(patch(target, ckpt, "--weight-format", "f16"))
    assert seen[total - 4].startswith("irsurgeon-write")  # the fault was on the retry's worker
    assert f"{STAGE_DIR}/{staged(DRAFT_BIN)} (the new {DRAFT_BIN}): cannot write it: {os.strerror(errno.EIO)}" \
        in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


def interrupted(result) -> bool:
    return result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED


@pytest.mark.parametrize("at", [1, 9])
def test_ctrl_c_raised_on_the_worker_is_interrupted_and_nothing_changes(tmp_path, monkeypatch, small_pieces, at):
    ckpt = dflash_ckpt(tmp_path, {})
    seen = faulty_tail(monkeypatch, at, KeyboardInterrupt())
    target = copy_target(tmp_path)
    before = snapshot(target)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert seen[at - 1].startswith("irsurgeon-write")
    assert interrupted(result), result.output
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


def interrupting_blocks(monkeypatch, name: str, after: int) -> None:
    """The blocks of the streamed matrix `name` raise KeyboardInterrupt after `after` blocks."""
    real = spec.half_row_reader

    def half_row_reader(ckpt, t, src, stored):
        blocks = real(ckpt, t, src, stored)
        if blocks is None or stored.prefix + src.name != name:
            return blocks

        def interrupted_blocks():
            for i, b in enumerate(blocks()):
                if i == after:
                    raise KeyboardInterrupt
                yield b
            raise KeyboardInterrupt
        return interrupted_blocks
    monkeypatch.setattr(spec, "half_row_reader", half_row_reader)


@pytest.mark.parametrize("which", [0, -1])
def test_ctrl_c_from_inside_a_matrixs_blocks_is_interrupted_and_nothing_changes(tmp_path, monkeypatch, which):
    monkeypatch.setattr(spec, "BLOCK", 512)  # several blocks a matrix
    ckpt = dflash_ckpt(tmp_path, {})
    interrupting_blocks(monkeypatch, ORDER[which], 1)
    target = copy_target(tmp_path)
    before = snapshot(target)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert interrupted(result), result.output
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


@pytest.mark.parametrize("when", ["demote", "second save"])
def test_ctrl_c_during_the_retry_is_interrupted_and_nothing_changes(tmp_path, monkeypatch, when):
    """Rule: Ctrl-C while the matrix found not to fit is rebuilt f32 (its fallback reads the tensor whole), or
    during the save made again: `Error: interrupted`, the target as before, nothing left behind."""
    ckpt = dflash_ckpt(tmp_path, {ORDER[-1]: beyond_last})
    calls = []
    if when == "demote":
        monkeypatch.setattr(draft_stream.Stream, "demote", lambda *a: os.kill(os.getpid(), signal.SIGINT))
    else:
        real = draft_save.save_appended

        def save(*a, **k):
            calls.append(1)
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGINT)
            return real(*a, **k)
        monkeypatch.setattr(draft_save, "save_appended", save)
    target = copy_target(tmp_path)
    before = snapshot(target)
    result = patch(target, ckpt, "--weight-format", "f16")
    assert interrupted(result), result.output
    assert calls in ([], [1, 1])
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert left_behind(target, ckpt) == CLEAN


def test_a_nan_found_at_the_retry_without_allow_nonfinite_is_one_line_and_nothing_changes(tmp_path):
    """Rule: a first matrix that demotes (beyond f16), a later one with NaN: the NaN one's fallback refuses it in
    the second save; one line, the target as before."""
    ckpt = dflash_ckpt(tmp_path, {ORDER[0]: beyond_last, ORDER[-1]: nan_tail})
    target = copy_target(tmp_path)
    before = snapshot(target)
    error = one_error(patch(target, ckpt, "--weight-format", "f16"))
    assert f"tensor {ORDER[-1]}: holds 3 NaN or Inf values" in error, error
    assert snapshot(target) == before and left_behind(target, ckpt) == CLEAN


# --- formats: auto mirroring an f16 target, int4 untouched -----------------------------------------------------------

def placeholders_made(monkeypatch) -> list[str]:
    made: list[str] = []
    real = draft_stream.Stream.half_placeholder
    monkeypatch.setattr(draft_stream.Stream, "half_placeholder", lambda self, name, *a: made.append(name) or
                        real(self, name, *a))
    return made


def test_auto_on_an_f16_target_streams_the_f16_draft_the_whole_build_makes(tmp_path, monkeypatch):
    """Rule: `--weight-format auto` on an f16 target (the Qwen3.5 demo pair) is a streamed f16 patch: its
    draft is the whole f16 build's, a matrix beyond f16 kept f32."""
    made = placeholders_made(monkeypatch)
    demoted = demotions(monkeypatch)
    ckpt = fixture_ckpt(tmp_path, "qwen3_5", {"mtp.fc.weight": beyond_last}, dtype="BF16")
    target = copy_target(tmp_path, "qwen3_5")
    result = patch(target, ckpt)  # --weight-format auto (the default)
    assert result.exit_code == 0, result.output
    assert "auto: f16" in result.output, result.output
    assert "mtp.fc.weight" in made and len(made) >= 8 and demoted == ["mtp.fc.weight"]
    assert_same_draft(target, "qwen3_5", ckpt, tmp_path)
    assert left_behind(target, ckpt) == CLEAN


def test_an_int4_patch_streams_nothing_and_closes_its_checkpoint(tmp_path, monkeypatch):
    made = placeholders_made(monkeypatch)
    ckpt = dflash_ckpt(tmp_path, {})
    target = copy_target(tmp_path)
    result = patch(target, ckpt, "--weight-format", "int4")
    assert result.exit_code == 0, result.output
    assert made == [] and left_behind(target, ckpt) == CLEAN


def test_a_streamed_f16_model_holds_no_matrix(tmp_path):
    """Rule (peak memory): the model built for an uncompressed f16 patch holds no matrix constant."""
    cfg, weights, ckpt = draft_load.load_with(RECIPE, CKPT, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, "f16", recipe=RECIPE, stream=ckpt.close)
    try:
        held = [op.get_friendly_name() for op in model.get_ops() if op.get_type_name() == "Constant"
                and len(op.get_shape()) >= 2 and op.get_byte_size() >= 1024]
        assert held == []
    finally:
        draft_stream.stream_of(model).close()
    assert draft_stream._STREAMS == {}


# --- save_draft (spend=False) with and without a stream -----------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_save_draft_of_an_f16_model_writes_the_whole_builds_draft_and_a_second_save_is_never_a_silent_other(
        tmp_path, stream):
    """Broke (fixed): a streamed model saved once by save_draft (spend=False: "the caller's model stays
    whole") lost its stream token, so a second save wrote its 15 placeholders as graph inputs, silently. Rule: the
    first save is the whole build's draft; a second one is the same again (whole) or an IRError (streamed)."""
    ckpt = dflash_ckpt(tmp_path, {ORDER[-1]: beyond_last})
    cfg, weights, opened = draft_load.load_with(RECIPE, ckpt, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, "f16", recipe=RECIPE, stream=opened.close if stream else None,
                              warn=lambda _: None)
    if not stream:
        opened.close()
    first = ov.Core().read_model(save_draft(model, tmp_path / "one"))
    theirs = saved("dflash", ckpt, tmp_path / "saved.xml")
    assert layers(first) == layers(theirs) and weight_data(first) == weight_data(theirs)
    assert draft_stream._STREAMS == {} and house_threads() == []
    if stream:
        with pytest.raises(IRError, match="its streamed weights are no longer open"):
            save_draft(model, tmp_path / "two")
        assert not (tmp_path / "two").exists()
    else:
        second = ov.Core().read_model(save_draft(model, tmp_path / "two"))
        assert graph(second) == graph(first)


def test_build_mtp_f16_writes_the_whole_builds_draft(tmp_path):
    key = "qwen3_5"
    ckpt = FIXTURE_PAIRS[key][1]
    result = invoke("build-mtp", ckpt, "-o", tmp_path / "out", "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    ours = ov.Core().read_model(tmp_path / "out" / "openvino_mtp_model.xml")
    theirs = saved(key, ckpt, tmp_path / "saved.xml")
    assert layers(ours) == layers(theirs) and weight_data(ours) == weight_data(theirs)
    assert draft_stream._STREAMS == {}


# --- kills during the retry (child processes: slow) ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kills_at_every_write_of_a_patch_that_saves_its_draft_twice(tmp_path, sig):
    """Rule (the kill lab): a kill or Ctrl-C before any write of a patch whose last matrix does not fit f16 (the
    draft saved, then demoted and saved again) leaves the target as before, complete, or holding a commit the
    next run rolls back."""
    from lab import kills
    ckpt = dflash_ckpt(tmp_path, {ORDER[-1]: beyond_last})
    lab = kills.KillLab(tmp_path / "kills", TARGET, ckpt)
    bins = [i for i, p in enumerate(lab.points, 1) if p.endswith("openvino_model.bin")]
    assert len(bins) >= 2, lab.points  # the save made twice
    sweep = kills.Sweep()
    for at in range(bins[0], bins[1] + 3):
        lab.kill(at, sig, sweep)
    assert not sweep.problems, "\n".join(sweep.problems)
