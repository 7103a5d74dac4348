"""`irsurgeon synth --kind eagle3`: a Llama text target (irsurgeon.synth's `llama` kind, 4 layers) and a seeded random
EAGLE-3 draft for it in the SafeAILab layout (config.json + model.safetensors, f32). `--kind eagle3-trained`: the
12-layer seed-0 `llama` target and the draft trained on it (trained/, scripts/train_eagle3_tiny.py; its README has
the provenance), a pair whose drafts are accepted.

The draft's geometry follows the target (hidden size, vocabulary; taps named in SpecForge's nested
eagle_config.eagle_aux_hidden_state_layer_ids); its vocabulary is a seeded subset (d2t/t2d). Matrices are normal /
sqrt(fan_in), norm gains 1 + 0.1 normal. Random drafts are accepted about never: such a pair proves the plumbing
(token-identical output), not a speed-up. Two seeds give two drafts of one geometry.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from irsurgeon.core.errors import ConfigError
from irsurgeon.synth.output import OWN, output_pair
from irsurgeon.synth.registry import checkpoint_tensors, default_spec, write_target
from irsurgeon.weights.safetensors_io import write_safetensors

LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER = 4, 2, 1, 16, 64
TAPS = [0, 1, 2]


def draft_config(hidden: int, vocab: int, draft_vocab: int) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "intermediate_size": INTER, "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0, "max_position_embeddings": 256, "vocab_size": vocab,
            "draft_vocab_size": draft_vocab, "tie_word_embeddings": False, "torch_dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": TAPS}}


def draft_tensors(hidden: int, vocab: int, draft_vocab: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 7])
    H, shapes = hidden, {"fc.weight": (hidden, 3 * hidden), "lm_head.weight": (draft_vocab, hidden),
                         "norm.weight": (hidden,)}
    layer = {"self_attn.q_proj.weight": (HEADS * HEAD_DIM, 2 * H), "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H),
             "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H), "self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
             "mlp.gate_proj.weight": (INTER, H), "mlp.up_proj.weight": (INTER, H), "mlp.down_proj.weight": (H, INTER),
             "input_layernorm.weight": (H,), "hidden_norm.weight": (H,), "post_attention_layernorm.weight": (H,)}
    shapes.update({"midlayer." + n: s for n, s in layer.items()})
    out = {}
    for name, shape in shapes.items():
        w = rng.standard_normal(shape) / np.sqrt(shape[1]) if len(shape) == 2 else 1 + 0.1 * rng.standard_normal(shape)
        out[name] = w.astype(np.float32)
    ids = np.sort(rng.choice(vocab, draft_vocab, replace=False))
    out["d2t"] = (ids - np.arange(draft_vocab)).astype(np.int64)
    t2d = np.zeros(vocab, bool)
    t2d[ids] = True
    out["t2d"] = t2d
    return out


# AngelSlim's VLM draft config (compressor/speculative/train/configs/qwen3-vl-2b-eagle3-mrope.json), at this size
VLM_KEYS = {"architectures": ["Eagle3LlamaForCausalLM"], "modal_type": "VLM", "target_model_type": "qwen3_vl",
            "rope_theta": 5000000.0}


def write_vlm_draft(ckpt: Path, hidden: int, vocab: int, mrope_section: list[int], seed: int) -> Path:
    """A seeded random AngelSlim VLM draft (modal_type "VLM", interleaved mrope) of a Qwen3-VL target's geometry."""
    draft_vocab = vocab * 3 // 4
    cfg = {k: v for k, v in draft_config(hidden, vocab, draft_vocab).items() if k != "eagle_config"}
    cfg.update(VLM_KEYS, rope_scaling={"type": "default", "rope_type": "default", "mrope_interleaved": True,
                                       "mrope_section": mrope_section})
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_safetensors(ckpt / "model.safetensors", draft_tensors(hidden, vocab, draft_vocab, seed), {"t2d": "BOOL"})
    return ckpt


def synthesize_eagle3(out_dir: Path, seed: int, wait: bool, force: bool = False) -> tuple[Path, Path]:
    """Write out_dir/target and out_dir/ckpt as every kind does (synth.output). Returns both paths."""
    s = default_spec("llama").with_(layers=LAYERS)
    draft_vocab = s.vocab * 3 // 4
    with output_pair(out_dir, wait, force) as (target, ckpt):
        write_target("llama", s, checkpoint_tensors("llama", s, seed, False), False, "f32", target)
        (ckpt / "config.json").write_text(json.dumps(draft_config(s.hidden, s.vocab, draft_vocab), indent=2) + "\n")
        write_safetensors(ckpt / "model.safetensors", draft_tensors(s.hidden, s.vocab, draft_vocab, seed),
                          {"t2d": "BOOL"})
    return Path(out_dir) / OWN[0], Path(out_dir) / OWN[1]


TRAINED = Path(__file__).resolve().parent / "trained"  # package data (setup.cfg): config.json, model.safetensors
TRAINED_SEED, TRAINED_LAYERS = 0, 12                   # its target: `synth --kind llama --layers 12 --seed 0`


def synthesize_trained(out_dir: Path, seed: int, wait: bool, force: bool = False) -> tuple[Path, Path]:
    """The trained pair: the target its draft was trained on, written again from its seed, and the draft as trained."""
    if seed != TRAINED_SEED:
        raise ConfigError(f"kind eagle3-trained is one fixed pair: its draft was trained on the target of seed "
                          f"{TRAINED_SEED}, not {seed}")
    s = default_spec("llama").with_(layers=TRAINED_LAYERS)
    with output_pair(out_dir, wait, force) as (target, ckpt):
        write_target("llama", s, checkpoint_tensors("llama", s, TRAINED_SEED, False), False, "f32", target)
        for name in ("config.json", "model.safetensors", "README.md"):
            shutil.copyfile(TRAINED / name, ckpt / name)
    return Path(out_dir) / OWN[0], Path(out_dir) / OWN[1]
