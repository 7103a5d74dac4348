"""Seeded full Qwen3.5 checkpoint (dense or MoE) made with transformers, plus its `mtp.*` head; bench-only.

    <bench venv>/bin/python scripts/make_hf_checkpoint.py TEMPLATE OUT --hidden 2048 --heads 16 --kv-heads 2 \
        --head-dim 256 --intermediate 6144 [--experts 64 --top-k 8 --expert-size 512] [--layers 2] [--seed 1234]

Runs inside the reference exporter's environment (torch + transformers), never the project's. TEMPLATE is a
reference checkpoint directory (config.json and the 1024-token byte-level tokenizer files are taken from it).
The non-MTP part is kept as small as the exporter accepts: `--layers` decoder layers alternating linear/full
attention, the template's tiny linear-attention heads, vocab and vision tower; only the text sizes the head shares
with the main model (hidden, heads, head_dim, MLP or experts) grow. transformers neither creates nor saves `mtp.*`
(Qwen3.5 lists them as unexpected keys), so the head's tensors are drawn here and appended to model.safetensors:
matrices ~ N(0, 1/fan_in), zero-centred norm gains ~ U(-0.5, 0.5), bf16, with the checkpoint's names and shapes.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

COPIED = ("chat_template.jinja", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
          "tokenizer_config.json", "video_preprocessor_config.json")


def text_sizes(a: argparse.Namespace, template: dict) -> dict:
    """The template's text_config with the benchmark's sizes; MoE fields only when the template is MoE."""
    tc = dict(template["text_config"])
    tc.update(hidden_size=a.hidden, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=a.head_dim,
              num_hidden_layers=a.layers,
              layer_types=[("full_attention" if i % 2 else "linear_attention") for i in range(a.layers)])
    if "num_experts" in tc:
        tc.update(num_experts=a.experts, num_experts_per_tok=a.top_k, moe_intermediate_size=a.expert_size,
                  shared_expert_intermediate_size=a.expert_size)
    else:
        tc["intermediate_size"] = a.intermediate
    half = int(a.head_dim * tc["partial_rotary_factor"]) // 2
    tc["rope_parameters"] = {**tc["rope_parameters"], "mrope_section": [half - 2 * (half // 3), half // 3, half // 3]}
    return tc


def mtp_tensors(tc: dict, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """The head's 15 (dense) or 19 (MoE, fused experts) tensors, bf16."""
    H, nH, nKV, D = tc["hidden_size"], tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]

    def mat(*shape):
        return (torch.randn(*shape, generator=gen) / shape[-1] ** 0.5).to(torch.bfloat16)

    def gain(n):
        return (torch.rand(n, generator=gen) - 0.5).to(torch.bfloat16)

    p = "mtp.layers.0."
    t = {"mtp.fc.weight": mat(H, 2 * H), "mtp.pre_fc_norm_embedding.weight": gain(H),
         "mtp.pre_fc_norm_hidden.weight": gain(H), "mtp.norm.weight": gain(H),
         p + "input_layernorm.weight": gain(H), p + "post_attention_layernorm.weight": gain(H),
         p + "self_attn.q_proj.weight": mat(2 * nH * D, H), p + "self_attn.k_proj.weight": mat(nKV * D, H),
         p + "self_attn.v_proj.weight": mat(nKV * D, H), p + "self_attn.o_proj.weight": mat(H, nH * D),
         p + "self_attn.q_norm.weight": gain(D), p + "self_attn.k_norm.weight": gain(D)}
    if "num_experts" not in tc:
        I = tc["intermediate_size"]
        t.update({p + "mlp.gate_proj.weight": mat(I, H), p + "mlp.up_proj.weight": mat(I, H),
                  p + "mlp.down_proj.weight": mat(H, I)})
        return t
    E, I, SI = tc["num_experts"], tc["moe_intermediate_size"], tc["shared_expert_intermediate_size"]
    t.update({p + "mlp.gate.weight": mat(E, H), p + "mlp.experts.gate_up_proj": mat(E, 2 * I, H),
              p + "mlp.experts.down_proj": mat(E, H, I), p + "mlp.shared_expert.gate_proj.weight": mat(SI, H),
              p + "mlp.shared_expert.up_proj.weight": mat(SI, H), p + "mlp.shared_expert.down_proj.weight": mat(H, SI),
              p + "mlp.shared_expert_gate.weight": mat(1, H)})
    return t


def make(a: argparse.Namespace) -> None:
    import transformers

    template = json.loads((a.template / "config.json").read_text())
    cfg = {**template, "text_config": text_sizes(a, template)}
    cfg["vision_config"] = {**cfg["vision_config"], "out_hidden_size": a.hidden}
    arch = cfg["architectures"][0]
    config_cls = getattr(transformers, arch.replace("ForConditionalGeneration", "Config"))
    config = config_cls(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")})
    torch.manual_seed(a.seed)
    torch.set_default_dtype(torch.bfloat16)
    model = getattr(transformers, arch)._from_config(config, dtype=torch.bfloat16)
    a.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(a.out)
    del model
    files = sorted(a.out.glob("model*.safetensors"))
    if len(files) != 1:
        raise SystemExit(f"{a.out}: expected one model.safetensors, found {[f.name for f in files]}")
    tensors = load_file(files[0])
    tensors.update(mtp_tensors(cfg["text_config"], torch.Generator().manual_seed(a.seed + 1)))
    save_file(tensors, files[0], metadata={"format": "pt"})
    for name in COPIED:
        if (a.template / name).is_file():
            shutil.copyfile(a.template / name, a.out / name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("template", type=Path)
    ap.add_argument("out", type=Path)
    for name, default in (("hidden", 64), ("heads", 4), ("kv-heads", 2), ("head-dim", 64), ("intermediate", 128),
                          ("experts", 4), ("top-k", 2), ("expert-size", 32), ("layers", 2), ("seed", 1234)):
        ap.add_argument(f"--{name}", type=int, default=default)
    make(ap.parse_args())


if __name__ == "__main__":
    main()
