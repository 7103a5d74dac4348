"""The JSON files of a synthetic model: Hugging Face config.json, generation_config.json, preprocessor_config.json.

The same config.json goes into the checkpoint and the target directory, as optimum-intel copies it.
"""
from __future__ import annotations

from irsurgeon.synth.checkpoint import SynthSpec, text_config
from irsurgeon.synth.tokenizer import EOS_ID, PAD_ID
from irsurgeon.synth.vision import VisionSpec

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 3, 4, 5, 6


def config_json(kind: str, s: SynthSpec, v: VisionSpec, with_mtp: bool) -> dict:
    if kind == "llama":
        return llama_config(s)
    moe = s.num_experts > 0
    tc = text_config(s)
    tc.update(mtp_num_hidden_layers=1 if with_mtp else 0, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
              bos_token_id=None, hidden_act="silu", attn_output_gate=True, max_position_embeddings=4096,
              attention_bias=False, dtype="bfloat16")
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5_moe" if moe else "qwen3_5", "dtype": "bfloat16", "tie_word_embeddings": False,
        "image_token_id": IMAGE_PAD, "video_token_id": VIDEO_PAD,
        "vision_start_token_id": VISION_START, "vision_end_token_id": VISION_END,
        "text_config": tc, "vision_config": vision_config(s, v, moe),
    }


def vision_config(s: SynthSpec, v: VisionSpec, moe: bool) -> dict:
    return {"model_type": "qwen3_5_moe" if moe else "qwen3_5", "depth": 1, "hidden_size": v.width,
            "num_heads": v.heads, "intermediate_size": 2 * v.width, "out_hidden_size": s.hidden,
            "in_channels": v.channels, "patch_size": v.patch, "temporal_patch_size": v.temporal_patch,
            "spatial_merge_size": v.merge, "num_position_embeddings": v.positions, "hidden_act": "gelu_pytorch_tanh"}


def llama_config(s: SynthSpec) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s.hidden,
            "intermediate_size": s.intermediate, "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads,
            "head_dim": s.head_dim, "num_hidden_layers": s.layers, "vocab_size": s.vocab,
            "rms_norm_eps": s.rms_norm_eps, "rope_theta": s.rope_theta, "max_position_embeddings": 4096,
            "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": EOS_ID,
            "pad_token_id": PAD_ID, "dtype": "bfloat16"}


def generation_config() -> dict:
    return {"do_sample": False, "eos_token_id": [EOS_ID, PAD_ID], "pad_token_id": PAD_ID}


def preprocessor_config(v: VisionSpec) -> dict:
    side = v.patch * v.merge
    return {"image_processor_type": "Qwen2VLImageProcessor", "do_convert_rgb": True, "do_normalize": True,
            "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
            "rescale_factor": 1 / 255, "resample": 3, "patch_size": v.patch, "merge_size": v.merge,
            "temporal_patch_size": v.temporal_patch, "min_pixels": 4 * side * side, "max_pixels": 64 * side * side,
            "size": {"shortest_edge": 4 * side * side, "longest_edge": 64 * side * side}}
