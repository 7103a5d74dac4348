"""One stateful DFlash draft call, timed for two draft IRs side by side in one process; prints one JSON object.

    python benchmarks/dflash_step.py irsurgeon=DIR/openvino_model.xml optimum=DIR/openvino_model.xml
        [--context 128] [--delta 4] [--steps 16] [--rounds 3] [--one-at-a-time MODES]

The feed is genai's (openvino.genai dflash_strategy.cpp, its shapes: irsurgeon.families.dflash.model), the same arrays
for both IRs: a first call with `--context` target rows, then `--steps` calls of `delta` new target rows (hidden_states
[1, delta, n*H]) and a block [seed, MASK x K] (inputs_embeds [1, block_size, H], block_size from the IR's config.json),
position_ids iota(committed, committed + delta + block_size), attention_mask ones; the state grows by delta a call.
A round of one IR = reset_state, the first call, then the timed calls; its latency is their median. Rounds alternate
between the IRs (irsurgeon, optimum, irsurgeon, ...), after one untimed warm-up round each. Modes:
    default  nothing set: the CPU's defaults plus the IR's rt_info runtime_options (both IRs carry the same)
    f32      INFERENCE_PRECISION_HINT=f32
--one-at-a-time f32 compiles each IR of that mode for its round and drops it after (a real-size draft compiled for f32
holds twice its f32 weights; two at once would not fit beside the other users of the machine); not timed.
Also per mode: each IR's weight bytes as the compiled model reads them (Constant elements of rank >= 2 times the
inference precision's size) and the memory-bandwidth floor of one call, those bytes over the bandwidth of a numpy
read of a buffer larger than the caches (two threads, as the plugin uses both cores; the better of a measurement
before and after the calls); and the largest difference of
the last call's outputs between the IRs (same inputs: the two graphs compute the same function).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np
import openvino as ov

MODES = {"default": {}, "f32": {"INFERENCE_PRECISION_HINT": "f32"}}
FLOOR_BYTES = 2 << 30  # the numpy read's buffer: larger than any cache of the machine's (L3 480 MiB)


def geometry(xml: Path) -> dict:
    """H and n*H from the IR's inputs, block_size from the config.json beside it (the checkpoint's)."""
    model = ov.Core().read_model(xml)
    config = json.loads((xml.parent / "config.json").read_text())
    return {"hidden": model.input("inputs_embeds").get_partial_shape()[2].get_length(),
            "features": model.input("hidden_states").get_partial_shape()[2].get_length(),
            "block": int(config.get("block_size") or config.get("dflash_config", {})["block_size"])}


def calls(g: dict, context: int, delta: int, steps: int) -> list[dict[str, np.ndarray]]:
    """The first call and `steps` timed calls, as genai feeds a stateful draft (module docstring)."""
    rng = np.random.default_rng(7)
    out, committed = [], 0
    for rows in [context] + [delta] * steps:
        total = committed + rows + g["block"]
        out.append({"inputs_embeds": rng.standard_normal((1, g["block"], g["hidden"]), dtype=np.float32),
                    "hidden_states": rng.standard_normal((1, rows, g["features"]), dtype=np.float32),
                    "position_ids": np.arange(committed, total, dtype=np.int64)[None],
                    "attention_mask": np.ones((1, total), np.int64), "beam_idx": np.zeros(1, np.int32)})
        committed += rows
    return out


def one_round(request: ov.InferRequest, feeds: list[dict]) -> tuple[float, np.ndarray]:
    """Median ms of the timed calls after the first one, and the last call's output."""
    request.reset_state()
    request.infer(feeds[0])
    times = []
    for f in feeds[1:]:
        t = time.perf_counter()
        request.infer(f)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, request.get_output_tensor(0).data.copy()


def weight_bytes(compiled: ov.CompiledModel, model: ov.Model) -> int:
    precision = compiled.get_property("INFERENCE_PRECISION_HINT")
    elements = sum(int(np.prod(op.get_output_shape(0))) for op in model.get_ordered_ops()
                   if op.get_type_name() == "Constant" and len(op.get_output_shape(0)) >= 2)
    return elements * precision.size


def bandwidth() -> float:
    """Bytes per second of a two-thread numpy read of FLOOR_BYTES (best of 5; the reduction releases the GIL)."""
    buf = np.ones(FLOOR_BYTES // 8, np.uint64)
    halves = np.array_split(buf, 2)
    best = float("inf")
    for _ in range(5):
        threads = [threading.Thread(target=np.bitwise_or.reduce, args=(h,)) for h in halves]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        best = min(best, time.perf_counter() - t)
    return FLOOR_BYTES / best


class Draft:
    """One IR in one mode: compiled on demand (and dropped after a round when one at a time)."""

    def __init__(self, core: ov.Core, xml: Path, props: dict, keep: bool):
        self.core, self.xml, self.props, self.keep = core, xml, props, keep
        self.request, self.bytes, self.info = None, 0, {}

    def get(self) -> ov.InferRequest:
        if self.request is None:
            model = self.core.read_model(self.xml)
            compiled = self.core.compile_model(model, "CPU", self.props)
            self.bytes = weight_bytes(compiled, model)
            self.info = {k: compiled.get_property(k).to_string() for k in ("INFERENCE_PRECISION_HINT",
                                                                           "KV_CACHE_PRECISION")}
            self.request = compiled.create_infer_request()
        return self.request

    def done(self) -> None:
        if not self.keep:
            self.request = None


def run_mode(core: ov.Core, irs: dict[str, Path], props: dict, feeds: list[dict], a, alone: bool) -> dict:
    drafts = {name: Draft(core, xml, props, keep=not alone) for name, xml in irs.items()}
    for d in drafts.values():  # warm-up: first inferences allocate, repack weights and pick kernels
        one_round(d.get(), feeds[:4])
        d.done()
    ms, loads, last = {n: [] for n in drafts}, [], {}
    for _ in range(a.rounds):
        loads.append(round(os.getloadavg()[0], 2))
        for name, d in drafts.items():
            t, last[name] = one_round(d.get(), feeds)
            ms[name].append(round(t, 3))
            d.done()
    first, second = drafts
    out = {n: {"ms": statistics.median(v), "rounds_ms": v, "weight_bytes": drafts[n].bytes, **drafts[n].info}
           for n, v in ms.items()}
    out["ratio"] = statistics.median(x / y for x, y in zip(ms[first], ms[second]))
    out["loads"] = loads
    out["max_abs_diff"] = float(np.abs(last[first] - last[second]).max())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("irs", nargs=2, help="NAME=openvino_model.xml (the ratio is the first over the second)")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--delta", type=int, default=4)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--one-at-a-time", default="", help="modes (comma-separated) whose IRs are compiled per round")
    a = ap.parse_args()
    irs = {name: Path(xml) for name, xml in (s.split("=", 1) for s in a.irs)}
    g = geometry(next(iter(irs.values())))
    feeds = calls(g, a.context, a.delta, a.steps)
    core, alone = ov.Core(), set(filter(None, a.one_at_a_time.split(",")))
    result = {"geometry": g, "bandwidth": bandwidth()}  # before and after: the better of the two (load varies)
    result["modes"] = {m: run_mode(core, irs, props, feeds, a, m in alone) for m, props in MODES.items()}
    result["bandwidth"] = max(result["bandwidth"], bandwidth())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
