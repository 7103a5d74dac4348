"""A MoE head's routed experts streamed into the staged .bin (weights.spec.half_row_reader / row_reader, draft.stream.Stream)
from checkpoints the other tests do not write: experts stored F16, F32, F64 or a mixture (between experts, between
gate_up and down), spread over shards or in a shard of their own, written in another order with gaps between
tensors, one expert, odd expert sizes, blocks smaller than one row, a shard that is a link; and the checkpoint
truncated or rewritten while the experts are being read, NaN/Inf and values beyond f16 in the last expert, a
missing or extra expert tensor.

Each either writes the draft the build holding every weight makes (tests/helpers/experts.saved_build: its
constants byte for byte, its ops one for one), or is one `Error:` line naming the file or tensor with the target
untouched and no stream left open.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.checkpoints import as_float, fp8_config, fp8_tensors, read_tensors, split_per_expert, stored_as
from helpers.cli import invoke, one_error
from helpers.drafts import layers
from helpers.experts import EXPERTS, MTP_XML, saved_build, streamed_names, weight_data
from helpers.leftovers import CLEAN, left_behind
from irsurgeon.flows.standalone import save_draft
from lab.dirsnap import snapshot
from irsurgeon.draft import build as draft_build, load as draft_load, stream as draft_stream
from irsurgeon.families.qwen35_mtp import patch as qwen_patch
from irsurgeon.families.qwen35_mtp.model import RECIPE as QWEN
from irsurgeon.ir import streamed
from irsurgeon.commit.journal_format import STAGE_DIR
from irsurgeon.weights import spec
from irsurgeon.weights.safetensors_io import STORAGE, decode, encode_header, f32_to_bf16
from helpers.cli import PATCH_INTERRUPTED

ROLES = [EXPERTS + f"{p}.weight" for p in ("down_proj", "gate_proj", "up_proj")]
INDEX = "model.safetensors.index.json"


# --- checkpoints ------------------------------------------------------------------------------------------------------

def write_ckpt(src: Path, dst: Path, tensors: dict, shard_of=None, order=None, gap: int = 0,
               config_edit=None) -> Path:
    """A checkpoint directory: src's config.json (edited by config_edit), tensors {name: (raw, dtype)} in
    model.safetensors or, with shard_of(name) -> file name, in those shards under an index. Each file's tensors are
    laid out in `order(names)` (default: sorted) with `gap` bytes of 0xA5 before each one's data."""
    dst.mkdir(parents=True)
    config = json.loads((src / "config.json").read_text())
    if config_edit:
        config_edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    files: dict[str, list[str]] = {}
    for name in tensors:
        files.setdefault(shard_of(name) if shard_of else "model.safetensors", []).append(name)
    for file, names in files.items():
        header, chunks, offset = {}, [], 0
        for name in (order or sorted)(names):
            raw, dtype = tensors[name]
            data = np.ascontiguousarray(raw, STORAGE[dtype]).tobytes()
            chunks += [b"\xa5" * gap, data]
            offset += gap
            header[name] = {"dtype": dtype, "shape": list(raw.shape), "data_offsets": [offset, offset + len(data)]}
            offset += len(data)
        header["__metadata__"] = {"format": "pt"}
        (dst / file).write_bytes(encode_header(header) + b"".join(chunks))
    if shard_of:
        (dst / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": {n: shard_of(n) for n in tensors}}))
    return dst


def values(raw: np.ndarray, dtype: str) -> np.ndarray:
    return decode(raw, dtype).astype(np.float32)


def with_value(tensors: dict, name: str, index: tuple, value: float) -> dict:
    """tensors with one value of `name` replaced (its dtype kept, BF16/F16 made F32 when the value needs it)."""
    out = dict(tensors)
    raw, dtype = tensors[name]
    w = values(raw, dtype)
    w[index] = value
    if dtype in ("BF16", "F16") and np.isfinite(value) and abs(value) > 6e4:
        dtype = "F32"
    out[name] = stored_as(w, dtype)
    return out


def expert_tensors(ckpt: Path, layout: str) -> dict:
    tensors = read_tensors(ckpt)
    return split_per_expert(tensors) if layout == "per-expert" else tensors


def is_expert(name: str) -> bool:
    return name.startswith(EXPERTS)


# --- what a run must give ---------------------------------------------------------------------------------------------

def patched(tmp_path: Path, target: Path, ckpt: Path, fmt: str, *extra):
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    return copy, invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt, *extra)


def assert_whole_builds_draft(tmp_path: Path, target: Path, ckpt: Path, fmt: str, monkeypatch,
                              allow_nonfinite: bool = False) -> dict:
    """The patch streams the three expert roles and writes the whole build's draft; its weights returned."""
    names = streamed_names(monkeypatch)
    extra = ("--allow-nonfinite",) if allow_nonfinite else ()
    copy, result = patched(tmp_path, target, ckpt, fmt, *extra)
    assert result.exit_code == 0, result.output
    assert sorted(n for n in names if is_expert(n)) == ROLES, names
    ours = ov.Core().read_model(copy / MTP_XML)
    theirs = saved_build(ckpt, fmt, tmp_path / "saved.xml", allow_nonfinite)
    got = weight_data(ours)
    assert got == weight_data(theirs) and all(r in got for r in ROLES)
    assert layers(ours) == layers(theirs)
    assert draft_stream._STREAMS == {}
    return got


def assert_refused(tmp_path: Path, target: Path, ckpt: Path, fmt: str, *extra) -> str:
    """One `Error:` line, the target as it was, nothing staged, no stream open; the line returned."""
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    before = snapshot(copy)
    error = one_error(invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt, *extra))
    assert snapshot(copy) == before and not (copy / STAGE_DIR).exists()
    assert left_behind(copy, ckpt) == CLEAN
    return error


def small_blocks(monkeypatch, block: int = 100, slice_: int = 300) -> None:
    """Many blocks per expert stack (and slices per block): each read is its own pread."""
    monkeypatch.setattr(spec, "BLOCK", block)
    monkeypatch.setattr(spec, "SLICE", slice_)


# --- dtypes on disk ---------------------------------------------------------------------------------------------------

DTYPE_CASES = [("fused", "F16", "f16"), ("per-expert", "F32", "f32"),
               *[pytest.param(layout, dtype, fmt, marks=pytest.mark.slow)
                 for layout in ("fused", "per-expert") for dtype in ("F16", "BF16", "F32", "F64")
                 for fmt in ("f16", "f32")
                 if (layout, dtype, fmt) not in (("fused", "F16", "f16"), ("per-expert", "F32", "f32"))]]


@pytest.mark.parametrize("layout,dtype,fmt", DTYPE_CASES)
def test_experts_stored_in_any_float_dtype_stream_into_the_whole_builds_draft(moe_pair, tmp_path, monkeypatch,
                                                                               layout, dtype, fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", as_float(expert_tensors(fused, layout), dtype, is_expert))
    got = assert_whole_builds_draft(tmp_path, target, ckpt, fmt, monkeypatch)
    assert {got[r][0] for r in ROLES} == {"<Type: 'float16'>" if fmt == "f16" else "<Type: 'float32'>"}


def mixed_between_experts(tensors: dict) -> dict:
    """Per-expert tensors, expert e stored in the e-th of BF16, F16, F32, F64."""
    order = ("BF16", "F16", "F32", "F64")
    out = dict(tensors)
    for name, t in tensors.items():
        if is_expert(name):
            e = int(name[len(EXPERTS):].split(".")[0])
            out[name] = stored_as(values(*t), order[e % len(order)])
    return out


def mixed_fused(tensors: dict) -> dict:
    """gate_up_proj F32, down_proj F16."""
    out = as_float(tensors, "F32", lambda n: n == EXPERTS + "gate_up_proj")
    return as_float(out, "F16", lambda n: n == EXPERTS + "down_proj")


@pytest.mark.parametrize("layout,fmt", [("per-expert", "f16"), ("fused", "f32"),
                                        pytest.param("per-expert", "f32", marks=pytest.mark.slow),
                                        pytest.param("fused", "f16", marks=pytest.mark.slow)])
def test_experts_of_mixed_dtypes_stream_into_the_whole_builds_draft(moe_pair, tmp_path, monkeypatch, layout, fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    mix = mixed_between_experts if layout == "per-expert" else mixed_fused
    ckpt = write_ckpt(fused, tmp_path / "ckpt", mix(expert_tensors(fused, layout)))
    assert_whole_builds_draft(tmp_path, target, ckpt, fmt, monkeypatch)


def mostly_subnormal(tensors: dict, name: str) -> dict:
    """tensors with `name`'s values made +-3e-7 (subnormal in f16: the f16 build keeps such a tensor f32)."""
    raw, dtype = tensors[name]
    w = np.float32(3e-7) * np.sign(values(raw, dtype) + np.float32(1e-9))
    return {**tensors, name: stored_as(w, "F32")}


@pytest.mark.parametrize("layout", ["per-expert", pytest.param("fused", marks=pytest.mark.slow)])
def test_an_expert_stack_of_f16_subnormals_is_kept_f32_as_the_whole_build_keeps_it(moe_pair, tmp_path, monkeypatch,
                                                                                   layout):
    """Only the stack's tally over every expert says it does not fit: found after its last block is written."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = expert_tensors(fused, layout)
    names = [EXPERTS + f"{e}.gate_proj.weight" for e in range(4)] if layout == "per-expert" else [
        EXPERTS + "gate_up_proj"]
    for name in names:
        tensors = mostly_subnormal(tensors, name)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    got = assert_whole_builds_draft(tmp_path, target, ckpt, "f16", monkeypatch)
    assert got[EXPERTS + "gate_proj.weight"][0] == "<Type: 'float32'>"
    assert got[EXPERTS + "down_proj.weight"][0] == "<Type: 'float16'>"


@pytest.mark.parametrize("layout,fmt", [("fused", "f16"), pytest.param("per-expert", "f16", marks=pytest.mark.slow),
                                        pytest.param("fused", "f32", marks=pytest.mark.slow),
                                        pytest.param("per-expert", "f32", marks=pytest.mark.slow)])
def test_experts_partly_fp8_read_the_fp8_ones_whole_and_stream_the_rest_into_the_whole_builds_draft(
        moe_pair, tmp_path, monkeypatch, layout, fmt):
    """Per expert: expert 1 alone FP8 with block scales (its stacks are read whole); fused: gate_up_proj FP8,
    down_proj BF16 (down streamed, gate and up read whole)."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = expert_tensors(fused, layout)
    pick = (lambda n: n.startswith(EXPERTS + "1.")) if layout == "per-expert" else (
        lambda n: n == EXPERTS + "gate_up_proj")
    quantized = fp8_tensors({n: t for n, t in tensors.items() if pick(n)}, block=(16, 16))
    tensors = {**{n: t for n, t in tensors.items() if not pick(n)}, **quantized}
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors, config_edit=fp8_config((16, 16)))
    names = streamed_names(monkeypatch)
    copy, result = patched(tmp_path, target, ckpt, fmt)
    assert result.exit_code == 0, result.output
    want = [] if layout == "per-expert" else [EXPERTS + "down_proj.weight"]
    assert sorted(n for n in names if is_expert(n)) == want, names
    ours, theirs = ov.Core().read_model(copy / MTP_XML), saved_build(ckpt, fmt, tmp_path / "saved.xml")
    assert weight_data(ours) == weight_data(theirs) and layers(ours) == layers(theirs)
    assert draft_stream._STREAMS == {}


# --- shards, order, gaps, links ---------------------------------------------------------------------------------------

def experts_apart(name: str) -> str:
    """The fused expert tensors in a shard of their own."""
    return "experts.safetensors" if is_expert(name) else "rest.safetensors"


def experts_split(name: str) -> str:
    """Per-expert tensors: experts 0 and 2 with the rest of the head, 1 and 3 in a second shard."""
    if is_expert(name) and int(name[len(EXPERTS):].split(".")[0]) % 2:
        return "model-00002-of-00002.safetensors"
    return "model-00001-of-00002.safetensors"


def gate_up_apart(name: str) -> str:
    """The fused gate_up_proj in a second shard, down_proj with the rest of the head."""
    if name == EXPERTS + "gate_up_proj":
        return "model-00002-of-00002.safetensors"
    return "model-00001-of-00002.safetensors"


def shuffled(names: list[str]) -> list[str]:
    rng = np.random.default_rng(7)
    return [names[i] for i in rng.permutation(len(names))]


SHARD_CASES = [("per-expert", experts_split, None, 0, "f16"), ("fused", experts_apart, None, 0, "f32"),
               ("per-expert", None, shuffled, 24, "f32"), ("fused", gate_up_apart, shuffled, 8, "f16"),
               pytest.param("per-expert", experts_split, shuffled, 40, "f32", marks=pytest.mark.slow),
               pytest.param("fused", experts_apart, shuffled, 2, "f16", marks=pytest.mark.slow)]


@pytest.mark.parametrize("layout,shard_of,order,gap,fmt", SHARD_CASES,
                         ids=["per-expert-two-shards", "fused-own-shard", "per-expert-shuffled-gaps",
                              "fused-shuffled-gaps", "per-expert-all", "fused-all"])
def test_experts_spread_over_shards_in_any_order_stream_into_the_whole_builds_draft(moe_pair, tmp_path, monkeypatch,
                                                                                     layout, shard_of, order, gap,
                                                                                     fmt):
    """Shards from an index, each file's tensors in a shuffled order with (odd-sized) gaps between them: each
    expert's rows are read at its own offsets."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch, block=50)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, layout), shard_of, order, gap)
    assert_whole_builds_draft(tmp_path, target, ckpt, fmt, monkeypatch)


def test_an_experts_shard_that_is_a_link_inside_the_checkpoint_streams_the_whole_builds_draft(moe_pair, tmp_path,
                                                                                              monkeypatch):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, "per-expert"), experts_split)
    blobs = ckpt / "blobs"
    blobs.mkdir()
    shard = ckpt / "model-00002-of-00002.safetensors"
    shard.rename(blobs / "1234abcd")
    shard.symlink_to(Path("blobs") / "1234abcd")
    assert_whole_builds_draft(tmp_path, target, ckpt, "f16", monkeypatch)


def test_an_experts_shard_linked_outside_the_checkpoint_is_one_line_and_nothing_changes(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, "fused"), experts_apart)
    outside = tmp_path / "elsewhere.safetensors"
    (ckpt / "experts.safetensors").rename(outside)
    (ckpt / "experts.safetensors").symlink_to(outside)
    error = assert_refused(tmp_path, target, ckpt, "f16")
    assert "experts.safetensors" in error and "outside the checkpoint directory" in error, error


# --- sizes: one expert, odd expert sizes, blocks below one row --------------------------------------------------------

def resized(fused: Path, experts: int, inner: int, seed: int = 3) -> tuple[dict, callable]:
    """fused's head with E experts of intermediate size I (the router and expert stacks redrawn), and the config
    edit that says so."""
    tensors = {n: t for n, t in read_tensors(fused).items() if n.startswith("mtp.") or not n.startswith("model.")}
    hidden = tensors["mtp.fc.weight"][0].shape[0]
    rng = np.random.default_rng(seed)

    def draw(*shape):
        return f32_to_bf16(rng.standard_normal(shape).astype(np.float32) * 0.05), "BF16"
    tensors[EXPERTS[:-len("experts.")] + "gate.weight"] = draw(experts, hidden)
    tensors[EXPERTS + "gate_up_proj"] = draw(experts, 2 * inner, hidden)
    tensors[EXPERTS + "down_proj"] = draw(experts, hidden, inner)

    def edit(config: dict) -> None:
        text = config["text_config"]
        text.update(num_experts=experts, num_experts_per_tok=min(experts, text["num_experts_per_tok"]),
                    moe_intermediate_size=inner)
    return tensors, edit


SIZE_CASES = [(1, 32, "fused", "f16", 10), (3, 7, "per-expert", "f32", 10), (1, 33, "per-expert", "f16", 40),
              pytest.param(5, 7, "fused", "f32", 1, marks=pytest.mark.slow),
              *[pytest.param(e, i, layout, fmt, block, marks=pytest.mark.slow)
                for e, i in ((1, 1), (2, 33), (5, 7)) for layout in ("fused", "per-expert")
                for fmt in ("f16", "f32") for block in (1, 63, 1 << 21)]]


@pytest.mark.parametrize("experts,inner,layout,fmt,block", SIZE_CASES)
def test_one_expert_odd_sizes_and_blocks_below_a_row_stream_into_the_whole_builds_draft(moe_pair, tmp_path,
                                                                                          monkeypatch, experts, inner,
                                                                                          layout, fmt, block):
    """BLOCK below one row of H values (a block is then one row, or one expert of a stack) and SLICE below one row
    too; I odd, so the fused halves' cut is at an odd row."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch, block, slice_=max(1, block // 2))
    tensors, edit = resized(fused, experts, inner)
    if layout == "per-expert":
        tensors = split_per_expert(tensors)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors, config_edit=edit)
    got = assert_whole_builds_draft(tmp_path, target, ckpt, fmt, monkeypatch)
    assert got[EXPERTS + "gate_proj.weight"][1] == (experts, inner, 64)
    assert got[EXPERTS + "down_proj.weight"][1] == (experts, 64, inner)


# --- the checkpoint changes while the experts are read ----------------------------------------------------------------

def while_experts_stream(monkeypatch, act, after: int = 1) -> list[str]:
    """act() once `after` blocks of the first expert matrix streamed have been handed to the .bin's writer (the
    dense matrices before it are written: read from the checkpoint as it was); the names of what was appended."""
    real, appended, done = streamed.Tail.append, [], []

    def append(self, name, shape, element_type, blocks, itemsize):
        appended.append(name)
        if is_expert(name) and not done:
            def acting():
                for k, block in enumerate(blocks):
                    yield block
                    if k + 1 == after and not done:
                        done.append(name)
                        act()
            return real(self, name, shape, element_type, acting(), itemsize)
        return real(self, name, shape, element_type, blocks, itemsize)
    monkeypatch.setattr(streamed.Tail, "append", append)
    return done


@pytest.mark.parametrize("layout,fmt", [("fused", "f16"), ("per-expert", "f32"),
                                        pytest.param("fused", "f32", marks=pytest.mark.slow),
                                        pytest.param("per-expert", "f16", marks=pytest.mark.slow)])
def test_an_experts_shard_truncated_while_they_stream_is_one_line_naming_it_and_nothing_changes(
        moe_pair, tmp_path, monkeypatch, layout, fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    shard_of = experts_apart if layout == "fused" else experts_split
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, layout), shard_of)
    shard = ckpt / shard_of(EXPERTS + "1.down_proj.weight")
    done = while_experts_stream(monkeypatch, lambda: os.truncate(shard, shard.stat().st_size // 2))
    error = assert_refused(tmp_path, target, ckpt, fmt)
    assert done, "no expert matrix was streamed"
    assert shard.name in error and ("truncated" in error or "changed while" in error), error


def rewritten_same_size(shard: Path) -> None:
    """Every tensor's bytes in the shard replaced by others (its header, so its size, kept)."""
    data = bytearray(shard.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")
    body = np.frombuffer(bytes(data[start:]), np.uint16).copy() if (len(data) - start) % 2 == 0 else None
    assert body is not None
    body ^= 0x0101  # small finite values stay small and finite in every float dtype here
    data[start:] = body.tobytes()
    with open(shard, "r+b") as f:
        f.write(data)


@pytest.mark.parametrize("layout,fmt", [("per-expert", "f16"), ("fused", "f32"),
                                        pytest.param("per-expert", "f32", marks=pytest.mark.slow),
                                        pytest.param("fused", "f16", marks=pytest.mark.slow)])
def test_an_experts_shard_rewritten_while_they_stream_is_refused_naming_it_and_nothing_changes(
        moe_pair, tmp_path, monkeypatch, layout, fmt):
    """The same size, other bytes: the draft would be of two checkpoints (the first block of the old, the rest of
    the new); the stamp taken when the shard was opened says it changed."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    shard_of = experts_apart if layout == "fused" else experts_split
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, layout), shard_of)
    shard = ckpt / shard_of(EXPERTS + "1.down_proj.weight")
    done = while_experts_stream(monkeypatch, lambda: rewritten_same_size(shard))
    error = assert_refused(tmp_path, target, ckpt, fmt)
    assert done, "no expert matrix was streamed"
    assert shard.name in error and "changed while" in error, error


def raise_interrupt() -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("layout,fmt", [("per-expert", "f16"), pytest.param("fused", "f32", marks=pytest.mark.slow)])
def test_ctrl_c_while_the_experts_stream_is_interrupted_and_nothing_changes(moe_pair, tmp_path, monkeypatch, layout,
                                                                            fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    shard_of = experts_apart if layout == "fused" else experts_split
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, layout), shard_of)
    done = while_experts_stream(monkeypatch, raise_interrupt, after=2)
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    before = snapshot(copy)
    result = invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt)
    assert done and result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED, result.output
    assert snapshot(copy) == before and not (copy / STAGE_DIR).exists()
    assert left_behind(copy, ckpt) == CLEAN


def test_the_single_file_rewritten_between_the_build_and_the_stage_is_refused_and_nothing_changes(
        moe_pair, tmp_path, monkeypatch):
    """Mirrors the dense case of test_streamed_f16 for a per-expert head: before any matrix is streamed."""
    target, fused, _ = moe_pair
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, "per-expert"))
    real = qwen_patch.stage_ir

    def stage_ir(*a, **k):
        rewritten_same_size(ckpt / "model.safetensors")
        return real(*a, **k)
    monkeypatch.setattr(qwen_patch, "stage_ir", stage_ir)
    error = assert_refused(tmp_path, target, ckpt, "f16")
    assert "model.safetensors" in error and "changed while" in error, error


# --- values: NaN, Inf, beyond f16 in the last expert or the up half --------------------------------------------------

LAST_DOWN = EXPERTS + "3.down_proj.weight"


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_an_inf_in_the_last_value_of_the_last_expert_is_refused_naming_its_tensor(moe_pair, tmp_path, monkeypatch,
                                                                                 fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = with_value(expert_tensors(fused, "per-expert"), LAST_DOWN, (-1, -1), np.inf)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    error = assert_refused(tmp_path, target, ckpt, fmt)
    assert f"tensor {LAST_DOWN}: holds 1 NaN or Inf values (pass --allow-nonfinite" in error, error


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_a_value_no_f32_norm_can_carry_in_the_last_expert_is_refused_naming_its_tensor(moe_pair, tmp_path,
                                                                                       monkeypatch, fmt):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = with_value(expert_tensors(fused, "per-expert"), LAST_DOWN, (-1, -1), -1e20)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    error = assert_refused(tmp_path, target, ckpt, fmt)
    assert f"tensor {LAST_DOWN}: holds 1e+20, beyond what the draft can compute in f32" in error, error


@pytest.mark.parametrize("layout", ["per-expert", pytest.param("fused", marks=pytest.mark.slow)])
def test_a_value_beyond_f16_in_the_last_expert_keeps_that_stack_f32_as_the_whole_build(moe_pair, tmp_path,
                                                                                       monkeypatch, layout):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = expert_tensors(fused, layout)
    name, index = (LAST_DOWN, (-1, -1)) if layout == "per-expert" else (EXPERTS + "down_proj", (-1, -1, -1))
    ckpt = write_ckpt(fused, tmp_path / "ckpt", with_value(tensors, name, index, 7e4))
    got = assert_whole_builds_draft(tmp_path, target, ckpt, "f16", monkeypatch)
    assert got[EXPERTS + "down_proj.weight"][0] == "<Type: 'float32'>"
    assert got[EXPERTS + "up_proj.weight"][0] == "<Type: 'float16'>"


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_a_nan_at_the_end_of_the_fused_gate_half_is_refused_naming_that_half(moe_pair, tmp_path, monkeypatch, fmt):
    """The last row of the gate half of the last expert: just before the up half's bytes in the file."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = read_tensors(fused)
    inner = tensors[EXPERTS + "gate_up_proj"][0].shape[1] // 2
    ckpt = write_ckpt(fused, tmp_path / "ckpt", with_value(tensors, EXPERTS + "gate_up_proj", (-1, inner - 1, -1),
                                                           np.nan))
    error = assert_refused(tmp_path, target, ckpt, fmt)
    assert (f"tensor {EXPERTS}gate_up_proj[:, 0:{inner}] (read as {EXPERTS}gate_proj.weight): holds 1 NaN"
            in error), error


@pytest.mark.parametrize("fmt,layout", [("f16", "fused"),
                                        pytest.param("f32", "per-expert", marks=pytest.mark.slow),
                                        pytest.param("f32", "fused", marks=pytest.mark.slow),
                                        pytest.param("f16", "per-expert", marks=pytest.mark.slow)])
def test_allow_nonfinite_with_nan_in_the_last_up_rows_writes_the_whole_builds_draft(moe_pair, tmp_path, monkeypatch,
                                                                                    fmt, layout):
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = expert_tensors(fused, layout)
    if layout == "fused":
        tensors = with_value(tensors, EXPERTS + "gate_up_proj", (-1, -1, -1), np.nan)
    else:
        tensors = with_value(tensors, EXPERTS + "3.up_proj.weight", (-1, -1), -np.inf)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    assert_whole_builds_draft(tmp_path, target, ckpt, fmt, monkeypatch, allow_nonfinite=True)


# --- the tensor set ---------------------------------------------------------------------------------------------------

def test_a_missing_expert_tensor_is_one_line_naming_it(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    tensors = expert_tensors(fused, "per-expert")
    del tensors[EXPERTS + "3.up_proj.weight"]
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors, experts_split)
    error = assert_refused(tmp_path, target, ckpt, "f16")
    assert f"no tensor {EXPERTS}3.up_proj.weight" in error, error


def test_an_extra_expert_tensor_is_one_line_naming_it(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    tensors = expert_tensors(fused, "per-expert")
    tensors[EXPERTS + "4.gate_proj.weight"] = tensors[EXPERTS + "0.gate_proj.weight"]
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    error = assert_refused(tmp_path, target, ckpt, "f32")
    assert f"tensor {EXPERTS}4.gate_proj.weight is not one of experts 0..3" in error, error


def test_an_expert_the_index_places_in_a_shard_that_lacks_it_is_one_line_naming_both(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    ckpt = write_ckpt(fused, tmp_path / "ckpt", expert_tensors(fused, "per-expert"), experts_split)
    index = json.loads((ckpt / INDEX).read_text())
    index["weight_map"][EXPERTS + "1.gate_proj.weight"] = "model-00001-of-00002.safetensors"
    (ckpt / INDEX).write_text(json.dumps(index))
    error = assert_refused(tmp_path, target, ckpt, "f16")
    assert "model-00001-of-00002.safetensors" in error and f"{EXPERTS}1.gate_proj.weight" in error, error


def test_an_expert_of_another_shape_is_one_line_naming_it(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    tensors = expert_tensors(fused, "per-expert")
    raw, dtype = tensors[EXPERTS + "2.down_proj.weight"]
    tensors[EXPERTS + "2.down_proj.weight"] = (np.ascontiguousarray(raw[:, :-1]), dtype)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    error = assert_refused(tmp_path, target, ckpt, "f16")
    assert f"tensor {EXPERTS}2.down_proj.weight: expected shape [64, 32]" in error and "[64, 31]" in error, error


# --- the gathered experts' graph form (irsurgeon.ops.moe.take_experts) ------------------------------------------------

def built_and_saved(ckpt: Path, out: Path, fmt: str, moe_form: str, stream: bool,
                    allow_nonfinite: bool = False) -> ov.Model:
    """The head of ckpt built in `moe_form` (streamed into the .bin or held whole), saved by save_draft."""
    cfg, weights, opened = draft_load.load_with(QWEN, ckpt, allow_nonfinite=allow_nonfinite, warn=lambda _: None)
    try:
        model = draft_build.build_model(cfg, weights, fmt, recipe=QWEN, moe_form=moe_form, warn=lambda _: None,
                                  stream=opened.close if stream else None)
        xml = save_draft(model, out)
    finally:
        opened.close()
    return ov.Core().read_model(xml)


@pytest.mark.parametrize("beyond,value,fmt", [(None, None, "f16"), ("down_proj", 7e4, "f16"),
                                              ("gate_up_proj", 7e4, "f16"), ("gate_up_proj", np.nan, "f16"),
                                              pytest.param(None, None, "f32", marks=pytest.mark.slow),
                                              pytest.param("3.down_proj.weight", 7e4, "f16", marks=pytest.mark.slow)],
                         ids=["fits", "down-f32", "up-f32", "up-nan", "f32-build", "per-expert-down-f32"])
def test_gathered_experts_streamed_save_the_whole_builds_draft_even_when_a_stack_is_kept_f32(
        moe_pair, tmp_path, monkeypatch, beyond, value, fmt):
    """take_experts gathers the chosen experts of the f16 weight before its decompression: a streamed stack found
    not to fit f16 (a value beyond f16; a NaN, allowed, which the build then stores f16 its own way) must be
    replaced where the gather reads it, as the whole build's constant is gathered."""
    target, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors = expert_tensors(fused, "per-expert" if beyond and beyond[0].isdigit() else "fused")
    if beyond:
        tensors = with_value(tensors, EXPERTS + beyond, (-1,) * tensors[EXPERTS + beyond][0].ndim, value)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", tensors)
    allow = beyond is not None and np.isnan(value)
    ours = built_and_saved(ckpt, tmp_path / "ours", fmt, "gather", stream=True, allow_nonfinite=allow)
    theirs = built_and_saved(ckpt, tmp_path / "theirs", fmt, "gather", stream=False, allow_nonfinite=allow)
    assert layers(ours) == layers(theirs) and weight_data(ours) == weight_data(theirs)
    assert graph_of(ours) == graph_of(theirs)
    if beyond and not allow:
        role = "up_proj" if beyond == "gate_up_proj" else "down_proj"
        assert weight_data(ours)[f"{EXPERTS}{role}.weight"][0] == "<Type: 'float32'>"
    assert draft_stream._STREAMS == {}


def graph_of(model: ov.Model) -> list:
    """Each op reached from the outputs as (type, output types and shapes, its inputs' producers likewise), sorted:
    the graph's structure whatever names the save gave its anonymous ops."""
    def kind(node) -> tuple:
        return node.get_type_name(), tuple((str(o.get_element_type()), str(o.get_partial_shape()))
                                           for o in node.outputs())
    return sorted((kind(op), tuple(kind(i.get_source_output().get_node()) for i in op.inputs()))
                  for op in model.get_ordered_ops())


def test_gathered_experts_choosing_every_expert_save_the_whole_builds_draft_when_a_stack_is_kept_f32(
        moe_pair, tmp_path, monkeypatch):
    """top_k = num_experts: the whole f32 stack where the gathered rows belong broadcasts against the routing
    weights, so a wrongly rewired gather is no shape error at the save but another model."""
    _, fused, _ = moe_pair
    small_blocks(monkeypatch)
    tensors, edit = resized(fused, 2, 32)
    ckpt = write_ckpt(fused, tmp_path / "ckpt", with_value(tensors, EXPERTS + "down_proj", (-1, -1, -1), 7e4),
                      config_edit=edit)
    ours = built_and_saved(ckpt, tmp_path / "ours", "f16", "gather", stream=True)
    theirs = built_and_saved(ckpt, tmp_path / "theirs", "f16", "gather", stream=False)
    assert graph_of(ours) == graph_of(theirs) and weight_data(ours) == weight_data(theirs)
    assert weight_data(ours)[EXPERTS + "down_proj.weight"][0] == "<Type: 'float32'>"
