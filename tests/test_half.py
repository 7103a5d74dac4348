"""The f16 weights irsurgeon rounds itself (weights/half.py) against openvino's own compression pass.

openvino's pass is the reference: for each array, either both keep it f32, or both store the same f16 bits. The
arrays probe each part of the rule: every bf16 bit pattern in f16's range, random f32 bit patterns, values rounding
to f16 subnormals on both sides of the relative-error threshold, the 75% share, the absolute-error veto above 4096.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from openvino._offline_transformations import compress_model_transformation

from helpers.checkpoints import as_float, fp8_config, fp8_tensors, read_tensors, split_per_expert, write_variant
from irsurgeon.ops.core import WeightFormat, weight
from irsurgeon.weights.half import BF16_BEYOND, Tally, bf16_slice, round_slice, to_half
from irsurgeon.weights.safetensors_io import bf16_to_f32


def pass_f16(data: np.ndarray) -> np.ndarray | None:
    """What openvino's compression pass stores for an f32 constant: its f16 values, or None when it keeps f32."""
    holder = ov.Model([ops.result(ov.op.Constant(np.asarray(data, np.float32)))], [], "probe")
    compress_model_transformation(holder)
    node = holder.get_results()[0].input_value(0).get_node()
    if node.get_type_name() != "Convert":
        return None
    return node.input_value(0).get_node().get_data().copy()


def assert_same_as_pass(data: np.ndarray) -> None:
    ours, tally = to_half(data)
    want = pass_f16(data)
    assert tally.fits == (want is not None), f"irsurgeon fits={tally.fits}, openvino keeps f32={want is None}"
    if want is not None:
        assert np.array_equal(ours.view(np.uint16), want.view(np.uint16))


def test_every_bf16_pattern_rounds_as_openvino():
    bits = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    finite = bits[np.isfinite(bits) & (np.abs(bits) <= 65504)]
    filler = np.random.default_rng(0).standard_normal(finite.size * 4).astype(np.float32)
    assert_same_as_pass(np.concatenate([finite, filler]))


def test_random_f32_patterns_round_as_openvino():
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    raw = raw[np.isfinite(raw) & (np.abs(raw) < 2048)]
    assert_same_as_pass(np.concatenate([raw, rng.standard_normal(raw.size * 20).astype(np.float32)]))


def both_paths(raw: np.ndarray) -> tuple[tuple[np.ndarray, Tally], tuple[np.ndarray, Tally]]:
    """(bits, tally) of round_slice on the float32 values and of bf16_slice on the bf16 bits themselves."""
    out = []
    for fill in (lambda dst, t: round_slice(bf16_to_f32(raw), dst, t), lambda dst, t: bf16_slice(raw, dst, t)):
        dst, tally = np.full(raw.shape, np.float16(7)), Tally()
        fill(dst, tally)
        out.append((dst.view(np.uint16), tally))
    return out[0], out[1]


def test_bf16_bits_rebiased_as_the_float_path_rounds_them():
    """Every bf16 pattern within f16's range (zeros, subnormals, normals to 65280): the same f16 bits and the same
    tally (rejected subnormals) as rounding through float32, in order, shuffled, and as a strided view."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    in_range = patterns[(patterns & 0x7FFF) < BF16_BEYOND]
    shuffled = np.random.default_rng(4).permutation(in_range)
    for raw in (in_range, shuffled, shuffled.reshape(-1, 16)[:, 3:11]):
        (want, expected), (got, tally) = both_paths(raw)
        assert np.array_equal(got, want) and tally == expected
    assert expected.rejected > 0 and not expected.fits  # the subnormal share was really counted


def test_bf16_slice_into_a_strided_output_gives_the_same_bits():
    """dst a view with gaps (every other column of a wider buffer): the small values land where they belong."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    raw = np.random.default_rng(6).permutation(patterns[(patterns & 0x7FFF) < BF16_BEYOND]).reshape(-1, 32)
    (want, expected), _ = both_paths(raw)
    wide, tally = np.full((raw.shape[0], 64), np.float16(7)), Tally()
    bf16_slice(raw, wide[:, ::2], tally)
    assert tally == expected and np.array_equal(wide[:, ::2].view(np.uint16), want)
    assert (wide[:, 1::2] == 7).all()


def test_bf16_slice_in_its_own_output_buffer_gives_the_same_bits():
    """The f16 build reads a block's bf16 bits into the f16 buffer itself and re-biases them there."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for raw in (patterns[(patterns & 0x7FFF) < BF16_BEYOND], patterns):  # the fast path, and the float path
        (want, expected), _ = both_paths(raw)
        dst, tally = np.empty(raw.shape, np.float16), Tally()
        dst.view(np.uint16)[:] = raw
        bf16_slice(dst.view(np.uint16), dst, tally)
        assert tally == expected
        if tally.fits or not (tally.beyond or tally.nonfinite):
            assert np.array_equal(dst.view(np.uint16), want)


def test_bf16_slice_beyond_f16_or_nonfinite_takes_the_float_path():
    for value in (0x4780, 0x7F80, 0x7FC0, 0xFF80):  # 65536, +Inf, NaN, -Inf
        raw = np.full(64, 0x3F80, np.uint16)  # 1.0
        raw[5] = value
        (want, expected), (got, tally) = both_paths(raw)
        assert tally == expected and (tally.beyond or tally.nonfinite) and not tally.fits


def test_bf16_slice_of_typical_weights_matches_openvinos_pass():
    values = np.random.default_rng(5).standard_normal(1 << 16).astype(np.float32) * np.float32(0.02)
    raw = (values.view(np.uint32) >> 16).astype(np.uint16)
    dst, tally = np.empty(raw.shape, np.float16), Tally()
    bf16_slice(raw, dst, tally)
    want = pass_f16(bf16_to_f32(raw))
    assert tally.fits and want is not None and np.array_equal(dst.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("share", [0.5, 0.749, 0.75, 0.9])
def test_subnormal_share_decides_as_openvino(share):
    rng = np.random.default_rng(2)
    tiny = np.exp(rng.uniform(np.log(1e-9), np.log(6e-5), 4000)).astype(np.float32)
    for value in tiny[:40]:  # one value repeated, at the share: rejected or not by its own relative error
        data = np.ones(1000, np.float32)
        data[:int(share * 1000)] = value
        assert_same_as_pass(data)
    data = rng.standard_normal(4000).astype(np.float32)
    data[:int(share * 4000)] = tiny[:int(share * 4000)]
    assert_same_as_pass(data)


@pytest.mark.parametrize("big", [4097.0, 4098.0, 4099.0, 8194.0, 2049.0, 60000.5])
def test_absolute_error_veto_as_openvino(big):
    data = np.ones(100, np.float32)
    data[3] = big
    assert_same_as_pass(data)


def test_weight_beyond_f16_stays_f32_with_a_warning():
    notes = []
    data = np.ones((4, 8), np.float32)
    data[1, 2] = 7e4
    out = weight(data, "mtp.fc.weight", WeightFormat.F16, warn=notes.append)
    assert out.get_element_type() == ov.Type.f32 and out.get_node().get_type_name() == "Constant"
    assert len(notes) == 1 and "mtp.fc.weight" in notes[0] and "kept as f32" in notes[0]


def test_f16_weight_is_marked_for_decompression_and_shares_memory():
    data = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)
    out = weight(data, "mtp.fc.weight", WeightFormat.F16)
    convert = out.get_node()
    assert convert.get_type_name() == "Convert" and "decompression" in "".join(convert.get_rt_info().keys())
    const = convert.input_value(0).get_node()
    assert const.get_element_type() == ov.Type.f16 and const.get_friendly_name() == "mtp.fc.weight"
    assert np.array_equal(const.get_data(), data.astype(np.float16))


def declare_f16(config: dict) -> None:
    config["dtype"] = config["text_config"]["dtype"] = "float16"


def variants(ckpt, root) -> dict:
    """The reference checkpoints as stored (bf16 dense and fused MoE, f32 dense) plus the MoE one per expert, per
    expert in FP8 with block scales, and in f16."""
    moe = read_tensors(ckpt("qwen35-moe"))
    return {"dense": ckpt("qwen35-dense"), "dense-f32": ckpt("qwen35-dense-f32"), "moe-fused": ckpt("qwen35-moe"),
            "moe-per-expert": write_variant(ckpt("qwen35-moe"), root / "pe", split_per_expert(moe)),
            "moe-per-expert-fp8": write_variant(ckpt("qwen35-moe"), root / "fp8",
                                                fp8_tensors(split_per_expert(moe), (16, 16)), fp8_config((16, 16))),
            "moe-f16": write_variant(ckpt("qwen35-moe"), root / "f16", as_float(moe, "F16"), declare_f16)}


@pytest.mark.parametrize("kind", ["dense", "dense-f32", "moe-fused", "moe-per-expert", "moe-per-expert-fp8",
                                  "moe-f16"])
def test_f16_read_path_stores_what_the_pass_stores(kind, ckpt, tmp_path):
    """Every tensor decoded straight to f16 equals openvino's pass applied to the float32 reader's output."""
    from irsurgeon.flows.standalone import load_mtp

    _, weights, handle = load_mtp(variants(ckpt, tmp_path)[kind])
    try:
        for name in weights:
            half, want = weights.half(name), pass_f16(weights[name])
            fp8 = "fp8" in kind and name.endswith("proj.weight") and "experts" not in name
            assert (half is None) == (want is None or fp8), name  # FP8 matrices take the f32 path, tested elsewhere
            if half is not None:
                assert np.array_equal(half.view(np.uint16), want.view(np.uint16)), name
    finally:
        handle.close()
