"""Draft-step latency of MTP heads on CPU, timed side by side in one process; prints one JSON object.

    python scripts/bench_head_latency.py NAME=openvino_mtp_model.xml [NAME=...] [--prefill 128] [--steps 50]

Per head and per mode, one run = reset_state, a prefill of --prefill tokens (batch 1), then --steps one-token steps;
a run's latency is the median step. All heads are compiled first, then timed in --rounds interleaved rounds (the
machine may be shared); the result is the median over rounds, with the best round beside it. Modes:
    f32      INFERENCE_PRECISION_HINT=f32, KV_CACHE_PRECISION=f32, DYNAMIC_QUANTIZATION_GROUP_SIZE=0 for every head
             (the setting under which speculative output equals plain greedy: the graphs alone are compared)
    default  nothing set: the CPU's defaults plus whatever the IR's rt_info runtime_options ask for
The compiled precisions of each (inference, KV cache, dynamic quantization group) are reported with the times, and
the machine's load average. --profile compiles with PERF_COUNT and adds, per head and mode, the plugin's per-op time
of a one-token step after the prefill (median of 10) (request.profiling_info), summed by node type and executed kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import openvino as ov

MODES = {"f32": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"},
         "default": {}}
REPORTED = ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "DYNAMIC_QUANTIZATION_GROUP_SIZE")


def feeds(rng: np.random.Generator, hidden: int, start: int, count: int) -> dict[str, np.ndarray]:
    return {"hidden_states": rng.standard_normal((1, count, hidden), dtype=np.float32),
            "inputs_embeds": rng.standard_normal((1, count, hidden), dtype=np.float32),
            "attention_mask": np.ones((1, start + count), np.int64),
            "position_ids": np.arange(start, start + count, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32)}


def one_run(request: ov.InferRequest, hidden: int, prefill: int, steps: int) -> float:
    """Median one-token step latency in ms after a fresh prefill."""
    rng = np.random.default_rng(1)
    request.reset_state()
    request.infer(feeds(rng, hidden, 0, prefill))
    times = []
    for i in range(steps):
        f = feeds(rng, hidden, prefill + i, 1)
        t = time.perf_counter()
        request.infer(f)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def text(value) -> str:
    return value.to_string() if isinstance(value, ov.Type) else str(value)


def op_split(request: ov.InferRequest, hidden: int, prefill: int, steps: int = 10) -> dict[str, float]:
    """Microseconds per `node_type/exec_type`, the median over `steps` one-token steps after a prefill."""
    rng = np.random.default_rng(2)
    request.reset_state()
    request.infer(feeds(rng, hidden, 0, prefill))
    per_step: dict[str, list[float]] = {}
    for i in range(steps):
        request.infer(feeds(rng, hidden, prefill + i, 1))
        split: dict[str, float] = {}
        for info in request.profiling_info:
            if info.status == ov.ProfilingInfo.Status.EXECUTED:
                key = f"{info.node_type}/{info.exec_type}"
                split[key] = split.get(key, 0.0) + info.real_time.total_seconds() * 1e6
        for key, us in split.items():
            per_step.setdefault(key, []).append(us)
    median = {key: round(statistics.median(v), 1) for key, v in per_step.items()}
    return dict(sorted(median.items(), key=lambda kv: -kv[1]))


Compiled = dict[tuple[str, str], tuple[ov.InferRequest, int, dict]]


def compile_all(heads: dict[str, str], profile: bool = False) -> Compiled:
    core = ov.Core()
    out = {}
    for name, xml in heads.items():
        model = core.read_model(xml)
        hidden = model.input("hidden_states").get_partial_shape()[2].get_length()
        for mode, props in MODES.items():
            compiled = core.compile_model(model, "CPU", {**props, **({"PERF_COUNT": True} if profile else {})})
            info = {k: text(compiled.get_property(k)) for k in REPORTED}
            out[(name, mode)] = (compiled.create_infer_request(), hidden, info)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads", nargs="+", help="NAME=path/to/openvino_mtp_model.xml")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="add the per-op time split of one step (PERF_COUNT)")
    a = ap.parse_args()
    heads = dict(h.split("=", 1) for h in a.heads)
    compiled = compile_all(heads, a.profile)
    for request, hidden, _ in compiled.values():  # warm-up: first inferences allocate and pick kernels
        one_run(request, hidden, a.prefill, 3)
    rounds = {key: [] for key in compiled}
    for _ in range(a.rounds):
        for key, (request, hidden, _) in compiled.items():
            rounds[key].append(one_run(request, hidden, a.prefill, a.steps))
    result = {name: {mode: {"ms": statistics.median(rounds[(name, mode)]), "best_ms": min(rounds[(name, mode)]),
                            "rounds_ms": rounds[(name, mode)], **compiled[(name, mode)][2]} for mode in MODES}
              for name in heads}
    if a.profile:
        for (name, mode), (request, hidden, _) in compiled.items():
            result[name][mode]["op_us"] = op_split(request, hidden, a.prefill)
    result["load"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
