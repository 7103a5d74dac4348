"""Tiny seeded Gemma 4 and gpt-oss text targets exported by optimum-intel 2.2.0, with transformers' greedy tokens, for
the DFlash family's tests (tests/data/dflash/{gemma4,gpt_oss}/).

Run in a separate venv, never the product's (torch CPU, transformers 5.5.4, optimum 2.3.0, optimum-intel 2.2.0
--no-deps, openvino 2026.4.1; scripts/make_dflash_reference.py lists the rest):

    /tmp/refenv/bin/python scripts/make_dflash_targets.py tests/data/dflash

gemma4: Gemma4ForCausalLM (gemma4_text) with what z-lab's Gemma 4 DFlash drafts' targets have and a text export
keeps: sliding / full layers (window 16, shorter than the 60-token test sequence), attention_k_eq_v full layers with
one global KV head, a tied lm_head, final_logit_softcapping 30 (the logits are MatMul -> Divide -> Tanh -> Multiply),
no per-layer inputs, no KV sharing. optimum-intel 2.2.0's Gemma4TextOpenVINOConfig inherits MAX_TRANSFORMERS_VERSION
"5.0" and is raised to export with 5.5.4 (GEMMA4_MTP.md). gpt_oss: GptOssForCausalLM with attention sinks, sliding /
full layers (window 8), 4 experts top-2 and yarn RoPE, exported as optimum-intel 2.2.0 registers it
(GptOssOpenVINOConfig, GptOssModelPatcher). Weights: seeded normal / sqrt(fan-in), norms 1 + N(0, 1) (gains near 1
give every layer weight; with 1 + 0.1 N the Gemma 4 target's greedy output is one repeated token).

Each folder: the IR (fp32), config.json, generation_config.json, and greedy.json: transformers' greedy continuation
(40 tokens, eager f32) of the prompt ids 8..27.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

PROMPT = list(range(8, 28))
NEW_TOKENS = 40


def model(kind: str):
    import torch
    if kind == "gemma4":
        from optimum.exporters.openvino.model_configs import Gemma4TextOpenVINOConfig
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig
        Gemma4TextOpenVINOConfig.MAX_TRANSFORMERS_VERSION = "5.6"
        m = Gemma4ForCausalLM(Gemma4TextConfig(
            vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32, num_kv_shared_layers=0,
            attention_k_eq_v=True, num_global_key_value_heads=1, sliding_window=16, hidden_size_per_layer_input=0,
            vocab_size_per_layer_input=0, tie_word_embeddings=True, final_logit_softcapping=30.0,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2))
    else:
        from transformers import GptOssConfig, GptOssForCausalLM
        m = GptOssForCausalLM(GptOssConfig(
            vocab_size=256, hidden_size=64, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
            layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=512, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0}))
    m = m.eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            elif "sinks" in name or "bias" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "norm" in name:
                p.copy_(1.0 + torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if "scalar" in name else 0.0))
    return m


def main(out: Path) -> None:
    import torch
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig
    for kind in ("gemma4", "gpt_oss"):
        m, where = model(kind), out / kind
        hf = out / f"{kind}_hf"
        m.save_pretrained(hf)
        main_export(str(hf), output=str(where), task="text-generation-with-past", ov_config=OVConfig(dtype="fp32"),
                    convert_tokenizer=False)
        shutil.rmtree(hf)
        with torch.no_grad():
            gen = m.generate(torch.tensor([PROMPT]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False)
        (where / "greedy.json").write_text(json.dumps({"prompt": PROMPT, "greedy": gen[0, len(PROMPT):].tolist()}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
