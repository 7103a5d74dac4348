"""A Qwen3.5 MoE head's routed experts are streamed into the staged .bin as its dense matrices are (draft.stream.Stream):
the halves of a fused experts.gate_up_proj and the one-tensor-per-expert layout alike, in f16 and f32, block by
block (a block smaller than an expert, one expert, several), into the model a build holding every weight saves, with
the refusals and the f32 fallback of a half f16 cannot hold, named as the whole-tensor readers name them."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.checkpoints import read_tensors, split_per_expert, write_variant
from helpers.cli import invoke, one_error
from helpers.experts import EXPERTS, MTP_XML, saved_build, streamed_names, weight_data
from lab.dirsnap import snapshot
from irsurgeon.draft import stream as draft_stream
from irsurgeon.weights import spec
from irsurgeon.weights.safetensors_io import decode, f32_to_bf16
from helpers.tiers import every_nth


def patched(tmp_path: Path, target: Path, ckpt: Path, fmt: str):
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    result = invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt)
    return copy, result


# BLOCK values per f16 block: below one expert (one expert a block), two experts, the whole stack in one
@pytest.mark.parametrize("layout, fmt, block", every_nth(
    [(layout, fmt, block) for layout in ("fused", "per-expert") for fmt in ("f16", "f32")
     for block in (100, 2 * 32 * 32, 1 << 21)], 3,
    ids=lambda p: f"{p[0]}-{p[1]}-{ {100: 'sub-expert', 2048: 'two-experts'}.get(p[2], 'whole')}"))
def test_routed_experts_stream_into_the_model_a_build_holding_them_saves(moe_pair, tmp_path, monkeypatch, layout,
                                                                          fmt, block):
    target, fused, per_expert = moe_pair
    ckpt = fused if layout == "fused" else per_expert
    monkeypatch.setattr(spec, "BLOCK", block)
    monkeypatch.setattr(spec, "SLICE", 300)  # several slices in an expert's rows: the decode's own grid moves too
    names = streamed_names(monkeypatch)
    copy, result = patched(tmp_path, target, ckpt, fmt)
    assert result.exit_code == 0, result.output
    experts = [n for n in names if n.startswith(EXPERTS)]
    assert sorted(experts) == [EXPERTS + f"{p}.weight" for p in ("down_proj", "gate_proj", "up_proj")], names
    ours, theirs = ov.Core().read_model(copy / MTP_XML), saved_build(ckpt, fmt, tmp_path / "saved.xml")
    got, want = weight_data(ours), weight_data(theirs)
    assert got == want and all(EXPERTS + f"{p}.weight" in got for p in ("gate_proj", "up_proj", "down_proj"))
    assert draft_stream._STREAMS == {}


def fused_with(ckpt: Path, d: Path, value: float, expert: int, row: int) -> Path:
    """ckpt's tensors with one value of experts.gate_up_proj (the expert, fused row `row`, column 0) replaced."""
    tensors = read_tensors(ckpt)
    raw, dt = tensors[EXPERTS + "gate_up_proj"]
    w = decode(raw, dt).astype(np.float32)
    w[expert, row, 0] = value
    tensors[EXPERTS + "gate_up_proj"] = (f32_to_bf16(w), "BF16")
    return write_variant(ckpt, d, tensors)


def expert_size(ckpt: Path) -> int:
    return read_tensors(ckpt)[EXPERTS + "gate_up_proj"][0].shape[1] // 2


@pytest.mark.parametrize("fmt", ["f16", "f32"])
def test_a_nan_in_a_streamed_fused_half_is_refused_naming_that_half_and_nothing_changes(moe_pair, tmp_path, fmt):
    target, fused, _ = moe_pair
    inner = expert_size(fused)
    ckpt = fused_with(fused, tmp_path / "ckpt", np.nan, 3, inner + 1)  # the up half of the last expert
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    before = snapshot(copy)
    error = one_error(invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt))
    part = (rf"tensor mtp\.layers\.0\.mlp\.experts\.gate_up_proj\[:, {inner}:{2 * inner}\] \(read as "
            rf"mtp\.layers\.0\.mlp\.experts\.up_proj\.weight\): holds 1 NaN")  # f16: the f32 path names it
    assert re.search(part, error), error
    assert snapshot(copy) == before and draft_stream._STREAMS == {}


def test_a_nan_in_one_streamed_expert_is_refused_naming_that_experts_tensor(moe_pair, tmp_path):
    target, fused, _ = moe_pair
    tensors = split_per_expert(read_tensors(fused))
    raw, dt = tensors[EXPERTS + "2.down_proj.weight"]
    bad = raw.copy()
    bad[0, 1] = 0x7FC0  # bf16 NaN
    tensors[EXPERTS + "2.down_proj.weight"] = (bad, dt)
    ckpt = write_variant(fused, tmp_path / "ckpt", tensors)
    copy = tmp_path / "t"
    shutil.copytree(target, copy)
    before = snapshot(copy)
    error = one_error(invoke("patch", copy, "--checkpoint", ckpt, "--weight-format", "f32"))
    assert "tensor mtp.layers.0.mlp.experts.2.down_proj.weight: holds 1 NaN" in error, error
    assert snapshot(copy) == before and draft_stream._STREAMS == {}


def test_a_streamed_fused_half_f16_cannot_hold_is_kept_f32_alone_as_the_build_keeps_it(moe_pair, tmp_path,
                                                                                      monkeypatch):
    target, fused, _ = moe_pair
    monkeypatch.setattr(spec, "BLOCK", 100)  # the value is met in the last of many blocks, after the others are written
    ckpt = fused_with(fused, tmp_path / "ckpt", 1e6, 3, expert_size(fused) + 1)  # beyond f16's 65504, the up half
    copy, result = patched(tmp_path, target, ckpt, "f16")
    assert result.exit_code == 0, result.output
    assert "experts.up_proj.weight" in result.output and "kept as f32" in result.output, result.output
    ours, theirs = ov.Core().read_model(copy / MTP_XML), saved_build(ckpt, "f16", tmp_path / "saved.xml")
    got = weight_data(ours)
    assert got[EXPERTS + "up_proj.weight"][0] == "<Type: 'float32'>"
    assert got[EXPERTS + "gate_proj.weight"][0] == got[EXPERTS + "down_proj.weight"][0] == "<Type: 'float16'>"
    assert got == weight_data(theirs) and draft_stream._STREAMS == {}
