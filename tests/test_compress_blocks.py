"""nncf's compression in blocks (irsurgeon.quant.blocks): the same IR as one nncf call on the whole weight.

Each case builds the f16 head of a seeded synthetic checkpoint twice and compresses it with the same parameters:
once through compress_model as the product runs it, with blocks forced down to the smallest nncf still quantizes
with its compiled model (MIN_INPUT_SIZE_FOR_OPTIMIZED_COMPRESSION values, the path every real-sized weight takes;
smaller weights go to nncf's numpy code, and so would too small a block), once with the blocks turned off
(nncf.compress_weights on the whole model, as before); the saved .xml must be equal byte for byte, and so must the
.bin but for the padding half-byte of 4-bit constants with an odd count of values. The heads are just large enough
for most weights to be split into several blocks on that path.
"""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import openvino as ov
import pytest

import nncf.openvino.optimized_functions as optimized

from irsurgeon.quant import blocks as compress_blocks
from irsurgeon.flows.standalone import save_draft
from irsurgeon.flows.standalone import build_mtp_model
from irsurgeon.quant.compress import compress_model, resolve_params
from irsurgeon.families.qwen35_mtp.contract import MTP_BIN, MTP_XML
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint

from nncf.quantization.algorithms.weight_compression.constants import \
    MIN_INPUT_SIZE_FOR_OPTIMIZED_COMPRESSION as SMALLEST

DENSE = SynthSpec(hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=512)
MOE = SynthSpec(hidden=128, heads=4, kv_heads=2, head_dim=32, num_experts=6, top_k=2, expert_size=256,
                shared_expert_size=256)
# hidden 192 = 3 groups of 64 per row: an odd number of packed 4-bit zero points per row, so a block of odd height
# would end inside a byte; experts of 75 rows (5 x 75 = 375 rows of the stack): an odd last block; their down_proj
# (75 input channels) falls back to the int8 backup
ODD = SynthSpec(hidden=192, heads=3, kv_heads=1, head_dim=64, intermediate=96, num_experts=5, top_k=2,
                expert_size=75, shared_expert_size=75)


def saved(model: ov.Model, out) -> tuple[bytes, bytes]:
    save_draft(model, out)
    return (out / MTP_XML).read_bytes(), (out / MTP_BIN).read_bytes()


def compressed(ckpt, params, blocks: bool, monkeypatch) -> ov.Model:
    """compress_model on a fresh f16 build; blocks=False: nncf on whole weights (compress_blocks.bounded off)."""
    with monkeypatch.context() as m:
        if not blocks:
            m.setattr(compress_blocks, "bounded", lambda head_values: nullcontext())
        else:
            m.setattr(compress_blocks, "block_values", lambda head_values: SMALLEST)
        return compress_model(build_mtp_model(ckpt, weight_format="f16"), params)[0]


SLOW = pytest.mark.slow  # the default tier's sample holds each head (dense, MoE, odd), each format and each option


@pytest.mark.parametrize("spec, fmt, overrides", [
    pytest.param(DENSE, "int4", {}, marks=SLOW), pytest.param(DENSE, "int8", {}, marks=SLOW),
    pytest.param(MOE, "int4", {}, marks=SLOW), (MOE, "int8", {}), (ODD, "int4", {}),
    pytest.param(ODD, "int8", {}, marks=SLOW), (DENSE, "int4", {"sym": True, "group_size": 32}),
    (DENSE, "int4", {"ratio": 0.5, "backup": "int8_asym"}), (MOE, "int4", {"all_layers": True, "group_size": 128}),
], ids=["dense-int4", "dense-int8", "moe-int4", "moe-int8", "odd-int4", "odd-int8", "dense-int4-sym-g32",
        "dense-int4-ratio", "moe-int4-g128-all-layers"])
def test_blocks_give_the_ir_of_one_nncf_call(spec, fmt, overrides, tmp_path, monkeypatch):
    write_checkpoint(tmp_path / "ckpt", spec, seed=5)
    params = resolve_params(fmt, **overrides)
    blocks, compiled = [], []
    real, real_ov = compress_blocks._assemble, optimized.do_integer_quantization
    monkeypatch.setattr(compress_blocks, "_assemble", lambda *a: blocks.append(a[3]) or real(*a))
    monkeypatch.setattr(optimized, "do_integer_quantization", lambda w, *a: compiled.append(w.size) or real_ov(w, *a))
    blocked = saved(compressed(tmp_path / "ckpt", params, True, monkeypatch), tmp_path / "blocks")
    assert len(blocks) >= 4 and max(len(b) for b in blocks) >= 3  # weights were really split, some in many blocks
    assert len(compiled) > len(blocks) and min(compiled) >= SMALLEST  # every block on nncf's compiled-model path
    blocks.clear()
    whole = saved(compressed(tmp_path / "ckpt", params, False, monkeypatch), tmp_path / "whole")
    assert not blocks
    assert blocked[0] == whole[0]
    padding = padding_bytes(tmp_path / "whole" / MTP_XML)
    assert bool(padding) == (spec is ODD and fmt == "int4")  # only there do 4-bit constants hold an odd count
    assert without(blocked[1], padding) == without(whole[1], padding)


def padding_bytes(xml) -> list[int]:
    """.bin offsets of the last byte of each 4-bit constant with an odd number of values: its high half is padding,
    which openvino never reads and nncf's whole-weight inference leaves as its plugin wrote it (a block's copy may
    leave another value there, and compress_blocks zeroes it)."""
    import xml.etree.ElementTree as ET

    out = []
    for layer in ET.parse(xml).getroot().iter("layer"):
        data = layer.find("data")
        if layer.get("type") == "Const" and data.get("element_type") in ("u4", "i4"):
            count = int(np.prod([int(d) for d in data.get("shape").split(",") if d]))
            if count % 2:
                out.append(int(data.get("offset")) + int(data.get("size")) - 1)
    return out


def without(data: bytes, padding: list[int]) -> bytes:
    """The .bin with the padding half of the given bytes cleared."""
    raw = bytearray(data)
    for at in padding:
        raw[at] &= 0x0F
    return bytes(raw)


def test_compressed_values_survive_the_release_of_their_sources(tmp_path):
    """The released f16 constants took no compressed data with them: the in-memory head (never saved) equals
    the same head read back from the files written at once."""
    write_checkpoint(tmp_path / "ckpt", MOE, seed=6)
    model = compress_model(build_mtp_model(tmp_path / "ckpt", weight_format="f16"), resolve_params("int4"))[0]
    H = MOE.hidden
    feed = {"hidden_states": np.full((1, 3, H), 0.3, np.float32), "inputs_embeds": np.full((1, 3, H), -0.2, np.float32),
            "attention_mask": np.ones((1, 3), np.int64), "position_ids": np.arange(3, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32)}
    core = ov.Core()
    live = core.compile_model(model, "CPU").create_infer_request().infer(feed)[0]
    save_draft(model, tmp_path / "head")
    del model
    read = core.compile_model(core.read_model(tmp_path / "head" / MTP_XML), "CPU").create_infer_request().infer(feed)[0]
    assert np.isfinite(live).all() and np.abs(live).max() > 0
    np.testing.assert_array_equal(live, read)


@pytest.mark.parametrize("shape, axes, limit, least, want", [
    ((8, 4), (1,), 32, 0, [(0, 8)]),                        # small enough: one block
    ((9, 4), (1,), 8, 0, [(0, 2), (2, 4), (4, 6), (6, 8), (8, 9)]),
    ((10, 4), (1,), 12, 0, [(0, 4), (4, 8), (8, 10)]),      # 3 rows fit: an even 4
    ((5, 3, 4), (2,), 1, 0, [(0, 2), (2, 4), (4, 5)]),      # expert stacks: whole experts, at least two a block
    ((9, 4), (1,), 8, 10, [(0, 4), (4, 9)]),                # no block under 10 values: 4 rows, the last 1 joins
    ((101, 1000), (1,), 1, 10_000, [(i, i + 10) for i in range(0, 80, 10)] + [(80, 90), (90, 101)]),
    ((8, 4), (0,), 8, 0, [(0, 8)]),                         # the leading axis is reduced over: never split
    ((64,), (0,), 8, 0, [(0, 64)]),
])
def test_leading_blocks(shape, axes, limit, least, want):
    assert compress_blocks.leading_blocks(shape, axes, limit, least) == want


@pytest.mark.parametrize("shape, axes, want", [
    ((8, 4), (1,), ((8, 4), (1,))), ((5, 3, 4), (2,), ((15, 4), (1,))), ((5, 3, 4, 2), (3,), ((60, 2), (1,))),
    ((5, 3, 4), (1,), ((5, 3, 4), (1,))), ((8, 4), (0,), ((8, 4), (0,))), ((8, 4), 1, ((8, 4), (1,))),
])
def test_flat_shape_merges_the_axes_before_the_first_reduced_one(shape, axes, want):
    assert compress_blocks.flat_shape(shape, axes) == want


def test_blocks_follow_the_head_size():
    assert compress_blocks.block_values(10) == compress_blocks.MIN_BLOCK_VALUES
    assert compress_blocks.block_values(845_000_000) == 845_000_000 // compress_blocks.HEAD_SHARE


def test_nncf_is_left_as_found(tmp_path):
    from nncf.openvino.optimized_functions.models import OV_MODEL_CACHE
    from nncf.quantization.algorithms.weight_compression import openvino_backend as backend

    before = backend.compress_weight, backend.OVWeightCompressionAlgoBackend._replace_node, OV_MODEL_CACHE.enabled()
    write_checkpoint(tmp_path / "ckpt", DENSE, seed=7)
    compress_model(build_mtp_model(tmp_path / "ckpt", weight_format="f16"), resolve_params("int4"))
    after = backend.compress_weight, backend.OVWeightCompressionAlgoBackend._replace_node, OV_MODEL_CACHE.enabled()
    assert after == before


def test_another_nncf_release_runs_unchanged(monkeypatch):
    """The internals read for nncf 3.4.0 are left alone under any other release (plain nncf, its own memory)."""
    import nncf
    from nncf.quantization.algorithms.weight_compression import openvino_backend as backend

    real = backend.compress_weight
    with compress_blocks.bounded(1 << 30):
        assert backend.compress_weight is not real
    monkeypatch.setattr(nncf, "__version__", "3.5.0")
    with compress_blocks.bounded(1 << 30):
        assert backend.compress_weight is real
