"""The Gemma 4 MTP assistant (`gemma4_assistant`): config, tensor table and graph, for openvino-genai's drafter.

A Gemma4TextModel whose every layer reads K/V from the target (transformers 5.24.0
models/gemma4_assistant/modeling_gemma4_assistant.py). Shapes: B batch, S = 1 query, T KV length, Hb target
hidden, Ha assistant hidden, nH heads, d head dim of the layer's type (sliding: head_dim, full: the per-layer
head_dim, "global_head_dim"), nKV its KV heads, V vocab.

    h = pre_projection(inputs_embeds)                                   [B, S, 2Hb] -> [B, S, Ha]
    per layer (t = sliding | full):
        q = rope_t(rms(q_proj(rms(h, input_layernorm)), q_norm))       [B, nH, S, d]
        h = h + rms(o_proj(softmax(q K_t^T * 1.0 + mask_t) V_t), post_attention_layernorm)   GQA, no softcap
        h = h + rms(down(gelu_tanh(gate(m)) * up(m)), post_feedforward_layernorm),  m = rms(h, pre_feedforward)
        h = h * layer_scalar
    hf = rms(h, model.norm);  last_hidden_state = post_projection(hf)  [B, S, Hb]
    logits = hf @ E^T, or with ordered embeddings (E: the lm_head, model.embed_tokens.weight when tied, else lm_head.weight):
        I = topk(centroids(hf), k);  C = token_ordering.view(nC, V/nC)[I];  s = hf . E[C]^T
        logits = full(min(s) - 1) with s scattered at C                 [B, S, V]

rms(x, w) = x * (mean(x^2) + eps)^-0.5 * w: Gemma 4 stores plain gains (Gemma4RMSNorm), nothing is folded.
Masks: full = attention_mask[:, :T_full] > 0; sliding = the last T_sliding entries of that, of which only the last
sliding_window + 1 (transformers flips the KV axis and applies its bidirectional window |q - kv| <= window).
RoPE: sliding layers "default" over d; full layers "proportional": the first int(p * d / 2) inverse frequencies
theta^(-2i/d), the rest 0 (modeling_rope_utils._compute_proportional_rope_parameters), divided by `factor`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import ROPE_THETA, flag, read_json
from irsurgeon.core.errors import CheckpointError, ConfigError
from irsurgeon.draft.recipe import Recipe
from irsurgeon.ops import apply_rope, expand_kv, linear, rms_norm
from irsurgeon.ops.core import const, named
from irsurgeon.families.gemma4_mtp.layout import MODEL_TYPE, UNIFIED_TYPE
from irsurgeon.weights.table import Table, Tensor

I64 = np.int64
TEXT_TYPE = "gemma4_text"
TYPES = ("sliding_attention", "full_attention")
Weights = Callable[[str], ov.Output]  # checkpoint name -> weight output (irsurgeon.draft.build.GraphWeights)
OUTPUTS = ("logits", "last_hidden_state")
KV_INPUTS = {kind: (f"{kind}_key", f"{kind}_value") for kind in TYPES}  # the target K/V per layer type, as genai feeds

# How transformers 5.24.0 reads each key (configuration_gemma4_assistant.py, configuration_gemma4.py):
# key -> (where, default). Gemma4AssistantConfig fields sit at the top level, Gemma4TextConfig's in `text_config`.
# tie_word_embeddings is Gemma4AssistantConfig's own (top level, default True): PreTrainedModel's tying
# (modeling_utils.py get_expanded_tied_weights_keys, 5.24.0) reads `self.config.tie_word_embeddings` of the
# Gemma4AssistantForCausalLM, whose config is the assistant's; text_config's copy ties nothing there.
ASSISTANT_KEYS = {"backbone_hidden_size": 1536, "use_ordered_embeddings": False, "num_centroids": 2048,
                  "centroid_intermediate_top_k": 32, "tie_word_embeddings": True}
EMBED, LM_HEAD = "model.embed_tokens.weight", "lm_head.weight"
TEXT_KEYS = {"vocab_size": 262_144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
             "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
             "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh", "layer_types": None,
             "rope_parameters": None, "attention_k_eq_v": False, "use_bidirectional_attention": None,
             "hidden_size_per_layer_input": 256, "enable_moe_block": False, "use_double_wide_mlp": False}
# Gemma4TextConfig.__post_init__: these defaults apply when rope_parameters is absent.
DEFAULT_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1_000_000.0}}
GELU_TANH = ("gelu_pytorch_tanh", "gelu_tanh")  # transformers ACT2FN: both are GELU with the tanh approximation


@dataclass(frozen=True)
class Layer:
    kind: str  # "sliding_attention" | "full_attention"
    head_dim: int
    kv_heads: int


@dataclass(frozen=True)
class AssistantConfig:
    source: str
    hidden_size: int  # Ha
    backbone_hidden_size: int  # Hb
    vocab_size: int
    intermediate_size: int
    num_heads: int
    layers: tuple[Layer, ...]
    sliding_window: int
    eps: float
    rope: dict  # layer type -> rope parameters
    ordered: bool
    num_centroids: int
    top_k: int
    tied: bool = True  # the lm_head is model.embed_tokens.weight (tie_word_embeddings)
    k_eq_v: bool = False  # text_config.attention_k_eq_v: the target it was trained on keeps V = K in full layers
    model_type: str = MODEL_TYPE
    dtype: str | None = None  # no storage dtype is declared to compare against: tensors are read as stored
    warnings: tuple[str, ...] = ()

    @property
    def recipe(self) -> Recipe:
        return RECIPE

    @property
    def head(self) -> str:
        """The tensor the logits are scored with: the embedding table when tied, else the stored lm_head.
        Gemma4AssistantForCausalLM.forward scores with self.lm_head.weight in both of its lm_heads (plain and masked
        embedding), and `_tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}` ties it."""
        return EMBED if self.tied else LM_HEAD

    def layer_of(self, kind: str) -> Layer:
        """Head dim and KV heads of a layer type (every layer of one type reads the same target KV)."""
        return next(layer for layer in self.layers if layer.kind == kind)


def _int(sec: dict, key: str, default, source: str, lo: int = 1) -> int:
    value = sec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < (1 << 24):
        raise ConfigError(f"{source}: {key} is {value!r}, expected an integer >= {lo}")
    return value


def resolve_layers(text: dict, source: str, prefix: str = "text_config.") -> tuple[Layer, ...]:
    """Layer types and per-layer head dims / KV heads as Gemma4TextConfig.__post_init__ resolves them; `prefix`
    names the section's keys in messages (a flat gemma4_text config: none)."""
    k_eq_v = flag(text, "attention_k_eq_v", TEXT_KEYS["attention_k_eq_v"], source, prefix)
    n = _int(text, "num_hidden_layers", TEXT_KEYS["num_hidden_layers"], source)
    kinds = text.get("layer_types") or ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    if not isinstance(kinds, list) or len(kinds) != n or any(k not in TYPES for k in kinds):
        raise ConfigError(f"{source}: {prefix}layer_types must list {n} of {TYPES}, got {kinds!r:.200}")
    kinds = [*kinds[:-1], "full_attention"]  # __post_init__ forces the last layer to full attention
    head_dim = _int(text, "head_dim", TEXT_KEYS["head_dim"], source)
    kv = _int(text, "num_key_value_heads", TEXT_KEYS["num_key_value_heads"], source)
    overrides = text.get("per_layer_config")
    if overrides is None:  # older files: global_head_dim / num_global_key_value_heads (used with attention_k_eq_v)
        full = {"head_dim": _int(text, "global_head_dim", 512, source)}
        if k_eq_v and text.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = _int(text, "num_global_key_value_heads", None, source)
        overrides = {str(i): full for i, k in enumerate(kinds) if k == "full_attention"}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: {prefix}per_layer_config must be an object keyed by layer index")
    layers = []
    for i, kind in enumerate(kinds):
        o = overrides.get(str(i), overrides.get(i, {})) or {}
        if not isinstance(o, dict):
            raise ConfigError(f"{source}: {prefix}per_layer_config.{i} must be an object, got {o!r:.80}")
        layers.append(Layer(kind, _int(o, "head_dim", head_dim, source), _int(o, "num_key_value_heads", kv, source)))
    for kind in set(kinds):
        if len({(x.head_dim, x.kv_heads) for x in layers if x.kind == kind}) > 1:
            raise ConfigError(f"{source}: {kind} layers differ in head_dim or KV heads; they share one target KV")
    return tuple(layers)


def _rope(text: dict, kinds: set[str], source: str) -> dict:
    rope = text.get("rope_parameters") or DEFAULT_ROPE
    for kind in kinds:
        p = rope.get(kind) if isinstance(rope, dict) else None
        if not isinstance(p, dict) or p.get("rope_type", "default") not in ("default", "proportional"):
            raise ConfigError(f"{source}: text_config.rope_parameters.{kind} must be a 'default' or 'proportional' "
                              f"rope, got {p!r}")
        theta = p.get("rope_theta")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or theta not in ROPE_THETA:
            raise ConfigError(f"{source}: text_config.rope_parameters.{kind}.rope_theta is {theta!r:.40}, expected a "
                              f"number in {ROPE_THETA}")
        # transformers 5.23.0 modeling_rope_utils.py (_compute_proportional_rope_parameters): partial_rotary_factor is
        # "the proportion of the embedding dimension" (0.0 .. 1.0) and the inverse frequencies are divided by factor
        for key, lo, hi in (("partial_rotary_factor", 0.0, 1.0), ("factor", 1e-6, 1e6)):
            value = p.get(key, 1.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise ConfigError(f"{source}: text_config.rope_parameters.{kind}.{key} is {value!r:.40}, expected "
                                  f"a number in [{lo:g}, {hi:g}]")
    return rope


def _check_assistant_only(text: dict, source: str, unified: bool = False) -> None:
    """Gemma4AssistantConfig.validate_architecture: no per-layer inputs, MoE or double-wide MLP (a
    gemma4_unified_text section has no per-layer-input or MoE keys: Gemma4UnifiedTextConfig sets them to
    AttributeError(), so absent means off)."""
    moe, wide = (flag(text, key, TEXT_KEYS[key], source, "text_config.") for key in ("enable_moe_block",
                                                                                       "use_double_wide_mlp"))
    ple = text.get("hidden_size_per_layer_input", 0 if unified else TEXT_KEYS["hidden_size_per_layer_input"])
    if ple != 0 or moe or wide:
        raise ConfigError(f"{source}: an assistant's text_config must have hidden_size_per_layer_input 0 and "
                          f"no MoE or double-wide MLP")
    act = text.get("hidden_activation", TEXT_KEYS["hidden_activation"])
    if act not in GELU_TANH:
        raise ConfigError(f"{source}: text_config.hidden_activation is {act!r}, expected one of {GELU_TANH}")


# The Gemma 4 12B unified assistant is the same graph under other names: transformers 5.10.0 (the release that added
# it; 5.9.0 has no models/gemma4_unified_assistant) generates modeling_gemma4_unified_assistant.py from
# `class Gemma4UnifiedAssistantForCausalLM(Gemma4AssistantForCausalLM)` (modular_gemma4_unified_assistant.py): forward,
# masks and masked embedder are the ordinary assistant's. Its decoder, Gemma4UnifiedTextModel
# (modular_gemma4_unified.py, 5.25.0), uses Gemma4TextAttention itself, the Gemma 4 RMSNorm formula and a decoder layer
# equal to Gemma4TextDecoderLayer with per-layer inputs and MoE off. What differs is the text_config class,
# Gemma4UnifiedTextConfig (model_type gemma4_unified_text): other defaults (below), no per-layer-input or MoE keys.
UNIFIED_DEFAULTS = {"backbone_hidden_size": 3840,  # Gemma4UnifiedAssistantConfig
                    "sliding_window": 1024, "use_bidirectional_attention": "vision"}  # Gemma4UnifiedTextConfig
KINDS = {MODEL_TYPE: "gemma4_text", UNIFIED_TYPE: "gemma4_unified_text"}  # assistant type -> its text_config's type


def parse_assistant_config(cfg: dict, source: str) -> AssistantConfig:
    model_type = cfg.get("model_type")
    if model_type not in KINDS:
        raise ConfigError(f"{source}: model_type is {model_type!r}, expected one of {tuple(KINDS)}")
    unified = model_type == UNIFIED_TYPE
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError(f"{source}: no text_config object (a gemma4_assistant keeps its decoder there)")
    text_type = text.get("model_type", KINDS[model_type])
    if text_type != KINDS[model_type]:
        raise ConfigError(f"{source}: text_config.model_type is {text_type!r:.40}; a {model_type} keeps a "
                          f"{KINDS[model_type]} decoder")
    _check_assistant_only(text, source, unified)
    layers = resolve_layers(text, source)
    window = _int(text, "sliding_window", UNIFIED_DEFAULTS["sliding_window"] if unified else TEXT_KEYS[
        "sliding_window"], source)
    bidirectional = text.get("use_bidirectional_attention", UNIFIED_DEFAULTS["use_bidirectional_attention"]
                              if unified else TEXT_KEYS["use_bidirectional_attention"])
    if bidirectional == "all":  # Gemma4TextConfig.__post_init__ rewrites the window
        window = window // 2 + 1
    eps = text.get("rms_norm_eps", TEXT_KEYS["rms_norm_eps"])
    if not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ConfigError(f"{source}: text_config.rms_norm_eps is {eps!r}, expected a number in (0, 1)")
    vocab = _int(text, "vocab_size", TEXT_KEYS["vocab_size"], source)
    ordered = flag(cfg, "use_ordered_embeddings", ASSISTANT_KEYS["use_ordered_embeddings"], source)
    nc = _int(cfg, "num_centroids", ASSISTANT_KEYS["num_centroids"], source)
    top_k = _int(cfg, "centroid_intermediate_top_k", ASSISTANT_KEYS["centroid_intermediate_top_k"], source)
    if ordered and (vocab % nc or top_k > nc):
        raise ConfigError(f"{source}: num_centroids {nc} must divide vocab_size {vocab} and be >= "
                          f"centroid_intermediate_top_k {top_k}")
    tied = flag(cfg, "tie_word_embeddings", ASSISTANT_KEYS["tie_word_embeddings"], source)
    heads = _int(text, "num_attention_heads", TEXT_KEYS["num_attention_heads"], source)
    if any(heads % layer.kv_heads for layer in layers):
        raise ConfigError(f"{source}: num_attention_heads {heads} is not a multiple of every layer's KV heads")
    return AssistantConfig(source, _int(text, "hidden_size", TEXT_KEYS["hidden_size"], source),
                           _int(cfg, "backbone_hidden_size", UNIFIED_DEFAULTS["backbone_hidden_size"] if unified
                                else ASSISTANT_KEYS["backbone_hidden_size"], source),
                           vocab, _int(text, "intermediate_size", TEXT_KEYS["intermediate_size"], source), heads,
                           layers, window, float(eps), _rope(text, {x.kind for x in layers}, source), ordered, nc,
                           top_k, tied, k_eq_v=k_eq_v(text, source), model_type=model_type)


def k_eq_v(text: dict, source: str, prefix: str = "text_config.") -> bool:
    """attention_k_eq_v of a Gemma 4 text section (transformers 5.24.0 modeling_gemma4.py Gemma4TextAttention: a
    full-attention layer of such a model has no v_proj and attends over its keys as values)."""
    return flag(text, "attention_k_eq_v", TEXT_KEYS["attention_k_eq_v"], source, prefix)


def load_assistant_config(path) -> AssistantConfig:
    return parse_assistant_config(read_json(path), str(path))


def tensor_table(cfg: AssistantConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor the assistant reads, with its shape (names as transformers saves them)."""
    Ha, Hb, V, I, nH = cfg.hidden_size, cfg.backbone_hidden_size, cfg.vocab_size, cfg.intermediate_size, cfg.num_heads
    table = {"pre_projection.weight": (Ha, 2 * Hb), "post_projection.weight": (Hb, Ha),
             "model.norm.weight": (Ha,), cfg.head: (V, Ha)}
    if cfg.ordered:
        table.update({"masked_embedding.centroids.weight": (cfg.num_centroids, Ha),
                      "masked_embedding.token_ordering": (V,)})
    for i, layer in enumerate(cfg.layers):
        p, d = f"model.layers.{i}.", layer.head_dim
        table.update({f"{p}{n}.weight": (Ha,) for n in ("input_layernorm", "post_attention_layernorm",
                                                          "pre_feedforward_layernorm", "post_feedforward_layernorm")})
        table.update({f"{p}self_attn.q_proj.weight": (nH * d, Ha), f"{p}self_attn.q_norm.weight": (d,),
                      f"{p}self_attn.o_proj.weight": (Ha, nH * d), f"{p}mlp.gate_proj.weight": (I, Ha),
                      f"{p}mlp.up_proj.weight": (I, Ha), f"{p}mlp.down_proj.weight": (Ha, I),
                      f"{p}layer_scalar": (1,)})
    return table


INTEGER_TENSORS = frozenset({"masked_embedding.token_ordering"})
ORDERED_EMBEDDINGS = ("masked_embedding.centroids.weight", "masked_embedding.token_ordering")


UNTIED_EMBEDDING = ("tie_word_embeddings is false and the assistant takes inputs_embeds (transformers 5.24.0 "
                    "Gemma4AssistantForCausalLM.forward calls self.model(input_ids=None, inputs_embeds=...)): nothing "
                    "reads")


def tensors(cfg: AssistantConfig) -> Table:
    """tensor_table as the build loads it, every stored tensor accounted for. Tied (the default): a stored
    lm_head.weight is a copy of model.embed_tokens.weight, accepted only with equal bytes. Untied: lm_head.weight is
    read and required; model.embed_tokens.weight is never read (noted). With use_ordered_embeddings off the masked
    embedder's two tensors are never read (transformers then builds no masked embedder and drops them as unexpected
    keys; Gemma4AssistantMaskedEmbedder holds only `centroids` and the `token_ordering` buffer:
    modeling_gemma4_assistant.py, 5.24.0). Gemma 4 norm gains are plain: no transform."""
    rows = tuple(Tensor(name, shape, integer=name in INTEGER_TENSORS) for name, shape in tensor_table(cfg).items())
    ignored = {} if cfg.tied else {EMBED: UNTIED_EMBEDDING}
    if not cfg.ordered:
        ignored.update({n: "use_ordered_embeddings is off" for n in ORDERED_EMBEDDINGS})
    tied = {LM_HEAD: EMBED} if cfg.tied else {}
    because = f"tie_word_embeddings (true in {cfg.source}, the default when absent)"
    return Table("", rows, source=cfg.source, ignored=ignored, tied=tied, tied_because=because)


def inv_freq(cfg: AssistantConfig, kind: str) -> np.ndarray:
    """Inverse frequencies [d/2] of a layer type."""
    return rope_inv_freq(cfg.rope[kind], cfg.layer_of(kind).head_dim)


def rope_inv_freq(p: dict, d: int) -> np.ndarray:
    """Inverse frequencies [d/2] of one rope_parameters entry over head dim d, in float32 as transformers does."""
    base = np.float32(p["rope_theta"])
    if p.get("rope_type", "default") == "default":
        return (1.0 / base ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d))).astype(np.float32)
    angles = int(p.get("partial_rotary_factor", 1.0) * d // 2)
    rotated = 1.0 / base ** (np.arange(0, 2 * angles, 2, dtype=np.float32) / np.float32(d))
    freqs = np.concatenate([rotated, np.zeros(d // 2 - angles, np.float32)])
    return (freqs / np.float32(p.get("factor", 1.0))).astype(np.float32)


@dataclass(frozen=True)
class Inputs:
    inputs_embeds: ov.Output  # [B, S, 2Hb]
    position_ids: ov.Output  # [B, S] i64
    attention_mask: ov.Output  # [B, T + 1] i64
    kv: dict  # layer type -> (key, value), [B, nKV, T, d]


def _dim(x: ov.Output, axis: int) -> ov.Output:
    return ops.gather(ops.shape_of(x, ov.Type.i64), const([axis], I64), const(0, I64)).output(0)  # [1]


def masks(x: Inputs, window: int) -> dict[str, ov.Output]:
    """Additive f32 biases [B, 1, 1, T_t] per layer type (see the module docstring)."""
    t_full = _dim(x.kv["full_attention"][0], 2)
    full_keep = ops.slice(x.attention_mask, const([0], I64), t_full, const([1], I64), const([1], I64))
    keep = {"full_attention": ops.greater(full_keep, const(0, I64)).output(0)}
    if "sliding_attention" in x.kv:
        t_sw = _dim(x.kv["sliding_attention"][0], 2)
        last = ops.slice(full_keep, ops.negative(t_sw), const([2**62], I64), const([1], I64), const([1], I64))
        j = ops.range(const(0, I64), ops.squeeze(t_sw, const(0, I64)), const(1, I64), ov.Type.i64)
        near = ops.greater_equal(j, ops.subtract(ops.subtract(t_sw, const(1, I64)), const(window, I64)))
        keep["sliding_attention"] = ops.logical_and(ops.greater(last, const(0, I64)), near).output(0)
    minimum = const(np.finfo(np.float32).min)
    return {k: named(ops.select(ops.unsqueeze(v, const([1, 2], I64)), const(0.0), minimum), f"attention_mask/{k}")
            for k, v in keep.items()}


def rope(x: ov.Output, positions: ov.Output, freqs: np.ndarray, d: int, name: str) -> ov.Output:
    """Rotate-half RoPE of x [B, N, S, d] at positions [B, S] with the given inverse frequencies [d/2]."""
    pos = ops.unsqueeze(ops.convert(positions, ov.Type.f32), const([-1], I64))  # [B, S, 1]
    ang = named(ops.multiply(pos, const(freqs, name=f"{name}.inv_freq")), f"{name}/angles")
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], I64))  # [B, 1, S, d]
    return apply_rope(x, ops.cos(emb).output(0), ops.sin(emb).output(0), d, d, name)


def attention(a: ov.Output, x: Inputs, bias: ov.Output, w: Weights, cfg: AssistantConfig, i: int) -> ov.Output:
    """q-only attention over the target's K/V of the layer's type; returns o_proj's output [B, S, Ha]."""
    layer, p = cfg.layers[i], f"model.layers.{i}.self_attn"
    nH, d = cfg.num_heads, layer.head_dim
    q = named(ops.reshape(linear(a, w(f"{p}.q_proj.weight"), f"{p}.q_proj"), const([0, 0, nH, d], I64),
                          special_zero=True), f"{p}/q_heads")
    q = rms_norm(q, w(f"{p}.q_norm.weight"), cfg.eps, f"{p}.q_norm")
    q = rope(ops.transpose(q, const([0, 2, 1, 3], I64)).output(0), x.position_ids, inv_freq(cfg, layer.kind), d,
             f"{p}/q_rope")  # [B, nH, S, d]
    k, v = (expand_kv(t, nH // layer.kv_heads, nH, d, f"{p}/{n}_gqa") for t, n in zip(x.kv[layer.kind], "kv"))
    out = named(ops.scaled_dot_product_attention(q, k, v, bias, const(1.0), causal=False), f"{p}/sdpa")
    out = ops.transpose(out, const([0, 2, 1, 3], I64))
    out = named(ops.reshape(out, const([0, 0, nH * d], I64), special_zero=True), f"{p}/merge_heads")
    return linear(out, w(f"{p}.o_proj.weight"), f"{p}.o_proj")


def decoder_layer(h: ov.Output, x: Inputs, bias: dict, w: Weights, cfg: AssistantConfig, i: int) -> ov.Output:
    p, eps = f"model.layers.{i}.", cfg.eps
    attn = attention(rms_norm(h, w(f"{p}input_layernorm.weight"), eps, f"{p}input_layernorm"), x,
                     bias[cfg.layers[i].kind], w, cfg, i)
    h = named(ops.add(h, rms_norm(attn, w(f"{p}post_attention_layernorm.weight"), eps,
                                  f"{p}post_attention_layernorm")), f"{p}attn_residual")
    m = rms_norm(h, w(f"{p}pre_feedforward_layernorm.weight"), eps, f"{p}pre_feedforward_layernorm")
    gate = named(ops.gelu(linear(m, w(f"{p}mlp.gate_proj.weight"), f"{p}mlp.gate_proj"), "tanh"), f"{p}mlp.act_fn")
    up = linear(m, w(f"{p}mlp.up_proj.weight"), f"{p}mlp.up_proj")
    down = linear(named(ops.multiply(gate, up), f"{p}mlp/mul"), w(f"{p}mlp.down_proj.weight"), f"{p}mlp.down_proj")
    h = named(ops.add(h, rms_norm(down, w(f"{p}post_feedforward_layernorm.weight"), eps,
                                  f"{p}post_feedforward_layernorm")), f"{p}mlp_residual")
    return named(ops.multiply(h, w(f"{p}layer_scalar")), f"{p}layer_scalar/mul")


def ordered_logits(hf: ov.Output, w: Weights, ordering: np.ndarray, cfg: AssistantConfig) -> ov.Output:
    """The masked-embedding lm_head: full-vocab logits holding min(s) - 1 except at the top-k centroids' tokens."""
    name, per = "masked_embedding", cfg.vocab_size // cfg.num_centroids
    scores = linear(hf, w(f"{name}.centroids.weight"), f"{name}.centroids")  # [B, S, nC]
    top = ops.topk(scores, const(cfg.top_k, I64), axis=-1, mode="max", sort="value", index_element_type=ov.Type.i64)
    top.set_friendly_name(f"{name}/topk")
    table = const(ordering.reshape(cfg.num_centroids, per), I64, f"{name}.token_ordering")
    chosen = ops.reshape(ops.gather(table, top.output(1), const(0, I64)), const([0, 0, cfg.top_k * per], I64),
                         special_zero=True)  # [B, S, k*per] token ids
    rows = ops.gather(w(cfg.head), chosen, const(0, I64))  # [B, S, k*per, Ha]
    s = ops.squeeze(ops.matmul(ops.unsqueeze(hf, const(-2, I64)), rows, False, True), const(-2, I64))
    fill = ops.subtract(ops.reduce_min(s, const([0, 1, 2], I64), keep_dims=False), const(1.0))
    shape = ops.concat([ops.slice(ops.shape_of(hf, ov.Type.i64), const([0], I64), const([2], I64),
                                  const([1], I64)), const([cfg.vocab_size], I64)], 0)
    full = ops.broadcast(fill, shape)
    return named(ops.scatter_elements_update(full, chosen, s, const(-1, I64)), f"{name}/logits")


def assistant(x: Inputs, w: Weights, cfg: AssistantConfig, ordering: np.ndarray | None = None
              ) -> tuple[ov.Output, ov.Output]:
    """(logits [B, S, V], last_hidden_state [B, S, Hb])."""
    h = linear(x.inputs_embeds, w("pre_projection.weight"), "pre_projection")
    bias = masks(x, cfg.sliding_window)
    for i in range(len(cfg.layers)):
        h = decoder_layer(h, x, bias, w, cfg, i)
    hf = rms_norm(h, w("model.norm.weight"), cfg.eps, "model.norm")
    hidden = linear(hf, w("post_projection.weight"), "post_projection")
    if cfg.ordered:
        return ordered_logits(hf, w, ordering, cfg), hidden
    return linear(hf, w(cfg.head), "lm_head"), hidden


def scale_check(cfg: AssistantConfig) -> None:
    """Bound the graph's sizes before any weight is read (a hostile config cannot allocate the machine)."""
    total = sum(math.prod(s) for s in tensor_table(cfg).values())
    if total > 1 << 34:
        raise ConfigError(f"{cfg.source}: describes {total} weight values; refusing an assistant that large")


# ---- the family, as the build sees it ----

def parse_config(cfg: dict, source: str) -> AssistantConfig:
    parsed = parse_assistant_config(cfg, source)
    scale_check(parsed)
    return parsed


def parameters(cfg: AssistantConfig) -> tuple[list[ov.Node], Inputs]:
    """inputs_embeds, position_ids, attention_mask and the K/V of each layer type present (names as genai's)."""
    def param(name: str, shape: list[int], dtype=ov.Type.f32) -> ov.Node:
        p = ops.parameter(ov.PartialShape(shape), dtype, name=name)
        p.output(0).set_names({name})
        return p

    params = [param("inputs_embeds", [-1, -1, 2 * cfg.backbone_hidden_size]),
              param("position_ids", [-1, -1], ov.Type.i64), param("attention_mask", [-1, -1], ov.Type.i64)]
    kv = {}
    for kind in TYPES:  # genai feeds all four; a type without layers still gets its inputs (unused)
        layer = next((x for x in cfg.layers if x.kind == kind), None)
        shape = [-1, layer.kv_heads, -1, layer.head_dim] if layer else [-1, -1, -1, -1]
        pair = [param(kv_name, shape) for kv_name in KV_INPUTS[kind]]
        params += pair
        kv[kind] = tuple(p.output(0) for p in pair)
    return params, Inputs(params[0].output(0), params[1].output(0), params[2].output(0), kv)


def ordering_of(w, cfg: AssistantConfig) -> np.ndarray | None:
    """token_ordering must be a permutation of the vocabulary (each id in exactly one centroid's bucket)."""
    if not cfg.ordered:
        return None
    name = "masked_embedding.token_ordering"
    ordering = w.array(name)
    if not np.array_equal(np.sort(ordering), np.arange(cfg.vocab_size)):
        raise CheckpointError(f"tensor {name}: expected a permutation of 0..{cfg.vocab_size - 1}")
    return ordering


def graph(x: Inputs, w, cfg: AssistantConfig) -> tuple[dict[str, ov.Output], list[ov.Node]]:
    return dict(zip(OUTPUTS, assistant(x, w, cfg, ordering_of(w, cfg)))), []


RECIPE = Recipe(MODEL_TYPE, parse_config, tensors, parameters, graph)
