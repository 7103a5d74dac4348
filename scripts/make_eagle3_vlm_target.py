"""tests/data/eagle3_vlm/{target,ckpt}/: a tiny seeded Qwen3-VL target as optimum-intel 2.2.0 exports it
(image-text-to-text), and a seeded random AngelSlim VLM EAGLE-3 draft of its geometry (`modal_type: "VLM"`,
`target_model_type: "qwen3_vl"`, interleaved mrope; irsurgeon.families.eagle3.synth.write_vlm_draft), for the
EAGLE-3 family's VLM path.

optimum-intel 2.2.0 refuses to export qwen3_vl under transformers > 5.0 (Qwen2VLOpenVINOConfig.MAX_TRANSFORMERS_VERSION),
so this runs in a venv with transformers 4.57.6 in front of the reference venv of scripts/make_eagle3_reference.py:

    python3 -m venv /tmp/vlm-ref && /tmp/vlm-ref/bin/pip install "transformers==4.57.6" "huggingface_hub<1.0"
    echo /tmp/eagle3-ref/lib/python3.11/site-packages > /tmp/vlm-ref/lib/python3.11/site-packages/zz_ref.pth
    /tmp/vlm-ref/bin/python scripts/make_eagle3_vlm_target.py [OUT_DIR]   (default: tests/data/eagle3_vlm/target)

What it does, offline (no hub download):
  1. a Qwen3VLForConditionalGeneration made from a config: text hidden 64, 4 layers, 4 heads / 2 KV heads of 16,
     MLP 128, vocabulary 1024, interleaved mrope with mrope_section [4, 2, 2]; a one-block vision tower of width 32;
     torch.manual_seed(SEED), float32
  2. its processor from local parts: fixtures/qwen3_5/target's 1024-token byte-level tokenizer (tokenizer.json,
     tokenizer_config.json, chat_template.jinja) and a Qwen2VLImageProcessor of patch 16
  3. `optimum-cli export openvino --model HF --task image-text-to-text --weight-format fp32 OUT`
  4. keeps the files genai's VLMPipeline reads (KEPT)
  5. the draft: write_vlm_draft(hidden 64, vocabulary 1024, mrope_section [4, 2, 2], seed 1); it names no taps
     (AngelSlim's default for 4 layers repeats layer 1), so the tests patch with --hidden-layers 0,1,2

Measured 2026-12-05 (torch 2.13.0+cpu, transformers 4.57.6, optimum 2.3.0, optimum-intel 2.2.0, openvino 2026.4.1):
openvino_language_model.xml takes inputs_embeds [?, ?, 64], position_ids [3, ?, ?] (mrope rows T/H/W) and
visual_pos_masks / deepstack_visual_embeds; each layer's MLP residual is `__module.model.language_model.layers.{i}/
aten::add/Add_1`, an Add fed by MatMul(Multiply): genai 2026.4.1's EAGLE-3 tap rule finds every layer.
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
TOKENIZER = ROOT / "fixtures" / "qwen3_5" / "target"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
TEXT = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=5000000.0,
            rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
            tie_word_embeddings=False, bos_token_id=None, eos_token_id=2, pad_token_id=0)
VISION = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
              temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=64, deepstack_visual_indexes=[0])
SPECIAL = dict(image_token_id=5, video_token_id=6, vision_start_token_id=3, vision_end_token_id=4)
KEPT = ("config.json", "generation_config.json", "preprocessor_config.json", "video_preprocessor_config.json",
        "chat_template.jinja", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
        "openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml", "openvino_detokenizer.bin",
        "openvino_language_model.xml", "openvino_language_model.bin", "openvino_text_embeddings_model.xml",
        "openvino_text_embeddings_model.bin", "openvino_vision_embeddings_model.xml",
        "openvino_vision_embeddings_model.bin", "openvino_vision_embeddings_merger_model.xml",
        "openvino_vision_embeddings_merger_model.bin", "openvino_vision_embeddings_pos_model.xml",
        "openvino_vision_embeddings_pos_model.bin")


def hf_model(out: Path) -> None:
    import torch
    from transformers import Qwen2TokenizerFast, Qwen2VLImageProcessor, Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(SEED)
    config = Qwen3VLConfig(text_config=TEXT, vision_config=VISION, tie_word_embeddings=False, **SPECIAL)
    Qwen3VLForConditionalGeneration(config).float().eval().save_pretrained(out)
    tokenizer = Qwen2TokenizerFast(tokenizer_file=str(TOKENIZER / "tokenizer.json"), eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>")
    tokenizer.chat_template = (TOKENIZER / "chat_template.jinja").read_text()
    image = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, image_mean=[0.5] * 3,
                                  image_std=[0.5] * 3, min_pixels=65536, max_pixels=262144)
    image.save_pretrained(out)  # no Qwen3VLProcessor: its video processor needs torchvision, absent here
    tokenizer.save_pretrained(out)


def export(hf: Path, out: Path) -> None:
    cli = Path(sys.prefix).parent / "eagle3-ref" / "bin" / "optimum-cli"
    cli = cli if cli.exists() else Path(sys.executable).with_name("optimum-cli")
    cmd = [sys.executable, str(cli), "export", "openvino", "--model", str(hf), "--task", "image-text-to-text",
           "--weight-format", "fp32", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **OFFLINE})
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")


def main(out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from irsurgeon.families.eagle3.synth import write_vlm_draft

    write_vlm_draft(out.parent / "ckpt", TEXT["hidden_size"], TEXT["vocab_size"],
                    TEXT["rope_scaling"]["mrope_section"], seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        hf_model(Path(tmp) / "hf")
        export(Path(tmp) / "hf", Path(tmp) / "ov")
        out.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            if (Path(tmp) / "ov" / name).exists():
                shutil.copyfile(Path(tmp) / "ov" / name, out / name)
    print(f"wrote {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "eagle3_vlm" / "target")
