#!/usr/bin/env python3
"""Compare the tests' numpy RoPE reference (tests/helpers/numpy_rope.py) with the PyTorch code it was written from.

Runs only in a separate venv holding torch and transformers, never in irsurgeon's own environment:

    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install torch==2.13.0 transformers==5.2.0 numpy
    /tmp/tfenv/bin/python tests/helpers/check_rope_reference.py [--specforge PATH/llama3_eagle.py]

transformers: LlamaRotaryEmbedding(LlamaConfig(...)).forward for each rope type at position ranges ending below and
above the original length, each on a fresh module (one forward, as one call of the draft); prints the largest
|difference| of inv_freq, cos and sin from numpy_rope.transformers_at. --specforge: the rotary classes of SpecForge's
specforge/modeling/draft/llama3_eagle.py (the text from `class LlamaRotaryEmbedding` up to `class LlamaAttention`,
run with torch.compile removed), built as its LlamaAttention._init_rope builds them, against numpy_rope.specforge_at.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the helpers package
from helpers import numpy_rope

D, M = 16, 64  # head_dim, max_position_embeddings
CASES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 3.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 16.0,
             "beta_slow": 2.0},
    "yarn mscale": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "mscale": 0.7,
                    "mscale_all_dim": 1.3, "truncate": False},
    "yarn attention_factor": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32,
                              "attention_factor": 0.8},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                 "short_factor": [1.0 + 0.1 * j for j in range(D // 2)],
                 "long_factor": [1.5 + 0.5 * j for j in range(D // 2)]},
    "longrope factor": {"rope_type": "longrope", "original_max_position_embeddings": 16, "factor": 3.0,
                        "short_factor": [1.0] * (D // 2), "long_factor": [2.0 + j for j in range(D // 2)]},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32},
}
TOP_LEVEL = {"longrope top-level original": ("longrope", 24), "yarn top-level original": ("yarn", 300)}
ENDS = (5, 15, 16, 17, 40, 64, 65, 100, 300)  # the last position + 1 of a call of 4 positions


def layer_of(rope: dict, top_original: int | None = None) -> dict:
    layer = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": D, "max_position_embeddings": M,
             "rope_theta": 500.0, "rope_scaling": dict(rope)}
    if top_original is not None:
        layer["original_max_position_embeddings"] = top_original
    return layer


def worst(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def check_transformers() -> None:
    cases = dict(CASES)
    cases.update({name: (CASES[kind], top) for name, (kind, top) in TOP_LEVEL.items()})
    print(f"transformers {transformers.__version__} LlamaRotaryEmbedding vs numpy_rope.transformers_at")
    for name, case in cases.items():
        rope, top = case if isinstance(case, tuple) else (case, None)
        layer = layer_of(rope, top)
        row = []
        for end in ENDS:
            pos = np.arange(end - 4, end)[None]
            module = LlamaRotaryEmbedding(LlamaConfig(**layer))  # fresh: a dynamic table is not carried over
            cos, sin = module(torch.zeros(1, 4, D), torch.tensor(pos))
            inv, attention = numpy_rope.transformers_at(layer, D, pos)
            want_cos, want_sin = numpy_rope.cos_sin(inv, attention, pos)
            row.append(max(worst(module.inv_freq, inv) / float(np.abs(inv).max()), worst(cos[0], want_cos[0]),
                           worst(sin[0], want_sin[0])))
        print(f"  {name:28s} max |diff| over ends {ENDS}: {max(row):.2e}  (inv_freq relative, cos, sin)")
    sequence_note()


def sequence_note() -> None:
    """What one module does over calls that go above max_position_embeddings and back below it."""
    layer = layer_of(CASES["dynamic"])
    module = LlamaRotaryEmbedding(LlamaConfig(**layer))
    x = torch.zeros(1, 4, D)
    module(x, torch.arange(96, 100)[None])
    module(x, torch.arange(0, 4)[None])
    default = numpy_rope.default_freqs(layer["rope_theta"], D)
    at_100 = numpy_rope.transformers_at(layer, D, np.arange(96, 100)[None])[0]
    print(f"  dynamic, one module, a call ending at 100 then one ending at 4: its inv_freq is the default table: "
          f"{np.allclose(module.inv_freq.numpy(), default)}, the table of length 100: "
          f"{np.allclose(module.inv_freq.numpy(), at_100)}")


def specforge_classes(path: Path) -> dict:
    text = path.read_text()
    start, end = text.index("class LlamaRotaryEmbedding"), text.index("class LlamaAttention")
    source = text[start:end].replace("@torch.compile(dynamic=True)", "")
    scope = {"torch": torch, "math": math, "print_with_rank": lambda *a, **k: None}
    exec(compile(source, str(path), "exec"), scope)  # the classes as written there, run by hand in this venv
    return scope


def specforge_module(scope: dict, rope: dict):
    """The rotary module LlamaAttention._init_rope makes for this rope dict (transformers 5: the dict standardized)."""
    p = numpy_rope.parameters(layer_of(rope), computed=False)
    kind, base, common = p["rope_type"], p["rope_theta"], {"max_position_embeddings": M}
    if kind == "linear":
        return scope["LlamaLinearScalingRotaryEmbedding"](D, base=base, scaling_factor=p["factor"], **common)
    if kind == "dynamic":
        return scope["LlamaDynamicNTKScalingRotaryEmbedding"](D, base=base, scaling_factor=p["factor"], **common)
    if kind == "llama3":
        return scope["LlamaRotaryEmbedding"](D, base=base, scaling_factor=p["factor"],
                                             low_freq_factor=p["low_freq_factor"],
                                             high_freq_factor=p["high_freq_factor"],
                                             orig_max_position=p["original_max_position_embeddings"], **common)
    return scope["LlamaYarnRotaryEmbedding"](D, base=base, scaling_factor=p["factor"],
                                             original_max_position_embeddings=p["original_max_position_embeddings"],
                                             beta_fast=p["beta_fast"], beta_slow=p["beta_slow"], mscale=p["mscale"],
                                             mscale_all_dim=p["mscale_all_dim"], **common)


def check_specforge(path: Path) -> None:
    scope = specforge_classes(path)
    yarn_full = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 16.0,
                 "beta_slow": 2.0, "mscale": 0.7, "mscale_all_dim": 0.0, "attention_factor": 3.0}
    cases = {"linear": CASES["linear"], "dynamic": CASES["dynamic"], "llama3": CASES["llama3"], "yarn": yarn_full}
    print(f"SpecForge {path} rotary classes vs numpy_rope.specforge_at")
    for name, rope in cases.items():
        row = []
        for end in ENDS:
            module = specforge_module(scope, rope)  # fresh, then one call with a cache of `end` positions
            cos, sin = module(torch.zeros(1, 1, end, D), seq_len=end)
            pos = np.arange(end)[None]
            inv, attention = numpy_rope.specforge_at(layer_of(rope), D, pos)
            want_cos, want_sin = numpy_rope.cos_sin(inv, attention, pos)
            row.append(max(worst(cos[0, 0, :end], want_cos[0]), worst(sin[0, 0, :end], want_sin[0])))
        print(f"  {name:28s} max |diff| over ends {ENDS}: {max(row):.2e}  (cos, sin)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specforge", type=Path, help="SpecForge's specforge/modeling/draft/llama3_eagle.py")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float32)
    transformers.logging.set_verbosity_error()  # its warnings on the deliberately unusual configs above
    check_transformers()
    if args.specforge:
        check_specforge(args.specforge)


if __name__ == "__main__":
    main()
