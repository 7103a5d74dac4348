"""Peak memory of reading every tensor of a ~1 GB `pytorch_model.bin`, against the bytes of the tensors kept.

    python3 benchmarks/bench_torch_bin.py [--mib 1024] [--rounds 3] [--dir DIR]

Writes a torch.save zip without torch (lab/torch_zip.py: the layout torch 2.13.0 writes; numpy data, each storage
streamed into the zip, never held whole): --mib MiB of tensors, 64 MiB each, f32, f16 and bf16 in turn, the last
two tied to one storage. Then, per round, a child process (fresh, so its peak is this read's alone) opens it with
irsurgeon.weights.torch_bin.TorchBinFile, reads every tensor with get() (f16 kept as f16, bf16 decoded to f32) and
keeps them all. Printed per round: the child's peak RSS (resource.getrusage ru_maxrss), its RSS before the first
tensor (Python, numpy, irsurgeon), the bytes of the arrays kept, peak / kept (the target: at most 1.2), and seconds.
The file is read with pread into each array: the page cache holds the file's pages, never the process.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # irsurgeon and the lab package of this checkout

import numpy as np  # noqa: E402  (sys.path set above)

from lab import torch_zip as tz  # noqa: E402  (sys.path set above)

TENSOR_MIB = 64
DTYPES = ("F32", "F16", "BF16")

CHILD = """
import json, resource, sys, time
from irsurgeon.weights.torch_bin import TorchBinFile
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
start = time.perf_counter()
f = TorchBinFile(sys.argv[1])
kept = [f.get(name) for name in f.tensors]
seconds = time.perf_counter() - start
f.close()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "peak": peak, "kept": sum(a.nbytes for a in kept), "tensors": len(kept),
                  "seconds": seconds}))
"""


def chunks(seed: int, numel: int, dtype: str, piece: int = 1 << 22):
    """A tensor's bytes, `piece` elements at a time, seeded (never the whole tensor in memory)."""
    rng = np.random.default_rng(seed)
    for at in range(0, numel, piece):
        values = rng.standard_normal(min(piece, numel - at), dtype=np.float32)
        yield (values.astype(np.float16) if dtype == "F16" else
               (values.view(np.uint32) >> 16).astype(np.uint16) if dtype == "BF16" else values).tobytes()


def write(path: Path, mib: int) -> int:
    """The .bin; returns its tensors' stored bytes."""
    entries, storages, stored = {}, {}, 0
    for k in range(max(1, mib // TENSOR_MIB)):
        dtype = DTYPES[k % len(DTYPES)]
        itemsize = 4 if dtype == "F32" else 2
        numel = (TENSOR_MIB << 20) // itemsize
        storage = tz.storage_id(str(k), dtype, numel)
        entries[f"model.layers.{k}.weight"] = tz.tensor_call(storage, (numel // 4096, 4096))
        storages[str(k)] = chunks(k, numel, dtype)
        stored += numel * itemsize
    entries["lm_head.weight"] = entries[f"model.layers.{k}.weight"]  # tied: one storage, two names
    tz.write(path, tz.dumps(tz.Call(tz.ORDERED_DICT, (list(entries.items()),))), storages)
    return stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the file (default: a temp folder)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        path = Path(tmp) / "pytorch_model.bin"
        stored = write(path, a.mib)
        print(f"{path.name}: {path.stat().st_size / 2**20:.0f} MiB, {stored / 2**20:.0f} MiB of stored tensors")
        ratios = []
        for r in range(a.rounds):
            out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True,
                                 cwd=ROOT)
            m = json.loads(out.stdout)
            ratios.append(m["peak"] / m["kept"])
            print(f"round {r + 1}: {m['tensors']} tensors, kept {m['kept'] / 2**20:.0f} MiB, RSS before "
                  f"{m['before'] / 2**20:.0f} MiB, peak {m['peak'] / 2**20:.0f} MiB, peak / kept "
                  f"{ratios[-1]:.3f}, {m['seconds']:.2f} s")
        print(f"peak RSS / bytes kept: median {statistics.median(ratios):.3f} (target <= 1.2)")


if __name__ == "__main__":
    main()
