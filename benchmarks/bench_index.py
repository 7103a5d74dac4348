"""How long the checkpoint index takes to read, against its size: 1 k, 100 k and 1 M tensor names over 4 shards.

    python3 benchmarks/bench_index.py [--rounds 3]

Prints per size the median seconds of Checkpoint.open (weight_map + shard paths) and the time per entry, in
alternating rounds; the per-entry time must stay flat (linear parsing), not grow with the index.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from irsurgeon.weights.checkpoint import Checkpoint

SIZES = (1_000, 100_000, 1_000_000)


def make(root: Path, n: int) -> Path:
    d = root / str(n)
    d.mkdir()
    shards = [f"model-{i:05d}-of-00004.safetensors" for i in range(4)]
    for s in shards:
        (d / s).write_bytes(b"")
    wm = {f"model.layers.{i}.mlp.w": shards[i % 4] for i in range(n)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    (d / "config.json").write_text("{}")
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {n: make(Path(tmp), n) for n in SIZES}
        times: dict[int, list[float]] = {n: [] for n in SIZES}
        for _ in range(a.rounds):
            for n in SIZES:  # alternating: every size once per round
                start = time.perf_counter()
                Checkpoint.open(dirs[n]).close()
                times[n].append(time.perf_counter() - start)
    base = statistics.median(times[SIZES[0]]) / SIZES[0]
    for n in SIZES:
        t = statistics.median(times[n])
        print(f"{n:>9} entries: {t:7.3f} s median of {a.rounds}, {1e6 * t / n:6.2f} us/entry, "
              f"{t / n / base:5.2f}x the per-entry time of {SIZES[0]}")


if __name__ == "__main__":
    main()
