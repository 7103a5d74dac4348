"""`irsurgeon synth --kind gemma4`: a tiny text-only Gemma 4 target and an assistant checkpoint made for it.

    out/target/     openvino_model.xml/.bin (stateful, optimum-intel's names), config.json (gemma4_text),
                    generation_config.json, openvino_tokenizer/detokenizer (irsurgeon.synth.tokenizer)
    out/ckpt/       config.json (gemma4_assistant) + model.safetensors, for `irsurgeon patch out/target
                    --checkpoint out/ckpt`

The target follows transformers' Gemma4TextModel (modeling_gemma4.py, 5.24.0):

    h = embed_tokens[input_ids] * sqrt(H)                 `embed_tokens/aten::mul/Multiply`: genai embeds drafts here
    per layer i (sliding | full; layers from first_shared on reuse the K/V of the last earlier layer of their type):
        q = rope(rms(q_proj(a), q_norm)),  k = rope(rms(k_proj(a), k_norm)),  v = rms(v_proj(a))   a = rms(h)
        h = h + rms(o_proj(sdpa(q, k, v, causal [+ window] mask, scale 1)), post_attention_layernorm)
        h = (h + rms(down(gelu_tanh(gate(m)) * up(m)), post_feedforward_layernorm)) * layer_scalar
    logits = lm_head(rms(h, norm))                         untied lm_head

Sliding layers see keys j with q - window < j <= q (sliding_window_overlay). It is a bigram model: the layers'
output gains are 0.01, so the final hidden state is essentially the token's embedding, and lm_head row j is the
embedding of P^-1(j) for a seeded permutation P that fixes the special ids (no text prompt reaches EOS). The
assistant drafts P(token) from the embedding half of its input, so its drafts are accepted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.families.gemma4_mtp.layout import MODEL_XML
from irsurgeon.families.gemma4_mtp.model import parse_assistant_config, rope, rope_inv_freq, tensor_table
from irsurgeon.ops import expand_kv, kv_cache, linear, rms_norm
from irsurgeon.ops.core import WeightFormat, const, named, weight
from irsurgeon.synth.output import OWN, output_pair
from irsurgeon.synth.registry import save, write_json
from irsurgeon.synth.tokenizer import SPECIAL, detokenizer_model, tokenizer_model, tokenizer_rt_info
from irsurgeon.weights.safetensors_io import write_safetensors

I64 = np.int64
M = "__module.model"
V, H, I, HEADS, KV_HEADS, WINDOW, EPS = 256, 64, 96, 2, 1, 16, 1e-6
LAYER_TYPES = ("sliding_attention", "full_attention", "sliding_attention", "full_attention")
HEAD_DIM = {"sliding_attention": 16, "full_attention": 32}
NUM_KV_SHARED = 2
ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}


@dataclass(frozen=True)
class Geometry:
    """What a target offers an assistant: KV heads and head dims per layer type, attention_k_eq_v (full layers keep
    v_norm(k_proj(a)) as values, transformers 5.25.0 Gemma4TextAttention) and its model_type. The defaults are
    `synth --kind gemma4`'s target."""
    kv_heads: dict = field(default_factory=lambda: {"sliding_attention": KV_HEADS, "full_attention": KV_HEADS})
    head_dim: dict = field(default_factory=lambda: dict(HEAD_DIM))
    heads: int = HEADS
    k_eq_v: bool = False
    model_type: str = "gemma4_text"


GEOMETRY = Geometry()


def target_config(g: Geometry = GEOMETRY) -> dict:
    extra = {"attention_k_eq_v": True, "num_global_key_value_heads": g.kv_heads["full_attention"]} if g.k_eq_v else {}
    if not g.k_eq_v and g.kv_heads["full_attention"] != g.kv_heads["sliding_attention"]:
        raise ValueError("Gemma4TextConfig gives full layers other KV heads only with attention_k_eq_v")
    return {"architectures": ["Gemma4UnifiedForCausalLM" if "unified" in g.model_type else "Gemma4ForCausalLM"],
            "model_type": g.model_type, "vocab_size": V, "hidden_size": H,
            "intermediate_size": I, "num_hidden_layers": len(LAYER_TYPES), "layer_types": list(LAYER_TYPES),
            "num_attention_heads": g.heads, "num_key_value_heads": g.kv_heads["sliding_attention"],
            "head_dim": g.head_dim["sliding_attention"], **extra,
            "global_head_dim": g.head_dim["full_attention"], "num_kv_shared_layers": NUM_KV_SHARED,
            "sliding_window": WINDOW, "rms_norm_eps": EPS, "rope_parameters": ROPE, "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0, "tie_word_embeddings": False, "hidden_activation": "gelu_pytorch_tanh",
            "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def assistant_config() -> dict:
    text = {"model_type": "gemma4_text", "vocab_size": V, "hidden_size": H, "intermediate_size": 48,
            "num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"],
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM["sliding_attention"],
            "per_layer_config": {"1": {"head_dim": HEAD_DIM["full_attention"]}}, "num_kv_shared_layers": 2,
            "sliding_window": WINDOW, "rms_norm_eps": EPS, "rope_parameters": ROPE, "hidden_size_per_layer_input": 0,
            "vocab_size_per_layer_input": 0, "enable_moe_block": False, "use_double_wide_mlp": False,
            "hidden_activation": "gelu_pytorch_tanh"}
    return {"architectures": ["Gemma4AssistantForCausalLM"], "model_type": "gemma4_assistant", "text_config": text,
            "backbone_hidden_size": H, "use_ordered_embeddings": True, "num_centroids": 4,
            "centroid_intermediate_top_k": 4, "tie_word_embeddings": True, "dtype": "float32"}


def _random(rng, shape) -> np.ndarray:
    return (rng.standard_normal(shape) / shape[1] ** 0.5).astype(np.float32)


def _gain(name: str, shape, output_gain: float = 0.01) -> np.ndarray:
    """Norm gains: the layers' output norms get output_gain (small: a bigram model), the others 1."""
    small = "post_attention_layernorm" in name or "post_feedforward_layernorm" in name
    return np.full(shape, output_gain if small else 1.0, np.float32)


def bigram(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(unit-norm embedding rows [V, H], permutation P fixing the special ids)."""
    rng = np.random.default_rng([seed, 0])
    emb = rng.standard_normal((V, H)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    perm = np.arange(V)
    perm[SPECIAL:] = SPECIAL + rng.permutation(V - SPECIAL)
    return emb, perm


def target_tensors(seed: int, output_gain: float = 0.01, g: Geometry = GEOMETRY) -> dict[str, np.ndarray]:
    """The target's weights by checkpoint name; output_gain 0.01 makes it a bigram model (see the module docstring),
    a gain near 1 gives the layers their full weight (how tests compare it with transformers)."""
    rng, (emb, perm) = np.random.default_rng([seed, 1]), bigram(seed)
    t = {"model.embed_tokens.weight": emb, "lm_head.weight": 4.0 * emb[np.argsort(perm)],
         "model.norm.weight": np.ones(H, np.float32)}
    for i, kind in enumerate(LAYER_TYPES):
        p, d, kv = f"model.layers.{i}.", g.head_dim[kind], g.kv_heads[kind]
        shapes = {"self_attn.q_proj.weight": (g.heads * d, H), "self_attn.q_norm.weight": (d,),
                  "self_attn.o_proj.weight": (H, g.heads * d), "mlp.gate_proj.weight": (I, H),
                  "mlp.up_proj.weight": (I, H), "mlp.down_proj.weight": (H, I), "layer_scalar": (1,),
                  **{f"{n}.weight": (H,) for n in ("input_layernorm", "post_attention_layernorm",
                                                  "pre_feedforward_layernorm", "post_feedforward_layernorm")}}
        if i < len(LAYER_TYPES) - NUM_KV_SHARED:
            shapes.update({"self_attn.k_proj.weight": (kv * d, H), "self_attn.k_norm.weight": (d,)})
            if not (g.k_eq_v and kind == "full_attention"):
                shapes["self_attn.v_proj.weight"] = (kv * d, H)
        for name, shape in shapes.items():
            t[p + name] = _random(rng, shape) if len(shape) == 2 else _gain(name, shape, output_gain)
    return t


def assistant_tensors(seed: int) -> dict[str, np.ndarray]:
    """An assistant drafting P(token): pre_projection keeps the embedding half, its table row j is E[P^-1(j)]."""
    rng, (emb, perm) = np.random.default_rng([seed, 2]), bigram(seed)
    table = tensor_table(parse_assistant_config(assistant_config(), "synth"))
    t = {n: _random(rng, s) if len(s) == 2 else _gain(n, s) for n, s in table.items()}
    t["pre_projection.weight"] = np.concatenate([np.eye(H), np.zeros((H, H))], axis=1).astype(np.float32)
    t["model.embed_tokens.weight"] = emb[np.argsort(perm)]
    t["masked_embedding.token_ordering"] = rng.permutation(V).astype(np.int64)
    return t


def _dim(x: ov.Output, axis: int) -> ov.Output:
    return ops.gather(ops.shape_of(x, ov.Type.i64), const(axis, I64), const(0, I64)).output(0)


def mask_bias(attention_mask: ov.Output, q: ov.Output, k: ov.Output, window: int | None, name: str) -> ov.Output:
    """Additive [B, 1, S, T] bias: key j visible to query i (absolute T - S + i) if j <= it, j > it - window
    (sliding layers only) and attention_mask[j] > 0."""
    s, t = _dim(q, 2), _dim(k, 2)
    q_abs = ops.add(ops.unsqueeze(ops.range(const(0, I64), s, const(1, I64), ov.Type.i64), const(1, I64)),
                    ops.subtract(t, s))  # [S, 1]
    j = ops.unsqueeze(ops.range(const(0, I64), t, const(1, I64), ov.Type.i64), const(0, I64))  # [1, T]
    visible = ops.less_equal(j, q_abs)
    if window is not None:
        visible = ops.logical_and(visible, ops.greater(j, ops.subtract(q_abs, const(window, I64))))
    keep = ops.greater(ops.unsqueeze(attention_mask, const([1, 2], I64)), const(0, I64))  # [B, 1, 1, T]
    return named(ops.select(ops.logical_and(keep, visible), const(0.0), const(np.finfo(np.float32).min)), name)


class Graph:
    """The target's inputs and the K/V each layer type stores, shared by the layers."""

    def __init__(self, w, positions, attention_mask, beam_idx, batch, window: int, g: Geometry = GEOMETRY):
        self.w, self.positions, self.mask, self.beam_idx, self.batch = w, positions, attention_mask, beam_idx, batch
        self.window, self.g = window, g
        self.stored: dict[str, tuple[ov.Output, ov.Output]] = {}
        self.sinks: list[ov.Node] = []

    def heads(self, x: ov.Output, n: int, d: int, norm: ov.Output, kind: str, name: str, rotate=True) -> ov.Output:
        """[B, S, n*d] -> RMS-normed per head, [B, n, S, d], rotated."""
        x = ops.reshape(x, const([0, 0, n, d], I64), special_zero=True).output(0)
        x = ops.transpose(rms_norm(x, norm, EPS, f"{name}_norm"), const([0, 2, 1, 3], I64)).output(0)
        return rope(x, self.positions, rope_inv_freq(ROPE[kind], d), d, f"{name}/rope") if rotate else x

    def attention(self, a: ov.Output, i: int) -> ov.Output:
        g = self.g
        kind, p = LAYER_TYPES[i], f"{M}.layers.{i}.self_attn"
        d, kv, heads = g.head_dim[kind], g.kv_heads[kind], g.heads
        c = f"model.layers.{i}.self_attn."
        q = self.heads(linear(a, self.w(c + "q_proj.weight"), f"{p}.q_proj/aten::linear/MatMul"), heads, d,
                       self.w(c + "q_norm.weight"), kind, f"{p}.q")
        if i < len(LAYER_TYPES) - NUM_KV_SHARED:
            raw_k = linear(a, self.w(c + "k_proj.weight"), f"{p}.k_proj/aten::linear/MatMul")
            k = self.heads(raw_k, kv, d, self.w(c + "k_norm.weight"), kind, f"{p}.k")
            raw_v = raw_k if g.k_eq_v and kind == "full_attention" else linear(
                a, self.w(c + "v_proj.weight"), f"{p}.v_proj/aten::linear/MatMul")  # k_eq_v: values are raw keys
            v = self.heads(raw_v, kv, d, const(np.ones(d, np.float32)), kind, f"{p}.v", rotate=False)
            k, k_sink = kv_cache(k, self.beam_idx, self.batch, f"past_key_values.{i}.keypresent.{i}.key", kv, d,
                                 f"{p}/key_cache")
            v, v_sink = kv_cache(v, self.beam_idx, self.batch, f"past_key_values.{i}.valuepresent.{i}.value",
                                 kv, d, f"{p}/value_cache")
            self.stored[kind], self.sinks = (k, v), [*self.sinks, k_sink, v_sink]
        k, v = self.stored[kind]
        bias = mask_bias(self.mask, q, k, self.window if kind == "sliding_attention" else None, f"{p}/mask")
        k, v = (expand_kv(x, heads // kv, heads, d, f"{p}/{n}_gqa") for x, n in ((k, "k"), (v, "v")))
        out = named(ops.scaled_dot_product_attention(q, k, v, bias, const(1.0), causal=False), f"{p}/sdpa")
        out = ops.reshape(ops.transpose(out, const([0, 2, 1, 3], I64)), const([0, 0, heads * d], I64),
                          special_zero=True).output(0)
        return linear(out, self.w(c + "o_proj.weight"), f"{p}.o_proj/aten::linear/MatMul")

    def layer(self, h: ov.Output, i: int) -> ov.Output:
        p, c, w = f"{M}.layers.{i}", f"model.layers.{i}.", self.w
        attn = self.attention(rms_norm(h, w(c + "input_layernorm.weight"), EPS, f"{p}.input_layernorm"), i)
        h = ops.add(h, rms_norm(attn, w(c + "post_attention_layernorm.weight"), EPS, f"{p}.post_attention_layernorm"))
        m = rms_norm(h.output(0), w(c + "pre_feedforward_layernorm.weight"), EPS, f"{p}.pre_feedforward_layernorm")
        gate = ops.gelu(linear(m, w(c + "mlp.gate_proj.weight"), f"{p}.mlp.gate_proj/aten::linear/MatMul"), "tanh")
        up = linear(m, w(c + "mlp.up_proj.weight"), f"{p}.mlp.up_proj/aten::linear/MatMul")
        down = linear(ops.multiply(gate, up).output(0), w(c + "mlp.down_proj.weight"),
                      f"{p}.mlp.down_proj/aten::linear/MatMul")
        post = rms_norm(down, w(c + "post_feedforward_layernorm.weight"), EPS, f"{p}.post_feedforward_layernorm")
        h = ops.add(h, post)
        return named(ops.multiply(h, w(c + "layer_scalar")), f"{p}/aten::mul/Multiply_layer_scalar")


def param(name: str, dtype: ov.Type, dims: list[int]) -> ov.Node:
    p = ops.parameter(ov.PartialShape(dims), dtype, name=name)
    p.output(0).set_names({name})
    return p


def target_model(tensors: dict[str, np.ndarray], window: int = WINDOW, g: Geometry = GEOMETRY) -> ov.Model:
    """The stateful target: input_ids, attention_mask, position_ids, beam_idx -> logits."""
    params = [param("input_ids", ov.Type.i64, [-1, -1]), param("attention_mask", ov.Type.i64, [-1, -1]),
              param("position_ids", ov.Type.i64, [-1, -1]), param("beam_idx", ov.Type.i32, [-1])]
    ids, mask, positions, beam = (p.output(0) for p in params)

    def w(name: str) -> ov.Output:
        return weight(tensors[name], name, WeightFormat.F32)

    rows = named(ops.gather(w("model.embed_tokens.weight"), ids, const(0, I64)),
                 f"{M}.embed_tokens/aten::embedding/Gather")
    h = named(ops.multiply(rows, const(np.float32(H ** 0.5))), f"{M}.embed_tokens/aten::mul/Multiply")
    graph = Graph(w, positions, mask, beam, _dim(ids, 0), window, g)
    graph.batch = ops.unsqueeze(graph.batch, const(0, I64)).output(0)
    for i in range(len(LAYER_TYPES)):
        h = graph.layer(h, i)
    hidden = rms_norm(h, w("model.norm.weight"), EPS, f"{M}.norm")
    logits = linear(hidden, w("lm_head.weight"), "__module.lm_head/aten::linear/MatMul")
    result = ops.result(logits)
    result.output(0).get_tensor().set_names({"logits"})
    return ov.Model([result], graph.sinks, params, "gemma4_text")


def synthesize_gemma4(out_dir: str | Path, seed: int = 0, wait: bool = False,
                      force: bool = False) -> tuple[Path, Path]:
    """Write out_dir/target and out_dir/ckpt (the assistant; see the module docstring) under out_dir's lock, as
    every kind does (synth.output: an earlier output replaced with force, else refused). Returns both paths."""
    with output_pair(out_dir, wait, force) as (target, assistant):
        _write(target, assistant, seed)
    return Path(out_dir) / OWN[0], Path(out_dir) / OWN[1]


def _write(target: Path, assistant: Path, seed: int) -> None:
    save(target_model(target_tensors(seed)), target / MODEL_XML)
    tok, detok = tokenizer_model(V), detokenizer_model(V)
    tokenizer_rt_info(tok, detokenizer=False)
    tokenizer_rt_info(detok, detokenizer=True)
    save(tok, target / "openvino_tokenizer.xml")
    save(detok, target / "openvino_detokenizer.xml")
    write_json(target / "config.json", target_config())
    write_json(target / "generation_config.json", {"do_sample": False, "eos_token_id": 2, "pad_token_id": 0})
    write_json(assistant / "config.json", assistant_config())
    write_safetensors(assistant / "model.safetensors", assistant_tensors(seed))
