"""EAGLE-3 RoPE types beyond default and llama3 (linear, dynamic, yarn, longrope) against tests/helpers/numpy_rope.py,
a float64 reference written from transformers 5.2.0 and SpecForge (tests/helpers/check_rope_reference.py compares it with
both).

Drafts: the fixture checkpoint re-stored in vLLM speculators' layout (helpers.eagle3.speculators_variant), whose
layer transformers' LlamaRotaryEmbedding computes, with rope_theta 100 so that every frequency turns by a sizeable
angle over the positions 0..17 of CALLS. Thresholds (dynamic's max_position_embeddings, longrope's
original_max_position_embeddings) are 10, so the calls ending at 6 and 10 stay at or below them and those ending at
13 and 18 go above. SpecForge's forms are checked on the cos/sin graph alone (`tables`).

Tolerances: as test_eagle3_draft.py, 1e-4 on logits of O(1) (the IR in f32, the reference in float64; measured
below 4e-6). The cos/sin graph alone is held to the same 1e-4: its f32 angles reach 64 rad, whose rounding moves
cos and sin by about 1e-5. A parameter counts as read when changing or dropping it moves the logits by more than
MOVED = 1e-3, ten times the tolerance (the smallest move measured is 2e-2).
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from helpers.cli import refused
from helpers.eagle3 import F32, load_checkpoint, run_calls, speculators_variant, target_embed, with_target_table
from helpers.numpy_eagle3 import Eagle3Reference
from helpers import numpy_rope
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.errors import ConfigError
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3 import rope
from helpers.tiers import every_nth

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]
CALLS = [6, 4, 3, 5]  # positions 0..5, 6..9, 10..12, 13..17
TOL, MOVED = 1e-4, 1e-3
D = 16  # the fixture's head_dim
SHORT = [1.0, 1.1, 1.3, 1.2, 1.6, 2.0, 1.8, 2.5]
LONG = [1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0]
BASE = {  # rope dict, layer-level keys
    "linear": ({"rope_type": "linear", "factor": 4.0}, {}),
    "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, {"max_position_embeddings": 10}),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2000, "beta_fast": 24.0,
              "beta_slow": 1.5, "mscale": 0.8, "mscale_all_dim": 0.5}, {}),
    "longrope": ({"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": 10,
                  "short_factor": SHORT, "long_factor": LONG}, {}),
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64}, {}),
}
DROP = object()
# (type, key, value): the rope dict's key changed, or dropped (DROP), or a layer-level key when it starts with "^"
CHANGES = [
    ("linear", "factor", 2.0),
    ("dynamic", "factor", 2.0), ("dynamic", "^max_position_embeddings", 12),
    ("yarn", "factor", 2.0), ("yarn", "factor", None), ("yarn", "original_max_position_embeddings", 1000),
    ("yarn", "original_max_position_embeddings", DROP), ("yarn", "^original_max_position_embeddings", 1000),
    ("yarn", "beta_fast", 12.0), ("yarn", "beta_fast", DROP), ("yarn", "beta_slow", 3.0), ("yarn", "beta_slow", DROP),
    ("yarn", "mscale", 1.5), ("yarn", "mscale", DROP), ("yarn", "mscale_all_dim", 1.5),
    ("yarn", "mscale_all_dim", DROP), ("yarn", "attention_factor", 0.9), ("yarn", "truncate", False),
    ("yarn", "rope_theta", 300.0),
    ("longrope", "factor", 2.0), ("longrope", "factor", DROP), ("longrope", "original_max_position_embeddings", 12),
    ("longrope", "^original_max_position_embeddings", 12), ("longrope", "attention_factor", 1.3),
    ("longrope", "short_factor", [x * 1.5 for x in SHORT]), ("longrope", "long_factor", [x / 2 for x in LONG]),
    ("llama3", "factor", 4.0), ("llama3", "low_freq_factor", 2.0), ("llama3", "high_freq_factor", 8.0),
    ("llama3", "original_max_position_embeddings", 32), ("llama3", "original_max_position_embeddings", DROP),
]


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return target_embed(TARGET)


@pytest.fixture(scope="module")
def spec(tmp_path_factory, table) -> Path:
    """The fixture draft in speculators' layout (its weights as stored: bf16)."""
    return speculators_variant(CKPT, tmp_path_factory.mktemp("spec") / "base", table)


def variant(spec: Path, where: Path, rope_dict: dict | None, layer: dict | None = None,
            home: str = "rope_scaling") -> Path:
    """`spec` with its layer's rope dict (under `home`) and layer-level keys replaced, rope_theta 100 by default."""
    where.mkdir(parents=True)
    shutil.copy(spec / "model.safetensors", where / "model.safetensors")
    config = json.loads((spec / "config.json").read_text())
    section = config["transformer_layer_config"]
    section.update({"rope_theta": 100.0, **(layer or {})})
    if rope_dict is not None:
        section[home] = rope_dict
    (where / "config.json").write_text(json.dumps(config))
    return where


def built(ckpt: Path):
    cfg, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=lambda _: None)
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE), cfg
    finally:
        handle.close()


def logits(ckpt: Path, table: np.ndarray) -> tuple[list[np.ndarray], list[dict], eagle3.Eagle3Config]:
    model, cfg = built(ckpt)
    outs, feeds = run_calls(with_target_table(model, table), CALLS)
    return outs, feeds, cfg


def reference(ckpt: Path, table: np.ndarray, feeds: list[dict]) -> list[np.ndarray]:
    ref = Eagle3Reference(*load_checkpoint(ckpt), table)
    return [ref.step(f["input_ids"], f["hidden_states"].astype(np.float64), f["position_ids"])[0] for f in feeds]


def gaps(a: list[np.ndarray], b: list[np.ndarray]) -> list[float]:
    return [float(np.abs(x - y).max()) for x, y in zip(a, b)]


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "longrope"])
def test_logits_match_the_numpy_reference_below_and_above_the_threshold(kind, spec, table, tmp_path):
    """The draft of each type equals the reference over stateful calls whose positions end at 6, 10, 13, 18, and
    its RoPE is not the default one (the default rope's reference is far away)."""
    rope_dict, layer = BASE[kind]
    ckpt = variant(spec, tmp_path / kind, rope_dict, layer)
    outs, feeds, cfg = logits(ckpt, table)
    assert cfg.rope.kind == kind
    assert max(gaps(outs, reference(ckpt, table, feeds))) < TOL
    plain = reference(variant(spec, tmp_path / "plain", None, layer), table, feeds)
    assert max(gaps(outs, plain)) > MOVED


def test_dynamic_is_the_default_rope_up_to_max_position_embeddings_and_scaled_past_it(spec, table, tmp_path):
    rope_dict, layer = BASE["dynamic"]
    outs, feeds, _ = logits(variant(spec, tmp_path / "dynamic", rope_dict, layer), table)
    plain = gaps(outs, reference(variant(spec, tmp_path / "plain", None, layer), table, feeds))
    assert max(plain[:2]) < TOL and min(plain[2:]) > MOVED, plain  # ends 6, 10 <= 10 < 13, 18


def test_longrope_takes_its_long_factors_only_past_the_original_length(spec, table, tmp_path):
    rope_dict, layer = BASE["longrope"]
    outs, _, _ = logits(variant(spec, tmp_path / "base", rope_dict, layer), table)
    other, _, _ = logits(variant(spec, tmp_path / "long", {**rope_dict, "long_factor": [9.0] * 8}, layer), table)
    moved = gaps(outs, other)
    assert max(moved[:2]) == 0 and min(moved[2:]) > MOVED, moved


@pytest.mark.parametrize("kind,key,value", every_nth(CHANGES, 4, ids=lambda c: "-".join("drop" if x is DROP else str(x)
                                                                                    for x in c)))
def test_each_parameter_is_read(kind, key, value, spec, table, tmp_path):
    """Changing or dropping one value moves the logits by more than MOVED, to where the reference puts them."""
    rope_dict, layer = dict(BASE[kind][0]), dict(BASE[kind][1])
    base, _, _ = logits(variant(spec, tmp_path / "base", rope_dict, layer), table)
    where = layer if key.startswith("^") else rope_dict
    if value is DROP:
        where.pop(key)
    else:
        where[key.lstrip("^")] = value
    ckpt = variant(spec, tmp_path / "changed", rope_dict, layer)
    outs, feeds, _ = logits(ckpt, table)
    assert max(gaps(outs, reference(ckpt, table, feeds))) < TOL
    assert max(gaps(outs, base)) > MOVED, gaps(outs, base)


def test_rope_parameters_reads_as_rope_scaling(spec, table, tmp_path):
    """transformers 5's rope_parameters (rope_theta inside) builds the same draft as rope_scaling."""
    rope_dict, layer = BASE["yarn"]
    a, _, _ = logits(variant(spec, tmp_path / "scaling", rope_dict, layer), table)
    b, _, _ = logits(variant(spec, tmp_path / "parameters", {**rope_dict, "rope_theta": 100.0}, layer,
                             home="rope_parameters"), table)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def tables(r: rope.Rope, ends=(5, 10, 11, 29, 30, 31, 64)) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(positions, cos, sin) of the cos/sin graph alone, one call per end (positions 0..end-1)."""
    pos = ops.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name="position_ids")
    cos, sin = rope.cos_sin(pos.output(0), r, D, "rotary_emb")
    compiled = ov.Core().compile_model(ov.Model([ops.result(cos), ops.result(sin)], [pos]), "CPU", F32)
    out = []
    for end in ends:
        p = np.arange(end, dtype=np.int64)[None]
        res = compiled({"position_ids": p})
        out.append((p, res[0][:, 0], res[1][:, 0]))  # [B, S, D]
    return out


SF_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2000, "beta_fast": 24.0,
           "beta_slow": 1.5, "mscale": 0.8, "mscale_all_dim": 1.2}
SPECFORGE = {  # (rope dict, layer-level keys): SpecForge's reading differs from transformers' for each
    "dynamic": ({"rope_type": "dynamic", "factor": 4.0}, {}),
    "yarn attention": ({**SF_YARN, "mscale_all_dim": 0.0, "attention_factor": 2.0}, {}),
    "yarn truncate": ({**SF_YARN, "truncate": False}, {}),
    "yarn layer-level original": (SF_YARN, {"original_max_position_embeddings": 500}),
}


@pytest.mark.parametrize("kind", list(SPECFORGE))
def test_specforge_tables_match_the_reference_and_differ_from_transformers(kind):
    """trainer=specforge: SpecForge's dynamic (theta' at max_position_embeddings + 20 = 30 at least) and yarn (mscale
    ratio with attention_factor unread, always truncated, the rope dict's original length) over calls below and
    above 30; transformers' reading of the same config is far from them, but for dynamic calls of 30 positions or
    more (both compute theta' at their length)."""
    rope_dict, extra = SPECFORGE[kind]
    layer = {"rope_theta": 100.0, "max_position_embeddings": 10, "head_dim": D, "rope_scaling": rope_dict, **extra}
    ours = rope.read(layer, 100.0, 10, "config.json", head_dim=D, trainer=rope.SPECFORGE)
    theirs = rope.read(layer, 100.0, 10, "config.json", head_dim=D)
    for (p, cos, sin), (_, cos_t, _) in zip(tables(ours), tables(theirs)):
        want_cos, want_sin = numpy_rope.cos_sin(*numpy_rope.specforge_at(layer, D, p), p)
        assert max(np.abs(cos - want_cos).max(), np.abs(sin - want_sin).max()) < TOL
        same = kind == "dynamic" and p.shape[1] >= 10 + rope.SPECFORGE_MARGIN
        assert (np.abs(cos - cos_t).max() < TOL) if same else (np.abs(cos - cos_t).max() > MOVED), p.shape


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "longrope"])
def test_transformers_tables_at_every_length(kind):
    """The cos/sin graph of each type against transformers' reading, one call per length around the thresholds."""
    rope_dict, layer = BASE[kind]
    layer = {"rope_theta": 100.0, "max_position_embeddings": 256, "head_dim": D, **layer, "rope_scaling": rope_dict}
    r = rope.read(layer, 100.0, layer["max_position_embeddings"], "config.json", head_dim=D)
    for p, cos, sin in tables(r):
        want_cos, want_sin = numpy_rope.cos_sin(*numpy_rope.transformers_at(layer, D, p), p)
        assert max(np.abs(cos - want_cos).max(), np.abs(sin - want_sin).max()) < TOL


def test_specforge_refuses_longrope_and_needs_every_yarn_value():
    layer = {"rope_scaling": BASE["longrope"][0]}
    with pytest.raises(ConfigError, match="rope_type 'longrope' is not one of .*SpecForge"):
        rope.read(layer, 100.0, 256, "config.json", head_dim=D, trainer=rope.SPECFORGE)
    for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        yarn = {k: v for k, v in BASE["yarn"][0].items() if k != key}
        with pytest.raises(ConfigError, match=f"rope_scaling.{key} is required"):
            rope.read({"rope_scaling": yarn}, 100.0, 256, "config.json", trainer=rope.SPECFORGE)


LR = BASE["longrope"][0]
YARN = BASE["yarn"][0]
HOSTILE = [  # (rope dict, layer-level keys, the key the one line names)
    ({"rope_type": "linear"}, {}, "factor"),
    ({"rope_type": "linear", "factor": float("nan")}, {}, "factor"),
    ({"rope_type": "linear", "factor": 0.5}, {}, "factor"),
    ({"rope_type": "linear", "factor": "2"}, {}, "factor"),
    ({"rope_type": "linear", "factor": True}, {}, "factor"),
    ({"rope_type": "dynamic", "factor": float("inf")}, {}, "factor"),
    ({"rope_type": "dynamic", "factor": 1e7}, {}, "factor"),
    ({**YARN, "factor": 1e300}, {}, "factor"),
    ({k: v for k, v in YARN.items() if k != "factor"}, {}, "factor"),
    ({**YARN, "beta_fast": float("nan")}, {}, "beta_fast"),
    ({**YARN, "beta_fast": -1.0}, {}, "beta_fast"),
    ({**YARN, "beta_slow": float("inf")}, {}, "beta_slow"),
    ({**YARN, "attention_factor": 0.0}, {}, "attention_factor"),
    ({**YARN, "attention_factor": float("nan")}, {}, "attention_factor"),
    ({**YARN, "mscale": -1.0}, {}, "mscale"),
    ({**YARN, "mscale_all_dim": -100.0}, {}, "mscale_all_dim"),
    ({**YARN, "truncate": "yes"}, {}, "truncate"),
    ({**YARN, "original_max_position_embeddings": 0}, {}, "original_max_position_embeddings"),
    ({**YARN, "original_max_position_embeddings": 100.5}, {}, "original_max_position_embeddings"),
    (YARN, {"original_max_position_embeddings": float("nan")}, "original_max_position_embeddings"),
    ({**LR, "short_factor": 2.0}, {}, "short_factor"),
    ({**LR, "short_factor": []}, {}, "short_factor"),
    ({**LR, "short_factor": [1.0] * 7 + [0.0]}, {}, "short_factor"),
    ({**LR, "long_factor": [1.0] * 7 + [float("nan")]}, {}, "long_factor"),
    ({**LR, "long_factor": [1.0] * 7 + ["2"]}, {}, "long_factor"),
    ({**LR, "long_factor": [1.0] * 9}, {}, "long_factor"),
    ({**LR, "short_factor": [1.0] * 4}, {}, "short_factor"),
    ({k: v for k, v in LR.items() if k != "long_factor"}, {}, "long_factor"),
    ({**LR, "original_max_position_embeddings": 1}, {}, "original_max_position_embeddings"),
    ({**LR, "attention_factor": -1.0}, {}, "attention_factor"),
    ({**YARN, "partial_rotary_factor": 0.5}, {}, "partial_rotary_factor"),
    (LR, {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ({"rope_type": "su", "factor": 2.0}, {}, "rope_type 'su'"),
    ({"type": "ntk", "factor": 2.0}, {}, "rope_type 'ntk'"),
]


@pytest.mark.parametrize("rope_dict,layer,key", HOSTILE, ids=lambda x: repr(x)[:40] if isinstance(x, dict) else str(x))
def test_a_hostile_value_is_refused_in_one_line_naming_its_key(rope_dict, layer, key, spec, tmp_path):
    """Refused by the build (the config read, or the widths at the graph), before any table is computed: one line,
    the key named, and no numpy warning on the way."""
    ckpt = variant(spec, tmp_path / "hostile", rope_dict, layer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError) as refused:
            built(ckpt)
    message = str(refused.value)
    assert key in message and "\n" not in message, message


@pytest.mark.parametrize("rope_dict,key", [({**YARN, "beta_fast": -1.0}, "beta_fast"),
                                           ({"rope_type": "linear", "factor": float("nan")}, "factor")], ids=str)
def test_patch_refuses_a_hostile_value_in_one_line_and_leaves_the_target(rope_dict, key, tmp_path):
    target = Path(shutil.copytree(TARGET, tmp_path / "target"))
    ckpt = Path(shutil.copytree(CKPT, tmp_path / "ckpt"))
    config = json.loads((ckpt / "config.json").read_text())
    config["rope_scaling"] = rope_dict
    (ckpt / "config.json").write_text(json.dumps(config))
    line = refused(["patch", target, "--checkpoint", ckpt], target)
    assert key in line, line
