"""`irsurgeon synth --kind dflash | dflash-cycle | dflash-qwen35 | dflash-llama`: a DFlash target and a draft checkpoint
made for it.

    out/target/   the target export; out/ckpt/ config.json (DFlashDraftModel, z-lab's form) + model.safetensors
                  (z-lab's tensor names, f32)

    dflash         a tiny Qwen3 text export (openvino_model.xml/.bin, stateful, optimum-intel's names, config.json
                   qwen3, generation_config.json, irsurgeon.synth.tokenizer's tokenizer/detokenizer) and a seeded
                   random draft
    dflash-cycle   a hand-set Qwen3 pair whose drafts are accepted (synth_cycle)
    dflash-qwen35  the qwen35 kind's decomposed VLM target, hybrid (Gated DeltaNet linear-attention layers and a
                   full-attention one; synth.registry), and a seeded random draft of its geometry
    dflash-llama   the llama kind's text export (synth.registry: model_type llama, no q/k norms, optimum's names) and
                   a seeded random draft of its geometry, taps [0, 1] of its 2 layers (z-lab publishes a draft for
                   LLaMA-3.1-8B-Instruct; layout.TARGET_TYPES)

The Qwen3 target follows transformers' Qwen3 (plain attention with per-head q/k RMSNorm, gains `w`, untied lm_head),
built from irsurgeon.synth.target's pieces; layer i's output is `__module.model.layers.<i>/aten::add/Add_1` as in
optimum's exports. Random drafts' proposals are accepted about never, so such a pair proves the plumbing
(token-identical output), not a speed-up. Two seeds give two models of one geometry.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ir import export as ex
from irsurgeon.ops import apply_rope, attention_mask_bias, expand_kv, kv_cache, linear, rms_norm, rope_cos_sin, sdpa
from irsurgeon.ops.attention import heads, to_bnsd
from irsurgeon.ops.core import WeightFormat, const, named
from irsurgeon.synth import target as tg
from irsurgeon.synth.checkpoint import SynthSpec
from irsurgeon.synth.configs import generation_config
from irsurgeon.synth.output import OWN, output_pair
from irsurgeon.synth.registry import checkpoint_tensors, default_spec, save, write_json, write_target
from irsurgeon.synth.tokenizer import EOS_ID, PAD_ID, detokenizer_model, tokenizer_model, tokenizer_rt_info
from irsurgeon.weights.safetensors_io import write_safetensors

I64 = np.int64
SPEC = SynthSpec(hidden=32, heads=2, kv_heads=1, head_dim=8, intermediate=16, vocab=64, layers=4,
                 partial_rotary_factor=1.0, rope_theta=10000.0, rms_norm_eps=1e-6, vlm=False)
BLOCK_SIZE = 4


@dataclass(frozen=True)
class Draft:
    """The geometry of a draft checkpoint (its hidden size, vocabulary and target layers come from the target)."""
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    rope_theta: float = 10000.0


RANDOM = Draft(layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=64, target_layer_ids=(1, 3),
               mask_token_id=SPEC.vocab - 1)


def target_config(s: SynthSpec = SPEC) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": s.hidden,
            "intermediate_size": s.intermediate, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim, "num_hidden_layers": s.layers, "vocab_size": s.vocab,
            "rms_norm_eps": s.rms_norm_eps, "rope_theta": s.rope_theta, "max_position_embeddings": 4096,
            "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": None,
            "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, "dtype": "float32"}


def draft_config(s: SynthSpec = SPEC, d: Draft = RANDOM) -> dict:
    return {"architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
            "model_type": "qwen3", "hidden_size": s.hidden, "vocab_size": s.vocab, "hidden_act": "silu",
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "float32",
            "block_size": BLOCK_SIZE, "num_target_layers": s.layers,
            "dflash_config": {"mask_token_id": d.mask_token_id, "target_layer_ids": list(d.target_layer_ids)},
            "num_hidden_layers": d.layers, "num_attention_heads": d.heads, "num_key_value_heads": d.kv_heads,
            "head_dim": d.head_dim, "intermediate_size": d.intermediate, "rms_norm_eps": s.rms_norm_eps,
            "rope_theta": d.rope_theta, "attention_bias": False}


def _mat(rng, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)


def _gain(rng, n: int) -> np.ndarray:
    return (1.0 + rng.uniform(-0.2, 0.2, n)).astype(np.float32)


def layer_tensors(rng, p: str, H: int, nH: int, nKV: int, D: int, inner: int) -> dict[str, np.ndarray]:
    a = p + "self_attn."
    return {p + "input_layernorm.weight": _gain(rng, H), p + "post_attention_layernorm.weight": _gain(rng, H),
            a + "q_proj.weight": _mat(rng, nH * D, H), a + "k_proj.weight": _mat(rng, nKV * D, H),
            a + "v_proj.weight": _mat(rng, nKV * D, H), a + "o_proj.weight": _mat(rng, H, nH * D),
            a + "q_norm.weight": _gain(rng, D), a + "k_norm.weight": _gain(rng, D),
            p + "mlp.gate_proj.weight": _mat(rng, inner, H), p + "mlp.up_proj.weight": _mat(rng, inner, H),
            p + "mlp.down_proj.weight": _mat(rng, H, inner)}


def target_tensors(seed: int, s: SynthSpec = SPEC) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 10])
    t = {"model.embed_tokens.weight": _mat(rng, s.vocab, s.hidden, np.sqrt(s.hidden))}
    for i in range(s.layers):
        t.update(layer_tensors(rng, f"model.layers.{i}.", s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate))
    t["model.norm.weight"] = _gain(rng, s.hidden)
    t["lm_head.weight"] = _mat(rng, s.vocab, s.hidden)
    return t


def draft_tensors(seed: int, s: SynthSpec = SPEC, d: Draft = RANDOM) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 11])
    H = s.hidden
    t = {"fc.weight": _mat(rng, H, len(d.target_layer_ids) * H), "hidden_norm.weight": _gain(rng, H),
         "norm.weight": _gain(rng, H)}
    for i in range(d.layers):
        t.update(layer_tensors(rng, f"layers.{i}.", H, d.heads, d.kv_heads, d.head_dim, d.intermediate))
    return t


def attention(a: ov.Output, i: int, ctx: tg.Context, w: tg.Weights, s: SynthSpec) -> tuple[ov.Output, list[ov.Node]]:
    """Qwen3 self-attention of layer i: q/k RMSNorm per head, full RoPE, GQA over the layer's KV state."""
    m, c = f"__module.model.layers.{i}.self_attn", f"model.layers.{i}.self_attn."
    nH, nKV, D = s.heads, s.kv_heads, s.head_dim

    def proj(x: ov.Output, p: str) -> ov.Output:
        return linear(x, w.mat(f"{c}{p}.weight"), f"{m}.{p}/aten::linear/MatMul")

    q = rms_norm(heads(proj(a, "q_proj"), nH, D, f"{m}/q_heads"), w.gain(f"{c}q_norm.weight"), s.rms_norm_eps,
                 f"{m}.q_norm/aten::mul/Multiply_1")
    k = rms_norm(heads(proj(a, "k_proj"), nKV, D, f"{m}/k_heads"), w.gain(f"{c}k_norm.weight"), s.rms_norm_eps,
                 f"{m}.k_norm/aten::mul/Multiply_1")
    v = heads(proj(a, "v_proj"), nKV, D, f"{m}/v_heads")
    q = apply_rope(to_bnsd(q), ctx.cos, ctx.sin, D, D, f"{m}/q_rope")
    k = apply_rope(to_bnsd(k), ctx.cos, ctx.sin, D, D, f"{m}/k_rope")
    k_all, k_sink = kv_cache(k, ctx.beam_idx, ctx.batch, tg.LLAMA.key_state.format(i=i), nKV, D, f"{m}/key_cache")
    v_all, v_sink = kv_cache(to_bnsd(v), ctx.beam_idx, ctx.batch, tg.LLAMA.value_state.format(i=i), nKV, D,
                             f"{m}/value_cache")
    bias = attention_mask_bias(ctx.attention_mask, q, k_all, f"{m}/attention")
    k_all, v_all = (expand_kv(x, nH // nKV, nH, D, f"{m}/{n}_gqa") for x, n in ((k_all, "key"), (v_all, "value")))
    out = to_bnsd(sdpa(q, k_all, v_all, bias, D, f"{m}/aten::scaled_dot_product_attention/ScaledDotProductAttention"))
    out = named(ops.reshape(out, const([0, 0, nH * D], I64), special_zero=True), f"{m}/merge_heads")
    return proj(out, "o_proj"), [k_sink, v_sink]


def target_model(s: SynthSpec, w: tg.Weights) -> ov.Model:
    """openvino_model.xml: (input_ids, attention_mask, position_ids, beam_idx) -> logits, optimum's names."""
    params = [tg.parameter("input_ids", ov.Type.i64, [-1, -1]), tg.parameter("attention_mask", ov.Type.i64, [-1, -1]),
              tg.parameter("position_ids", ov.Type.i64, [-1, -1]), tg.parameter("beam_idx", ov.Type.i32, [-1])]
    ids, mask, positions, beam_idx = (p.output(0) for p in params)
    x = named(ops.gather(w.mat("model.embed_tokens.weight"), ids, const(0, I64)),
              "__module.model.embed_tokens/aten::embedding/Gather")
    cos, sin = rope_cos_sin(positions, s.head_dim, s.rope_theta, "__module.model.rotary_emb")
    batch = ops.gather(ops.shape_of(ids, ov.Type.i64), const([0], I64), const(0, I64)).output(0)
    ctx, sinks, eps = tg.Context(cos, sin, mask, beam_idx, batch), [], s.rms_norm_eps
    for i in range(s.layers):
        m, c = f"__module.model.layers.{i}", f"model.layers.{i}."
        a = rms_norm(x, w.gain(c + "input_layernorm.weight"), eps, f"{m}.input_layernorm/aten::mul/Multiply_1")
        attn, layer_sinks = attention(a, i, ctx, w, s)
        x = named(ops.add(x, attn), f"{m}/aten::add/Add")
        post = rms_norm(x, w.gain(c + "post_attention_layernorm.weight"), eps,
                        f"{m}.post_attention_layernorm/aten::mul/Multiply_1")
        x = named(ops.add(x, tg.mlp(post, i, w, s, tg.LLAMA)), f"{m}/aten::add/Add_1")
        sinks += layer_sinks
    x = rms_norm(x, w.gain("model.norm.weight"), eps, "__module.model.norm/aten::mul/Multiply_1")
    return tg.logits_model(linear(x, w.mat("lm_head.weight"), tg.LLAMA.lm_head), sinks, params, "qwen3")


def write_qwen3_target(target: Path, s: SynthSpec, tensors: dict[str, np.ndarray]) -> None:
    """out/target of a Qwen3 text export: the IR (f32 weights, optimum's runtime options), tokenizer, configs."""
    lm = target_model(s, tg.Weights(tensors, WeightFormat.F32, zero_centred=False))
    lm.set_rt_info("8.0", ["runtime_options", "ACTIVATIONS_SCALE_FACTOR"])
    lm.set_rt_info("f16", ["runtime_options", "KV_CACHE_PRECISION"])
    save(lm, target / ex.TEXT_ONLY_MODEL)
    tok, detok = tokenizer_model(s.vocab), detokenizer_model(s.vocab)
    tokenizer_rt_info(tok, detokenizer=False)
    tokenizer_rt_info(detok, detokenizer=True)
    save(tok, target / ex.TOKENIZER)
    save(detok, target / ex.DETOKENIZER)
    write_json(target / ex.CONFIG, target_config(s))
    write_json(target / ex.GENERATION_CONFIG, generation_config())


def write_checkpoint(ckpt: Path, config: dict, tensors: dict[str, np.ndarray]) -> None:
    write_safetensors(ckpt / "model.safetensors", tensors)
    write_json(ckpt / ex.CONFIG, config)


def synthesize_dflash(out_dir: Path, seed: int, wait: bool, force: bool = False) -> tuple[Path, Path]:
    """Write out_dir/target and out_dir/ckpt as every kind does (synth.output). Returns both paths."""
    with output_pair(out_dir, wait, force) as (target, ckpt):
        write_checkpoint(ckpt, draft_config(), draft_tensors(seed))
        write_qwen3_target(target, SPEC, target_tensors(seed))
    return final(out_dir)


def final(out_dir: Path) -> tuple[Path, Path]:
    """Where output_pair moved the pair once written."""
    return Path(out_dir) / OWN[0], Path(out_dir) / OWN[1]


def synthesize_llama(out_dir: Path, seed: int, wait: bool, force: bool = False) -> tuple[Path, Path]:
    """The llama kind's default target (synth.registry) and a random draft of its hidden size, layers and vocabulary."""
    s = default_spec("llama")
    draft = replace(RANDOM, target_layer_ids=tuple(range(s.layers)), mask_token_id=s.vocab - 1)
    with output_pair(out_dir, wait, force) as (target, ckpt):
        write_target("llama", s, checkpoint_tensors("llama", s, seed, False), False, "f32", target)
        write_checkpoint(ckpt, draft_config(s, draft), draft_tensors(seed, s, draft))
    return final(out_dir)


def synthesize_hybrid(out_dir: Path, seed: int, wait: bool, force: bool = False) -> tuple[Path, Path]:
    """The qwen35 kind's default target (no MTP head) and a random draft of its hidden size, layers and vocabulary."""
    s = default_spec("qwen35")
    draft = replace(RANDOM, mask_token_id=s.vocab - 1)
    with output_pair(out_dir, wait, force) as (target, ckpt):
        write_target("qwen35", s, checkpoint_tensors("qwen35", s, seed, False), False, "f32", target)
        write_checkpoint(ckpt, draft_config(s, draft), draft_tensors(seed, s, draft))
    return final(out_dir)
