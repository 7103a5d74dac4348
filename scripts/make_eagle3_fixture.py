"""fixtures/eagle3/: the EAGLE-3 family's bundled pair, as `irsurgeon synth --kind eagle3 --seed 0` writes it.

    target/  irsurgeon.synth's `llama` kind at 4 layers (a text export in optimum-intel's form: openvino_model.xml
             with layers.<i> names genai taps, config.json, generation_config.json, tokenizer and detokenizer)
    ckpt/    a seeded random EAGLE-3 draft for it in the SafeAILab layout (families/eagle3/synth.py)

    python scripts/make_eagle3_fixture.py [OUT_DIR]       (default: fixtures/eagle3)
"""
from __future__ import annotations

import sys
from pathlib import Path

from irsurgeon.families.eagle3.synth import synthesize_eagle3

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures" / "eagle3"
    synthesize_eagle3(out, seed=0, wait=False, force=True)
