"""Seeded Hugging Face checkpoints with an `mtp.*` head, for any size: config.json + safetensors (bf16 by default).

    write_checkpoint(out_dir, SynthSpec(hidden=64, heads=4, ...), seed=0)

Norm gains are drawn around zero (the checkpoint's zero-centred form), so an off-by-one in `1 + w` shows.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors


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

    def with_(self, **kw) -> "SynthSpec":
        return replace(self, **kw)


def text_config(s: SynthSpec) -> dict:
    moe = s.num_experts > 0
    cfg = {
        "model_type": ("qwen3_5_moe_text" if moe else "qwen3_5_text"),
        "hidden_size": s.hidden, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim, "num_hidden_layers": s.layers, "vocab_size": s.vocab, "rms_norm_eps": s.rms_norm_eps,
        "mtp_num_hidden_layers": 1, "partial_rotary_factor": s.partial_rotary_factor,
        "rope_parameters": {"rope_theta": s.rope_theta, "partial_rotary_factor": s.partial_rotary_factor,
                            "mrope_section": [1, 1, 1], "mrope_interleaved": True, "rope_type": "default"},
        "layer_types": ["full_attention"] * s.layers, "tie_word_embeddings": False,
    }
    if moe:
        cfg.update(num_experts=s.num_experts, num_experts_per_tok=s.top_k, moe_intermediate_size=s.expert_size,
                   shared_expert_intermediate_size=s.shared_expert_size)
    else:
        cfg["intermediate_size"] = s.intermediate
    return cfg


def config_json(s: SynthSpec) -> dict:
    tc = text_config(s)
    if not s.vlm:
        return tc
    return {"model_type": tc["model_type"].replace("_text", ""), "text_config": tc, "tie_word_embeddings": False}


def mtp_tensors(s: SynthSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """float32 `mtp.*` tensors with the checkpoint's names and shapes."""
    H, nH, nKV, D = s.hidden, s.heads, s.kv_heads, s.head_dim

    def mat(o, i):
        return rng.standard_normal((o, i)).astype(np.float32) / np.sqrt(i)

    def gain(n):
        return rng.uniform(-0.5, 0.5, n).astype(np.float32)

    L = "mtp.layers.0."
    t = {
        "mtp.fc.weight": mat(H, 2 * H), "mtp.pre_fc_norm_embedding.weight": gain(H),
        "mtp.pre_fc_norm_hidden.weight": gain(H), "mtp.norm.weight": gain(H),
        L + "input_layernorm.weight": gain(H), L + "post_attention_layernorm.weight": gain(H),
        L + "self_attn.q_proj.weight": mat(2 * nH * D, H), L + "self_attn.k_proj.weight": mat(nKV * D, H),
        L + "self_attn.v_proj.weight": mat(nKV * D, H), L + "self_attn.o_proj.weight": mat(H, nH * D),
        L + "self_attn.q_norm.weight": gain(D), L + "self_attn.k_norm.weight": gain(D),
    }
    if s.num_experts:
        E, I, SI = s.num_experts, s.expert_size, s.shared_expert_size
        t.update({
            L + "mlp.gate.weight": mat(E, H),
            L + "mlp.experts.gate_up_proj": np.stack([mat(2 * I, H) for _ in range(E)]),
            L + "mlp.experts.down_proj": np.stack([mat(H, I) for _ in range(E)]),
            L + "mlp.shared_expert.gate_proj.weight": mat(SI, H), L + "mlp.shared_expert.up_proj.weight": mat(SI, H),
            L + "mlp.shared_expert.down_proj.weight": mat(H, SI), L + "mlp.shared_expert_gate.weight": mat(1, H),
        })
    else:
        I = s.intermediate
        t.update({L + "mlp.gate_proj.weight": mat(I, H), L + "mlp.up_proj.weight": mat(I, H),
                  L + "mlp.down_proj.weight": mat(H, I)})
    return t


def write_checkpoint(out_dir: str | Path, spec: SynthSpec = SynthSpec(), seed: int = 0, dtype: str = "bf16",
                     extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Write config.json + model.safetensors; returns the tensors exactly as stored (decoded to float32)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {**mtp_tensors(spec, np.random.default_rng(seed)), **(extra or {})}
    (out / "config.json").write_text(json.dumps(config_json(spec), indent=1))
    if dtype == "bf16":
        bits = {k: f32_to_bf16(v) for k, v in tensors.items()}
        write_safetensors(out / "model.safetensors", bits, {k: "BF16" for k in bits})
        return {k: (b.astype(np.uint32) << 16).view(np.float32) for k, b in bits.items()}
    arrays = {k: v.astype(np.dtype(dtype)) for k, v in tensors.items()}
    write_safetensors(out / "model.safetensors", arrays)
    return {k: v.astype(np.float32) for k, v in arrays.items()}


def spec_dict(s: SynthSpec) -> dict:
    return asdict(s)
