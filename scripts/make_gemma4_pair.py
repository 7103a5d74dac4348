"""A tiny Gemma 4 target (optimum-intel 2.2.0's export) and an assistant checkpoint made for it, for genai tests.

Run in a separate venv (never the product's): optimum-intel 2.2.0 needs transformers < 5.6 and gemma4 needs 5.5+:

    python3 -m venv /tmp/gemma-opt
    /tmp/gemma-opt/bin/pip install torch==2.13.0+cpu transformers==5.5.4 optimum-intel==2.2.0 \
        openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 safetensors numpy
    PYTHONPATH=. /tmp/gemma-opt/bin/python scripts/make_gemma4_pair.py fixtures/gemma4

The pair predicts: the target is a bigram model, next = P(token) for a seeded permutation P (decoder layers' output
gains are 0.01, so the final hidden state is essentially the token's embedding, and the untied lm_head row j is the
embedding of P^-1(j)); the assistant reads the embedding half of its input (pre_projection = [I | 0]) and its tied
table row j is the same embedding, so it drafts P(token) too, and every draft can be accepted. P fixes the special
ids so a text prompt never reaches EOS. Writes OUT/target (export + config + synthetic byte tokenizer IRs) and
OUT/assistant (model.safetensors + config.json as transformers 5.24.0 saves a gemma4_assistant).
Two workarounds for optimum-intel 2.2.0: Gemma4TextOpenVINOConfig.MAX_TRANSFORMERS_VERSION is raised (it inherits
"5.0"), and sliding_window is 16 (its dummy past for sliding layers is window-long, and tracing fails below 16).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np

V, H, SEED, WINDOW = 256, 64, 11, 16
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
SPECIAL = 8  # irsurgeon.synth.tokenizer: ids below are special (0 pad, 1 bos, 2 eos)


def permutation(rng) -> np.ndarray:
    p = np.arange(V)
    p[SPECIAL:] = SPECIAL + rng.permutation(V - SPECIAL)
    return p


def target_config() -> dict:
    return dict(vocab_size=V, hidden_size=H, intermediate_size=96, num_hidden_layers=4, layer_types=LAYER_TYPES,
                num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
                num_kv_shared_layers=2, sliding_window=WINDOW, hidden_size_per_layer_input=0,
                vocab_size_per_layer_input=0, tie_word_embeddings=False, final_logit_softcapping=None,
                max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def make_target(out: Path, emb: np.ndarray, perm: np.ndarray, rng) -> None:
    import torch
    from optimum.exporters.openvino import main_export
    from optimum.exporters.openvino.model_configs import Gemma4TextOpenVINOConfig
    from optimum.intel import OVConfig
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    Gemma4TextOpenVINOConfig.MAX_TRANSFORMERS_VERSION = "5.6"
    model = Gemma4ForCausalLM(Gemma4TextConfig(**target_config())).eval()
    inverse = np.argsort(perm)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32) / p.shape[1] ** 0.5))
            elif "post_attention_layernorm" in name or "post_feedforward_layernorm" in name:
                p.fill_(0.01)
            else:
                p.fill_(1.0)
        model.model.embed_tokens.weight.copy_(torch.from_numpy(emb))
        model.lm_head.weight.copy_(torch.from_numpy(4.0 * emb[inverse]))
    out.mkdir(parents=True, exist_ok=True)
    reference_outputs(model, out / "target_golden.npz")
    hf = out / "hf"
    model.save_pretrained(hf)
    main_export(str(hf), output=str(out / "target"), task="text-generation-with-past",
                ov_config=OVConfig(dtype="fp32"), convert_tokenizer=False)
    shutil.rmtree(hf)


def reference_outputs(model, path: Path) -> None:
    """transformers' eager f32 final-norm output and store-layer K/V (layer 0 sliding, 1 full) for two prompts, one
    shorter than the window (the sliding cache then holds every position) and one longer (hidden and full K/V)."""
    import torch

    rng, arrays = np.random.default_rng(SEED + 1), {}
    for name, length in (("short", WINDOW - 4), ("long", 2 * WINDOW + 3)):
        ids = torch.from_numpy(rng.integers(SPECIAL, V, (1, length)))
        with torch.no_grad():
            out = model.model(input_ids=ids, use_cache=True)
        arrays[f"{name}_input_ids"] = ids.numpy()
        arrays[f"{name}_mtp_last_hidden_state"] = out.last_hidden_state.numpy()
        for layer, kind in ((1, "full"), (0, "sliding")):
            if kind == "sliding" and name == "long":
                continue
            cache = out.past_key_values.layers[layer]
            arrays[f"{name}_mtp_{kind}_attention_key"] = cache.keys.numpy()
            arrays[f"{name}_mtp_{kind}_attention_value"] = cache.values.numpy()
    np.savez_compressed(path, **arrays)


def assistant_config(target_cfg: dict) -> dict:
    text = dict(vocab_size=V, hidden_size=H, intermediate_size=48, num_hidden_layers=2,
                layer_types=["sliding_attention", "full_attention"], num_attention_heads=2, num_key_value_heads=1,
                head_dim=16, per_layer_config={"1": {"head_dim": 32}}, num_kv_shared_layers=2,
                sliding_window=WINDOW, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=False,
                use_double_wide_mlp=False, attention_k_eq_v=False, model_type="gemma4_text",
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                    "rope_theta": 1_000_000.0}})
    return dict(architectures=["Gemma4AssistantForCausalLM"], model_type="gemma4_assistant", text_config=text,
                backbone_hidden_size=target_cfg["hidden_size"], use_ordered_embeddings=True, num_centroids=4,
                centroid_intermediate_top_k=4, tie_word_embeddings=True, dtype="float32")


def assistant_tensors(cfg: dict, emb: np.ndarray, perm: np.ndarray, rng) -> dict[str, np.ndarray]:
    """Weights of an assistant that drafts P(token) from the embedding half of its input."""
    from irsurgeon.families.gemma4_mtp.model import parse_assistant_config, tensor_table

    table = tensor_table(parse_assistant_config(cfg, "assistant"))
    t = {}
    for name, shape in table.items():
        if len(shape) == 2:
            t[name] = (rng.standard_normal(shape) / shape[1] ** 0.5).astype(np.float32)
        elif "post_attention_layernorm" in name or "post_feedforward_layernorm" in name:
            t[name] = np.full(shape, 0.01, np.float32)
        else:
            t[name] = np.ones(shape, np.float32)
    t["pre_projection.weight"] = np.concatenate([np.eye(H), np.zeros((H, H))], axis=1).astype(np.float32)
    t["model.embed_tokens.weight"] = emb[np.argsort(perm)].astype(np.float32)
    t["masked_embedding.token_ordering"] = rng.permutation(V).astype(np.int64)
    return t


def write_tokenizer(target: Path) -> None:
    import openvino as ov

    from irsurgeon.synth.tokenizer import detokenizer_model, tokenizer_model

    ov.save_model(tokenizer_model(V), target / "openvino_tokenizer.xml", compress_to_fp16=False)
    ov.save_model(detokenizer_model(V), target / "openvino_detokenizer.xml", compress_to_fp16=False)


def main(out: Path) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(SEED)
    emb = rng.standard_normal((V, H)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    perm = permutation(rng)
    make_target(out, emb, perm, rng)
    write_tokenizer(out / "target")
    cfg = assistant_config(target_config())
    (out / "ckpt").mkdir(parents=True, exist_ok=True)
    (out / "ckpt" / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(assistant_tensors(cfg, emb, perm, rng), str(out / "ckpt" / "model.safetensors"))
    np.save(out / "permutation.npy", perm)
    print(f"{out}: target and assistant written")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/gemma4"))
