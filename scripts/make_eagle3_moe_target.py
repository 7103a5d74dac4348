"""tests/data/eagle3_moe/target/: a tiny seeded Qwen3-MoE text target as optimum-intel 2.2.0 exports it, for the
EAGLE-3 family's MoE tap edit (irsurgeon/families/eagle3/moe_taps.py).

Run in the reference venv of scripts/make_eagle3_reference.py (its docstring has the install), never the product's:

    /tmp/eagle3-ref/bin/python scripts/make_eagle3_moe_target.py [OUT_DIR]     (default: tests/data/eagle3_moe/target)

What it does, offline:
  1. a Qwen3MoeForCausalLM made from a config (no hub download) with the geometry of fixtures/eagle3/target (hidden
     64, vocabulary 256, 4 layers, 4 heads / 2 KV heads of 64 / 16 wide) and 4 experts of width 32, 2 per token,
     every layer sparse (decoder_sparse_step 1, mlp_only_layers []), torch.manual_seed(SEED), float32
  2. `optimum-cli export openvino --model HF --task text-generation-with-past --weight-format fp32 OUT`
  3. keeps openvino_model.xml/.bin and config.json; the tokenizer, detokenizer and generation_config.json are
     fixtures/eagle3/target's (the same 256-token vocabulary), so fixtures/eagle3/ckpt is an EAGLE-3 draft of this
     target's geometry (hidden 64, vocabulary 256, taps [0, 1, 2])

What it shows (measured 2026-12-05 with torch 2.13.0+cpu, transformers 5.2.0, optimum 2.3.0, optimum-intel 2.2.0,
openvino 2026.4.1): each decoder layer's MoE block is exported in the dense batched form (Tile of the tokens to every
expert, bmm gate/up/down, routing weights scattered into [T, E], Multiply, ReduceSum over the experts, Reshape); the
layer's output `__module.model.layers.{i}/aten::add/Add_1` reads Add(attention residual, Reshape(...)), so genai
2026.4.1's tap rule (an Add fed by MatMul(Multiply)) finds no layer of it; the CPU plugin fuses the block into
GatherMatmul nodes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = 20261205
KEPT = ("openvino_model.xml", "openvino_model.bin", "config.json")
FROM_DENSE = ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml",
              "openvino_detokenizer.bin", "generation_config.json")
DENSE = ROOT / "fixtures" / "eagle3" / "target"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
GEOMETRY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
                max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                bos_token_id=None, eos_token_id=2, pad_token_id=0)


def hf_model(out: Path) -> None:
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(SEED)
    Qwen3MoeForCausalLM(Qwen3MoeConfig(**GEOMETRY)).float().eval().save_pretrained(out)


def export(hf: Path, out: Path) -> None:
    cli = Path(sys.executable).with_name("optimum-cli")
    cmd = [str(cli), "export", "openvino", "--model", str(hf), "--task", "text-generation-with-past",
           "--weight-format", "fp32", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **OFFLINE})
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hf_model(Path(tmp) / "hf")
        export(Path(tmp) / "hf", Path(tmp) / "ov")
        out.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            shutil.copyfile(Path(tmp) / "ov" / name, out / name)
    for name in FROM_DENSE:
        shutil.copyfile(DENSE / name, out / name)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "eagle3_moe" / "target")
