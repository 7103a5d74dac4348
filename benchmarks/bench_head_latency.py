"""Draft-step latency of MTP heads on CPU, timed side by side in one process; prints one JSON object.

    python benchmarks/bench_head_latency.py NAME=openvino_mtp_model.xml [NAME=...] [--prefill 128] [--steps 50]
        [--rounds 3] [--max-others CORES] [--floor] [--profile]

Per head and per mode, one run = reset_state, a prefill of --prefill tokens (batch 1), then --steps one-token steps;
a run's latency is the median step. All heads are compiled first, then timed in --rounds interleaved rounds (the
machine may be shared); the result is the median over rounds, with the best round beside it. Each round also records
the CPU time other processes used while it ran (/proc/stat busy time minus this process's, in cores): with
--max-others, "quiet_ms" is the median over the rounds where others used at most that many cores ("quiet_rounds" says
how many). --floor adds, per head, the bandwidth floor of its step: a BLAS matrix-vector product (numpy, f32 `w @ x`)
over as many bytes as the head's 2-D MatMul weights hold as stored (weights, scales and zero points; a MoE head's
expert stacks are left out, as a step reads only its chosen experts), timed in the same rounds right after the head
(the median of --steps products): the time no graph form can beat, as every step reads those bytes once
(`floor`: its ms, bytes and GB/s; `over_floor`: the head's median over it, per mode). Modes:
    f32      INFERENCE_PRECISION_HINT=f32, KV_CACHE_PRECISION=f32, DYNAMIC_QUANTIZATION_GROUP_SIZE=0 for every head
             (the setting under which speculative output equals plain greedy: the graphs alone are compared)
    default  nothing set: the CPU's defaults plus whatever the IR's rt_info runtime_options ask for
The compiled precisions of each (inference, KV cache, dynamic quantization group) are reported with the times, and
the machine's load average. --profile compiles with PERF_COUNT and adds, per head and mode, the plugin's per-op time
of a one-token step after the prefill (the least of 30) (request.profiling_info), summed by node type and executed
kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import sys
from pathlib import Path

import numpy as np
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab package of this checkout
from lab.bandwidth_floor import Floor, weight_bytes

MODES = {"f32": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"},
         "default": {}}
REPORTED = ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION", "DYNAMIC_QUANTIZATION_GROUP_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def busy_jiffies() -> tuple[int, float]:
    """(all CPUs' busy jiffies from /proc/stat, this process's CPU jiffies)."""
    with open("/proc/stat") as f:
        cpu = [int(v) for v in f.readline().split()[1:9]]
    t = os.times()
    return sum(cpu) - cpu[3] - cpu[4], (t.user + t.system) * TICK


def others_cores(before: tuple[int, float], after: tuple[int, float], seconds: float) -> float:
    """Cores other processes kept busy between two busy_jiffies() readings `seconds` apart."""
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / TICK / seconds


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
    return timed(request, [feeds(rng, hidden, prefill + i, 1) for i in range(steps)])


def timed(request: ov.InferRequest, inputs: list[dict]) -> float:
    times = []
    for f in inputs:
        t = time.perf_counter()
        request.infer(f)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def text(value) -> str:
    return value.to_string() if isinstance(value, ov.Type) else str(value)


def op_split(request: ov.InferRequest, hidden: int, prefill: int, steps: int = 30) -> dict[str, float]:
    """Microseconds per `node_type/exec_type`, the least over `steps` one-token steps after a prefill (on a shared
    machine a preempted op inflates a step; its least is what the op itself costs)."""
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
    least = {key: round(min(v), 1) for key, v in per_step.items()}
    return dict(sorted(least.items(), key=lambda kv: -kv[1]))


Compiled = dict[tuple[str, str], tuple[ov.InferRequest, int, dict]]


def compile_all(heads: dict[str, str], profile: bool = False) -> tuple[Compiled, dict[str, ov.Model]]:
    core = ov.Core()
    out = {}
    models = {name: core.read_model(xml) for name, xml in heads.items()}
    for name, model in models.items():
        hidden = model.input("hidden_states").get_partial_shape()[2].get_length()
        for mode, props in MODES.items():
            compiled = core.compile_model(model, "CPU", {**props, **({"PERF_COUNT": True} if profile else {})})
            info = {k: text(compiled.get_property(k)) for k in REPORTED}
            out[(name, mode)] = (compiled.create_infer_request(), hidden, info)
    return out, models


def summary(ms: list[float], others: list[float], max_others: float | None) -> dict:
    out = {"ms": statistics.median(ms), "best_ms": min(ms), "rounds_ms": ms, "others_cores": others}
    if max_others is not None:
        quiet = [m for m, o in zip(ms, others) if o <= max_others]
        out.update(quiet_ms=statistics.median(quiet) if quiet else None, quiet_rounds=len(quiet))
    return out


def timed_rounds(compiled: Compiled, floors: dict[str, Floor], a) -> tuple[dict, dict]:
    """Per key (head, mode) or (head, "floor"): each round's ms and the cores others used meanwhile."""
    rounds, others = {}, {}
    for _ in range(a.rounds):
        for key, (request, hidden, _) in compiled.items():
            runs = [(key, lambda: one_run(request, hidden, a.prefill, a.steps))]
            if key[0] in floors and key[1] == list(MODES)[-1]:  # the floor right after the head's last mode
                runs.append(((key[0], "floor"), lambda: floors[key[0]].run(a.steps)))
            for k, run in runs:
                before, t = busy_jiffies(), time.perf_counter()
                rounds.setdefault(k, []).append(run())
                others.setdefault(k, []).append(round(others_cores(before, busy_jiffies(), time.perf_counter() - t), 2))
    return rounds, others


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads", nargs="+", help="NAME=path/to/openvino_mtp_model.xml")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="add the per-op time split of one step (PERF_COUNT)")
    ap.add_argument("--max-others", type=float, help="quiet_ms: median of rounds where others used <= this many cores")
    ap.add_argument("--floor", action="store_true",
                    help="also time a BLAS matrix-vector product over each head's weight bytes (the bandwidth floor)")
    a = ap.parse_args()
    heads = dict(h.split("=", 1) for h in a.heads)
    compiled, models = compile_all(heads, a.profile)
    floors = {name: Floor(weight_bytes(m), m.input("hidden_states").get_partial_shape()[2].get_length())
              for name, m in models.items()} if a.floor else {}
    del models
    for request, hidden, _ in compiled.values():  # warm-up: first inferences allocate and pick kernels
        one_run(request, hidden, a.prefill, 3)
    for floor in floors.values():
        floor.run(3)
    rounds, others = timed_rounds(compiled, floors, a)
    result = {name: {mode: summary(rounds[key], others[key], a.max_others) | compiled[key][2]
                     for mode in MODES for key in [(name, mode)]} for name in heads}
    for name, floor in floors.items():
        f = result[name]["floor"] = summary(rounds[(name, "floor")], others[(name, "floor")], a.max_others)
        f.update(bytes=floor.nbytes, gb_per_s=round(floor.nbytes / f["ms"] / 1e6, 2))
        for mode in MODES:
            result[name][mode]["over_floor"] = round(result[name][mode]["ms"] / f["ms"], 2)
    if a.profile:
        for (name, mode), (request, hidden, _) in compiled.items():
            result[name][mode]["op_us"] = op_split(request, hidden, a.prefill)
    result["load"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
