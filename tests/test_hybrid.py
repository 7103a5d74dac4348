"""Hybrid synth targets (Gated DeltaNet linear-attention layers beside full attention), checked against:

- optimum-intel's export of the reference checkpoint: same states (ids, shapes, types) and the same logits when the
  synth builder is fed that checkpoint's tensors (an independent implementation of the same layers);
- a float64 numpy reference written from transformers' modeling code (tests/helpers/numpy_hybrid.py), over a
  prefill and single-token steps with every state carried, and under a beam reorder;
- openvino's paged conversion and openvino-genai: MTP decoding equal to greedy, with drafts accepted and rejected;
- genai's scheduler sized for real-size linear-attention states (the 256-sequence default does not fit them).
"""
from __future__ import annotations

import json
import math

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from helpers.cli import invoke
from helpers.numpy_hybrid import HybridReference
from irsurgeon.cli import main
from irsurgeon.ops.core import WeightFormat
from irsurgeon.synth import target as tg
from irsurgeon.synth.checkpoint import FULL, LINEAR, conv_dim, layer_types, spec_from_config
from irsurgeon.synth.registry import default_spec, synthesize
from irsurgeon.weights.safetensors_io import SafetensorsFile

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}  # an f16/u8 KV cache alone moves logits 1e-4
LM = "openvino_language_model.xml"
SPLITS = (5, 6, 7, 8)  # a 5-token prefill, then three single-token steps


def tensors(path) -> dict[str, np.ndarray]:
    st = SafetensorsFile(path)
    try:
        return {n: np.array(st.get(n), dtype=np.float32) for n in st.tensors}
    finally:
        st.close()


def feed(embeds: np.ndarray, start: int, stop: int, beam_idx=None) -> dict:
    B = embeds.shape[0]
    pos = np.repeat(np.arange(start, stop)[None], B, 0)
    return {"inputs_embeds": embeds, "position_ids": np.repeat(pos[None], 4, 0),
            "attention_mask": np.ones((B, stop), np.int64),
            "beam_idx": np.arange(B, dtype=np.int32) if beam_idx is None else np.asarray(beam_idx, np.int32)}


def run_steps(model, embed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Logits [S, V] of ids, batch 1, prefill then single tokens on one request (states carried)."""
    req = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    out, start = [], 0
    for stop in SPLITS:
        out.append(req.infer(feed(embed[ids[start:stop]][None], start, stop))["logits"][0].copy())
        start = stop
    return np.concatenate(out)


def states(model: ov.Model) -> list[tuple[str, str, str]]:
    return sorted((v.get_info().variable_id, str(v.get_info().data_shape), str(v.get_info().data_type))
                  for v in model.get_variables())


def reference_build(ckpt_dir, fmt: WeightFormat) -> tuple[ov.Model, dict, object]:
    """The synth language model built from a reference checkpoint's own tensors and config."""
    spec = spec_from_config(json.loads((ckpt_dir / "config.json").read_text())["text_config"])
    t = tensors(ckpt_dir / "model.safetensors")
    return tg.qwen35_language_model(spec, tg.Weights(t, fmt, True)), t, spec


def test_states_and_layer_ops_are_optimums(ckpt, export):
    """Same variable ids, shapes and types as optimum-intel's export of the same config; the linear layers use
    its ops (GroupConvolution causal conv, a Loop for the recurrence)."""
    ours, _, spec = reference_build(ckpt("qwen35-dense"), WeightFormat.F16)
    theirs = ov.Core().read_model(export("dense-fp16") / LM)
    assert layer_types(spec) == [LINEAR, FULL, LINEAR, FULL]
    assert states(ours) == states(theirs)
    kinds = {op.get_type_name() for op in ours.get_ops()}
    assert {"GroupConvolution", "Loop", "SoftPlus", "ScaledDotProductAttention"} <= kinds


@pytest.mark.parametrize("ckpt_name, export_name, fmt, tolerance", [
    ("qwen35-dense-f32", "dense-f32ckpt-fp32", WeightFormat.F32, 1e-5),
    # optimum stores every float constant of this export as f16 (gains, A, dt_bias included), synth keeps the
    # small ones f32: the rounding of those alone moves logits ~1e-4 of their scale.
    ("qwen35-moe", "moe-fp16", WeightFormat.F16, 2e-4),
])
def test_logits_equal_optimums_export_of_the_same_checkpoint(ckpt, export, ckpt_name, export_name, fmt, tolerance):
    ours, t, spec = reference_build(ckpt(ckpt_name), fmt)
    theirs = ov.Core().read_model(export(export_name) / LM)
    ids = np.random.default_rng(0).integers(8, spec.vocab, SPLITS[-1])
    embed = t["model.language_model.embed_tokens.weight"]
    want = run_steps(theirs, embed, ids)
    np.testing.assert_allclose(run_steps(ours, embed, ids), want, atol=tolerance * np.abs(want).max(), rtol=0)


@pytest.fixture(scope="module", params=["qwen35", "qwen35-moe"])
def hybrid(request, tmp_path_factory):
    """Full-strength branches (not the bigram default), grouped linear heads (2 key heads for 4 value heads)."""
    kind = request.param
    spec = default_spec(kind).with_(bigram=False)
    out = synthesize(tmp_path_factory.mktemp(kind), kind, spec, seed=13, with_mtp=False, weight_format="f32")
    return out, tensors(out.ckpt / "model.safetensors")


def test_logits_equal_numpy_reference_with_states_carried(hybrid):
    """f32 inference against float64: the largest difference seen is 2.5e-6 of the logit scale (dense 5.9e-6, MoE
    9.2e-6 at scales ~4); 5e-5 of it leaves room for other CPUs' kernels and is still ~100x below a wiring error
    (a conv window off by one token, a state not carried or a wrong dt_bias move logits by ~1e-2)."""
    out, t = hybrid
    assert layer_types(out.spec) == [LINEAR, LINEAR, LINEAR, FULL]
    ids = np.random.default_rng(1).integers(8, out.spec.vocab, SPLITS[-1])
    got = run_steps(ov.Core().read_model(out.target / LM), t["model.language_model.embed_tokens.weight"], ids)
    ref, want, start = HybridReference(t, out.spec, layer_types(out.spec)), [], 0
    for stop in SPLITS:
        want.append(ref.step(ids[start:stop]))
        start = stop
    want = np.concatenate(want)
    np.testing.assert_allclose(got, want, atol=5e-5 * np.abs(want).max(), rtol=0)


def test_loop_body_alone_computes_the_gated_delta_rule():
    """openvino fuses the whole layer's Loop into its own GatedDeltaNet op when compiling the language model, so
    the body's arithmetic only runs where that fusion does not apply; fed straight from Parameters (no q-scale
    pattern to match) the Loop runs as written and must equal the recurrence, the carried state included."""
    import openvino.opset13 as ops

    from irsurgeon.synth.linear_attn import gated_delta_rule

    s = default_spec("qwen35")
    Vh, Kd, Vd, S = s.linear_value_heads, s.linear_key_head_dim, s.linear_value_head_dim, 5
    shapes = {"q": [-1, Vh, -1, Kd], "k": [-1, Vh, -1, Kd], "v": [-1, Vh, -1, Vd], "g": [-1, Vh, -1],
              "beta": [-1, Vh, -1], "h0": [-1, Vh, Kd, Vd]}
    params = {n: ops.parameter(shape, ov.Type.f32, name=n) for n, shape in shapes.items()}
    core, h = gated_delta_rule(*(params[n].output(0) for n in shapes), s, "test")
    model = ov.Model([ops.result(core), ops.result(h)], list(params.values()))
    rng = np.random.default_rng(7)
    x = {n: rng.standard_normal([1 if d == -1 and i == 0 else S if d == -1 else d for i, d in enumerate(shape)])
         .astype(np.float32) for n, shape in shapes.items()}
    x["g"] = -np.abs(x["g"]) * 0.5
    x["beta"] = 1 / (1 + np.exp(-x["beta"]))
    got = ov.Core().compile_model(model, "CPU", F32)(x)
    state, want = x["h0"][0].astype(np.float64), np.zeros((Vh, S, Vd))
    for t in range(S):
        k, v, q = x["k"][0, :, t], x["v"][0, :, t], x["q"][0, :, t]
        state = state * np.exp(x["g"][0, :, t])[:, None, None]
        delta = (v - np.einsum("hk,hkv->hv", k, state)) * x["beta"][0, :, t][:, None]
        state = state + k[:, :, None] * delta[:, None, :]
        want[:, t] = np.einsum("hk,hkv->hv", q, state)
    np.testing.assert_allclose(got[0][0], want, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(got[1][0], state, atol=1e-5, rtol=1e-5)


def test_beam_reorder_moves_the_linear_states(hybrid):
    """Two prompts in a batch, then a step with beam_idx [1, 0] and the tokens swapped: each row continues the
    other row's history, so the logits are the unswapped step's rows swapped."""
    out, t = hybrid
    embed = t["model.language_model.embed_tokens.weight"]
    ids = np.random.default_rng(2).integers(8, out.spec.vocab, (2, 5))
    nxt = np.array([[11], [12]])
    compiled = ov.Core().compile_model(out.target / LM, "CPU", F32)
    results = []
    for beam, step in (([0, 1], nxt), ([1, 0], nxt[::-1])):
        req = compiled.create_infer_request()
        req.infer(feed(embed[ids], 0, 5))
        results.append(req.infer(feed(embed[step], 5, 6, beam))["logits"][:, 0])
    np.testing.assert_allclose(results[1], results[0][::-1], atol=1e-5, rtol=0)
    assert np.abs(results[0][0] - results[0][1]).max() > 1e-2  # the rows really differ


def test_show_reports_linear_states_as_constant_size(tmp_path, export):
    from irsurgeon.flows.show import show

    out = synthesize(tmp_path, "qwen35", seed=3)
    s = out.spec
    kv = show(out.target)["footprint"]["kv"]["target"]
    linear = layer_types(s).count(LINEAR)
    per_layer = 4 * (conv_dim(s) * s.linear_conv_kernel
                     + s.linear_value_heads * s.linear_key_head_dim * s.linear_value_head_dim)
    assert (kv["constant_states"], kv["constant_bytes"]) == (2 * linear, linear * per_layer)
    assert (kv["growing_states"], kv["layers"]) == (2, 1)
    text = CliRunner().invoke(main, ["show", str(out.target)]).output
    line = f"constant-size states ({2 * linear}: linear-attention conv/ssm), independent of context"
    assert line in text
    optimum = CliRunner().invoke(main, ["show", str(export("dense-fp16"))]).output
    assert "constant-size states (4: linear-attention conv/ssm), independent of context" in optimum


def test_cli_layer_types(tmp_path):
    for args, types, interval in ((["--layer-types", "full,linear,linear"], [FULL, LINEAR, LINEAR], None),
                                  (["--layer-types", "2", "--layers", "4"], [LINEAR, FULL] * 2, 2),
                                  (["--layer-types", "1", "--layers", "2"], [FULL, FULL], 1),
                                  ([], [LINEAR, LINEAR, LINEAR, FULL], 4)):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        result = CliRunner().invoke(main, ["synth", str(out), *args])
        assert result.exit_code == 0, result.output
        tc = json.loads((out / "ckpt" / "config.json").read_text())["text_config"]
        assert tc["layer_types"] == types and tc.get("full_attention_interval") == interval
        names = set(tensors(out / "ckpt" / "model.safetensors"))
        for i, kind in enumerate(types):
            mixer = "linear_attn.in_proj_qkv.weight" if kind == LINEAR else "self_attn.q_proj.weight"
            assert f"model.language_model.layers.{i}.{mixer}" in names
        lm = ov.Core().read_model(out / "target" / LM)
        assert sum("conv" in v for v, _, _ in states(lm)) == types.count(LINEAR)


def test_synth_refuses_a_hybrid_without_a_full_attention_layer(tmp_path):
    result = invoke("synth", tmp_path / "s", "--layers", "3")
    assert result.exit_code == 1 and "no full_attention layer" in result.stderr and not (tmp_path / "s").exists()
    assert "(pass --layer-types 3 or a list with 'full')" in result.stderr, result.stderr  # the option, by its flag


def test_checkpoint_tensors_have_real_names_and_shapes(tmp_path):
    """As transformers' Qwen3_5GatedDeltaNet declares them (and the reference checkpoint stores them)."""
    s = default_spec("qwen35")
    t = tensors(synthesize(tmp_path, "qwen35", s, seed=4).ckpt / "model.safetensors")
    C, H, Vh = conv_dim(s), s.hidden, s.linear_value_heads
    V = Vh * s.linear_value_head_dim
    shapes = {"in_proj_qkv.weight": (C, H), "in_proj_z.weight": (V, H), "in_proj_b.weight": (Vh, H),
              "in_proj_a.weight": (Vh, H), "conv1d.weight": (C, 1, s.linear_conv_kernel), "dt_bias": (Vh,),
              "A_log": (Vh,), "norm.weight": (s.linear_value_head_dim,), "out_proj.weight": (H, V)}
    p = "model.language_model.layers.0.linear_attn."
    assert {k[len(p):]: v.shape for k, v in t.items() if k.startswith(p)} == shapes
    assert not any(k.startswith("model.language_model.layers.0.self_attn.") for k in t)


def patched(tmp_path, kind: str, **spec):
    out = synthesize(tmp_path, kind, default_spec(kind).with_(**spec), seed=21)
    result = CliRunner().invoke(main, ["patch", str(out.target), "--checkpoint", str(out.ckpt)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.genai
def test_genai_rolls_linear_states_back_on_rejected_drafts(tmp_path):
    """A full-strength (non-bigram) model: its head's drafts are mostly rejected, so genai must roll the conv and
    recurrent states back on nearly every step; the tokens still equal plain greedy."""
    from irsurgeon.flows.genai import run_equivalence

    out = patched(tmp_path, "qwen35", bigram=False)
    report = run_equivalence(out.target, prompts=2, nats=(1, 2, 3, 4), max_new_tokens=20, echo=lambda _: None)
    assert len(report.runs) == 8 and report.identical
    assert sum(r.draft_tokens - r.accepted for r in report.runs) > 20


REAL_LINEAR = dict(linear_key_heads=16, linear_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128)


def test_scheduler_size_follows_the_states(tmp_path):
    from irsurgeon.families.qwen35_mtp.genai import CONTEXT_TOKENS, GIB, scheduler_size

    s = default_spec("qwen35").with_(layers=6, layer_types=(LINEAR,) * 5 + (FULL,), **REAL_LINEAR)
    out = synthesize(tmp_path, "qwen35", s, seed=5)
    la = 5 * 4 * (conv_dim(s) * 4 + 16 * 128 * 128)  # 5 layers, f32 conv window + recurrent state
    kv = 2 * 4 * s.kv_heads * s.head_dim  # K and V rows of the one full-attention layer at f32 (no head yet)
    assert scheduler_size(out.target, 1) == (1, 1)
    assert scheduler_size(out.target, 300) == (300, math.ceil(300 * (la + CONTEXT_TOKENS * kv) / GIB))
    assert 256 * la > GIB  # genai's default max_num_seqs would not fit in a 1 GiB cache


@pytest.mark.genai
@pytest.mark.slow
def test_genai_runs_real_size_linear_attention_states(tmp_path):
    """Real Qwen3.5 linear-attention heads (16 x 128): at f32 (the equivalence run's precision) genai's default
    max_num_seqs reserves 256 x 5.5 MiB of linear-attention state and refuses a 1 GiB cache; the sized scheduler
    loads and MTP equals greedy."""
    import openvino_genai as g

    from irsurgeon.flows.genai import run_equivalence

    out = patched(tmp_path, "qwen35", layers=6, layer_types=(LINEAR,) * 5 + (FULL,), **REAL_LINEAR)
    old = g.SchedulerConfig()
    old.enable_prefix_caching, old.cache_size = False, 1
    with pytest.raises(RuntimeError, match="reserved_la_bytes <= budget_in_bytes"):
        g.VLMPipeline(str(out.target), "CPU", scheduler_config=old, INFERENCE_PRECISION_HINT="f32")
    report = run_equivalence(out.target, prompts=2, nats=(1, 4), max_new_tokens=12, echo=lambda _: None)
    assert len(report.runs) == 4 and report.identical and all(r.accepted > 0 for r in report.runs)
