#!/usr/bin/env python3
"""Logit parity of `irsurgeon synth` hybrid targets with optimum-intel's export of the same synthesized checkpoint.

    python benchmarks/hybrid_vs_optimum.py [--venv DIR] [--work DIR] [--kinds qwen35 qwen35-moe]

For each kind: synthesize a hybrid target and checkpoint (full-strength branches, vocabulary 1024 to fit the
reference tokenizer), store the checkpoint's values as float32 beside the reference checkpoint's tokenizer and
processor files, export it with `optimum-cli export openvino --task image-text-to-text --weight-format fp32` in the
reference exporter's environment (benchmarks/bench_vs_optimum.py builds it: torch 2.13.0 CPU, transformers 5.2.0,
optimum 2.3.0, optimum-intel 2.2.0; never the project's environment), then run both language models on one prompt
(a 6-token prefill, then single tokens with the states carried) at f32 and print the largest logit difference and
whether the two models declare the same states.
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_vs_optimum import CACHE, REFERENCE, ensure_venv, run  # noqa: E402  (sys.path set above)
from irsurgeon.synth.checkpoint import write_tensors  # noqa: E402  (sys.path set above)
from irsurgeon.synth.registry import default_spec, synthesize  # noqa: E402  (sys.path set above)
from irsurgeon.weights.safetensors_io import SafetensorsFile  # noqa: E402  (sys.path set above)

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SIDE_FILES = ("chat_template.jinja", "tokenizer.json", "tokenizer_config.json", "preprocessor_config.json",
              "video_preprocessor_config.json", "generation_config.json")
SPLITS = (6, 7, 8, 9)


def float32_checkpoint(ckpt: Path, dst: Path) -> dict[str, np.ndarray]:
    """The synthesized checkpoint's values stored as float32 (optimum refuses fp32 export of a bf16 checkpoint)."""
    st = SafetensorsFile(ckpt / "model.safetensors")
    try:
        tensors = {n: np.array(st.get(n), dtype=np.float32) for n in st.tensors}
    finally:
        st.close()
    dst.mkdir(parents=True)
    write_tensors(dst / "model.safetensors", tensors, "float32")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["dtype"] = cfg["text_config"]["dtype"] = "float32"
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    for name in SIDE_FILES:
        shutil.copy(REFERENCE / "ckpt" / "qwen35-dense" / name, dst / name)
    return tensors


def logits(xml: Path, embed: np.ndarray, ids: np.ndarray) -> np.ndarray:
    req = ov.Core().compile_model(xml, "CPU", F32).create_infer_request()
    out, start = [], 0
    for stop in SPLITS:
        pos = np.arange(start, stop)[None]
        out.append(req.infer({"inputs_embeds": embed[ids[start:stop]][None], "position_ids": np.repeat(pos[None], 4, 0),
                              "attention_mask": np.ones((1, stop), np.int64),
                              "beam_idx": np.zeros(1, np.int32)})["logits"][0].copy())
        start = stop
    return np.concatenate(out)


def states(xml: Path) -> list[tuple[str, str, str]]:
    return sorted((v.get_info().variable_id, str(v.get_info().data_shape), str(v.get_info().data_type))
                  for v in ov.Core().read_model(xml).get_variables())


def compare(python: Path, kind: str, work: Path) -> None:
    spec = default_spec(kind).with_(bigram=False, vocab=1024)
    out = synthesize(work / kind, kind, spec, seed=11, with_mtp=True, weight_format="f32")
    tensors = float32_checkpoint(out.ckpt, work / kind / "ckpt32")
    export = work / kind / "optimum"
    run([python.parent / "optimum-cli", "export", "openvino", "--model", work / kind / "ckpt32",
         "--task", "image-text-to-text", "--weight-format", "fp32", export], check=f"optimum export of {kind}")
    lm = "openvino_language_model.xml"
    ids = np.random.default_rng(0).integers(8, spec.vocab, SPLITS[-1])
    embed = tensors["model.language_model.embed_tokens.weight"]
    ours, theirs = logits(out.target / lm, embed, ids), logits(export / lm, embed, ids)
    diff = np.abs(ours - theirs)
    print(f"{kind}: layers {spec.layers} ({spec.full_attention_interval=}), {len(SPLITS) - 1} single steps after a "
          f"{SPLITS[0]}-token prefill: max |logit diff| {diff.max():.3g} (logit scale {np.abs(theirs).max():.3g}, "
          f"per position {[float(f'{d:.2g}') for d in diff.max(-1)]}); greedy tokens equal: "
          f"{bool((ours.argmax(-1) == theirs.argmax(-1)).all())}; same states: "
          f"{states(out.target / lm) == states(export / lm)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=CACHE / "venv", help="the reference exporter's environment")
    ap.add_argument("--work", type=Path, default=None, help="keep the synthesized models and exports here")
    ap.add_argument("--kinds", nargs="+", default=["qwen35", "qwen35-moe"])
    a = ap.parse_args()
    python = ensure_venv(a.venv)
    with tempfile.TemporaryDirectory() as tmp:
        work = a.work or Path(tmp)
        for kind in a.kinds:
            compare(python, kind, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
