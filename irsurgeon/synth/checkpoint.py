"""Seeded Hugging Face checkpoints with an `mtp.*` head, for any size: config.json + safetensors (bf16 by default).

    write_checkpoint(out_dir, SynthSpec(hidden=64, heads=4, ...), seed=0)

Norm gains are drawn around zero (the checkpoint's zero-centred form), so an off-by-one in `1 + w` shows.
Decoder layers follow `layer_types(spec)`: gated full attention (`self_attn.*`) or Gated DeltaNet linear attention
(`linear_attn.*`, names and shapes as transformers 5.23.0 models/qwen3_5/modeling_qwen3_5.py Qwen3_5GatedDeltaNet
declares them: in_proj_qkv [2*Kh*Kd + Vh*Vd, H], in_proj_z [Vh*Vd, H], in_proj_b/in_proj_a [Vh, H],
conv1d.weight [conv_dim, 1, kernel], dt_bias [Vh], A_log [Vh], norm.weight [Vd] (a plain gain, not 1 + w),
out_proj [H, Vh*Vd]).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors

BIGRAM_BRANCH = 0.02
FULL, LINEAR = "full_attention", "linear_attention"


@dataclass(frozen=True)
class SynthSpec:
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 128
    vocab: int = 256
    layers: int = 2
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    rms_norm_eps: float = 1e-6
    num_experts: int = 0  # > 0: a MoE head
    top_k: int = 2
    expert_size: int = 32
    shared_expert_size: int = 32
    vlm: bool = True  # config under text_config, model_type qwen3_5 / qwen3_5_moe
    bigram: bool = False  # residual branches scaled down so the model is a bigram the MTP head can predict
    full_attention_interval: int = 1  # every n-th layer is full attention, the others linear (1: all full)
    layer_types: tuple[str, ...] = ()  # explicit per-layer pattern; () derives it from full_attention_interval
    linear_key_heads: int = 2
    linear_value_heads: int = 4
    linear_key_head_dim: int = 16
    linear_value_head_dim: int = 16
    linear_conv_kernel: int = 4

    def with_(self, **kw) -> "SynthSpec":
        return replace(self, **kw)


def mrope_section(s: SynthSpec) -> list[int]:
    """t/h/w frequency counts of the interleaved MRoPE, summing to the R/2 rotary frequencies."""
    half = int(s.head_dim * s.partial_rotary_factor) // 2
    return [half - 2 * (half // 3), half // 3, half // 3]


def layer_types(s: SynthSpec) -> list[str]:
    """Each decoder layer's kind; without an explicit list, as transformers 5.23.0 Qwen3_5TextConfig.__post_init__
    derives it: `"linear_attention" if (i + 1) % full_attention_interval else "full_attention"`."""
    if s.layer_types:
        return list(s.layer_types)
    return [LINEAR if (i + 1) % s.full_attention_interval else FULL for i in range(s.layers)]


def conv_dim(s: SynthSpec) -> int:
    """Channels of the linear-attention causal conv: q and k (Kh x Kd each) and v (Vh x Vd)."""
    return 2 * s.linear_key_heads * s.linear_key_head_dim + s.linear_value_heads * s.linear_value_head_dim


def interval_of(types: list[str]) -> int | None:
    """The full_attention_interval that derives `types`, if one does."""
    for n in range(1, len(types) + 1):
        if types == [LINEAR if (i + 1) % n else FULL for i in range(len(types))]:
            return n
    return None


def linear_config(s: SynthSpec) -> dict:
    """The hybrid keys of text_config (written whatever the pattern, as real configs carry them)."""
    types = layer_types(s)
    cfg = {"layer_types": types, "linear_conv_kernel_dim": s.linear_conv_kernel,
           "linear_key_head_dim": s.linear_key_head_dim, "linear_value_head_dim": s.linear_value_head_dim,
           "linear_num_key_heads": s.linear_key_heads, "linear_num_value_heads": s.linear_value_heads,
           "mamba_ssm_dtype": "float32"}
    interval = interval_of(types)
    if interval is not None:
        cfg["full_attention_interval"] = interval
    return cfg


def text_config(s: SynthSpec) -> dict:
    moe = s.num_experts > 0
    cfg = {
        "model_type": ("qwen3_5_moe_text" if moe else "qwen3_5_text"),
        "hidden_size": s.hidden, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim, "num_hidden_layers": s.layers, "vocab_size": s.vocab, "rms_norm_eps": s.rms_norm_eps,
        "mtp_num_hidden_layers": 1, "partial_rotary_factor": s.partial_rotary_factor,
        "rope_parameters": {"rope_theta": s.rope_theta, "partial_rotary_factor": s.partial_rotary_factor,
                            "mrope_section": mrope_section(s), "mrope_interleaved": True, "rope_type": "default"},
        "tie_word_embeddings": False, **linear_config(s),
    }
    if moe:
        cfg.update(num_experts=s.num_experts, num_experts_per_tok=s.top_k, moe_intermediate_size=s.expert_size,
                   shared_expert_intermediate_size=s.shared_expert_size)
    else:
        cfg["intermediate_size"] = s.intermediate
    return cfg


def spec_from_config(tc: dict, **overrides) -> SynthSpec:
    """The SynthSpec of a Qwen3.5 text_config (layer kinds, sizes, linear-attention heads), to synthesize a model
    shaped like a published one; keys and defaults as transformers 5.23.0 Qwen3_5TextConfig reads them."""
    rope = tc.get("rope_parameters") or {}
    moe = ({"num_experts": tc["num_experts"], "top_k": tc["num_experts_per_tok"],
            "expert_size": tc["moe_intermediate_size"], "shared_expert_size": tc["shared_expert_intermediate_size"]}
           if tc.get("num_experts") else {"intermediate": tc["intermediate_size"]})
    return SynthSpec(
        hidden=tc["hidden_size"], heads=tc["num_attention_heads"], kv_heads=tc["num_key_value_heads"],
        head_dim=tc.get("head_dim", 256), vocab=tc["vocab_size"], layers=tc["num_hidden_layers"],
        partial_rotary_factor=rope.get("partial_rotary_factor", 0.25), rope_theta=rope.get("rope_theta", 10000.0),
        rms_norm_eps=tc.get("rms_norm_eps", 1e-6), full_attention_interval=tc.get("full_attention_interval", 4),
        layer_types=tuple(tc.get("layer_types") or ()), linear_key_heads=tc.get("linear_num_key_heads", 16),
        linear_value_heads=tc.get("linear_num_value_heads", 32), linear_key_head_dim=tc.get("linear_key_head_dim", 128),
        linear_value_head_dim=tc.get("linear_value_head_dim", 128),
        linear_conv_kernel=tc.get("linear_conv_kernel_dim", 4),
        **moe).with_(**overrides)


def checkpoint_config(s: SynthSpec) -> dict:
    """The checkpoint's config.json: the text config, nested under text_config for a VLM."""
    tc = text_config(s)
    if not s.vlm:
        return tc
    return {"model_type": tc["model_type"].replace("_text", ""), "text_config": tc, "tie_word_embeddings": False}


class Draw:
    """Seeded weight draws: matrices ~ N(0, 1/fan_in), zero-centred norm gains ~ U(-0.5, 0.5)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def mat(self, o: int, i: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal((o, i)) * (scale / np.sqrt(i))).astype(np.float32)

    def gain(self, n: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.uniform(-0.5, 0.5, n) * scale).astype(np.float32)


def attention_tensors(p: str, s: SynthSpec, d: Draw, branch: float = 1.0, gated: bool = True,
                      qk_norm: bool = True) -> dict[str, np.ndarray]:
    """`<p>self_attn.*` and the two layer norms; `branch` scales o_proj (the residual branch)."""
    H, nH, nKV, D = s.hidden, s.heads, s.kv_heads, s.head_dim
    t = {p + "input_layernorm.weight": d.gain(H), p + "post_attention_layernorm.weight": d.gain(H),
         p + "self_attn.q_proj.weight": d.mat((2 if gated else 1) * nH * D, H),
         p + "self_attn.k_proj.weight": d.mat(nKV * D, H), p + "self_attn.v_proj.weight": d.mat(nKV * D, H),
         p + "self_attn.o_proj.weight": d.mat(H, nH * D, branch)}
    if qk_norm:
        t.update({p + "self_attn.q_norm.weight": d.gain(D), p + "self_attn.k_norm.weight": d.gain(D)})
    return t


def linear_attention_tensors(p: str, s: SynthSpec, d: Draw, branch: float = 1.0) -> dict[str, np.ndarray]:
    """`<p>linear_attn.*` and the two layer norms; `branch` scales out_proj (the residual branch).

    A = exp(A_log) is drawn in [0.05, 1] rather than transformers' init range [0.01, 16]: with decays exp(-A x
    softplus(.)) this close to 1 the recurrent state carries tokens far back, so a wrong state carry shows.
    """
    H, C, K = s.hidden, conv_dim(s), s.linear_conv_kernel
    Vh, V = s.linear_value_heads, s.linear_value_heads * s.linear_value_head_dim
    a = p + "linear_attn."
    return {p + "input_layernorm.weight": d.gain(H), p + "post_attention_layernorm.weight": d.gain(H),
            a + "in_proj_qkv.weight": d.mat(C, H), a + "in_proj_z.weight": d.mat(V, H),
            a + "in_proj_b.weight": d.mat(Vh, H), a + "in_proj_a.weight": d.mat(Vh, H),
            a + "conv1d.weight": d.mat(C, K).reshape(C, 1, K), a + "dt_bias": d.gain(Vh, 2.0),
            a + "A_log": np.log(d.rng.uniform(0.05, 1.0, Vh)).astype(np.float32),
            a + "norm.weight": d.gain(s.linear_value_head_dim) + np.float32(1.0),
            a + "out_proj.weight": d.mat(H, V, branch)}


def mlp_tensors(p: str, s: SynthSpec, d: Draw, branch: float = 1.0) -> dict[str, np.ndarray]:
    """`<p>mlp.*`: SwiGLU, or fused experts + shared expert when s.num_experts; `branch` scales the down projections."""
    H = s.hidden
    if not s.num_experts:
        I = s.intermediate
        return {p + "mlp.gate_proj.weight": d.mat(I, H), p + "mlp.up_proj.weight": d.mat(I, H),
                p + "mlp.down_proj.weight": d.mat(H, I, branch)}
    E, I, SI = s.num_experts, s.expert_size, s.shared_expert_size
    return {
        p + "mlp.gate.weight": d.mat(E, H),
        p + "mlp.experts.gate_up_proj": np.stack([d.mat(2 * I, H) for _ in range(E)]),
        p + "mlp.experts.down_proj": np.stack([d.mat(H, I, branch) for _ in range(E)]),
        p + "mlp.shared_expert.gate_proj.weight": d.mat(SI, H), p + "mlp.shared_expert.up_proj.weight": d.mat(SI, H),
        p + "mlp.shared_expert.down_proj.weight": d.mat(H, SI, branch), p + "mlp.shared_expert_gate.weight": d.mat(1, H),
    }


def mtp_tensors(s: SynthSpec, rng: np.random.Generator, final_norm: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """float32 `mtp.*` tensors with the checkpoint's names and shapes.

    With s.bigram the head reproduces the main model's next-token map: `fc = [I | ~0]` keeps only the (unit-gain)
    embedding half, the layer's residual branches are scaled by BIGRAM_BRANCH, and `mtp.norm` = `final_norm`.
    """
    d, H = Draw(rng), s.hidden
    branch = BIGRAM_BRANCH if s.bigram else 1.0
    t = {"mtp.fc.weight": d.mat(H, 2 * H), "mtp.pre_fc_norm_embedding.weight": d.gain(H),
         "mtp.pre_fc_norm_hidden.weight": d.gain(H), "mtp.norm.weight": d.gain(H)}
    t.update(attention_tensors("mtp.layers.0.", s, d, branch))
    t.update(mlp_tensors("mtp.layers.0.", s, d, branch))
    if s.bigram:
        t["mtp.fc.weight"][:, :H] = np.eye(H, dtype=np.float32)
        t["mtp.fc.weight"][:, H:] *= BIGRAM_BRANCH
        t["mtp.pre_fc_norm_embedding.weight"] *= BIGRAM_BRANCH
        if final_norm is not None:
            t["mtp.norm.weight"] = final_norm.copy()
    return t


def write_checkpoint(out_dir: str | Path, spec: SynthSpec = SynthSpec(), seed: int = 0, dtype: str = "bf16",
                     extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write config.json + model.safetensors; returns the tensors exactly as stored (decoded to float32)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {**mtp_tensors(spec, np.random.default_rng(seed)), **(extra or {})}
    (out / "config.json").write_text(json.dumps(checkpoint_config(spec), indent=1))
    if dtype == "bf16":
        bits = {k: f32_to_bf16(v) for k, v in tensors.items()}
        write_safetensors(out / "model.safetensors", bits, {k: "BF16" for k in bits})
        return {k: (b.astype(np.uint32) << 16).view(np.float32) for k, b in bits.items()}
    arrays = {k: v.astype(np.dtype(dtype)) for k, v in tensors.items()}
    write_safetensors(out / "model.safetensors", arrays)
    return {k: v.astype(np.float32) for k, v in arrays.items()}


def lm_tensors(s: SynthSpec, rng: np.random.Generator, prefix: str = "model.language_model.",
               qwen: bool = True) -> dict[str, np.ndarray]:
    """float32 main-model tensors: embeddings, decoder layers, final norm, lm_head (untied).

    Qwen3.5 layers are gated full attention with q/k norms and zero-centred norm gains; `qwen=False` gives a Llama
    layer (plain attention, gains around 1). With s.bigram the residual branches are scaled by BIGRAM_BRANCH, so the
    logits at a position depend (almost) only on the token there.
    """
    d, H, V = Draw(rng), s.hidden, s.vocab
    branch = BIGRAM_BRANCH if s.bigram else 1.0
    t = {prefix + "embed_tokens.weight": d.mat(V, H, np.sqrt(H))}  # unit-variance rows, like a trained model
    for i, kind in enumerate(layer_types(s) if qwen else [FULL] * s.layers):
        p = f"{prefix}layers.{i}."
        if kind == LINEAR:
            t.update(linear_attention_tensors(p, s, d, branch))
        else:
            t.update(attention_tensors(p, s, d, branch, gated=qwen, qk_norm=qwen))
        t.update(mlp_tensors(p, s, d, branch))
    t[prefix + "norm.weight"] = d.gain(H)
    t["lm_head.weight"] = d.mat(V, H)
    if not qwen:  # Llama norms multiply by w itself
        for name in [n for n in t if n.endswith("norm.weight")]:
            t[name] = t[name] + np.float32(1.0)
    return t


def bf16_round(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float32 values a bf16 checkpoint of `tensors` holds."""
    return {k: (f32_to_bf16(v).astype(np.uint32) << 16).view(np.float32) for k, v in tensors.items()}


def write_tensors(path: str | Path, tensors: dict[str, np.ndarray], dtype: str = "bf16") -> None:
    """One safetensors file, bf16 (bit-exact with `bf16_round`) or a numpy float dtype."""
    if dtype == "bf16":
        bits = {k: f32_to_bf16(v) for k, v in tensors.items()}
        write_safetensors(path, bits, {k: "BF16" for k in bits})
    else:
        write_safetensors(path, {k: v.astype(np.dtype(dtype)) for k, v in tensors.items()})
