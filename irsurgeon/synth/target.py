"""Synthetic decoder language models as stateful `ov.Model`s, named the way optimum-intel names its exports.

Shapes: B batch, S new tokens, T = past + S, H hidden, V vocab, nH/nKV heads, D head_dim, R rotary dims.

    x = inputs_embeds                                   (qwen35)  or  embed_tokens[input_ids]   (llama)   [B, S, H]
    for each layer i:
        x = x + o_proj(attn(input_layernorm(x)))         -> `<module>.layers.<i>/aten::add/Add`
        x = x + mlp(post_attention_layernorm(x))         -> `<module>.layers.<i>/aten::add/Add_1`
    logits = lm_head(norm(x))                           norm -> `<module>.norm/aten::mul/Multiply_1`   [B, S, V]

qwen35: gated attention `attn * sigmoid(gate)` with per-head q/k RMSNorm, partial interleaved MRoPE on
position_ids [4, B, S] (rows 1..3 = t, h, w), zero-centred gains `1 + w`; MLP SwiGLU or sparse MoE + shared expert.
llama: plain attention, full 1-D RoPE on position_ids [B, S], gains `w`.
Every full-attention layer keeps K and V as `ReadValue -> Gather(beam_idx) -> Concat -> Assign` (irsurgeon.ops.kv_cache)
and attends through one 4-input ScaledDotProductAttention, the form openvino's SDPAToPagedAttention converts.
qwen35 layers follow `checkpoint.layer_types`: a linear-attention layer is a Gated DeltaNet (synth.linear_attn) with
two constant-size states; states are numbered per kind, as optimum numbers them (key.<j> counts full-attention
layers, conv.<j> / ssm.<j> linear-attention layers).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.attention import heads, to_bnsd
from irsurgeon.ops import (apply_rope, attention_mask_bias, expand_kv, kv_cache, linear, rms_norm, rope_cos_sin,
                           sdpa, swiglu)
from irsurgeon.ops.core import WeightFormat, const, named, weight
from irsurgeon.ops.rope import inv_freq
from irsurgeon.synth.checkpoint import FULL, LINEAR, SynthSpec, layer_types, mrope_section
from irsurgeon.synth.linear_attn import gated_delta_net

I64 = np.int64


@dataclass(frozen=True)
class Arch:
    """What differs between the decoder families: optimum's module paths, checkpoint prefix, layer flavour, states."""

    module: str
    lm_head: str
    ckpt: str
    qwen: bool
    linear_op: str
    key_state: str
    value_state: str


QWEN35 = Arch("__module.model.model.language_model", "__module.model.lm_head/ov_ext::linear/MatMul",
              "model.language_model.", True, "ov_ext::linear",
              "cache_params.past.key.{i}cache_params.present.key.{i}",
              "cache_params.past.value.{i}cache_params.present.value.{i}")
LLAMA = Arch("__module.model", "__module.lm_head/aten::linear/MatMul", "model.", False, "aten::linear",
             "past_key_values.{i}.keypresent.{i}.key", "past_key_values.{i}.valuepresent.{i}.value")


@dataclass(frozen=True)
class Weights:
    """Checkpoint tensors (float32, by checkpoint name) turned into IR weights of one storage format."""

    tensors: dict[str, np.ndarray]
    fmt: WeightFormat
    zero_centred: bool

    def mat(self, name: str, view: Callable[[np.ndarray], np.ndarray] | None = None) -> ov.Output:
        """The tensor as a weight, optionally re-laid out first (fused experts as one 2-D matrix)."""
        array = self.tensors[name]
        return weight(view(array) if view else array, name, self.fmt)

    def gain(self, name: str) -> ov.Output:
        g = self.tensors[name]
        return weight(g + np.float32(1.0) if self.zero_centred else g, name, self.fmt)


@dataclass(frozen=True)
class Context:
    """What every layer reads besides its own input: RoPE tables and the cache inputs."""

    cos: ov.Output
    sin: ov.Output
    attention_mask: ov.Output
    beam_idx: ov.Output
    batch: ov.Output  # [1] i64


def parameter(name: str, dtype: ov.Type, dims: list[int]) -> ov.Node:
    p = ops.parameter(ov.PartialShape(dims), dtype, name=name)
    p.output(0).set_names({name})
    return p


def mrope_rows(half: int, section: list[int]) -> np.ndarray:
    """Which of t/h/w (0/1/2) drives each rotary frequency, interleaved as Qwen3-VL does: t h w t h w ... t."""
    rows = np.zeros(half, I64)
    for axis in (1, 2):
        rows[axis:section[axis] * 3:3] = axis
    return rows


def mrope_cos_sin(position_ids: ov.Output, s: SynthSpec, name: str) -> tuple[ov.Output, ov.Output]:
    """cos, sin [B, 1, S, R] from position_ids [4, B, S]; for text tokens all rows agree and this is 1-D RoPE."""
    R = int(s.head_dim * s.partial_rotary_factor)
    rows = mrope_rows(R // 2, mrope_section(s)) + 1  # row 0 holds the text positions
    pos = ops.gather(position_ids, const(rows, I64), const(0, I64))  # [R/2, B, S]
    pos = ops.convert(ops.transpose(pos, const([1, 2, 0], I64)), ov.Type.f32)  # [B, S, R/2]
    ang = named(ops.multiply(pos, const(inv_freq(R, s.rope_theta), name=f"{name}.inv_freq")), f"{name}/angles")
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], I64))
    return named(ops.cos(emb), f"{name}/aten::cos/Cos"), named(ops.sin(emb), f"{name}/aten::sin/Sin")


def attention(a: ov.Output, i: int, kv_i: int, ctx: Context, w: Weights, s: SynthSpec,
              arch: Arch) -> tuple[ov.Output, list[ov.Node]]:
    """Self-attention of layer i (its kv_i-th KV cache); returns the o_proj output and the two Assign sinks."""
    m, c = f"{arch.module}.layers.{i}.self_attn", f"{arch.ckpt}layers.{i}.self_attn."
    nH, nKV, D, R = s.heads, s.kv_heads, s.head_dim, int(s.head_dim * s.partial_rotary_factor)

    def proj(x: ov.Output, p: str) -> ov.Output:
        return linear(x, w.mat(f"{c}{p}.weight"), f"{m}.{p}/{arch.linear_op}/MatMul")

    k = heads(proj(a, "k_proj"), nKV, D, f"{m}/k_heads")
    v = heads(proj(a, "v_proj"), nKV, D, f"{m}/v_heads")
    q = heads(proj(a, "q_proj"), nH, 2 * D if arch.qwen else D, f"{m}/q_heads")
    if arch.qwen:  # per head: [q (D) | gate (D)], then q/k RMSNorm over D
        q, gate = ops.split(q, const(-1, I64), 2).outputs()
        q = rms_norm(q, w.gain(f"{c}q_norm.weight"), s.rms_norm_eps, f"{m}.q_norm/aten::mul/Multiply_1")
        k = rms_norm(k, w.gain(f"{c}k_norm.weight"), s.rms_norm_eps, f"{m}.k_norm/aten::mul/Multiply_1")
    q = apply_rope(to_bnsd(q), ctx.cos, ctx.sin, R, D, f"{m}/q_rope")  # [B, nH, S, D]
    k = apply_rope(to_bnsd(k), ctx.cos, ctx.sin, R, D, f"{m}/k_rope")  # [B, nKV, S, D]
    k_all, k_sink = kv_cache(k, ctx.beam_idx, ctx.batch, arch.key_state.format(i=kv_i), nKV, D, f"{m}/key_cache")
    v_all, v_sink = kv_cache(to_bnsd(v), ctx.beam_idx, ctx.batch, arch.value_state.format(i=kv_i), nKV, D,
                             f"{m}/value_cache")
    bias = attention_mask_bias(ctx.attention_mask, q, k_all, f"{m}/attention")
    k_all = expand_kv(k_all, s.heads // s.kv_heads, nH, D, f"{m}/key_gqa")
    v_all = expand_kv(v_all, s.heads // s.kv_heads, nH, D, f"{m}/value_gqa")
    out = to_bnsd(sdpa(q, k_all, v_all, bias, D, f"{m}/aten::scaled_dot_product_attention/ScaledDotProductAttention"))
    out = named(ops.reshape(out, const([0, 0, nH * D], I64), special_zero=True), f"{m}/merge_heads")
    if arch.qwen:
        gate = ops.reshape(gate, const([0, 0, nH * D], I64), special_zero=True)
        out = named(ops.multiply(out, ops.sigmoid(gate)), f"{m}/aten::mul/Multiply_gate")
    return proj(out, "o_proj"), [k_sink, v_sink]


def sparse_moe(x: ov.Output, i: int, w: Weights, s: SynthSpec, arch: Arch) -> ov.Output:
    """Top-k routed experts (softmax in f32, top-k renormalised) plus the sigmoid-gated shared expert.

    Every expert runs on every token and the routing weights are zero off the top-k: the numbers of a sparse
    dispatch, as two plain 2-D MatMuls over all experts side by side (gate_up as [E*2I, H], down as [H, E*I]).
    """
    m, c = f"{arch.module}.layers.{i}.mlp", f"{arch.ckpt}layers.{i}.mlp."
    E, I, H = s.num_experts, s.expert_size, s.hidden
    probs = ops.softmax(linear(x, w.mat(c + "gate.weight"), f"{m}.gate/{arch.linear_op}/MatMul"), -1)  # [B, S, E]
    top = ops.topk(probs, const(s.top_k, I64), -1, "max", "value", ov.Type.i64)
    top_w = ops.divide(top.output(0), ops.reduce_sum(top.output(0), const([-1], I64), keep_dims=True))
    hot = ops.one_hot(top.output(1), const(E, I64), const(1.0), const(0.0), -1)  # [B, S, K, E]
    route = ops.reduce_sum(ops.multiply(hot, ops.unsqueeze(top_w, const(-1, I64))), const([2], I64))  # [B, S, E]
    gate_up = w.mat(c + "experts.gate_up_proj", lambda a: a.reshape(E * 2 * I, H))
    down = w.mat(c + "experts.down_proj", lambda a: a.transpose(1, 0, 2).reshape(H, E * I))
    h = ops.reshape(linear(x, gate_up, f"{m}.experts/gate_up"), const([0, 0, E, 2 * I], I64), True)
    gate, up = ops.split(h, const(-1, I64), 2).outputs()
    act = ops.multiply(ops.multiply(ops.swish(gate), up), ops.unsqueeze(route, const(-1, I64)))  # [B, S, E, I]
    routed = linear(ops.reshape(act, const([0, 0, E * I], I64), True), down, f"{m}.experts/down")  # [B, S, H]
    shared = swiglu(x, w.mat(c + "shared_expert.gate_proj.weight"), w.mat(c + "shared_expert.up_proj.weight"),
                    w.mat(c + "shared_expert.down_proj.weight"), f"{m}.shared_expert")
    shared_gate = ops.sigmoid(linear(x, w.mat(c + "shared_expert_gate.weight"), f"{m}.shared_expert_gate"))
    return named(ops.add(routed, ops.multiply(shared_gate, shared)), f"{m}/aten::add/Add")


def mlp(x: ov.Output, i: int, w: Weights, s: SynthSpec, arch: Arch) -> ov.Output:
    if s.num_experts:
        return sparse_moe(x, i, w, s, arch)
    m, c = f"{arch.module}.layers.{i}.mlp", f"{arch.ckpt}layers.{i}.mlp."
    return swiglu(x, w.mat(c + "gate_proj.weight"), w.mat(c + "up_proj.weight"), w.mat(c + "down_proj.weight"), m)


def decoder_layer(x: ov.Output, i: int, j: int, kind: str, ctx: Context, w: Weights, s: SynthSpec,
                  arch: Arch) -> tuple[ov.Output, list[ov.Node]]:
    """Layer i, the j-th of its kind (full or linear attention): token mixer, then the MLP, each residual."""
    m, c, eps = f"{arch.module}.layers.{i}", f"{arch.ckpt}layers.{i}.", s.rms_norm_eps
    a = rms_norm(x, w.gain(c + "input_layernorm.weight"), eps, f"{m}.input_layernorm/aten::mul/Multiply_1")
    mixer = gated_delta_net if kind == LINEAR else attention
    attn, sinks = mixer(a, i, j, ctx, w, s, arch)
    x = named(ops.add(x, attn), f"{m}/aten::add/Add")
    post = rms_norm(x, w.gain(c + "post_attention_layernorm.weight"), eps,
                    f"{m}.post_attention_layernorm/aten::mul/Multiply_1")
    return named(ops.add(x, mlp(post, i, w, s, arch)), f"{m}/aten::add/Add_1"), sinks


def decoder(x: ov.Output, ctx: Context, w: Weights, s: SynthSpec, arch: Arch) -> tuple[ov.Output, list[ov.Node]]:
    """All layers, the final norm and the lm_head MatMul that feeds `logits` directly; returns logits and sinks."""
    sinks, seen = [], {FULL: 0, LINEAR: 0}
    for i, kind in enumerate(layer_types(s) if arch.qwen else [FULL] * s.layers):
        x, layer_sinks = decoder_layer(x, i, seen[kind], kind, ctx, w, s, arch)
        seen[kind] += 1
        sinks += layer_sinks
    x = rms_norm(x, w.gain(arch.ckpt + "norm.weight"), s.rms_norm_eps, f"{arch.module}.norm/aten::mul/Multiply_1")
    return linear(x, w.mat("lm_head.weight"), arch.lm_head), sinks


def logits_model(logits: ov.Output, sinks: list[ov.Node], params: list[ov.Node], title: str) -> ov.Model:
    result = ops.result(logits)
    result.set_friendly_name("Result_logits")
    result.output(0).set_names({"logits"})
    return ov.Model([result], sinks, params, title)


def qwen35_language_model(s: SynthSpec, w: Weights) -> ov.Model:
    """openvino_language_model.xml: (attention_mask, inputs_embeds, position_ids [4,B,S], beam_idx) -> logits."""
    params = [parameter("attention_mask", ov.Type.i64, [-1, -1]), parameter("inputs_embeds", ov.Type.f32, [-1, -1, s.hidden]),
              parameter("position_ids", ov.Type.i64, [4, -1, -1]), parameter("beam_idx", ov.Type.i32, [-1])]
    mask, embeds, positions, beam_idx = (p.output(0) for p in params)
    cos, sin = mrope_cos_sin(positions, s, f"{QWEN35.module}.rotary_emb")
    batch = ops.gather(ops.shape_of(embeds, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    logits, sinks = decoder(embeds, Context(cos, sin, mask, beam_idx, batch), w, s, QWEN35)
    return logits_model(logits, sinks, params, "language_model")


def text_embeddings_model(s: SynthSpec, w: Weights) -> ov.Model:
    """openvino_text_embeddings_model.xml: input i64 [B, S] -> inputs_embeds f32 [B, S, H]."""
    ids = parameter("input", ov.Type.i64, [-1, -1])
    table = w.mat(QWEN35.ckpt + "embed_tokens.weight")
    embeds = named(ops.gather(table, ids, const(0, I64)), "ov_ext::embedding/Gather")
    result = ops.result(embeds)
    result.set_friendly_name("Result_inputs_embeds")
    result.output(0).set_names({"inputs_embeds"})
    return ov.Model([result], [ids], "text_embeddings")


def llama_model(s: SynthSpec, w: Weights) -> ov.Model:
    """openvino_model.xml: (input_ids, attention_mask, position_ids [B,S], beam_idx) -> logits."""
    params = [parameter("input_ids", ov.Type.i64, [-1, -1]), parameter("attention_mask", ov.Type.i64, [-1, -1]),
              parameter("position_ids", ov.Type.i64, [-1, -1]), parameter("beam_idx", ov.Type.i32, [-1])]
    ids, mask, positions, beam_idx = (p.output(0) for p in params)
    table = w.mat(LLAMA.ckpt + "embed_tokens.weight")
    x = named(ops.gather(table, ids, const(0, I64)), f"{LLAMA.module}.embed_tokens/aten::embedding/Gather")
    cos, sin = rope_cos_sin(positions, int(s.head_dim * s.partial_rotary_factor), s.rope_theta,
                            f"{LLAMA.module}.rotary_emb")
    batch = ops.gather(ops.shape_of(ids, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    logits, sinks = decoder(x, Context(cos, sin, mask, beam_idx, batch), w, s, LLAMA)
    return logits_model(logits, sinks, params, "llama")
