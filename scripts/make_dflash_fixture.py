"""fixtures/dflash/: the DFlash family's bundled pair, from tests/data/dflash/base (scripts/make_dflash_reference.py).

    target/  optimum-intel 2.2.0's fp32 export of the seeded Qwen3 target (openvino_model.xml/.bin, config.json)
             with its hidden_states_decoder_layers annotation removed (so a patch writes it, as for an export made
             without it), plus irsurgeon.synth's byte-level tokenizer/detokenizer (vocab 64) and a generation_config
    ckpt/    the z-lab-format draft checkpoint made for it (config.json + model.safetensors)

    python scripts/make_dflash_fixture.py [OUT_DIR]       (default: fixtures/dflash)
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from irsurgeon.synth.registry import save
from irsurgeon.synth.tokenizer import EOS_ID, PAD_ID, detokenizer_model, tokenizer_model, tokenizer_rt_info

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "tests" / "data" / "dflash" / "base"
ANNOTATION = re.compile(rb"\s*<hidden_states_decoder_layers value=\"[^\"]*\" />")


def main(out: Path) -> None:
    target, ckpt = out / "target", out / "ckpt"
    for d in (target, ckpt):
        shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(BASE / "optimum" / "target", target)
    shutil.copytree(BASE / "draft", ckpt)
    xml = target / "openvino_model.xml"
    data, count = ANNOTATION.subn(b"", xml.read_bytes())
    assert count == 1, "the optimum export's annotation was not found"
    xml.write_bytes(data)
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    tok, detok = tokenizer_model(vocab), detokenizer_model(vocab)
    tokenizer_rt_info(tok, detokenizer=False)
    tokenizer_rt_info(detok, detokenizer=True)
    save(tok, target / "openvino_tokenizer.xml")
    save(detok, target / "openvino_detokenizer.xml")
    (target / "generation_config.json").write_text(json.dumps(
        {"do_sample": False, "eos_token_id": [EOS_ID, PAD_ID], "pad_token_id": PAD_ID}, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "fixtures" / "dflash")
