"""The DFlash draft built by irsurgeon against z-lab's dflash 0.1.0 (float32, CPU) goldens, call after stateful call.

tests/data/dflash (scripts/make_dflash_reference.py): three seeded tiny cases, each a Qwen3 target, a z-lab-format
draft and golden.npz with four calls fed as openvino-genai feeds a DFlash draft (state carried, reset only before the
first call). Tolerance: 1e-4 absolute on last_hidden_state (values of order 1-4). The f32 build differs from torch by
at most ~3e-6 (summation order, the SDPA kernel, float32 RoPE tables); z-lab's own two implementations differ by
~1e-6 on the same data. Each negative control below (a causal block, the target layers concatenated in another
order, Qwen3.5's `1 + w` norms, the seed row kept, a window off by one, the sliding layers' default causality
ignored) moves the output by far more, so the tolerance cannot hide those bugs.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from irsurgeon.draft.build import build_model

from irsurgeon.draft.load import load_with
from irsurgeon.core.errors import ConfigError
from irsurgeon.families.dflash import rope as rope_tables
from irsurgeon.families.dflash.model import (RECIPE, INPUTS, OUTPUT, annotate, draft, key_state, parse_config,
                                             value_state)
from helpers.tiers import every_nth

DATA = Path(__file__).resolve().parents[2] / "data" / "dflash"
CASES = ("base", "bias_yarn", "sliding")
FEEDS = ("inputs_embeds", "hidden_states", "position_ids", "attention_mask")
TOL = 1e-4


def goldens(case: str, name: str = "golden.npz") -> tuple[list[dict], list[np.ndarray]]:
    g, feeds = np.load(DATA / case / "golden.npz"), []
    want = np.load(DATA / case / name)
    for c in range(len(g["deltas"])):
        feeds.append({k: g[f"c{c}_{k}"] for k in FEEDS})
    return feeds, [want[f"c{c}_last_hidden_state"] for c in range(len(feeds))]


def load(case: str):
    cfg, weights, ckpt = load_with(RECIPE, DATA / case / "draft", warn=lambda line: None)
    return cfg, {role: np.array(weights[role]) for role in weights}, ckpt


def build(case: str, cfg=None, adjust=None, builder=RECIPE) -> ov.Model:
    loaded, weights, ckpt = load(case)
    ckpt.close()
    if adjust:
        weights = {role: adjust(role, w) for role, w in weights.items()}
    cfg = cfg or loaded
    return annotate(build_model(cfg, weights, "f32", recipe=builder), cfg)


def run(model: ov.Model, feeds: list[dict], permute=None) -> list[np.ndarray]:
    """Every call in order on one infer request (state reset once, before the first)."""
    req = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    req.reset_state()
    outs = []
    for feed in feeds:
        feed = dict(feed, beam_idx=np.zeros(1, np.int32))
        if permute:
            feed["hidden_states"] = permute(feed["hidden_states"])
        req.infer(feed)
        outs.append(req.get_tensor(OUTPUT).data.copy())
    return outs


def errors(outs: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    return [float(np.abs(o[:, :w.shape[1]] - w).max()) for o, w in zip(outs, want)]


@pytest.mark.parametrize("case", CASES)
def test_matches_zlab_every_call(case):
    feeds, want = goldens(case)
    errs = errors(run(build(case), feeds), want)
    print(case, [f"{e:.3g}" for e in errs])
    assert len(errs) >= 4 and max(errs) < TOL


def test_sliding_case_covers_a_context_longer_than_the_window():
    cfg = load("sliding")[0]
    windows = {layer.window for layer in cfg.layers if layer.kind == "sliding_attention"}
    feeds, _ = goldens("sliding")
    assert windows == {3} and feeds[0]["hidden_states"].shape[1] > 3 and feeds[0]["inputs_embeds"].shape[1] > 3
    assert [layer.causal for layer in cfg.layers] == [True, False, True]


def test_is_causal_false_matches_zlab_two_sided_window():
    cfg = load("sliding")[0]
    bidir = dataclasses.replace(cfg, layers=tuple(dataclasses.replace(x, causal=False) for x in cfg.layers))
    feeds, want = goldens("sliding", "golden_is_causal_false.npz")
    assert max(errors(run(build("sliding", bidir), feeds), want)) < TOL


def with_layers(case: str, **changes):
    cfg = load(case)[0]
    return dataclasses.replace(cfg, layers=tuple(dataclasses.replace(x, **changes) for x in cfg.layers))


def window_moved(case: str, by: int):
    cfg = load(case)[0]
    return dataclasses.replace(cfg, layers=tuple(dataclasses.replace(x, window=x.window + by) if x.window else x
                                                 for x in cfg.layers))


def reversed_blocks(cfg):
    n, H = len(cfg.target_layer_ids), cfg.hidden_size
    return lambda h: np.concatenate([h[..., i * H:(i + 1) * H] for i in reversed(range(n))], axis=-1)


CONTROLS = {
    "causal block": lambda case: dict(cfg=with_layers(case, causal=True)),
    "target layers in reverse order": lambda case: dict(permute=reversed_blocks(load(case)[0])),
    "norms 1 + w": lambda case: dict(adjust=lambda role, w: w + 1 if role.endswith("norm.weight") else w),
    "seed row kept": lambda case: dict(builder=dataclasses.replace(RECIPE, graph=keep_seed_graph)),
}
SLIDING_CONTROLS = {
    "window - 1": lambda: dict(cfg=window_moved("sliding", -1)),
    "window + 1": lambda: dict(cfg=window_moved("sliding", +1)),
    "sliding layers not causal": lambda: dict(cfg=with_layers("sliding", causal=False)),
    "no window": lambda: dict(cfg=with_layers("sliding", window=None)),
}


def keep_seed_graph(x, w, cfg):
    out, sinks = draft(x, w, cfg, drop_seed=False)
    return {OUTPUT: out}, sinks


def control_error(case: str, cfg=None, adjust=None, builder=RECIPE, permute=None) -> float:
    feeds, want = goldens(case)
    return max(errors(run(build(case, cfg, adjust, builder), feeds, permute), want))


@pytest.mark.parametrize("case, control", every_nth([(k, c) for k in CASES for c in CONTROLS], 3,
                                                   ids=lambda p: f"{p[0]}-{p[1]}"))
def test_negative_control_breaks_tolerance(case, control):
    err = control_error(case, **CONTROLS[control](case))
    print(case, control, f"{err:.3g}")
    assert err > 100 * TOL


@pytest.mark.parametrize("control", SLIDING_CONTROLS)
def test_sliding_negative_control_breaks_tolerance(control):
    err = control_error("sliding", **SLIDING_CONTROLS[control]())
    print("sliding", control, f"{err:.3g}")
    assert err > 100 * TOL


def test_interface_matches_optimum_intel_export():
    """Inputs (names, order, types, shapes), the output, state ids and shapes, and the dflash rt_info of the base
    draft are those of optimum-intel 2.2.0's fp32 export of the same checkpoint."""
    ours, theirs = build("base"), ov.Core().read_model(DATA / "base" / "optimum" / "draft" / "openvino_model.xml")

    def ports(m):
        return [(p.get_any_name(), p.get_element_type(), str(p.get_partial_shape())) for p in m.inputs]

    def states(m):
        return sorted((v.get_info().variable_id, str(v.get_info().data_shape), v.get_info().data_type)
                      for v in m.get_variables())

    assert ports(ours) == ports(theirs) and [p.get_any_name() for p in ours.inputs] == list(INPUTS)
    assert [sorted(o.get_names()) for o in ours.outputs] == [sorted(o.get_names()) for o in theirs.outputs]
    assert str(ours.outputs[0].get_partial_shape()) == str(theirs.outputs[0].get_partial_shape())
    assert states(ours) == states(theirs)
    assert {key_state(1), value_state(1)} <= {s[0] for s in states(ours)}
    for path in (["dflash_mode"], ["dflash", "mask_token_id"], ["dflash", "target_layer_ids"]):
        assert ours.get_rt_info(path).astype(str) == theirs.get_rt_info(path).astype(str), path
    sdpa = [op for op in ours.get_ordered_ops() if op.get_type_name() == "ScaledDotProductAttention"]
    assert len(sdpa) == len(load("base")[0].layers)


def test_each_mlp_has_the_form_the_cpu_plugin_fuses_as_optimums_export_does():
    """gate MatMul -> one-input Swish -> Multiply(up MatMul) -> down MatMul, as in optimum-intel's export: the CPU
    plugin's MLPFusion (intel_cpu x64/pass/mlp_fusion.cpp) matches opset4::Swish with its data input only."""
    def mlps(m):
        out = []
        for op in m.get_ordered_ops():
            if op.get_type_name() == "Swish":
                mul = next(iter(op.output(0).get_target_inputs())).get_node()
                down = next(iter(mul.output(0).get_target_inputs())).get_node()
                out.append((op.get_input_size(), op.input_value(0).get_node().get_type_name(),
                            mul.get_type_name(), down.get_type_name()))
        return out

    theirs = ov.Core().read_model(DATA / "base" / "optimum" / "draft" / "openvino_model.xml")
    assert mlps(build("base")) == mlps(theirs) == [(1, "MatMul", "Multiply", "MatMul")] * 2


def test_state_keeps_only_context_rows():
    cfg = load("base")[0]
    model = build("base")
    feeds, _ = goldens("base")
    req = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    req.reset_state()
    rows = 0
    for feed in feeds:
        req.infer(dict(feed, beam_idx=np.zeros(1, np.int32)))
        rows += feed["hidden_states"].shape[1]
        for state in req.query_state():
            assert state.state.shape == [1, cfg.num_kv_heads, rows, cfg.head_dim], state.name


# ---- config: as transformers 5.2.0 and dflash 0.1.0 read it ----

def base_config(**changes) -> dict:
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 2, "head_dim": 16, "intermediate_size": 8, "num_target_layers": 8,
           "dflash_config": {"mask_token_id": 3, "target_layer_ids": [1, 7]}}
    cfg.update(changes)
    return cfg


def test_config_defaults_and_precedence():
    cfg = parse_config(base_config(num_key_value_heads=None, rope_theta=77.0))
    assert cfg.num_kv_heads == 2 and cfg.rope.rope_type == "default" and cfg.rope.theta == 77.0
    assert [x.kind for x in cfg.layers] == ["full_attention"] * 2 and not any(x.causal for x in cfg.layers)
    # rope_scaling replaces rope_parameters; its own theta wins over the top-level one
    cfg = parse_config(base_config(rope_parameters={"rope_type": "default", "rope_theta": 500.0}, rope_theta=77.0,
                                   rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert (cfg.rope.rope_type, cfg.rope.theta, cfg.rope.factor) == ("linear", 77.0, 2.0)
    cfg = parse_config(base_config(rope_parameters={"rope_type": "default", "rope_theta": 500.0}, rope_theta=77.0))
    assert cfg.rope.theta == 500.0
    # yarn: a top-level original_max_position_embeddings wins; absent everywhere, max_position_embeddings
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
    assert parse_config(base_config(rope_scaling=yarn, original_max_position_embeddings=16)
                        ).rope.original_max_position_embeddings == 16
    assert parse_config(base_config(rope_scaling={"type": "yarn", "factor": 4.0}, max_position_embeddings=64)
                        ).rope.original_max_position_embeddings == 64
    # sliding_window only with use_sliding_window; layer types from max_window_layers when not listed
    cfg = parse_config(base_config(layer_types=["sliding_attention", "full_attention"], sliding_window=5))
    assert [(x.window, x.causal) for x in cfg.layers] == [(None, True), (None, False)]
    cfg = parse_config(base_config(use_sliding_window=True, sliding_window=5, max_window_layers=1))
    assert [(x.kind, x.window, x.causal) for x in cfg.layers] == [("full_attention", None, False),
                                                                  ("sliding_attention", 5, True)]
    cfg = parse_config(base_config(use_sliding_window=True, sliding_window=None, max_window_layers=0))
    assert [x.kind for x in cfg.layers] == ["full_attention"] * 2
    cfg = parse_config(base_config(use_sliding_window=True, sliding_window=5, max_window_layers=0, is_causal=False))
    assert [(x.window, x.causal) for x in cfg.layers] == [(5, False), (5, False)]
    # target_layer_ids: dflash_config, else top level, else z-lab's build_target_layer_ids over [1, L - 3]
    assert parse_config(base_config(dflash_config={"mask_token_id": 3}, target_layer_ids=[2, 4])
                        ).target_layer_ids == (2, 4)
    assert parse_config(base_config(dflash_config={"mask_token_id": 3}, num_hidden_layers=3, num_target_layers=36)
                        ).target_layer_ids == (1, 17, 33)
    assert parse_config(base_config(dflash_config={"mask_token_id": 3}, num_hidden_layers=1)
                        ).target_layer_ids == (4,)
    assert parse_config(base_config(mask_token_id=9, dflash_config={"target_layer_ids": [0]})).mask_token_id == 9


@pytest.mark.parametrize("changes, words", [
    (dict(architectures=["DFlash2DraftModel"]), "DFlash2"),
    (dict(model_type="qwen3_5"), "model_type"),
    (dict(dflash_config={"mask_token_id": 3, "target_layer_ids": [1, 1]}), "repeat"),
    (dict(dflash_config={"mask_token_id": 3, "target_layer_ids": [1, 8]}), "outside"),
    (dict(dflash_config={"target_layer_ids": [1]}), "mask_token_id"),
    (dict(num_target_layers=None), "num_target_layers"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0}, partial_rotary_factor=0.5), "partial_rotary_factor"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type"),
    (dict(dflash_config={"mask_token_id": 3, "target_layer_ids": [1], "input_embedding_scale": 2.0}),
     "input_embedding_scale"),
    (dict(num_attention_heads=3, num_key_value_heads=2), "multiple"),
    (dict(hidden_act="gelu"), "hidden_act"),
    (dict(layer_types=["full_attention"]), "layer_types"),
])
def test_config_refusals(changes, words):
    cfg = base_config(**changes)
    if changes.get("num_target_layers", 0) is None:
        del cfg["num_target_layers"]
    with pytest.raises(ConfigError, match=words):
        parse_config(cfg)


def test_rope_tables_match_transformers():
    """inv_freq[:3] and attention_scaling of transformers 5.2.0's Qwen3RotaryEmbedding (head_dim 16), measured in the
    reference venv of scripts/make_dflash_reference.py."""
    yarn = parse_config(base_config(rope_scaling={"rope_type": "yarn", "factor": 4.0},
                                    original_max_position_embeddings=16, max_position_embeddings=64)).rope
    inv, scale = rope_tables.tables(yarn, 16, 64)
    assert np.allclose(inv[:3], [1.0, 0.07905694097280502, 0.02500000037252903], rtol=1e-6)
    assert scale == pytest.approx(1.138629436111989)
    linear = parse_config(base_config(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=77.0)).rope
    assert np.allclose(rope_tables.tables(linear, 16, 64)[0][:3], [0.5, 0.2905083894729614, 0.16879023611545563],
                       rtol=1e-6)
    default = parse_config(base_config(rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                       partial_rotary_factor=0.5)).rope  # default RoPE ignores the factor
    assert np.allclose(rope_tables.tables(default, 16, 64)[0][:3], [1.0, 0.4598632752895355, 0.2114742398262024],
                       rtol=1e-6)
