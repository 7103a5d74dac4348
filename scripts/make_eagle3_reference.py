"""Reference data for EAGLE-3 drafts: optimum-intel 2.2.0's fp32 export of fixtures/eagle3/ckpt and a golden of its
draft IR over stateful calls (tests/data/eagle3/).

Run in a separate venv, never the product's:

    python3 -m venv /tmp/eagle3-ref
    /tmp/eagle3-ref/bin/pip install torch==2.13.0+cpu transformers==5.2.0 optimum==2.3.0 einops diffusers==0.37.1 \
        safetensors numpy
    /tmp/eagle3-ref/bin/pip install --no-deps optimum-intel==2.2.0
    /tmp/eagle3-ref/bin/pip install openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 nncf==3.4.0 \
        "huggingface-hub>=0.23.2,<1.22"
    /tmp/eagle3-ref/bin/python scripts/make_eagle3_reference.py [tests/data/eagle3]

(scripts/make_dflash_reference.py's recipe without z-lab's `dflash`: pip resolves huggingface-hub 1.21.0, numpy
2.4.6, safetensors 0.8.0, einops 0.8.2; optimum-intel 2.2.0 asks for torchvision, which the export does not import.
The EAGLE-3 export imports diffusers and einops as the DFlash one does, and needs --trust-remote-code: optimum-intel
2.2.0 `optimum/exporters/openvino/__main__.py` maps architectures[0] LlamaForCausalLMEagle3 (and
Eagle3LlamaForCausalLM) through `_CUSTOM_DRAFT_MODEL_MAP` to its own `model_patcher.LlamaEagle3ForCausalLM`, by
rewriting the config's auto_map to point at model_patcher.py, which only trust_remote_code lets transformers load.)

The export, offline, as the issue words it (the tokenizer files it also writes are not kept):

    optimum-cli export openvino --model fixtures/eagle3/ckpt --task text-generation-with-past --trust-remote-code \
        --weight-format fp32 OUT

tests/data/eagle3/optimum/ keeps openvino_model.xml and openvino_model.bin only: what the tests read (the IR the
golden comes from, its .bin size against irsurgeon's). The export's `embed_tokens` table is random (the checkpoint has
none: `LlamaEagle3Model.__init__` makes an nn.Embedding(vocab, hidden) that from_pretrained reports MISSING and
initialises unseeded), so the .bin differs from one export to the next in those 256 x 64 floats only.

golden.npz: optimum's draft IR after openvino.genai's `share_vocabulary` (src/cpp/src/speculative_decoding/
eagle3_model_transforms.cpp: find_embedding_gather, the first Gather in get_ordered_ops() whose data has static
rank >= 2 and dim 0 > 1000 or whose data node's friendly name contains embed_tokens / embedding; its data node's
output replaced by the target's weight subgraph), the target being fixtures/eagle3/target, whose table is the f32
Constant `model.embed_tokens.weight`. Then CALLS stateful calls (openvino CPU, INFERENCE_PRECISION_HINT f32 and
KV_CACHE_PRECISION f32: the plugin's default cache precision changes the S = 1 call), the state reset before the
first only. Per call c:
    c{c}_input_ids [1, S] i64            seeded, in [0, vocab)
    c{c}_position_ids [1, S] i64         iota(P, P + S), P the tokens of the earlier calls
    c{c}_attention_mask [1, P + S] i64   ones
    c{c}_hidden_states [1, S, 3H] f32    seeded, N(0, 0.5^2)
    c{c}_beam_idx [1] i32                zeros
    c{c}_logits [1, S, Vd] f32           optimum's IR
plus d2t (the IR's d2t output, i64 [Vd]), calls, table_sha256 (of the target table's f32 bytes), versions, command.
The script also replays the same calls through optimum-intel's PyTorch module (model_patcher.LlamaEagle3ForCausalLM
loaded from the checkpoint, the same table copied in, one DynamicCache) and prints the distance, and prints how far
the IR moves under the plugin's default KV cache precision.

Measured with the versions above (2026-12-05, 2 AMD EPYC vCPUs): optimum's IR vs its PyTorch module 2.2e-6 over the
three calls, d2t equal; with the KV cache precision the IR's rt_info asks for (f16) the calls move by 0, 7.1e-4 and
5.2e-4. A rerun writes golden.npz's arrays byte for byte again (only the kept .bin's random table differs).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import openvino as ov

ROOT = Path(__file__).resolve().parents[1]
CALLS = (3, 1, 2)
SEED = 20261205
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
KEPT = ("openvino_model.xml", "openvino_model.bin")
TARGET_TABLE = "model.embed_tokens.weight"
FEEDS = ("input_ids", "position_ids", "attention_mask", "hidden_states", "beam_idx")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def export(ckpt: Path, out: Path) -> list[str]:
    cli = Path(sys.executable).with_name("optimum-cli")
    cmd = [str(cli), "export", "openvino", "--model", str(ckpt), "--task", "text-generation-with-past",
           "--trust-remote-code", "--weight-format", "fp32"]
    r = subprocess.run(cmd + [str(out)], capture_output=True, text=True, env={**os.environ, **OFFLINE})
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} OUT failed:\n{r.stderr[-3000:]}")
    shown = [os.path.relpath(c, ROOT) if c == str(ckpt) and ckpt.is_relative_to(ROOT) else c for c in cmd[1:]]
    return ["optimum-cli", *shown, "OUT"]


def find_embedding_gather(model: ov.Model):
    """openvino.genai eagle3_model_transforms.cpp share_vocabulary's find_embedding_gather."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather":  # ov::op::util::GatherBase: Gather v1, v7, v8
            continue
        data = op.input_value(0).get_node()
        ps = data.get_output_partial_shape(0)
        if ps.rank.is_static and ps.rank.get_length() >= 2 and ps[0].is_static and ps[0].get_length() > 1000:
            return op
        if "embed_tokens" in data.get_friendly_name() or "embedding" in data.get_friendly_name():
            return op
    return None


def target_table(target: Path) -> np.ndarray:
    model = ov.Core().read_model(str(target / "openvino_model.xml"))
    gather = find_embedding_gather(model)
    data = gather.input_value(0).get_node()
    if data.get_type_name() != "Constant" or data.get_friendly_name() != TARGET_TABLE:
        raise SystemExit(f"{target}: the embedding Gather reads {data.get_type_name()} {data.get_friendly_name()}, "
                         f"expected the Constant {TARGET_TABLE} (clone its subgraph as genai does otherwise)")
    return data.get_data().copy()


def share_vocabulary(draft: ov.Model, table: np.ndarray) -> str:
    """The draft's embedding data node replaced by (a copy of) the target's Constant; returns the replaced name."""
    gather = find_embedding_gather(draft)
    data = gather.input_value(0).get_node()
    clone = ov.opset13.constant(table)
    clone.set_friendly_name(TARGET_TABLE + "_cloned_for_draft")
    data.output(0).replace(clone.output(0))
    draft.validate_nodes_and_infer_types()
    return data.get_friendly_name()


def feeds(vocab: int, features: int) -> list[dict[str, np.ndarray]]:
    rng, pos, out = np.random.default_rng(SEED), 0, []
    for s in CALLS:
        out.append({"input_ids": rng.integers(0, vocab, (1, s), dtype=np.int64),
                    "position_ids": np.arange(pos, pos + s, dtype=np.int64)[None],
                    "attention_mask": np.ones((1, pos + s), np.int64),
                    "hidden_states": (0.5 * rng.standard_normal((1, s, features))).astype(np.float32),
                    "beam_idx": np.zeros(1, np.int32)})
        pos += s
    return out


def run_ir(model: ov.Model, calls: list[dict], config: dict) -> tuple[list[np.ndarray], np.ndarray]:
    request = ov.Core().compile_model(model, "CPU", config).create_infer_request()
    request.reset_state()
    logits = []
    for f in calls:
        request.infer(f)
        logits.append(request.get_tensor("logits").data.copy())
    return logits, request.get_tensor("d2t").data.copy()


def run_torch(ckpt: Path, table: np.ndarray, calls: list[dict]) -> tuple[list[np.ndarray], np.ndarray]:
    """optimum-intel 2.2.0's own PyTorch module of the draft (what it traces), the same table, one cache."""
    import torch
    from transformers import AutoConfig, DynamicCache

    from optimum.exporters.openvino.model_patcher import LlamaEagle3ForCausalLM

    config = AutoConfig.from_pretrained(ckpt)
    config.tie_word_embeddings = False  # update_config_for_custom_draft_model
    model = LlamaEagle3ForCausalLM.from_pretrained(ckpt, config=config, dtype=torch.float32).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.from_numpy(table))
    cache, out = DynamicCache(config=config), []
    for f in calls:
        with torch.no_grad():
            r = model(input_ids=torch.from_numpy(f["input_ids"]),
                      hidden_states=torch.from_numpy(f["hidden_states"]),
                      attention_mask=torch.from_numpy(f["attention_mask"]),
                      position_ids=torch.from_numpy(f["position_ids"]), past_key_values=cache, use_cache=True)
        out.append(r.logits.numpy())
    return out, r.d2t.numpy()


def worst(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", default=ROOT / "tests" / "data" / "eagle3")
    ap.add_argument("--ckpt", type=Path, default=ROOT / "fixtures" / "eagle3" / "ckpt")
    ap.add_argument("--target", type=Path, default=ROOT / "fixtures" / "eagle3" / "target")
    a = ap.parse_args()
    versions = (f"torch {torch.__version__}, transformers {transformers.__version__}, optimum {version('optimum')}, "
                f"optimum-intel {version('optimum-intel')}, openvino {version('openvino')}")
    print(versions)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    optimum_dir = a.out / "optimum"
    shutil.rmtree(optimum_dir, ignore_errors=True)
    optimum_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        command = export(a.ckpt, Path(tmp))
        for name in KEPT:
            shutil.copy(Path(tmp) / name, optimum_dir / name)
    print(f"kept {', '.join(KEPT)}: {sum((optimum_dir / n).stat().st_size for n in KEPT)} bytes")

    draft = ov.Core().read_model(str(optimum_dir / "openvino_model.xml"))
    table = target_table(a.target)
    replaced = share_vocabulary(draft, table)
    print(f"share_vocabulary: {replaced} -> the target's {TARGET_TABLE} {list(table.shape)} {table.dtype}")
    vocab, hidden = table.shape
    calls = feeds(vocab, 3 * hidden)
    logits, d2t = run_ir(draft, calls, F32)

    ref, ref_d2t = run_torch(a.ckpt, table, calls)
    print(f"optimum-intel IR (f32, KV f32) vs its PyTorch module, worst over calls {list(CALLS)}: "
          f"{worst(logits, ref):.3g}; d2t equal: {np.array_equal(d2t, ref_d2t)}")
    again = ov.Core().read_model(str(optimum_dir / "openvino_model.xml"))
    share_vocabulary(again, table)
    default_kv, _ = run_ir(again, calls, {"INFERENCE_PRECISION_HINT": "f32"})
    print("the same IR with the plugin's default KV cache precision (rt_info runtime_options apply), per call: "
          + ", ".join(f"{float(np.abs(x - y).max()):.3g}" for x, y in zip(default_kv, logits)))

    arrays = {"calls": np.asarray(CALLS, np.int64), "d2t": d2t,
              "table_sha256": np.asarray(hashlib.sha256(np.ascontiguousarray(table, np.float32).tobytes()).hexdigest()),
              "versions": np.asarray(versions), "command": np.asarray(" ".join(command))}
    for c, (f, out) in enumerate(zip(calls, logits)):
        arrays.update({f"c{c}_{k}": f[k] for k in FEEDS})
        arrays[f"c{c}_logits"] = out
    np.savez_compressed(a.out / "golden.npz", **arrays)
    print(f"wrote {a.out / 'golden.npz'}: calls {list(CALLS)}, |logits| max "
          f"{max(float(np.abs(x).max()) for x in logits):.3g}, d2t [{d2t.size}] i64")


if __name__ == "__main__":
    main()
