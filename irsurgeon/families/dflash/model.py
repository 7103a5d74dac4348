"""The DFlash draft (z-lab's DFlashDraftModel): config keys, tensor table and graph, for openvino-genai's DFlash mode.

A few Qwen3 decoder layers that draft a block in one pass, conditioned on target hidden states (dflash 0.1.0
dflash/model.py, the PyPI package of z-lab/dflash). Shapes: B batch, P context rows already in the state, C new
context rows, Q = K + 1 block rows ([seed, MASK x K]), T = P + C + Q, H hidden, n = len(target_layer_ids), nH/nKV
heads, D head_dim.

    c = hidden_norm(fc(hidden_states))                          hidden_states [B, C, n*H] -> [B, C, H]
    x = inputs_embeds                                           [B, Q, H]
    cos, sin = rope(position_ids)                               position_ids [B, C + Q] -> [B, 1, C + Q, D]
    per layer:
        a = input_layernorm(x)
        q = rope(q_norm(q_proj(a)))                             the last Q rows of the tables      [B, nH, Q, D]
        k = rope(k_norm(k_proj(concat(c, a)))),  v = v_proj(concat(c, a))                        [B, nKV, C + Q, D]
        k = concat(state(k[:, :, :C]), k[:, :, C:])             only context rows enter the state [B, nKV, P + C, D]
        x = x + o_proj(sdpa(q, gqa(k), gqa(v), mask))           one ScaledDotProductAttention per layer
        x = x + down(silu(gate(m)) * up(m)),  m = post_attention_layernorm(x)
    last_hidden_state = norm(x)[:, 1:]                          the seed row dropped               [B, K, H]

Norms are Qwen3RMSNorm, x * rsqrt(mean(x^2) + eps) * w with w as stored (not Qwen3.5's 1 + w).
mask[b, i, j] (query i at key index T - Q + i, key j < T): attention_mask[b, j] > 0; a causal layer also needs
j <= T - Q + i; a layer with a sliding window W also (T - Q + i) - j < W, and j - (T - Q + i) < W when not causal
(dflash 0.1.0 `_attention_mask`, in the same frame: key index = position in the state). A layer is causal when the
config's `is_causal` says so, else exactly when it is a sliding_attention layer (Qwen3DFlashAttention.__init__).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import (MAX_HEADS, MAX_VOCAB, MAX_WIDTH, MISSING, ROPE_THETA, Key, Range, ints, lookup,
                                   read_keys)
from irsurgeon.core.errors import ConfigError
from irsurgeon.draft.recipe import Recipe, Weights
from irsurgeon.families.dflash import rope as rope_tables
from irsurgeon.ops import apply_rope, expand_kv, kv_cache, linear, rms_norm, sdpa, swiglu
from irsurgeon.ops.attention import heads, to_bnsd
from irsurgeon.ops.core import const, named
from irsurgeon.weights.table import Table, Tensor

MODEL_TYPE = "qwen3"
ARCHITECTURE = "DFlashDraftModel"
TITLE = "DFlash draft"  # the family named in a refusal (DFlash.title)
OUTPUT = "last_hidden_state"
INPUTS = ("inputs_embeds", "hidden_states", "position_ids", "attention_mask", "beam_idx")  # genai's order
DFLASH_MODE = "dflash_mode"  # rt_info genai reads (optimum-intel 2.2.0 convert.py _add_dflash_mode_to_rt_info)
MASK_TOKEN_ID, TARGET_LAYER_IDS = ("dflash", "mask_token_id"), ("dflash", "target_layer_ids")
LAYER_TYPES = ("full_attention", "sliding_attention")
I64 = np.int64


def key_state(i: int) -> str:
    return f"past_key_values.{i}.keypresent.{i}.key"  # optimum-intel 2.2.0's names, as MakeStateful makes them


def value_state(i: int) -> str:
    return f"past_key_values.{i}.valuepresent.{i}.value"


# ---- config ----

@dataclass(frozen=True)
class Layer:
    kind: str  # full_attention | sliding_attention
    window: int | None  # sliding_window of a sliding layer (None: no window)
    causal: bool


@dataclass(frozen=True)
class DFlashConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    attention_bias: bool
    layers: tuple[Layer, ...]
    rope: rope_tables.Rope
    max_position_embeddings: int
    target_layer_ids: tuple[int, ...]
    num_target_layers: int
    mask_token_id: int
    vocab_size: int
    block_size: int
    dtype: str | None = None
    source: str = field(default="", compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def recipe(self) -> Recipe:
        return RECIPE


# transformers 5.2.0 models/qwen3/configuration_qwen3.py Qwen3Config.__init__ defaults (dflash 0.1.0 builds its draft
# from a Qwen3Config); hidden_size is kept required (a draft of the default width could only fail on a weight shape).
KEYS: tuple[Key, ...] = (
    Key("hidden_size", ("hidden_size",), bounds=ints(MAX_WIDTH)),
    Key("num_hidden_layers", ("num_hidden_layers",), 32, bounds=ints(1024)),
    Key("num_heads", ("num_attention_heads",), 32, bounds=ints(MAX_HEADS)),
    # num_key_value_heads None -> num_attention_heads (Qwen3Config: "for backward compatibility")
    Key("num_kv_heads", ("num_key_value_heads",), None, bounds=ints(MAX_HEADS), null_is_absent=True),
    # Qwen3Config always has head_dim (default 128), so dflash's getattr(config, "head_dim", H // nH) never falls back
    Key("head_dim", ("head_dim",), 128, bounds=ints(MAX_WIDTH)),
    Key("intermediate_size", ("intermediate_size",), 22016, bounds=ints(MAX_WIDTH * 4)),
    Key("rms_norm_eps", ("rms_norm_eps",), 1e-6, float, Range(0, 1, lo_open=True, hi_open=True)),
    Key("hidden_act", ("hidden_act",), "silu", str, allowed=("silu",)),  # Qwen3MLP: ACT2FN[hidden_act]
    Key("attention_bias", ("attention_bias",), False, bool),  # q/k/v/o_proj bias (Qwen3DFlashAttention)
    Key("max_position_embeddings", ("max_position_embeddings",), 32768, bounds=ints(1 << 24)),
    Key("vocab_size", ("vocab_size",), 151936, bounds=ints(MAX_VOCAB)),
    # Qwen3Config: sliding_window = sliding_window if use_sliding_window else None; layer_types default: sliding
    # where a window is set and i >= max_window_layers.
    Key("use_sliding_window", ("use_sliding_window",), False, bool),
    Key("sliding_window", ("sliding_window",), 4096, bounds=ints(1 << 24), null_is_absent=True),
    Key("max_window_layers", ("max_window_layers",), 28, bounds=Range(0, 1 << 20)),
    # not a Qwen3Config field: an extra attribute of config.json, read by getattr(config, "is_causal", None)
    Key("is_causal", ("is_causal",), None, bool, null_is_absent=True),
    # dflash 0.1.0 _draft_value: dflash_config[name], else the top-level attribute, else the default
    Key("mask_token_id", ("dflash_config.mask_token_id", "mask_token_id"), bounds=Range(0, MAX_VOCAB - 1)),
    Key("block_size", ("dflash_config.block_size", "block_size"), 16, bounds=ints(1 << 16)),
    # DFlashDraftModel.__init__ evaluates build_target_layer_ids(config.num_target_layers, ...) eagerly: required
    Key("num_target_layers", ("num_target_layers",), bounds=ints(4096)),
    # applied outside the draft by dflash_generate (embedding scale, logit multiplier); genai feeds raw target
    # embeddings (the embedding Gather's table, not Gemma's sqrt(H)-scaled output: attach_target_embedding_to_draft)
    # and scores with the target's lm_head, so only the neutral values build a faithful draft. z-lab's Gemma 4
    # drafts set neither: dflash_generate feeds them F.embedding(target.get_input_embeddings().weight) unscaled too
    Key("input_embedding_scale", ("dflash_config.input_embedding_scale", "input_embedding_scale"), 1.0, float,
        allowed=(1.0,)),
    Key("output_multiplier", ("dflash_config.output_multiplier", "output_multiplier"), 1.0, float, allowed=(1.0,)),
    # compute_logits (z-lab/dflash dflash/model.py @10129599) caps the draft's logits with tanh when > 0 (z-lab's
    # Gemma 4 drafts: 30); genai grafts the target's bare lm_head MatMul (dflash_model_transforms.cpp
    # attach_target_lm_head_to_draft) and its DFlash path is greedy only (dflash_strategy.cpp add_request: "supports
    # greedy decoding only"): tanh is increasing, so the uncapped argmax is the capped one and the cap is not built
    Key("final_logit_softcapping", ("dflash_config.final_logit_softcapping", "final_logit_softcapping"), None, float,
        null_is_absent=True),
    Key("dtype", ("dtype", "torch_dtype"), None, str, null_is_absent=True),
)
# RoPE (modeling_rope_utils.py 5.2.0 convert_rope_params_to_dict / standardize_rope_params): rope_scaling, when set,
# replaces rope_parameters; in that dict rope_theta wins over the top-level one (default 10000); rope_type, else
# `type`, else "default". yarn: a top-level original_max_position_embeddings wins over the dict's, which defaults to
# max_position_embeddings; factor None -> max_position_embeddings / original; beta_fast/beta_slow `or` 32 / 1;
# truncate default true.
# Every value is bounded before a table is computed with it (a NaN, an infinity, a negative beta or a subnormal
# factor would reach math.log, a division or a float32 cast): transformers 5.2.0's _validate_*_rope_parameters ask
# for positive factors and betas; the upper bounds are far above any published config and keep float32 tables finite.
FINITE = 1e6
ROPE_KEYS: tuple[Key, ...] = (
    Key("rope_theta", ("{rope}rope_theta", "rope_theta"), 10000.0, float, ROPE_THETA),
    Key("rope_type", ("{rope}rope_type", "{rope}type"), "default", str, allowed=rope_tables.TYPES),
    Key("factor", ("{rope}factor",), None, float, Range(1e-6, FINITE), null_is_absent=True),
    Key("original_max_position_embeddings", ("original_max_position_embeddings",
                                             "{rope}original_max_position_embeddings"), None,
        bounds=ints(1 << 24), null_is_absent=True),
    Key("attention_factor", ("{rope}attention_factor",), None, float, Range(0, FINITE, lo_open=True),
        null_is_absent=True),
    Key("beta_fast", ("{rope}beta_fast",), None, float, Range(0, FINITE, lo_open=True), null_is_absent=True),
    Key("beta_slow", ("{rope}beta_slow",), None, float, Range(0, FINITE, lo_open=True), null_is_absent=True),
    Key("mscale", ("{rope}mscale",), None, float, Range(0, FINITE), null_is_absent=True),
    Key("mscale_all_dim", ("{rope}mscale_all_dim",), None, float, Range(0, FINITE), null_is_absent=True),
    Key("truncate", ("{rope}truncate",), True, bool),
    Key("partial_rotary_factor", ("{rope}partial_rotary_factor", "partial_rotary_factor"), 1.0, float,
        Range(0, 1, lo_open=True)),
)


def parse_config(cfg: dict, source: str = "config.json") -> DFlashConfig:
    """The draft's configuration as transformers 5.2.0 and dflash 0.1.0 read config.json, validated."""
    check_identity(cfg, source)
    values, warnings = read_keys(cfg, KEYS, MODEL_TYPE, {}, source, family=TITLE)
    rope, rope_lines = read_rope(cfg, values, source)
    v = values
    nH, nKV = v["num_heads"], v["num_kv_heads"] or v["num_heads"]
    if nH % nKV:
        raise ConfigError(f"{source}: num_attention_heads {nH} is not a multiple of num_key_value_heads {nKV}")
    if v["head_dim"] % 2:  # RoPE rotates pairs: rotate_half splits every head in two halves
        raise ConfigError(f"{source}: head_dim {v['head_dim']} must be even (RoPE rotates its two halves)")
    ids = target_layer_ids(cfg, v["num_target_layers"], v["num_hidden_layers"], source)
    return DFlashConfig(
        hidden_size=v["hidden_size"], num_heads=nH, num_kv_heads=nKV, head_dim=v["head_dim"],
        intermediate_size=v["intermediate_size"], rms_norm_eps=v["rms_norm_eps"],
        attention_bias=v["attention_bias"], layers=layers(cfg, v, source), rope=rope,
        max_position_embeddings=v["max_position_embeddings"], target_layer_ids=ids,
        num_target_layers=v["num_target_layers"], mask_token_id=v["mask_token_id"], vocab_size=v["vocab_size"],
        block_size=v["block_size"], dtype=v["dtype"], source=source, warnings=tuple(warnings + rope_lines))


def check_identity(cfg: dict, source: str) -> None:
    if cfg.get("model_type") != MODEL_TYPE:
        raise ConfigError(f"{source}: model_type {cfg.get('model_type')!r:.80} is not a DFlash draft's "
                          f"({MODEL_TYPE!r})")
    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or archs[0] != ARCHITECTURE:
        raise ConfigError(f"{source}: architectures {archs!r:.80} do not name {ARCHITECTURE} (DFlash2 drafts, with "
                          f"their convolutions and candidate selector, are another model)")
    if not isinstance(cfg.get("dflash_config", {}), dict):
        raise ConfigError(f"{source}: dflash_config must be a JSON object")


def read_rope(cfg: dict, values: dict, source: str) -> tuple[rope_tables.Rope, list[str]]:
    home = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"
    section = lookup(cfg, home)
    if section not in (MISSING, None) and not isinstance(section, dict):
        raise ConfigError(f"{source}: {home} must be a JSON object, found {type(section).__name__}")
    if isinstance(section, dict) and any(isinstance(x, dict) for x in section.values()):
        raise ConfigError(f"{source}: {home}: RoPE parameters per layer type are not supported")
    r, lines = read_keys(cfg, ROPE_KEYS, MODEL_TYPE, {"rope": home + "."}, source, family=TITLE)
    if r["rope_type"] != "default" and r["partial_rotary_factor"] != 1.0:
        # the rope tables would cover int(D * factor) dims, which Qwen3's apply_rotary_pos_emb cannot broadcast
        raise ConfigError(f"{source}: partial_rotary_factor {r['partial_rotary_factor']} with rope_type "
                          f"{r['rope_type']!r}: z-lab's Qwen3 attention rotates every head dim")
    if r["rope_type"] == "linear" and r["factor"] is None:  # _compute_linear_scaling_rope_parameters: ["factor"]
        raise ConfigError(f"{source}: {home}.factor is required for rope_type 'linear'")
    original = r["original_max_position_embeddings"] or values["max_position_embeddings"]
    rope = rope_tables.Rope(r["rope_type"], r["rope_theta"], r["factor"], original, r["attention_factor"],
                            r["beta_fast"], r["beta_slow"], r["mscale"], r["mscale_all_dim"], r["truncate"])
    return rope, lines


def layers(cfg: dict, v: dict, source: str) -> tuple[Layer, ...]:
    n = v["num_hidden_layers"]
    explicit_null = "sliding_window" in cfg and cfg["sliding_window"] is None  # null is None, not the default
    window = v["sliding_window"] if v["use_sliding_window"] and not explicit_null else None
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = ["sliding_attention" if window is not None and i >= v["max_window_layers"] else "full_attention"
                 for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in LAYER_TYPES for k in kinds):
        raise ConfigError(f"{source}: layer_types must list {n} of {', '.join(LAYER_TYPES)}, found {kinds!r:.120}")
    causal = v["is_causal"]
    return tuple(Layer(k, window if k == "sliding_attention" else None,
                       (k == "sliding_attention") if causal is None else causal) for k in kinds)


def target_layer_ids(cfg: dict, num_target_layers: int, num_layers: int, source: str) -> tuple[int, ...]:
    """dflash_config.target_layer_ids, else the top-level key, else z-lab's build_target_layer_ids; genai refuses
    duplicates, and every id must name a target layer."""
    ids = lookup(cfg, "dflash_config.target_layer_ids")
    if ids is MISSING:
        ids = cfg.get("target_layer_ids", MISSING)
    if ids is MISSING:
        if num_layers == 1:
            ids = [num_target_layers // 2]
        else:
            span = num_target_layers - 3 - 1
            ids = [round(1 + i * span / (num_layers - 1)) for i in range(num_layers)]
    if not isinstance(ids, list) or not ids or any(not isinstance(i, int) or isinstance(i, bool) for i in ids):
        raise ConfigError(f"{source}: dflash_config.target_layer_ids must be a non-empty list of integers")
    bad = [i for i in ids if not 0 <= i < num_target_layers]
    if bad:
        raise ConfigError(f"{source}: target layer id {bad[0]} is outside the target's {num_target_layers} layers")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: target_layer_ids {ids} repeat a layer (openvino-genai refuses duplicates)")
    return tuple(ids)


def rt_info(cfg: DFlashConfig) -> dict[tuple[str, ...], str]:
    """The model-level rt_info genai reads from a DFlash draft (path -> value)."""
    return {(DFLASH_MODE,): "True", MASK_TOKEN_ID: str(cfg.mask_token_id),
            TARGET_LAYER_IDS: ",".join(map(str, cfg.target_layer_ids))}


def annotate(model: ov.Model, cfg: DFlashConfig) -> ov.Model:
    for path, value in rt_info(cfg).items():
        model.set_rt_info(value, list(path))
    return model


# ---- tensors ----

PREFIX = ""  # z-lab's checkpoints store the draft's tensors without a `model.` prefix


def tensors(cfg: DFlashConfig) -> Table:
    """Every tensor of the draft (Qwen3 norms: gains as stored, no transform)."""
    H, nH, nKV, D, I = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    rows = [Tensor("fc.weight", (H, len(cfg.target_layer_ids) * H)), Tensor("hidden_norm.weight", (H,)),
            Tensor("norm.weight", (H,))]
    for i in range(len(cfg.layers)):
        p, a = f"layers.{i}.", f"layers.{i}.self_attn."
        rows += [Tensor(f"{p}input_layernorm.weight", (H,)), Tensor(f"{p}post_attention_layernorm.weight", (H,)),
                 Tensor(f"{a}q_proj.weight", (nH * D, H)), Tensor(f"{a}k_proj.weight", (nKV * D, H)),
                 Tensor(f"{a}v_proj.weight", (nKV * D, H)), Tensor(f"{a}o_proj.weight", (H, nH * D)),
                 Tensor(f"{a}q_norm.weight", (D,)), Tensor(f"{a}k_norm.weight", (D,)),
                 Tensor(f"{p}mlp.gate_proj.weight", (I, H)), Tensor(f"{p}mlp.up_proj.weight", (I, H)),
                 Tensor(f"{p}mlp.down_proj.weight", (H, I))]
        if cfg.attention_bias:
            rows += [Tensor(f"{a}{proj}.bias", (n,)) for proj, n in
                     (("q_proj", nH * D), ("k_proj", nKV * D), ("v_proj", nKV * D), ("o_proj", H))]
    return Table(PREFIX, tuple(rows), source=cfg.source)


# ---- graph ----

@dataclass(frozen=True)
class Rotary:
    """The RoPE tables over context + block rows, their block rows (the queries'), and the two lengths ([1] each)."""
    cos: ov.Output
    sin: ov.Output
    cos_q: ov.Output
    sin_q: ov.Output
    ctx_len: ov.Output
    q_len: ov.Output


@dataclass(frozen=True)
class Inputs:
    inputs_embeds: ov.Output
    hidden_states: ov.Output
    position_ids: ov.Output
    attention_mask: ov.Output
    beam_idx: ov.Output


def parameters(cfg: DFlashConfig) -> tuple[list[ov.Node], Inputs]:
    """genai's five inputs, in its order (optimum-intel 2.2.0's form)."""
    H, n = cfg.hidden_size, len(cfg.target_layer_ids)
    shapes = {"inputs_embeds": ([-1, -1, H], ov.Type.f32), "hidden_states": ([-1, -1, n * H], ov.Type.f32),
              "position_ids": ([-1, -1], ov.Type.i64), "attention_mask": ([-1, -1], ov.Type.i64),
              "beam_idx": ([-1], ov.Type.i32)}
    params = []
    for name in INPUTS:
        dims, dtype = shapes[name]
        p = ops.parameter(ov.PartialShape(dims), dtype, name=name)
        p.output(0).set_names({name})
        params.append(p)
    return params, Inputs(*(p.output(0) for p in params))


def dim(x: ov.Output, axis: int) -> ov.Output:
    return ops.gather(ops.shape_of(x, ov.Type.i64), const([axis], I64), const(0, I64)).output(0)  # [1]


def dense(x: ov.Output, w: Weights, name: str, bias: bool) -> ov.Output:
    y = linear(x, w(f"{name}.weight"), name)
    return named(ops.add(y, w(f"{name}.bias")), f"{name}/bias") if bias else y


def block_mask(x: Inputs, q_len: ov.Output, kv_len: ov.Output, layer: Layer, name: str) -> ov.Output:
    """Additive f32 mask [B, 1, Q, T]: attention_mask, and the layer's causality and window (module docstring)."""
    q = ops.add(ops.range(const(0, I64), ops.squeeze(q_len, const(0, I64)), const(1, I64), ov.Type.i64),
                ops.subtract(kv_len, q_len))
    q = ops.unsqueeze(q, const(1, I64))  # [Q, 1]: the queries' key index
    k = ops.unsqueeze(ops.range(const(0, I64), ops.squeeze(kv_len, const(0, I64)), const(1, I64), ov.Type.i64),
                      const(0, I64))  # [1, T]
    visible = ops.greater(ops.unsqueeze(x.attention_mask, const([1, 2], I64)), const(0, I64)).output(0)
    if layer.causal:
        visible = ops.logical_and(visible, ops.less_equal(k, q)).output(0)
    if layer.window is not None:
        window = const(layer.window, I64)
        visible = ops.logical_and(visible, ops.less(ops.subtract(q, k), window)).output(0)
        if not layer.causal:
            visible = ops.logical_and(visible, ops.less(ops.subtract(k, q), window)).output(0)
    visible.get_node().set_friendly_name(f"{name}/visible")
    return named(ops.select(visible, const(0.0), const(np.finfo(np.float32).min)), f"{name}/mask")


def attention(a: ov.Output, c: ov.Output, x: Inputs, w: Weights, cfg: DFlashConfig, i: int, r: Rotary,
              ) -> tuple[ov.Output, list[ov.Node]]:
    """One layer's attention over the state, the new context rows and the block; returns o_proj's output."""
    name, eps, bias = f"layers.{i}.self_attn", cfg.rms_norm_eps, cfg.attention_bias
    nH, nKV, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = rms_norm(heads(dense(a, w, f"{name}.q_proj", bias), nH, D, f"{name}/q_heads"), w(f"{name}.q_norm.weight"),
                 eps, f"{name}.q_norm")
    kv_in = named(ops.concat([c, a], axis=1), f"{name}/kv_input")  # [B, C + Q, H]
    k = rms_norm(heads(dense(kv_in, w, f"{name}.k_proj", bias), nKV, D, f"{name}/k_heads"),
                 w(f"{name}.k_norm.weight"), eps, f"{name}.k_norm")
    v = to_bnsd(heads(dense(kv_in, w, f"{name}.v_proj", bias), nKV, D, f"{name}/v_heads"))
    q = apply_rope(to_bnsd(q), r.cos_q, r.sin_q, D, D, f"{name}/q_rope", fusable=True)  # [B, nH, Q, D]
    k = apply_rope(to_bnsd(k), r.cos, r.sin, D, D, f"{name}/k_rope", fusable=True)  # [B, nKV, C + Q, D]
    lengths = ops.concat([r.ctx_len, r.q_len], axis=0)
    k_ctx, k_blk = ops.variadic_split(k, const(2, I64), lengths).outputs()
    v_ctx, v_blk = ops.variadic_split(v, const(2, I64), lengths).outputs()
    batch = dim(x.inputs_embeds, 0)
    k_state, k_sink = kv_cache(k_ctx, x.beam_idx, batch, key_state(i), nKV, D, f"{name}/key_cache")
    v_state, v_sink = kv_cache(v_ctx, x.beam_idx, batch, value_state(i), nKV, D, f"{name}/value_cache")
    k_all = named(ops.concat([k_state, k_blk], axis=2), f"{name}/keys")  # [B, nKV, T, D]
    v_all = named(ops.concat([v_state, v_blk], axis=2), f"{name}/values")
    bias_mask = block_mask(x, r.q_len, dim(k_all, 2), cfg.layers[i], f"{name}/attention")
    out = sdpa(q, expand_kv(k_all, cfg.kv_groups, nH, D, f"{name}/key_gqa"),
               expand_kv(v_all, cfg.kv_groups, nH, D, f"{name}/value_gqa"), bias_mask, D, f"{name}/sdpa")
    out = named(ops.reshape(to_bnsd(out), const([0, 0, nH * D], I64), special_zero=True), f"{name}/merge_heads")
    return dense(out, w, f"{name}.o_proj", bias), [k_sink, v_sink]


def draft(x: Inputs, w: Weights, cfg: DFlashConfig, drop_seed: bool = True) -> tuple[ov.Output, list[ov.Node]]:
    """last_hidden_state (seed row dropped unless told) and the Assign sinks of every layer's K/V state."""
    def norm(t: ov.Output, name: str) -> ov.Output:
        return rms_norm(t, w(f"{name}.weight"), cfg.rms_norm_eps, name)

    c = norm(linear(x.hidden_states, w("fc.weight"), "fc"), "hidden_norm")  # [B, C, H]
    ctx_len, q_len = dim(x.hidden_states, 1), dim(x.inputs_embeds, 1)
    inv_freq, scaling = rope_tables.tables(cfg.rope, cfg.head_dim, cfg.max_position_embeddings)
    cos, sin = rope_tables.cos_sin(x.position_ids, inv_freq, scaling, "rotary_emb")  # [B, 1, C + Q, D]
    big = const([np.iinfo(np.int64).max], I64)
    cos_q, sin_q = (named(ops.slice(t, ctx_len, big, const([1], I64), const([2], I64)), f"rotary_emb/{n}_block")
                    for t, n in ((cos, "cos"), (sin, "sin")))
    rotary = Rotary(cos, sin, cos_q, sin_q, ctx_len, q_len)
    h, sinks = x.inputs_embeds, []
    for i in range(len(cfg.layers)):
        p = f"layers.{i}."
        attn, layer_sinks = attention(norm(h, f"{p}input_layernorm"), c, x, w, cfg, i, rotary)
        h = named(ops.add(h, attn), f"{p}attn_residual")
        m = norm(h, f"{p}post_attention_layernorm")
        mlp = swiglu(m, *(w(f"{p}mlp.{n}.weight") for n in ("gate_proj", "up_proj", "down_proj")), f"{p}mlp",
                     fusable=True)
        h = named(ops.add(h, mlp), f"{p}mlp_residual")
        sinks += layer_sinks
    out = norm(h, "norm")
    if not drop_seed:
        return out, sinks
    one = const([1], I64)
    return named(ops.slice(out, one, big, one, one), "drop_seed"), sinks  # [B, K, H]


def graph(x: Inputs, w: Weights, cfg: DFlashConfig) -> tuple[dict[str, ov.Output], list[ov.Node]]:
    out, sinks = draft(x, w, cfg)
    return {OUTPUT: out}, sinks


RECIPE = Recipe("dflash_draft", parse_config, tensors, parameters, graph,
                  rt_info={DFLASH_MODE: "True"})
