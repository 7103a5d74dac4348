"""Checkpoint storage formats: F32 / F16 / BF16 (as declared or mixed), FP8 block-scaled (dense and MoE, BF16 or
F32 scales, partial edge blocks, modules_to_not_convert), f16 builds of weights f16 cannot hold; each builds, and
patches an export that then decodes like plain greedy in openvino-genai. Other quantized layouts:
test_quantized_layouts.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from helpers.tiers import default_tier, every_nth
from helpers.checkpoints import (PER_TENSOR, as_float, dequantized, fp8_config, fp8_tensors, fused_view,
                                 read_tensors, split_per_expert, write_variant)
from helpers.heads import max_diff, run_head, run_reference, scale, three_calls
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.flows.standalone import build_mtp_model, load_mtp
from irsurgeon.cli import main
from irsurgeon.core.errors import CheckpointError
from irsurgeon.ops.core import WeightFormat, weight
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from irsurgeon.families.qwen35_mtp.strip import strip_mtp
from irsurgeon.flows.verify import verify_directory
from irsurgeon.weights.fp8 import dequantize_blocks, unconverted_by
from irsurgeon.weights.safetensors_io import FP8_E4M3FN, decode, write_safetensors

Q = "mtp.layers.0.self_attn.q_proj.weight"
DOWN = "mtp.layers.0.mlp.down_proj.weight"


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def one_line_error(code: int, out: str) -> str:
    assert code == 1 and out.startswith("Error: ") and out.count("\n") == 1, out
    return out


# ---- float storage dtypes ----------------------------------------------------------------------------------------

def declare(dtype: str):
    def edit(config: dict) -> None:
        config["dtype"] = config["text_config"]["dtype"] = dtype
    return edit


@pytest.fixture(scope="module")
def floats(ckpt, tmp_path_factory):
    """name -> checkpoint: the reference bf16 and f32 ones, an f16 copy, and a bf16 one with two tensors in other
    float dtypes than config.json declares."""
    root, src = tmp_path_factory.mktemp("floats"), ckpt("qwen35-dense")
    t = read_tensors(src)
    mixed = as_float(as_float(t, "F32", lambda n: n == "mtp.fc.weight"), "F16",
                     lambda n: n.endswith(("q_norm.weight", "k_norm.weight")))
    return {"bf16": src, "f32": ckpt("qwen35-dense-f32"),
            "f16": write_variant(src, root / "f16", as_float(t, "F16"), declare("float16")),
            "mixed": write_variant(src, root / "mixed", mixed)}


@pytest.mark.parametrize("name", ["bf16", "f16", "f32", "mixed"])
def test_float_checkpoint_matches_numpy_on_its_stored_values(floats, name):
    """f32 head vs the float64 numpy layer on the values as stored: f32 rounding only (see test_build), 1e-4."""
    d = floats[name]
    cfg, _, _ = load_mtp(d)
    calls = three_calls(cfg.hidden_size)
    want = run_reference(dequantized(read_tensors(d)), cfg, calls)
    assert max_diff(run_head(build_mtp_model(d, weight_format="f32"), calls), want) <= 1e-4 * scale(want)


@pytest.mark.parametrize("name, fmt", every_nth([(n, f) for n in ("bf16", "f16", "f32", "mixed")
                                                for f in ("f16", "f32", "int8", "int4")], 3, ids=lambda p: f"{p[0]}-{p[1]}"))
def test_float_checkpoint_builds_in_every_weight_format(floats, name, fmt, tmp_path):
    code, out = run("build-mtp", floats[name], "-o", tmp_path, "--weight-format", fmt)
    assert code == 0, out
    assert (tmp_path / contract.MTP_XML).is_file() and "warning" not in out


def test_other_float_dtypes_than_declared_are_noted_once_per_dtype(floats, tmp_path):
    code, out = run("build-mtp", floats["mixed"], "-o", tmp_path)
    assert code == 0, out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    config = floats["mixed"] / "config.json"
    assert notes == [
        f"note: mtp.layers.0.self_attn.k_norm.weight and 1 more stored as F16, not the bfloat16 {config} declares; "
        "read as stored",
        f"note: mtp.fc.weight stored as F32, not the bfloat16 {config} declares; read as stored"]


def test_read_only_arrays_become_weights_and_decoded_tensors_are_writable():
    """A read-only (memory-mapped) float32 array cannot back a shared openvino Constant: it is copied once."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a.setflags(write=False)
    for fmt in WeightFormat:
        node = weight(a, "w", fmt).get_node()
        const = node if node.get_type_name() == "Constant" else node.input_value(0).get_node()
        np.testing.assert_array_equal(const.get_data().astype(np.float32), a)
    assert decode(a, "F32").flags.writeable and not np.shares_memory(decode(a, "F32"), a)
    b = np.arange(4, dtype=np.float32)
    assert decode(b, "F32") is b  # writable memory is used as it is: no second copy


@pytest.mark.parametrize("name, raw, dtype, needle", [
    ("mtp.fc.weight", np.zeros((64, 128), np.int8), "I8", "stored as I8, which cannot hold a float weight"),
    ("mtp.norm.weight", np.zeros(64, bool), "BOOL", "stored as BOOL, which cannot hold a float weight"),
    (DOWN, np.zeros((64, 128), np.uint8), "F8_E5M2", "stored as F8_E5M2, which cannot hold a float weight"),
    (DOWN, np.zeros((64, 128), np.uint8), "F8_E4M3", "_scale_inv (its block scales) is missing"),
    (DOWN, np.zeros((64, 64), np.uint16), "BF16", "expected shape [64, 128]"),
])
def test_tensors_that_cannot_be_weights_are_refused(floats, tmp_path, name, raw, dtype, needle):
    t = read_tensors(floats["bf16"])
    t[name] = (raw, dtype)
    d = write_variant(floats["bf16"], tmp_path / "ckpt", t)
    out = one_line_error(*run("build-mtp", d, "-o", tmp_path / "out"))
    assert name in out and needle in out
    assert not (tmp_path / "out").exists()


# ---- f16 builds of weights f16 cannot hold -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def out_of_f16_range(tmp_path_factory):
    """A synthetic head whose o_proj / down_proj have std 1.5e-6 (below f16's normal range), whose fc is scaled
    by 1e7 (beyond f16's largest) and whose k_proj holds one value of 1e5 among ordinary ones; stored F32."""
    d = tmp_path_factory.mktemp("range")
    write_checkpoint(d / "src", SynthSpec(), seed=3)
    t = as_float(read_tensors(d / "src"), "F32")
    rng = np.random.default_rng(0)
    for n in ("mtp.layers.0.self_attn.o_proj.weight", DOWN):
        t[n] = ((rng.standard_normal(t[n][0].shape) * 1.5e-6).astype(np.float32), "F32")
    t["mtp.fc.weight"] = (t["mtp.fc.weight"][0] * np.float32(1e7), "F32")
    k = t["mtp.layers.0.self_attn.k_proj.weight"][0].copy()
    k[0, 0] = 1e5
    t["mtp.layers.0.self_attn.k_proj.weight"] = (k, "F32")
    return write_variant(d / "src", d / "ckpt", t, declare("float32"))


KEPT = {"mtp.fc.weight", "mtp.layers.0.self_attn.k_proj.weight", "mtp.layers.0.self_attn.o_proj.weight", DOWN}


def test_f16_build_keeps_what_f16_cannot_hold_as_f32_with_one_warning_each(out_of_f16_range, tmp_path):
    code, out = run("build-mtp", out_of_f16_range, "-o", tmp_path)
    assert code == 0, out
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert sorted(w.split()[2].rstrip(":") for w in warnings) == sorted(KEPT)
    assert all("kept as f32" in w and "values in [" in w for w in warnings)
    assert any("1e+05]" in w for w in warnings if "k_proj" in w)  # the range names the offending value
    assert any("e-06" in w for w in warnings if "o_proj" in w)
    head = ov.Core().read_model(tmp_path / contract.MTP_XML)
    consts = {op.get_friendly_name(): op.get_element_type().get_type_name() for op in head.get_ops()
              if op.get_type_name() == "Constant" and op.get_friendly_name().startswith("mtp.")}
    assert {n: consts[n] for n in KEPT} == {n: "f32" for n in KEPT}
    assert consts[Q] == "f16"  # the rest stays compressed


def test_f16_build_of_out_of_range_weights_equals_the_f32_build(out_of_f16_range):
    """Kept tensors are exact; the others carry f16 rounding (2^-11 relative): 1e-2 of the output scale. Clamping
    fc at 65504 or flushing o_proj to f16 subnormals would move the output by far more."""
    cfg, _, _ = load_mtp(out_of_f16_range)
    calls = three_calls(cfg.hidden_size)
    f32 = run_head(build_mtp_model(out_of_f16_range, weight_format="f32", warn=lambda _: None), calls)
    f16 = run_head(build_mtp_model(out_of_f16_range, weight_format="f16", warn=lambda _: None), calls)
    assert max_diff(f16, f32) <= 1e-2 * scale(f32)


# ---- FP8 block-scaled --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fp8_copy(ckpt, tmp_path_factory):
    """fp8_copy(source, block, scale_dtype, per_expert=False) -> (dir, stored tensors, block used)."""
    made = {}

    def get(source: str, block, scale_dtype: str, per_expert: bool = False):
        key = (source, block, scale_dtype, per_expert)
        if key not in made:
            src = ckpt(source)
            t = read_tensors(src)
            if per_expert:
                t = split_per_expert(t)
            used = block or (128, 128)
            q = fp8_tensors(t, used, scale_dtype)
            d = tmp_path_factory.mktemp(f"{source}-fp8")
            made[key] = write_variant(src, d / "ckpt", q, fp8_config(block)), q, used, t
        return made[key]
    return get


FP8_CASES = [  # (source, block in quantization_config (None: absent, so 128 x 128), scale dtype, per expert)
    ("qwen35-dense", None, "BF16", False),
    ("qwen35-dense", (48, 40), "BF16", False),
    ("qwen35-dense", (48, 40), "F32", False),
    ("qwen35-dense", PER_TENSOR, "F32", False),
    ("qwen35-moe", (48, 40), "BF16", True),
    ("qwen35-moe", (48, 40), "F32", False),
]


def case_id(case) -> str:
    block = case[1] if case[1] in (None, PER_TENSOR) else "x".join(map(str, case[1]))
    return f"{case[0]}-{block}-{case[2]}" + ("-per-expert" if case[3] else "")


@pytest.mark.parametrize("case", FP8_CASES, ids=case_id)
def test_fp8_head_matches_numpy_on_the_dequantized_weights_and_the_bf16_head_within_fp8_error(fp8_copy, case):
    """(a) vs the float64 numpy layer on codes x block scales (computed here with np.repeat): f32 rounding only,
    1e-4 of the output scale, as for float checkpoints.
    (b) vs the bf16 head: e4m3 keeps 3 mantissa bits, so rounding to nearest changes each weight by at most 2^-4 of
    its magnitude (block scales bring every block's largest value to 448, inside the normal range). To first order
    each quantized projection perturbs its output by at most that relative error, the perturbations add along the
    residual stream, and the final RMSNorm keeps the output scale: bound = (projections on the path) x 2^-4 of the
    output scale, with 7 projections in the dense layer (q, k, v, o, gate, up, down) and 10 in the MoE layer (the
    routed experts' gate/up/down count once: their top-k outputs are mixed with weights summing to 1, so the mixture's
    relative error is at most its worst expert's; plus the shared expert's three). Measured: 0.018-0.033 of the scale.
    It must also be a real quantization: more than 1e-3 of the scale.
    """
    d, q, block, original = fp8_copy(*case)
    cfg, _, _ = load_mtp(d)
    calls = three_calls(cfg.hidden_size)
    got = run_head(build_mtp_model(d, weight_format="f32"), calls)
    want = run_reference(fused_view(dequantized(q, block)), cfg, calls)
    bf16 = run_reference(fused_view(dequantized(original)), cfg, calls)
    assert max_diff(got, want) <= 1e-4 * scale(want)
    projections = 10 if cfg.is_moe else 7
    assert 1e-3 * scale(bf16) < max_diff(got, bf16) <= projections * 2 ** -4 * scale(bf16)


@pytest.mark.parametrize("source, fmt", [("qwen35-dense", "int4"), ("qwen35-moe", "int4"), ("qwen35-dense", "f16")])
def test_fp8_checkpoint_compresses(fp8_copy, source, fmt, tmp_path):
    d, *_ = fp8_copy(source, None, "BF16", source == "qwen35-moe")
    code, out = run("build-mtp", d, "-o", tmp_path, "--weight-format", fmt)
    assert code == 0, out
    head = ov.Core().read_model(tmp_path / contract.MTP_XML)
    types = {op.get_element_type().get_type_name() for op in head.get_ops() if op.get_type_name() == "Constant"}
    assert ("u4" if fmt == "int4" else "f16") in types


def test_fp8_dequantization_scales_partial_edge_blocks_in_place():
    codes = np.random.default_rng(0).integers(0, 0x7E, (2, 5, 7)).astype(np.uint8)
    values, scale_inv = FP8_E4M3FN[codes], np.arange(1, 2 * 3 * 3 + 1, dtype=np.float32).reshape(2, 3, 3)
    want = values * np.repeat(np.repeat(scale_inv, 2, 1), 3, 2)[:, :5, :7]
    got = dequantize_blocks(values.copy(), scale_inv, (2, 3), "x")
    np.testing.assert_array_equal(got, want)
    per_tensor = dequantize_blocks(values.copy(), np.float32([2.0, 3.0]), None, "x")
    np.testing.assert_array_equal(per_tensor, values * np.float32([2.0, 3.0])[:, None, None])
    with pytest.raises(CheckpointError, match=r"x_scale_inv: expected shape \[2, 3, 3\].*2x3 blocks.*\[2, 3, 2\]"):
        dequantize_blocks(values.copy(), scale_inv[..., :2], (2, 3), "x")


@pytest.mark.parametrize("module, patterns, match", [
    ("mtp.fc", ("mtp.fc",), "mtp.fc"),
    ("mtp.layers.0.self_attn.q_proj", ("q_proj",), "q_proj"),                        # suffix
    ("mtp.layers.0.self_attn.q_proj", ("mtp.layers.0.self_attn",), "mtp.layers.0.self_attn"),  # prefix at a boundary
    ("mtp.layers.0.self_attn.q_proj", ("mtp.layers.0.self_att",), None),             # not at a module boundary
    ("mtp.layers.0.mlp.gate_proj", ("mtp.layers.0.mlp.gate",), None),                # mlp.gate is not mlp.gate_proj
    ("mtp.layers.10.mlp.up_proj", ("mtp.layers.1",), None),
    ("mtp.layers.0.mlp.experts", (r"mtp\.layers\.\d+\.mlp",), r"mtp\.layers\.\d+\.mlp"),  # a regex
])
def test_modules_to_not_convert_matches_like_transformers(module, patterns, match):
    assert unconverted_by(module, patterns) == match


def test_modules_to_not_convert_is_honoured(ckpt, tmp_path):
    """Listed modules kept BF16 build; a listed module stored as FP8 is refused (transformers would load it as a
    plain Linear, without its scales)."""
    src = ckpt("qwen35-dense")
    q = fp8_tensors(read_tensors(src), (128, 128), "BF16")
    ok = write_variant(src, tmp_path / "ok", q, fp8_config(modules_to_not_convert=["lm_head", "mtp.fc"]))
    assert run("build-mtp", ok, "-o", tmp_path / "ok-out")[0] == 0
    bad = write_variant(src, tmp_path / "bad", q, fp8_config(modules_to_not_convert=["self_attn.q_proj"]))
    out = one_line_error(*run("build-mtp", bad, "-o", tmp_path / "bad-out"))
    assert f"tensor {Q}: stored as F8_E4M3" in out and "modules_to_not_convert lists 'self_attn.q_proj'" in out


def fp8_edit(src: Path, dst: Path, mutate_tensors=None, **qc) -> Path:
    q = fp8_tensors(read_tensors(src), (128, 128), "BF16")
    if mutate_tensors:
        mutate_tensors(q)
    return write_variant(src, dst, q, fp8_config(**qc))


BAD_FP8 = {
    "scale-shape": (lambda q: q.__setitem__(Q + "_scale_inv", (np.zeros((1, 1), np.float32), "F32")), {},
                    [Q + "_scale_inv", "expected shape [4, 1]", "[512, 64]", "128x128 blocks", "found [1, 1]"]),
    "scale-dtype": (lambda q: q.__setitem__(Q + "_scale_inv", (np.zeros((4, 1), np.int32), "I32")), {},
                    [Q + "_scale_inv", "scales stored as I32"]),
    "orphan-scale": (lambda q: q.__setitem__("mtp.fc.weight_scale_inv", (np.ones((1, 1), np.float32), "F32")), {},
                     ["mtp.fc.weight_scale_inv", "without a F8_E4M3 tensor"]),
    "block-size": (None, {"weight_block_size": [0, 128]}, ["weight_block_size must be two positive integers"]),
    "e5m2": (None, {"fmt": "e5m2"}, ["fmt 'e5m2'", "supported: fmt 'e4m3'"]),
    "ue8m0-scales": (None, {"scale_fmt": "ue8m0"}, ["scale_fmt 'ue8m0'"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FP8))
def test_bad_fp8_layouts_are_one_line_errors(ckpt, tmp_path, case):
    mutate, qc, needles = BAD_FP8[case]
    d = fp8_edit(ckpt("qwen35-dense"), tmp_path / "ckpt", mutate, **qc)
    out = one_line_error(*run("build-mtp", d, "-o", tmp_path / "out"))
    for needle in needles:
        assert needle in out
    assert not (tmp_path / "out").exists()


# ---- patch from F32 / F16 / FP8 checkpoints, and openvino-genai on the result ----------------------------------

@pytest.fixture(scope="module")
def patch_sources(ckpt, floats, fp8_copy):
    return {"f32": ("dense-f32ckpt-fp32", ckpt("qwen35-dense-f32")),
            "f16": ("dense-fp16", floats["f16"]),
            "fp8-dense": ("dense-fp16", fp8_copy("qwen35-dense", None, "BF16")[0]),
            "fp8-moe": ("moe-fp16", fp8_copy("qwen35-moe", None, "BF16", True)[0]),
            "fp8-bigram": ("dense-bigram-fp16", fp8_copy("qwen35-dense-bigram", None, "BF16")[0])}


@pytest.fixture(scope="module")
def patched_from(patch_sources, export, tmp_path_factory):
    done = {}

    def get(name):
        if name not in done:
            export_name, source = patch_sources[name]
            target = strip_mtp(export(export_name), tmp_path_factory.mktemp(name) / "target")
            code, out = run("patch", target, "--checkpoint", source)
            assert code == 0, out
            done[name] = target
        return done[name]
    return get


@pytest.mark.parametrize("name", ["f32", "f16", "fp8-dense", "fp8-moe", "fp8-bigram"])
def test_patch_from_each_checkpoint_format_passes_verify(patched_from, name):
    target = patched_from(name)
    assert [c.name for c in verify_directory(target) if not c.ok] == []


@pytest.mark.genai
@pytest.mark.extended  # CI's extended tier: the FP8 heads are compared with the f32 reference in the default tier
@pytest.mark.parametrize("name", default_tier(
    ["f32", "f16", "fp8-dense", "fp8-moe", "fp8-bigram"], keep={"fp8-dense"}))
def test_genai_mtp_decoding_equals_plain_greedy(patched_from, patch_sources, export, name):
    """Token-identical to plain greedy; on the bigram checkpoint the FP8 head's drafts are accepted as often as
    optimum's bf16 head's (within 2 points, as in test_patch)."""
    from irsurgeon.flows.genai import run_equivalence

    report = run_equivalence(patched_from(name), prompts=3, nats=(1, 2, 3, 4), echo=lambda _: None)
    assert len(report.runs) == 12 and report.identical, [r for r in report.runs if not r.identical]
    if "bigram" in name:
        theirs = run_equivalence(export(patch_sources[name][0]), prompts=3, nats=(1, 2, 3, 4), echo=lambda _: None)
        assert report.acceptance > 0.3 and abs(report.acceptance - theirs.acceptance) <= 0.02


def test_sharded_fp8_checkpoint_with_scales_in_another_shard_builds_the_same_head(fp8_copy, tmp_path):
    """Index + shards: FP8 codes in one shard, their scales in another, the rest of the model in a third that is
    corrupt (opening it would be an error): the head equals the single-file one exactly."""
    single, q, _, _ = fp8_copy("qwen35-dense", None, "BF16")
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_bytes((single / "config.json").read_bytes())
    groups = {"codes.safetensors": [n for n in q if n.startswith("mtp.") and not n.endswith("_scale_inv")],
              "scales.safetensors": [n for n in q if n.endswith("_scale_inv")]}
    for shard, names in groups.items():
        write_safetensors(d / shard, {n: q[n][0] for n in names}, {n: q[n][1] for n in names})
    (d / "rest.safetensors").write_bytes(b"\xff" * 64)
    weight_map = {n: s for s, names in groups.items() for n in names}
    weight_map.update({n: "rest.safetensors" for n in q if not n.startswith("mtp.")})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg, _, ck = load_mtp(d)
    assert sorted(p.name for p in ck.opened) == ["codes.safetensors", "scales.safetensors"]
    ck.close()
    calls = three_calls(cfg.hidden_size)
    got = run_head(build_mtp_model(d, weight_format="f32"), calls)
    assert max_diff(got, run_head(build_mtp_model(single, weight_format="f32"), calls)) == 0.0


def test_static_activation_scales_are_dropped_and_an_orphan_one_is_refused(fp8_copy, tmp_path):
    """activation_scheme static: each FP8 linear also stores `activation_scale` (input quantization only)."""
    single, q, _, _ = fp8_copy("qwen35-dense", None, "BF16")
    static = dict(q)
    for name in (n for n in q if n.endswith(".weight_scale_inv")):
        static[name[: -len(".weight_scale_inv")] + ".activation_scale"] = (np.float32([0.5]).reshape(()), "F32")
    d = write_variant(single, tmp_path / "static", static, fp8_config(activation_scheme="static"))
    cfg, _, _ = load_mtp(d)
    calls = three_calls(cfg.hidden_size)
    got = run_head(build_mtp_model(d, weight_format="f32"), calls)
    assert max_diff(got, run_head(build_mtp_model(single, weight_format="f32"), calls)) == 0.0
    static["mtp.fc.activation_scale"] = (np.float32([0.5]).reshape(()), "F32")  # fc is BF16: nothing to go with
    bad = write_variant(single, tmp_path / "orphan", static, fp8_config(activation_scheme="static"))
    out = one_line_error(*run("build-mtp", bad, "-o", tmp_path / "out"))
    assert "mtp.fc.activation_scale: activation scale without a block-scaled F8_E4M3 mtp.fc.weight" in out
