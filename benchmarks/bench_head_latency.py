"""Draft-step latency of MTP heads on CPU, timed side by side in one process; prints one JSON object.

    python benchmarks/bench_head_latency.py NAME=openvino_mtp_model.xml [NAME=...] [--prefill 128] [--steps 50]
        [--rounds 3] [--max-others CORES] [--matmul-floor] [--profile]

Per head and per mode, one run = reset_state, a prefill of --prefill tokens (batch 1), then --steps one-token steps;
a run's latency is the median step. All heads are compiled first, then timed in --rounds interleaved rounds (the
machine may be shared); the result is the median over rounds, with the best round beside it. Each round also records
the CPU time other processes used while it ran (/proc/stat busy time minus this process's, in cores): with
--max-others, "quiet_ms" is the median over the rounds where others used at most that many cores ("quiet_rounds" says
how many). --matmul-floor adds, per head, a model of only its 2-D weight MatMuls (`matmul_floor`, fed [1, 1, K] zeros) timed
the same way: what the FullyConnected weight reads alone cost. Modes:
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

import numpy as np
import openvino as ov
import openvino.opset13 as ops

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


def one_run(request: ov.InferRequest, hidden, prefill: int, steps: int) -> float:
    """Median one-token step latency in ms after a fresh prefill (a floor model: `hidden` is its one-token feed)."""
    if isinstance(hidden, dict):  # the prefill-sized call first, as for a head: the plugin picks kernels per shape
        request.infer({k: np.zeros((1, prefill, v.shape[-1]), np.float32) for k, v in hidden.items()})
        return timed(request, [hidden] * steps)
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


def matmul_floor(model: ov.Model) -> ov.Model:
    """Only the 2-D weight MatMuls of `model`, each on its own weight subgraph, in a chain: MatMul i reads a Parameter
    [?, ?, K] plus 0 * sum(output of MatMul i - 1), so they run one after the other as in the head (independent
    MatMuls may be run concurrently by the plugin); the chain adds two tiny ops per MatMul."""
    params, prev, last = {}, None, None
    for op in model.get_ordered_ops():
        w = op.input_value(1) if op.get_type_name() == "MatMul" else None
        if w is None or w.get_node().get_type_name() not in ("Convert", "Constant") or len(w.get_partial_shape()) != 2:
            continue
        k = w.get_partial_shape()[1].get_length()
        x = params.setdefault(k, ops.parameter([-1, -1, k], np.float32, name=f"x{k}")).output(0)
        if prev is not None:
            x = ops.add(x, ops.multiply(ops.reduce_sum(prev, np.int64(-1), keep_dims=True), np.float32(0)))
        prev = last = ops.matmul(x, w, transpose_a=False, transpose_b=True).output(0)
    return ov.Model([ops.result(last)], list(params.values()), "matmul_floor")


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


def step_input(model: ov.Model):
    """A head's hidden size (feeds() makes its inputs), or a floor model's whole one-token feed."""
    if model.get_friendly_name() != "matmul_floor":
        return model.input("hidden_states").get_partial_shape()[2].get_length()
    return {i.get_any_name(): np.zeros((1, 1, i.get_partial_shape()[2].get_length()), np.float32) for i in model.inputs}


Compiled = dict[tuple[str, str], tuple[ov.InferRequest, int, dict]]


def compile_all(heads: dict[str, str], profile: bool = False, floor: bool = False) -> Compiled:
    core = ov.Core()
    out = {}
    models = {name: core.read_model(xml) for name, xml in heads.items()}
    if floor:
        models.update({f"{name}:matmul_floor": matmul_floor(m) for name, m in list(models.items())})
    for name, model in models.items():
        hidden = step_input(model)
        for mode, props in MODES.items():
            compiled = core.compile_model(model, "CPU", {**props, **({"PERF_COUNT": True} if profile else {})})
            info = {k: text(compiled.get_property(k)) for k in REPORTED}
            out[(name, mode)] = (compiled.create_infer_request(), hidden, info)
    return out


def summary(ms: list[float], others: list[float], max_others: float | None) -> dict:
    out = {"ms": statistics.median(ms), "best_ms": min(ms), "rounds_ms": ms, "others_cores": others}
    if max_others is not None:
        quiet = [m for m, o in zip(ms, others) if o <= max_others]
        out.update(quiet_ms=statistics.median(quiet) if quiet else None, quiet_rounds=len(quiet))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("heads", nargs="+", help="NAME=path/to/openvino_mtp_model.xml")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="add the per-op time split of one step (PERF_COUNT)")
    ap.add_argument("--max-others", type=float, help="quiet_ms: median of rounds where others used <= this many cores")
    ap.add_argument("--matmul-floor", action="store_true", help="also time each head's weight MatMuls alone")
    a = ap.parse_args()
    heads = dict(h.split("=", 1) for h in a.heads)
    compiled = compile_all(heads, a.profile, a.matmul_floor)
    for request, hidden, _ in compiled.values():  # warm-up: first inferences allocate and pick kernels
        one_run(request, hidden, a.prefill, 3)
    rounds, others = {key: [] for key in compiled}, {key: [] for key in compiled}
    for _ in range(a.rounds):
        for key, (request, hidden, _) in compiled.items():
            before, t = busy_jiffies(), time.perf_counter()
            rounds[key].append(one_run(request, hidden, a.prefill, a.steps))
            others[key].append(round(others_cores(before, busy_jiffies(), time.perf_counter() - t), 2))
    result = {name: {mode: summary(rounds[key], others[key], a.max_others) | compiled[key][2]
                     for mode in MODES for key in [(name, mode)]} for name in dict.fromkeys(n for n, _ in compiled)}
    if a.profile:
        for (name, mode), (request, hidden, _) in compiled.items():
            if not isinstance(hidden, dict):  # heads only, not their floors
                result[name][mode]["op_us"] = op_split(request, hidden, a.prefill)
    result["load"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
