"""A DFlash pair at z-lab's Qwen3.5-27B-DFlash draft size: the draft's real bytes, a target of only its geometry.

    python scripts/make_dflash_real_size.py OUT_DIR [--seed 0]

OUT_DIR/ckpt: config.json as z-lab's releases spell it (CONFIG below) and model.safetensors with every draft tensor
at its real shape, random bf16 (matrices ~ N(0, 0.02^2), norm gains ~ U(-0.5, 0.5); make_real_size.write_head):
1.73 G parameters, 3.46 GB. Random, not a file hole: openvino's serializer writes identical constants once, so zero
weights would make both exporters' .bin (and the draft step's weight reads) unrealistically small.
OUT_DIR/target: a Qwen3 text export (irsurgeon.families.dflash.synth.target_model) with what the pair check and the
annotation read at real values (hidden 5120, 64 decoder layers, vocabulary 248320: the mask token 248070 must be
one of its rows) and tiny attention/MLP widths; zero f16 weights, its .bin made sparse (`fallocate --dig-holes`).
The draft uses the target's embedding and lm_head only inside genai, so the target's layers do not change the build.
Prints the apparent and the on-disk size of both directories.

Where the numbers come from (z-lab/Qwen3.5-27B-DFlash, whose config.json is not in this repository):
Luce-Org/lucebox-hub dflash/include/dflash27b.h, the C++ runtime written against that checkpoint: draft layers 5,
hidden 5120, 32 heads / 8 KV heads, head_dim 128, intermediate 17408, vocab 248320, rope_theta 1e7, rms eps 1e-6,
block size 16, mask_token_id 248070, target_layer_ids {1, 16, 31, 46, 61} of a 64-layer target, fc 5*5120 -> 5120,
every layer full attention (that runtime has no sliding window for the 3.5 draft). 1.73 G parameters in bf16 are
3.46 GB = 3.22 GiB, the size its model.safetensors is listed with. max_position_embeddings 262144 is the Qwen3.5
target's (z-lab's DFlash2 27B release of the same family carries it); the draft build reads it only for RoPE.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from make_real_size import ZeroWeights, Zeros, footprint, write_head  # noqa: E402  (sys.path set above)

from irsurgeon.families.dflash import synth as dflash_synth  # noqa: E402  (sys.path set above)
from irsurgeon.families.dflash.model import parse_config, tensors  # noqa: E402  (sys.path set above)
from irsurgeon.ops.core import WeightFormat  # noqa: E402  (sys.path set above)
from irsurgeon.synth.registry import save, write_json  # noqa: E402  (sys.path set above)

CONFIG = {
    "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "model_type": "qwen3", "dtype": "bfloat16", "hidden_act": "silu", "attention_bias": False,
    "attention_dropout": 0.0, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 5,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 248320,
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0},
    "layer_types": ["full_attention"] * 5, "tie_word_embeddings": False, "use_cache": True,
    "block_size": 16, "num_target_layers": 64,
    "dflash_config": {"mask_token_id": 248070, "target_layer_ids": [1, 16, 31, 46, 61]},
}
# the target's geometry as the pair check reads it; attention and MLP as small as the synth graph allows
TARGET = dflash_synth.SPEC.with_(hidden=CONFIG["hidden_size"], vocab=CONFIG["vocab_size"],
                                 layers=CONFIG["num_target_layers"])


def write_checkpoint(ckpt: Path, seed: int) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    part = ckpt / "model.safetensors.part"  # renamed when whole: an interrupted run is not taken for a checkpoint
    write_head(part, tensors(parse_config(CONFIG)).shapes(), seed)
    part.rename(ckpt / "model.safetensors")


def target_shapes() -> dict[str, tuple[int, ...]]:
    """synth's target tensors by name with their shapes, drawn as zero-stride views (no memory)."""
    def mat(rng, rows, cols, scale=1.0):
        return np.broadcast_to(np.float32(0), (rows, cols))

    def gain(rng, n):
        return np.broadcast_to(np.float32(0), (n,))

    with mock.patch.object(dflash_synth, "_mat", mat), mock.patch.object(dflash_synth, "_gain", gain):
        return {name: a.shape for name, a in dflash_synth.target_tensors(0, TARGET).items()}


def write_target(target: Path) -> None:
    """openvino_model.xml/.bin (zero f16 weights, .bin sparse) and config.json; nothing else is read by patch."""
    target.mkdir(parents=True, exist_ok=True)
    weights = ZeroWeights(Zeros(target_shapes()), WeightFormat.F16, zero_centred=False)
    save(dflash_synth.target_model(TARGET, weights), target / "openvino_model.xml")
    subprocess.run(["fallocate", "--dig-holes", str(target / "openvino_model.bin")], check=True)
    write_json(target / "config.json", dflash_synth.target_config(TARGET))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not (a.out / "ckpt" / "model.safetensors").is_file():
        write_checkpoint(a.out / "ckpt", a.seed)
    if not (a.out / "target" / "openvino_model.xml").is_file():
        write_target(a.out / "target")
    print(footprint(a.out / "ckpt"))
    print(footprint(a.out / "target"))


if __name__ == "__main__":
    main()
