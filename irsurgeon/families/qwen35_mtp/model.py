"""The Qwen3.5 / Qwen3.6 MTP head, the whole family in one module: config keys, tensor table, graph.

One full-attention decoder layer fed by the target's hidden state and the next embedding.

Shapes: B batch, S new tokens, T = past + S, H hidden, nH/nKV heads, D head_dim, R rotary dims.

    e = norm_emb(inputs_embeds), h = norm_hid(hidden_states)                       [B, S, H]
    x = fc(concat(e, h))                                    embedding half first     [B, S, H]
    a = norm_in(x)
    q|g = q_proj(a) viewed [B, S, nH, 2D];  q = rope(q_norm(q)),  k = rope(k_norm(k_proj(a))),  v = v_proj(a)
    k, v = cache(k), cache(v)                               stateful, [B, nKV, T, D]
    x = x + o_proj(sdpa(q, gqa(k), gqa(v), mask) * sigmoid(g))
    x = x + mlp(norm_post(x))                               SwiGLU, or sparse MoE + shared expert
    last_hidden_state = norm(x)                                                       [B, S, H]

Every norm is RMSNorm with the zero-centred gain folded to (1 + w) on load.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import (MAX_EXPERTS, MAX_HEADS, MAX_VOCAB, MAX_WIDTH, MISSING, ROPE_THETA, Key, Range,
                                   disagreement, ints, lookup, read_json, read_keys)
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.families.qwen35_mtp.contract import KEY_STATE, VALUE_STATE
from irsurgeon.core.errors import ConfigError
from irsurgeon.draft.recipe import Recipe, Weights
from irsurgeon.ops import (apply_rope, attention_mask_bias, expand_kv, kv_cache, linear, rms_norm, rope_cos_sin, sdpa,
                           swiglu)
from irsurgeon.ops.attention import heads, to_bnsd
from irsurgeon.ops.core import const, named
from irsurgeon.ops.moe import DEFAULT_FORM, MoEShape, sparse_moe
from irsurgeon.core.rtinfo import MTP_MODE
from irsurgeon.weights.table import Part, Stack, Table, Tensor, Whole


# ---- config: every key the head reads, as transformers 5.23.0 reads it ----

from irsurgeon.families.qwen35_mtp.layout import DENSE_TYPES, MOE_TYPES  # spelled with the family
DENSE_TEXT, MOE_TEXT = "qwen3_5_text", "qwen3_5_moe_text"
# transformers 5.23.0 Qwen3_5Config / Qwen3_5MoeConfig: `sub_configs_defaults` fixes the text config class by the
# top-level model_type (text_config.model_type does not choose it); the *_text types are their own text config.
TEXT_TYPE = {"qwen3_5": DENSE_TEXT, "qwen3_5_text": DENSE_TEXT, "qwen3_5_moe": MOE_TEXT, "qwen3_5_moe_text": MOE_TEXT}

@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    expert_size: int
    shared_expert_size: int
    norm_topk_prob: bool = True


@dataclass(frozen=True)
class MTPConfig:
    model_type: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    intermediate_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None = None
    moe: MoEConfig | None = None
    dtype: str | None = None  # the checkpoint's declared storage dtype ("bfloat16", ...), when it declares one
    quantized: bool = False  # a quantization_config is present (FP8 releases): stored dtypes may differ from dtype
    source: str = field(default="", compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)  # "warning: <file>: ..." lines, for the caller

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def recipe(self) -> Recipe:
        return RECIPE


# transformers 5.23.0: models/qwen3_5/configuration_qwen3_5.py (Qwen3_5TextConfig) and
# models/qwen3_5_moe/configuration_qwen3_5_moe.py (Qwen3_5MoeTextConfig) field defaults; RoPE precedence from
# modeling_rope_utils.py RotaryEmbeddingConfigMixin.convert_rope_params_to_dict (values already in rope_parameters
# win, `setdefault` only fills them from the legacy top-level rope_theta / partial_rotary_factor; partial_rotary_factor
# defaults to 0.25 in Qwen3_5TextConfig.__post_init__, rope_theta to `default_theta` 10000.0), and `rope_scaling`, when
# set, replaces rope_parameters; standardize_rope_params reads rope_type, else the legacy `type`, else "default".
# dtype: configuration_utils.py PreTrainedConfig.__post_init__ keeps `dtype` over `torch_dtype`; modeling_utils.py
# _get_dtype reads the top-level config's dtype only (a VLM's text_config.dtype is irsurgeon's fallback declaration:
# transformers would take the weights' dtype there, which check_dtype then compares against).
D, M = DENSE_TEXT, MOE_TEXT
QWEN35_KEYS: tuple[Key, ...] = (
    # hidden_size: transformers defaults to 4096 (dense) / 2048 (MoE); kept required, a head of a default width
    # could only fail later with a weight-shape error.
    Key("hidden_size", ("{text}hidden_size",), bounds=ints(MAX_WIDTH)),
    Key("num_heads", ("{text}num_attention_heads",), 16, bounds=ints(MAX_HEADS)),
    Key("num_kv_heads", ("{text}num_key_value_heads",), {D: 4, M: 2}, bounds=ints(MAX_HEADS)),
    Key("head_dim", ("{text}head_dim",), 256, bounds=ints(MAX_WIDTH)),
    Key("rms_norm_eps", ("{text}rms_norm_eps",), 1e-6, float, Range(0, 1, lo_open=True, hi_open=True)),
    Key("rope_theta", ("{rope}rope_theta", "{text}rope_theta"), 10000.0, float, ROPE_THETA),
    Key("partial_rotary_factor", ("{rope}partial_rotary_factor", "{text}partial_rotary_factor"), 0.25, float,
        Range(0, 1, lo_open=True)),
    # Qwen3_5TextRotaryEmbedding uses ROPE_INIT_FUNCTIONS[rope_type] for anything but "default"; the head has only
    # the default inverse frequencies. mrope_section / mrope_interleaved: equal t/h/w positions for text, a no-op.
    Key("rope_type", ("{rope}rope_type", "{rope}type"), "default", str, allowed=("default",)),
    Key("intermediate_size", ("{text}intermediate_size",), 12288, bounds=ints(MAX_WIDTH * 4), types=(D,)),
    Key("vocab_size", ("{text}vocab_size",), 248320, bounds=ints(MAX_VOCAB)),
    Key("num_hidden_layers", ("{text}num_hidden_layers",), {D: 32, M: 40}, bounds=ints(4096)),
    # The two mtp_* keys are not transformers fields (kept as extra attributes of the text config; transformers
    # drops mtp.* at load). Dedicated embeddings would be a table of the head's own; it is fed the model's embeddings.
    Key("mtp_num_hidden_layers", ("{text}mtp_num_hidden_layers",), 0, bounds=Range(0, 4096)),
    Key("mtp_use_dedicated_embeddings", ("{text}mtp_use_dedicated_embeddings",), False, bool, allowed=(False,)),
    # Qwen3_5Attention: nn.Linear(..., bias=config.attention_bias); Qwen3_5MLP: ACT2FN[config.hidden_act]. The head
    # has no biases and only SiLU.
    Key("attention_bias", ("{text}attention_bias",), False, bool, allowed=(False,)),
    Key("hidden_act", ("{text}hidden_act",), "silu", str, allowed=("silu",)),
    Key("num_experts", ("{text}num_experts",), 256, bounds=ints(MAX_EXPERTS), types=(M,)),
    Key("top_k", ("{text}num_experts_per_tok",), 8, bounds=ints(MAX_EXPERTS), types=(M,)),
    Key("expert_size", ("{text}moe_intermediate_size",), 512, bounds=ints(MAX_WIDTH * 4), types=(M,)),
    Key("shared_expert_size", ("{text}shared_expert_intermediate_size",), 512, bounds=ints(MAX_WIDTH * 4),
        types=(M,)),
    # Qwen3_5MoeTopKRouter.forward always divides the top-k weights by their sum; the config has no such field.
    Key("norm_topk_prob", (), True, bool, types=(M,), ignored=("{text}norm_topk_prob",)),
    Key("dtype", ("dtype", "torch_dtype", "{text}dtype", "{text}torch_dtype"), None, str, null_is_absent=True),
)
del D, M

def load_config(path: str | Path) -> MTPConfig:
    """Read and validate the MTP configuration in a config.json."""
    return parse_config(read_json(Path(path)), source=str(path))


def parse_config(cfg: dict, source: str = "config.json") -> MTPConfig:
    """The head's configuration as transformers reads config.json (QWEN35_KEYS), validated and bounded."""
    text_type, text = text_model(cfg, source)
    rope, warnings = rope_section(cfg, text, source)
    values, lines = read_keys(cfg, QWEN35_KEYS, text_type, {"text": text, "rope": rope}, source,
                              family="Qwen3.5 / Qwen3.6 MTP head")
    check_head(values, source)
    moe = None
    if text_type == MOE_TEXT:
        moe = MoEConfig(num_experts=values["num_experts"], top_k=values["top_k"], expert_size=values["expert_size"],
                        shared_expert_size=values["shared_expert_size"], norm_topk_prob=values["norm_topk_prob"])
    # transformers reads only the top-level quantization_config; a text-level one is honoured too, as FP8 experts
    # are decoded from either place (weights/quant.py).
    quantized = any(isinstance(lookup(cfg, p), dict) for p in ("quantization_config", f"{text}quantization_config"))
    return MTPConfig(
        model_type=text_type, hidden_size=values["hidden_size"], num_heads=values["num_heads"],
        num_kv_heads=values["num_kv_heads"], head_dim=values["head_dim"], rms_norm_eps=values["rms_norm_eps"],
        rope_theta=values["rope_theta"], partial_rotary_factor=values["partial_rotary_factor"],
        intermediate_size=values.get("intermediate_size"), vocab_size=values["vocab_size"],
        num_hidden_layers=values["num_hidden_layers"], moe=moe, dtype=values["dtype"], quantized=quantized,
        source=source, warnings=tuple(warnings + lines))


def text_model(cfg: dict, source: str) -> tuple[str, str]:
    """(text model type, path prefix of its section) as transformers resolves them from the top-level model_type."""
    outer = cfg.get("model_type")
    text_type = TEXT_TYPE.get(outer) if isinstance(outer, str) else None
    if text_type is None:
        raise ConfigError(f"{source}: model_type {outer!r} has no supported MTP head "
                          f"(expected one of {', '.join(DENSE_TYPES + MOE_TYPES)})")
    if outer == text_type:
        return text_type, ""
    tc = cfg.get("text_config")
    if tc is None:  # transformers would build the text model from its class defaults, which have no MTP head
        raise ConfigError(f"{source}: model_type {outer!r} keeps its text model under text_config, which is absent")
    if not isinstance(tc, dict):
        raise ConfigError(f"{source}: text_config must be a JSON object, found {type(tc).__name__}")
    inner = tc.get("model_type", text_type)
    if inner not in (text_type, outer):
        raise ConfigError(f"{source}: text_config.model_type {inner!r} does not match model_type {outer!r} "
                          f"(expected {text_type!r})")
    return text_type, "text_config."


def rope_section(cfg: dict, text: str, source: str) -> tuple[str, list[str]]:
    """The `{rope}` prefix: rope_scaling when set (transformers: `rope_scaling or rope_parameters`), else
    rope_parameters; one flat dict, as Qwen3_5TextRotaryEmbedding reads it."""
    params, scaling = f"{text}rope_parameters", f"{text}rope_scaling"
    chosen, warnings = params, []
    if (replacing := lookup(cfg, scaling)) is not MISSING and replacing:
        chosen = scaling
        other = lookup(cfg, params)
        if other is not MISSING and other and other != replacing:
            warnings.append(disagreement(source, params, other, scaling, replacing, label=scaling))
    rope = lookup(cfg, chosen)
    if rope not in (MISSING, None) and not isinstance(rope, dict):
        raise ConfigError(f"{source}: {chosen} must be a JSON object, found {type(rope).__name__}")
    nested = [k for k, v in (rope or {}).items() if isinstance(v, dict)] if rope is not MISSING else []
    if nested:
        raise ConfigError(f"{source}: {chosen}.{nested[0]}: RoPE parameters per layer type are not supported "
                          f"(Qwen3.5 reads one flat {chosen.rsplit('.', 1)[-1]} dict)")
    return chosen + ".", warnings



def check_head(v: dict[str, Any], source: str) -> None:
    """What the head needs across keys: one MTP layer, whole KV groups, an even rotary width, top-k <= experts."""
    if not v["mtp_num_hidden_layers"]:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is absent or 0: this checkpoint has no MTP head")
    if v["mtp_num_hidden_layers"] != 1:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is {v['mtp_num_hidden_layers']}; "
                          f"only a one-layer MTP head is supported")
    heads, kv_heads, head_dim, prf = v["num_heads"], v["num_kv_heads"], v["head_dim"], v["partial_rotary_factor"]
    if heads % kv_heads:
        raise ConfigError(f"{source}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    rot = int(head_dim * prf)  # transformers: dim = int(head_dim * partial_rotary_factor)
    if rot < 2 or rot % 2:
        raise ConfigError(f"{source}: head_dim {head_dim} x partial_rotary_factor {prf} = {rot} rotary dims; "
                          f"expected an even number >= 2")
    if "top_k" in v and v["top_k"] > v["num_experts"]:
        raise ConfigError(f"{source}: num_experts_per_tok {v['top_k']} exceeds num_experts {v['num_experts']}")


# ---- tensors ----

from irsurgeon.families.qwen35_mtp.layout import PREFIX  # noqa: E402  (imported with the tensor section that uses it)
LAYER = "layers.0."
MLP = f"{LAYER}mlp."
EXPERTS = f"{MLP}experts."
MOE_LAYOUTS = ("fused", "per-expert")


def one_plus(w: np.ndarray) -> np.ndarray:
    """Qwen3.5 stores RMSNorm gains zero-centred (Qwen3_5RMSNorm: x_hat * (1 + weight)); folded once on load."""
    return 1.0 + w


def tensors(cfg: MTPConfig) -> Table:
    """Every tensor of the head (roles relative to `mtp.`), with its shape and how a release may store it.

    Routed experts (E experts, I = moe_intermediate_size) are stored fused, experts.gate_up_proj [E, 2I, H] (gate rows
    first) + experts.down_proj [E, H, I], or per expert, experts.<e>.{gate,up,down}_proj.weight; either way the
    graph gets each projection stacked over the experts.
    """
    H, nH, nKV, D = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    attn = f"{LAYER}self_attn."
    rows = [Tensor("fc.weight", (H, 2 * H)),
            *(Tensor(role, (n,), transform=one_plus) for role, n in (
                ("pre_fc_norm_embedding.weight", H), ("pre_fc_norm_hidden.weight", H), ("norm.weight", H),
                (f"{LAYER}input_layernorm.weight", H), (f"{LAYER}post_attention_layernorm.weight", H),
                (f"{attn}q_norm.weight", D), (f"{attn}k_norm.weight", D))),
            Tensor(f"{attn}q_proj.weight", (2 * nH * D, H)), Tensor(f"{attn}k_proj.weight", (nKV * D, H)),
            Tensor(f"{attn}v_proj.weight", (nKV * D, H)), Tensor(f"{attn}o_proj.weight", (H, nH * D))]
    if cfg.moe is None:
        rows += swiglu_rows(f"{MLP}", cfg.intermediate_size, H)
        return Table(PREFIX, tuple(rows), source=cfg.source)
    E, I = cfg.moe.num_experts, cfg.moe.expert_size
    rows += [Tensor(f"{MLP}gate.weight", (E, H), compress=False),  # routing: rounding would change the choice
             *swiglu_rows(f"{MLP}shared_expert.", cfg.moe.shared_expert_size, H),
             Tensor(f"{MLP}shared_expert_gate.weight", (1, H), compress=False)]
    fused = (E, 2 * I, H)
    for proj, shape, part in (("gate_proj", (E, I, H), Part(f"{EXPERTS}gate_up_proj", fused, 1, 0, I)),
                              ("up_proj", (E, I, H), Part(f"{EXPERTS}gate_up_proj", fused, 1, I, 2 * I)),
                              ("down_proj", (E, H, I), Whole(f"{EXPERTS}down_proj"))):
        rows.append(Tensor(f"{EXPERTS}{proj}.weight", shape,
                           {"fused": part, "per-expert": Stack(f"{EXPERTS}{{i}}.{proj}.weight", E, "expert")}))
    return Table(PREFIX, tuple(rows), MOE_LAYOUTS, "routed experts", cfg.source)


def swiglu_rows(path: str, inner: int, H: int) -> list[Tensor]:
    return [Tensor(f"{path}gate_proj.weight", (inner, H)), Tensor(f"{path}up_proj.weight", (inner, H)),
            Tensor(f"{path}down_proj.weight", (H, inner))]

# ---- graph ----

LAYER_NAME = PREFIX + LAYER  # graph names of the decoder layer
I64 = np.int64


@dataclass(frozen=True)
class Inputs:
    hidden_states: ov.Output
    inputs_embeds: ov.Output
    attention_mask: ov.Output
    position_ids: ov.Output
    beam_idx: ov.Output


def mtp_head(x: Inputs, w: Weights, cfg: MTPConfig, moe_form: str = DEFAULT_FORM) -> tuple[ov.Output, list[ov.Node]]:
    """last_hidden_state and the two Assign sinks of the KV cache; moe_form: the routed experts' graph form
    (irsurgeon.ops.moe.FORMS)."""
    def norm(t: ov.Output, name: str) -> ov.Output:
        return rms_norm(t, w(f"{name}.weight"), cfg.rms_norm_eps, name)

    e = norm(x.inputs_embeds, PREFIX + "pre_fc_norm_embedding")
    h = norm(x.hidden_states, PREFIX + "pre_fc_norm_hidden")
    hidden = linear(named(ops.concat([e, h], axis=-1), PREFIX + "fc/concat"), w(PREFIX + "fc.weight"), PREFIX + "fc")
    attn, sinks = self_attention(norm(hidden, LAYER_NAME + "input_layernorm"), x, w, cfg)
    hidden = named(ops.add(hidden, attn), LAYER_NAME + "attn_residual")
    post = norm(hidden, LAYER_NAME + "post_attention_layernorm")
    hidden = named(ops.add(hidden, mlp(post, w, cfg, moe_form)), LAYER_NAME + "mlp_residual")
    return norm(hidden, PREFIX + "norm"), sinks


def mlp(x: ov.Output, w: Weights, cfg: MTPConfig, moe_form: str = DEFAULT_FORM) -> ov.Output:
    name = LAYER_NAME + "mlp"
    if cfg.moe is not None:
        m = cfg.moe
        return sparse_moe(x, w, MoEShape(cfg.hidden_size, m.num_experts, m.top_k, m.norm_topk_prob), name, moe_form)
    return swiglu(x, *(w(f"{name}.{p}.weight") for p in ("gate_proj", "up_proj", "down_proj")), name)


def self_attention(a: ov.Output, x: Inputs, w: Weights, cfg: MTPConfig) -> tuple[ov.Output, list[ov.Node]]:
    """Gated attention with q/k norms, partial RoPE, GQA and a stateful KV cache; returns o_proj output."""
    name, eps = LAYER_NAME + "self_attn", cfg.rms_norm_eps
    nH, nKV, D, R = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.rotary_dim
    qg = heads(linear(a, w(f"{name}.q_proj.weight"), f"{name}.q_proj"), nH, 2 * D, f"{name}/q_heads")
    q_gate = ops.split(qg, const(-1, I64), 2)  # per head: [q (D) | gate (D)]
    q = rms_norm(q_gate.output(0), w(f"{name}.q_norm.weight"), eps, f"{name}.q_norm")
    gate = named(ops.reshape(q_gate.output(1), const([0, 0, nH * D], I64), special_zero=True), f"{name}/gate")
    k = rms_norm(heads(linear(a, w(f"{name}.k_proj.weight"), f"{name}.k_proj"), nKV, D, f"{name}/k_heads"),
                 w(f"{name}.k_norm.weight"), eps, f"{name}.k_norm")
    v = heads(linear(a, w(f"{name}.v_proj.weight"), f"{name}.v_proj"), nKV, D, f"{name}/v_heads")

    cos, sin = rope_cos_sin(x.position_ids, R, cfg.rope_theta, PREFIX + "rotary_emb")
    q = apply_rope(to_bnsd(q), cos, sin, R, D, f"{name}/q_rope", fusable=True)  # [B, nH, S, D]
    k = apply_rope(to_bnsd(k), cos, sin, R, D, f"{name}/k_rope", fusable=True)  # [B, nKV, S, D]
    batch = ops.gather(ops.shape_of(x.inputs_embeds, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    k_all, k_sink = kv_cache(k, x.beam_idx, batch, KEY_STATE, nKV, D, f"{name}/key_cache")
    v_all, v_sink = kv_cache(to_bnsd(v), x.beam_idx, batch, VALUE_STATE, nKV, D, f"{name}/value_cache")

    bias = attention_mask_bias(x.attention_mask, q, k_all, f"{name}/attention")
    k_all = expand_kv(k_all, cfg.kv_groups, nH, D, f"{name}/key_gqa")
    v_all = expand_kv(v_all, cfg.kv_groups, nH, D, f"{name}/value_gqa")
    out = to_bnsd(sdpa(q, k_all, v_all, bias, D, f"{name}/sdpa"))  # [B, S, nH, D]
    out = named(ops.reshape(out, const([0, 0, nH * D], I64), special_zero=True), f"{name}/merge_heads")
    gated = named(ops.multiply(out, ops.sigmoid(gate)), f"{name}/output_gate")
    return linear(gated, w(f"{name}.o_proj.weight"), f"{name}.o_proj"), [k_sink, v_sink]


# ---- the family, as the build sees it ----

def parameters(cfg: MTPConfig) -> tuple[list[ov.Node], Inputs]:
    """The contract's five inputs (contract.INPUTS), named as openvino-genai feeds them."""
    params = []
    for port in contract.INPUTS:
        p = ops.parameter(contract.partial_shape(port, cfg.hidden_size), port.dtype, name=port.name)
        p.output(0).set_names({port.name})
        params.append(p)
    return params, Inputs(*(p.output(0) for p in params))


def graph(x: Inputs, w: Weights, cfg: MTPConfig, moe_form: str = DEFAULT_FORM
          ) -> tuple[dict[str, ov.Output], list[ov.Node]]:
    out, sinks = mtp_head(x, w, cfg, moe_form)
    return {contract.OUTPUT: out}, sinks


RECIPE = Recipe("qwen3_5_mtp", parse_config, tensors, parameters, graph,
                rt_info={MTP_MODE: "True"})
