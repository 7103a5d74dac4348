"""transformers' logits for the `synth --kind gemma4` target's weights, for tests/families/gemma4/test_gemma4_synth.py.

Run in the optimum venv of scripts/make_gemma4_pair.py (transformers 5.5.4; 5.24.0's Gemma4TextModel fails on a
model with KV-shared layers and no per-layer inputs: `per_layer_inputs[:, logits_to_keep]` on None):

    PYTHONPATH=. /tmp/gemma-opt/bin/python scripts/make_gemma4_synth_golden.py tests/data/gemma4/synth_target.npz

The weights are irsurgeon.families.gemma4_mtp.synth.target_tensors(seed 0) with output gains 0.7 (the synthesized bigram model
uses 0.01, which would leave attention and MLP nearly invisible); one 40-token prompt, longer than the window.
"""
from __future__ import annotations

import sys

import numpy as np
import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

from irsurgeon.families.gemma4_mtp.synth import target_config, target_tensors

SEED, GAIN, LENGTH = 0, 0.7, 40


def main(out: str) -> None:
    cfg = {k: v for k, v in target_config().items() if k not in ("architectures", "model_type")}
    config = Gemma4TextConfig(**cfg)
    config._attn_implementation = "eager"
    model = Gemma4ForCausalLM(config).eval()
    state = {k: torch.from_numpy(v) for k, v in target_tensors(SEED, GAIN).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    ids = np.random.default_rng(3).integers(8, 256, (1, LENGTH))
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids)).logits.numpy()
    np.savez_compressed(out, input_ids=ids, logits=logits, seed=SEED, output_gain=GAIN)
    print(f"{out}: logits {logits.shape}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gemma4/synth_target.npz")
