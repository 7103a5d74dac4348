"""build-mtp: numeric parity (numpy reference, optimum's golden), structure, and the paged-attention conversion."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import openvino as ov
from irsurgeon.flows.standalone import save_draft
import pytest

import irsurgeon
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.draft.build import build_model
from irsurgeon.flows.standalone import build_mtp_model, load_mtp
from irsurgeon.families.qwen35_mtp.model import load_config
from irsurgeon.ops.core import WeightFormat
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from helpers.golden import INPUT_NAMES, compile_f32, golden_outputs, run_sequence, three_calls
from helpers.numpy_mtp import MTPReference, cfg_dict

SHAPES = {
    "gqa2-partial": SynthSpec(),
    "gqa2-half-rot-6heads": SynthSpec(hidden=96, heads=6, kv_heads=3, head_dim=16, intermediate=80,
                                      partial_rotary_factor=0.5, rope_theta=10000.0, rms_norm_eps=1e-5),
    "mha-full-rot": SynthSpec(hidden=48, heads=4, kv_heads=4, head_dim=24, intermediate=64, partial_rotary_factor=1.0),
    "gqa8-wide-head": SynthSpec(hidden=128, heads=8, kv_heads=1, head_dim=64, intermediate=96),
}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def synth_head(request, tmp_path_factory):
    spec = SHAPES[request.param]
    d = tmp_path_factory.mktemp(request.param)
    stored = write_checkpoint(d, spec, seed=7)
    cfg, weights, _ = load_mtp(d)
    ref_weights = {k[len("mtp."):]: v for k, v in stored.items()}
    return cfg, build_model(cfg, weights, WeightFormat.F32), ref_weights


def test_numpy_parity_three_calls(synth_head):
    """Prefill + two decode steps on one request, state carried, against the float64 numpy layer.

    f32 inference of f32 weights vs a float64 reference: differences are accumulated f32 rounding, ~1e-6 relative
    per op; 1e-4 of the output scale leaves two orders of margin and is far below any wiring error (>= 1e-1).
    """
    cfg, model, w = synth_head
    calls = three_calls(np.random.default_rng(0), cfg.hidden_size)
    ref = MTPReference(w, cfg_dict(cfg))
    expected = [ref.step(c["hidden_states"], c["inputs_embeds"], c["attention_mask"], c["position_ids"]) for c in calls]
    for got, want in zip(run_sequence(compile_f32(model), calls), expected):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max(), rtol=0)


def test_numpy_parity_batch2_padding_and_beam_reorder(synth_head):
    """Batch 2 with left padding in row 1, then steps that swap the beams through beam_idx."""
    cfg, model, w = synth_head
    H = cfg.hidden_size
    rng = np.random.default_rng(1)
    calls = three_calls(rng, H, batch=2)
    calls[0]["attention_mask"][1, :2] = 0  # row 1 is left-padded by two tokens
    for c in calls[1:]:
        c["attention_mask"][1, :2] = 0
        c["beam_idx"] = np.array([1, 0], np.int32)
    got = run_sequence(compile_f32(model), calls)
    ref = MTPReference(w, cfg_dict(cfg))
    for i, c in enumerate(calls):
        if i:
            ref.reorder(c["beam_idx"])
        with np.errstate(invalid="ignore", divide="ignore"):
            want = ref.step(c["hidden_states"], c["inputs_embeds"], c["attention_mask"], c["position_ids"])
        valid = c["attention_mask"][:, -c["hidden_states"].shape[1]:] > 0  # padded query rows are undefined
        np.testing.assert_allclose(got[i][valid], want[valid], atol=1e-4 * np.abs(want[valid]).max(), rtol=0)


@pytest.mark.parametrize("fmt, atol", [
    # optimum stores the (1 + w) norm gains as f16 and the MatMul weights as bf16 (exact in f16): with f16 weights
    # both IRs hold the same numbers, leaving only f32 accumulation order (seen: 1.6e-5).
    ("f16", 1e-4),
    # f32 gains differ from optimum's f16-rounded ones by up to 2^-11 relative in each of 7 norms (seen: 1.2e-3);
    # the smallest real bug the golden catches (wrong rope_theta) moves outputs by >= 2.3e-2.
    ("f32", 5e-3),
])
def test_golden_dense_matches_optimum(ckpt, golden, fmt, atol):
    model = build_mtp_model(ckpt("qwen35-dense"), weight_format=fmt)
    got, want = golden_outputs(model, golden("dense-fp16"))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= atol


def test_golden_is_sensitive_to_the_concat_order(ckpt, golden, tmp_path):
    """Negative control: swapping the two pre-fc norms (the embedding half goes first) must break the golden."""
    cfg, weights, _ = load_mtp(ckpt("qwen35-dense"))
    weights = dict(weights)
    weights["pre_fc_norm_embedding.weight"], weights["pre_fc_norm_hidden.weight"] = (
        weights["pre_fc_norm_hidden.weight"], weights["pre_fc_norm_embedding.weight"])
    fc = weights["fc.weight"]
    H = cfg.hidden_size
    weights["fc.weight"] = np.concatenate([fc[:, H:], fc[:, :H]], axis=1)
    got, want = golden_outputs(build_model(cfg, weights, WeightFormat.F32), golden("dense-fp16"))
    assert max(np.abs(g - w).max() for g, w in zip(got, want)) > 0.1


def op_counts(model: ov.Model) -> Counter:
    return Counter(op.get_type_name() for op in model.get_ops())


@pytest.fixture(scope="module")
def saved_head(tmp_path_factory):
    d = tmp_path_factory.mktemp("saved")
    write_checkpoint(d / "ckpt", SynthSpec(), seed=3)
    save_draft(build_mtp_model(d / "ckpt", weight_format="f16"), d / "out")
    return ov.Core().read_model(d / "out" / contract.MTP_XML), load_config(d / "ckpt" / "config.json")


def test_structure_matches_contract(saved_head):
    model, cfg = saved_head
    assert contract.check_model(model, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim) == []
    counts = op_counts(model)
    assert counts["ReadValue"] == 2 and counts["Assign"] == 2
    assert counts["ScaledDotProductAttention"] == 1
    assert counts["MatMul"] == 8  # fc, q, k, v, o, gate, up, down: RoPE uses Multiply
    assert [p.get_friendly_name() for p in model.get_parameters()] == INPUT_NAMES
    for rv in (op for op in model.get_ops() if op.get_type_name() == "ReadValue"):
        assert rv.input_value(0).get_node().get_type_name() == "Broadcast"
        (gather,) = [t.get_node() for t in rv.output(0).get_target_inputs()]
        assert gather.get_type_name() == "Gather"
        (concat,) = [t.get_node() for t in gather.output(0).get_target_inputs()]
        assert concat.get_type_name() == "Concat"


def test_names_and_rt_info(saved_head):
    model, _ = saved_head
    names = {op.get_friendly_name() for op in model.get_ops()}
    for path in ("mtp.fc", "mtp.layers.0.self_attn.q_proj", "mtp.layers.0.mlp.down_proj", "mtp.norm",
                 "mtp.layers.0.self_attn.q_proj.weight"):
        assert path in names
    assert model.get_rt_info("mtp_mode").astype(str) == "True"
    assert model.get_rt_info(["irsurgeon", "weight_format"]).astype(str) == "f16"
    assert model.get_rt_info(["irsurgeon", "version"]).astype(str) == irsurgeon.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", irsurgeon.__version__)


def test_f16_weights_are_stored_f16_and_f32_stays_f32(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=4)
    for fmt, want in (("f16", ov.Type.f16), ("f32", ov.Type.f32)):
        save_draft(build_mtp_model(tmp_path / "ckpt", weight_format=fmt), tmp_path / fmt)
        model = ov.Core().read_model(tmp_path / fmt / contract.MTP_XML)
        for mm in (op for op in model.get_ops() if op.get_type_name() == "MatMul"):
            src = mm.input_value(1).get_node()
            if src.get_type_name() == "Convert":
                assert any(k.startswith("decompression") for k in src.get_rt_info().keys())
                src = src.input_value(0).get_node()
            assert src.get_type_name() == "Constant" and src.get_element_type() == want
        inv_freq = [op for op in model.get_ops() if op.get_friendly_name() == "mtp.rotary_emb.inv_freq"]
        assert inv_freq and inv_freq[0].get_element_type() == ov.Type.f32  # never compressed


def test_paged_attention_pass_converts_the_head(saved_head):
    model, _ = saved_head
    model = model.clone()
    contract.to_paged_attention(model)
    counts = op_counts(model)
    assert counts["PagedAttentionExtension"] == 1
    assert counts["ReadValue"] == 0 and counts["Assign"] == 0 and counts["ScaledDotProductAttention"] == 0


def test_same_checkpoint_builds_byte_identical_files(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=6)
    for out in ("a", "b"):
        save_draft(build_mtp_model(tmp_path / "ckpt"), tmp_path / out)
    for name in (contract.MTP_XML, contract.MTP_BIN):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def exec_nodes(model: ov.Model, props: dict) -> list[tuple[str, list[str]]]:
    """The CPU plugin's runtime graph after its fusions: (layer type, input layer types) per node."""
    compiled = ov.Core().compile_model(model, "CPU", props)
    kind = lambda op: op.get_rt_info()["layerType"].astype(str)
    return [(kind(op), [kind(v.get_node()) for v in op.input_values()]) for op in compiled.get_runtime_model().get_ops()]


@pytest.mark.parametrize("props", [{"INFERENCE_PRECISION_HINT": "f32"}, {}], ids=["f32", "default"])
def test_cpu_plugin_fuses_rope_and_the_stateful_attention(saved_head, props):
    """q and k each run as one RoPE node straight into SDPA, which reads both cache states itself (no Concat)."""
    model, _ = saved_head
    nodes = exec_nodes(model, props)
    assert Counter(kind for kind, _ in nodes)["RoPE"] == 2
    (sdpa_inputs,) = [inputs for kind, inputs in nodes if kind == "ScaledDotProductAttention"]
    assert sdpa_inputs[:2] == ["RoPE", "RoPE"] and sdpa_inputs.count("MemoryInput") == 2
