#!/usr/bin/env python3
"""Draft-step latency of the MoE head's graph forms on CPU, against optimum-intel's MoE head.

    python benchmarks/bench_moe.py [--geometry reference a3b] [--steps 200] [--prefill 128]

For each geometry and each form of irsurgeon.ops.moe (`tiled`, `gather`), the head is built with f16 weights and
compiled for CPU at INFERENCE_PRECISION_HINT=f32 / KV_CACHE_PRECISION=f32 (the golden settings). One run = reset,
a prefill of --prefill tokens, then --steps one-token steps; the step latency is the median over the steps. The
heads are compiled first, then timed in interleaved rounds (the machine may be shared): the table gives the median
over rounds and the best round.
`reference` is the seeded tiny checkpoint (ckpt/qwen35-moe) and also times optimum's export/moe-fp16 head in the
same run. `a3b` uses random weights at Qwen3.6-35B-A3B's MoE sizes (hidden 2048, 256 experts, top-8, expert and
shared expert 512; 16/2 heads of 256), where the experts' weights (1.6 GB in f16) dominate.
A prefill the `gather` form cannot hold in memory (it copies k expert matrices per token) is fed in chunks.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

import irsurgeon.ops.moe as moe_ops
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.draft.build import build_model
from irsurgeon.flows.standalone import load_mtp
from irsurgeon.families.qwen35_mtp.model import MoEConfig, MTPConfig, tensors
from irsurgeon.ops.core import WeightFormat

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("IRSURGEON_REFERENCE") or ROOT / "tests" / "data" / "reference")
PROPS = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
GATHER_BYTES_LIMIT = 1 << 30  # per prefill call: k expert matrices per token, f16 + their f32 copy

A3B = MTPConfig(model_type="qwen3_5_moe_text", hidden_size=2048, num_heads=16, num_kv_heads=2, head_dim=256,
                rms_norm_eps=1e-6, rope_theta=1e7, partial_rotary_factor=0.25, intermediate_size=None,
                vocab_size=None, moe=MoEConfig(num_experts=256, top_k=8, expert_size=512, shared_expert_size=512))


def random_weights(cfg: MTPConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Folded (1 + w) norm gains and N(0, 1/fan_in) matrices in the canonical layout."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in tensors(cfg).tensors:
        name, shape = t.role, t.shape
        if t.transform is not None:  # a (1 + w) norm gain
            out[name] = (1.0 + rng.uniform(-0.5, 0.5, shape)).astype(np.float32)
        else:
            out[name] = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[-1]))
    return out


def feeds(rng, H: int, start: int, count: int) -> dict[str, np.ndarray]:
    return {"hidden_states": rng.standard_normal((1, count, H), dtype=np.float32),
            "inputs_embeds": rng.standard_normal((1, count, H), dtype=np.float32),
            "attention_mask": np.ones((1, start + count), np.int64),
            "position_ids": np.arange(start, start + count, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32)}


def run(request: ov.InferRequest, H: int, prefill: int, steps: int, chunk: int) -> dict[str, float]:
    """Prefill (in chunks of `chunk` tokens), then `steps` one-token steps; latencies in ms."""
    rng = np.random.default_rng(1)
    request.reset_state()
    t0, done = time.perf_counter(), 0
    while done < prefill:
        n = min(chunk, prefill - done)
        request.infer(feeds(rng, H, done, n))
        done += n
    prefill_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for i in range(steps):
        f = feeds(rng, H, prefill + i, 1)
        t = time.perf_counter()
        request.infer(f)
        times.append((time.perf_counter() - t) * 1e3)
    return {"prefill_ms": prefill_ms, "step_ms": statistics.median(times),
            "step_p90_ms": float(np.percentile(times, 90))}


def outputs(request: ov.InferRequest, H: int, sizes: list[int]) -> list[np.ndarray]:
    rng, outs, start = np.random.default_rng(2), [], 0
    request.reset_state()
    for n in sizes:
        request.infer(feeds(rng, H, start, n))
        outs.append(request.get_tensor(contract.OUTPUT).data.copy())
        start += n
    return outs


def build(cfg: MTPConfig, weights: dict[str, np.ndarray], form: str) -> tuple[ov.Model, float]:
    t = time.perf_counter()
    model = build_model(cfg, weights, WeightFormat.F16, moe_form=form)
    return model, time.perf_counter() - t


def gather_chunk(cfg: MTPConfig, prefill: int) -> int:
    per_token = cfg.moe.top_k * 3 * cfg.moe.expert_size * cfg.hidden_size * (2 + 4)
    return max(1, min(prefill, GATHER_BYTES_LIMIT // per_token))


def compile_candidates(cfg: MTPConfig, weights, optimum_xml: Path | None, forms: list[str]) -> list[dict]:
    """Build and compile every head first, so the timed rounds below can interleave them."""
    core, out = ov.Core(), []
    candidates = [(f"irsurgeon {form}", form) for form in forms]
    if optimum_xml is not None and optimum_xml.is_file():
        candidates.append(("optimum-intel", None))
    for title, form in candidates:
        if form is None:
            model, built = core.read_model(optimum_xml), float("nan")
        else:
            model, built = build(cfg, weights, form)
        t = time.perf_counter()
        request = core.compile_model(model, "CPU", PROPS).create_infer_request()
        out.append({"title": title, "form": form, "request": request, "build_s": built,
                    "compile_s": time.perf_counter() - t, "runs": []})
        del model
    return out


def bench_geometry(label: str, cfg: MTPConfig, weights, optimum_xml: Path | None, args) -> None:
    print(f"\n== {label}: hidden {cfg.hidden_size}, {cfg.moe.num_experts} experts, top-{cfg.moe.top_k}, "
          f"expert {cfg.moe.expert_size}, prefill {args.prefill} then {args.steps} one-token steps, "
          f"{args.repeats} interleaved rounds")
    heads = compile_candidates(cfg, weights, optimum_xml, args.forms)
    for _ in range(args.repeats):  # round robin: a load change on the machine hits every head alike
        for h in heads:
            chunk = gather_chunk(cfg, args.prefill) if h["form"] == "gather" else args.prefill
            h["chunk"] = chunk
            h["runs"].append(run(h["request"], cfg.hidden_size, args.prefill, args.steps, chunk))
    print(f"{'head':<22}{'build s':>9}{'compile s':>11}{'prefill ms':>12}{'chunk':>7}{'step ms':>10}"
          f"{'best':>8}{'p90 ms':>9}")
    for h in heads:
        steps = [r["step_ms"] for r in h["runs"]]
        print(f"{h['title']:<22}{h['build_s']:>9.2f}{h['compile_s']:>11.2f}"
              f"{statistics.median(r['prefill_ms'] for r in h['runs']):>12.1f}{h['chunk']:>7}"
              f"{statistics.median(steps):>10.3f}{min(steps):>8.3f}"
              f"{statistics.median(r['step_p90_ms'] for r in h['runs']):>9.3f}")
    first = outputs(heads[0]["request"], cfg.hidden_size, [min(heads[0]["chunk"], 7), 1, 1])
    for h in heads[1:]:
        got = outputs(h["request"], cfg.hidden_size, [min(h["chunk"], 7), 1, 1])
        diff = max(float(np.abs(a - b).max()) for a, b in zip(first, got))
        print(f"  max |{h['title']} - {heads[0]['title']}| over a 3-call sequence: {diff:.2e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", nargs="+", default=["reference", "a3b"], choices=["reference", "a3b"])
    ap.add_argument("--forms", nargs="+", default=sorted(moe_ops.FORMS), choices=sorted(moe_ops.FORMS))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds; medians over rounds are reported")
    args = ap.parse_args()
    print(f"openvino {ov.get_version()}, CPU {ov.Core().get_property('CPU', 'FULL_DEVICE_NAME')}, "
          f"{os.cpu_count()} cores; default form: {moe_ops.DEFAULT_FORM}")
    for geometry in args.geometry:
        if geometry == "reference":
            ckpt = REFERENCE / "ckpt" / "qwen35-moe"
            if not ckpt.is_dir():
                print(f"reference checkpoint not found at {ckpt}: skipped", file=sys.stderr)
                continue
            cfg, weights, handle = load_mtp(ckpt)
            handle.close()
            bench_geometry("reference qwen35-moe", cfg, weights,
                           REFERENCE / "export" / "moe-fp16" / contract.MTP_XML, args)
        else:
            weights = random_weights(A3B)
            bench_geometry("35B-A3B sizes, random weights", A3B, weights, None, args)
            del weights
    return 0


if __name__ == "__main__":
    sys.exit(main())
