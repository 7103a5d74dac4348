#!/usr/bin/env python3
"""Regenerate fixtures/qwen3_5/ from the reference data (tests/data/reference, or $IRSURGEON_REFERENCE).

fixtures/qwen3_5/target : optimum-intel 2.2.0's export of the seeded `qwen35-dense-bigram` checkpoint
                       (`--task image-text-to-text --weight-format fp16`) with openvino_mtp_model.* removed and the
                       `hidden_states_decoder_layers` rt_info line taken out of openvino_language_model.xml:
                       a published IR without the MTP head, as users have them.
fixtures/qwen3_5/ckpt   : that checkpoint's config.json, its `mtp.*` tensors and its token-embedding table (bf16 bytes
                       copied verbatim): the head, and the rows `patch` compares to prove the checkpoint is the
                       target's own.
The bigram checkpoint's head really predicts (about half of its drafts are accepted), so the demo shows a speed-up
mechanism at work, not just equal tokens.
"""
import os
import shutil
import sys
from pathlib import Path

from irsurgeon.families.qwen35_mtp.strip import strip_mtp
from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

ROOT = Path(__file__).resolve().parents[1]
REF = Path(os.environ.get("IRSURGEON_REFERENCE") or ROOT / "tests" / "data" / "reference")
OUT = ROOT / "fixtures" / "qwen3_5"
EMBEDDINGS = "model.language_model.embed_tokens.weight"


def main() -> int:
    src_export, src_ckpt = REF / "export" / "dense-bigram-fp16", REF / "ckpt" / "qwen35-dense-bigram"
    if not src_export.is_dir():
        print(f"reference export not found at {src_export}", file=sys.stderr)
        return 1
    shutil.rmtree(OUT, ignore_errors=True)
    strip_mtp(src_export, OUT / "target")
    (OUT / "ckpt").mkdir()
    shutil.copyfile(src_ckpt / "config.json", OUT / "ckpt" / "config.json")
    st = SafetensorsFile(src_ckpt / "model.safetensors")
    names = [n for n in st.tensors if n.startswith("mtp.") or n == EMBEDDINGS]
    write_safetensors(OUT / "ckpt" / "model.safetensors", {n: st.raw(n) for n in names},
                      {n: st.tensors[n].dtype for n in names})
    print(f"wrote {OUT} ({sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
