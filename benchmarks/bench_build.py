"""Build benchmark: `irsurgeon build-mtp` on a realistically sized checkpoint, one subprocess per weight format.

    python benchmarks/bench_build.py [--work DIR] [--formats f16,f32,int8,int4] [--big-shard-gib 4] [--keep] [--moe]
                                  [--no-latency]

The checkpoint (bf16, seeded): hidden 2048, 16 heads / 2 KV heads, head_dim 256, intermediate 6144. Its 15 `mtp.*`
tensors (~73 M parameters, ~147 MB) sit in their own shard beside a large non-MTP shard; both are listed in
model.safetensors.index.json, so a build that reads only what it needs touches ~147 MB of the checkpoint.

Per format, for the child process: wall time; peak RSS (os.wait4's rusage); bytes read, from /proc/self/io as the
child exits (with VmHWM, the same peak seen from inside): `read_bytes` came from the device (the checkpoint is evicted from the page cache with posix_fadvise
before each run, so it counts the shards really read), `rchar` went through read() calls (mmap reads are not in it);
the .bin size; peak RSS per byte of the head's shard (RSS/mtp; the shard is the head's bf16 bytes plus a header of a
few KB) and the same above the import baseline `python -c "import openvino, nncf"` ((RSS-base)/mtp: the figure the
int4/int8 budget of 1.5x is about). Then the int4/f16 .bin ratio, with the machine's load average before each run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = dict(hidden=2048, heads=16, kv_heads=2, head_dim=256, intermediate=6144, vocab=151936, layers=24)
# --moe: Qwen3.6-35B-A3B's MoE sizes (256 experts, top-8, expert and shared expert 512): ~0.8 G head parameters
MOE_SPEC = dict(SPEC, num_experts=256, top_k=8, expert_size=512, shared_expert_size=512)
MTP_SHARD = "model-00002-of-00002.safetensors"
BIG_SHARD = "model-00001-of-00002.safetensors"
CHUNK = 64 << 20

# Runs the CLI in the child and leaves its /proc/self/io behind at exit (the counters vanish once it is reaped).
CHILD = """
import atexit, sys
io_path = sys.argv[1]
def dump():
    with open("/proc/self/io") as io, open("/proc/self/status") as status, open(io_path, "w") as dst:
        dst.write(io.read() + "".join(l for l in status if l.startswith("VmHWM")))
atexit.register(dump)
sys.argv = ["irsurgeon"] + sys.argv[2:]
from irsurgeon.cli import main
main()
"""


def write_big_shard(path: Path, hidden: int, gib: float) -> dict[str, str]:
    """A non-MTP shard of about `gib` GiB (embedding-like bf16 tensors), streamed so it never sits in memory."""
    import numpy as np

    rows = max(1, int(gib * (1 << 30)) // (2 * hidden) // 4)
    names = [f"model.language_model.layers.{i}.mlp.stacked.weight" for i in range(4)]
    header, offset = {}, 0
    for name in names:
        n = rows * hidden * 2
        header[name] = {"dtype": "BF16", "shape": [rows, hidden], "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    pattern = np.random.default_rng(0).integers(0, 1 << 16, CHUNK // 2, dtype=np.uint16).tobytes()
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        left = offset
        while left:
            fh.write(pattern[:min(left, CHUNK)])
            left -= min(left, CHUNK)
        fh.flush()
        os.fsync(fh.fileno())
    return {name: path.name for name in names}


def write_checkpoint(root: Path, big_gib: float, moe: bool = False) -> None:
    """Runs in its own process: the benchmark's parent stays small, since a child's peak RSS as the kernel reports
    it includes the memory of the process it was forked from."""
    import numpy as np

    from irsurgeon.synth.checkpoint import SynthSpec, checkpoint_config, mtp_tensors
    from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors

    spec = SynthSpec(**(MOE_SPEC if moe else SPEC))
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(checkpoint_config(spec), indent=1))
    weight_map = write_big_shard(root / BIG_SHARD, spec.hidden, big_gib)
    bits = {k: f32_to_bf16(v) for k, v in mtp_tensors(spec, np.random.default_rng(0)).items()}
    write_safetensors(root / MTP_SHARD, bits, {k: "BF16" for k in bits})
    with open(root / MTP_SHARD, "rb+") as fh:
        os.fsync(fh.fileno())
    weight_map.update({name: MTP_SHARD for name in bits})
    index = {"metadata": {"total_size": sum((root / f).stat().st_size for f in (BIG_SHARD, MTP_SHARD))},
             "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))


def evict(root: Path) -> None:
    """Drop the checkpoint's pages from the page cache so the next run reads them from the device."""
    for f in root.iterdir():
        if not f.is_file():
            continue
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run_child(args: list[str]) -> dict:
    """Run `python args`; wall seconds, peak RSS bytes and exit code of that child alone."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": time.perf_counter() - start, "rss": usage.ru_maxrss * 1024, "rc": proc.returncode, "out": out}


def build(ckpt: Path, out: Path, fmt: str) -> dict:
    evict(ckpt)
    io_file = out.with_suffix(".io")
    result = run_child(["-c", CHILD, str(io_file), "build-mtp", str(ckpt), "-o", str(out), "--weight-format", fmt,
                        "--force"])  # a kept --work directory holds the last run's head
    if result["rc"] != 0:
        raise SystemExit(f"build-mtp --weight-format {fmt} failed:\n{result['out']}")
    io = dict(line.split(":", 1) for line in io_file.read_text().splitlines())
    result.update(read_bytes=int(io["read_bytes"]), rchar=int(io["rchar"]), hwm=int(io["VmHWM"].split()[0]) * 1024,
                  bin=(out / "openvino_mtp_model.bin").stat().st_size)
    return result


def baselines() -> int:
    """Print the import-only peak RSS of `import openvino` and of `import openvino, nncf`; returns the latter."""
    run_child(["-c", "import openvino, nncf"])  # warm the page cache for the libraries, not measured
    rss = {}
    for libs in ("openvino", "openvino, nncf"):
        r = run_child(["-c", f"import {libs}"])
        rss[libs] = r["rss"]
        print(f"import-only baseline (python -c 'import {libs}'): peak RSS {mb(r['rss']).strip()} MB, "
              f"{r['wall']:.2f} s; load {os.getloadavg()[0]:.1f}")
    return rss["openvino, nncf"]


def mb(n: float) -> str:
    return f"{n / 1e6:9.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="directory for the checkpoint and outputs (default: a temporary one)")
    ap.add_argument("--formats", default="f16,f32,int8,int4")
    ap.add_argument("--big-shard-gib", type=float, default=4.0, help="size of the non-MTP shard")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--moe", action="store_true",
                    help="a MoE head at Qwen3.6-35B-A3B sizes; then also the MoE graph forms' draft-step latency "
                         "against optimum-intel's MoE head (benchmarks/bench_moe.py --geometry reference)")
    ap.add_argument("--no-latency", action="store_true", help="--moe: skip the graph forms' latency comparison")
    ap.add_argument("--write-checkpoint", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.write_checkpoint:
        return write_checkpoint(a.write_checkpoint, a.big_shard_gib, a.moe)
    work = a.work or Path(tempfile.mkdtemp(prefix="irsurgeon-bench-"))
    ckpt = work / ("ckpt-moe" if a.moe else "ckpt")
    try:
        if not (ckpt / "model.safetensors.index.json").is_file():
            t = time.perf_counter()
            made = run_child([__file__, "--write-checkpoint", str(ckpt), "--big-shard-gib", str(a.big_shard_gib)]
                             + (["--moe"] if a.moe else []))
            if made["rc"] != 0:
                raise SystemExit(f"writing the checkpoint failed:\n{made['out']}")
            print(f"checkpoint written in {time.perf_counter() - t:.1f} s: {ckpt}")
        sizes = {f: (ckpt / f).stat().st_size for f in (MTP_SHARD, BIG_SHARD)}
        print(f"shards: mtp {mb(sizes[MTP_SHARD]).strip()} MB, non-MTP {mb(sizes[BIG_SHARD]).strip()} MB")
        base = baselines()
        print(f"{'format':8}{'wall s':>8}{'peak RSS MB':>13}{'(VmHWM)':>9}{'RSS/mtp':>9}{'(RSS-base)/mtp':>16}"
              f"{'read_bytes MB':>15}{'rchar MB':>10}{'.bin MB':>10}{'load':>6}")
        results = {}
        for fmt in a.formats.split(","):
            load = os.getloadavg()[0]
            r = results[fmt] = build(ckpt, work / f"out-{fmt}", fmt)
            print(f"{fmt:8}{r['wall']:8.1f}{mb(r['rss']):>13}{mb(r['hwm']):>9}{r['rss'] / sizes[MTP_SHARD]:9.2f}"
                  f"{(r['rss'] - base) / sizes[MTP_SHARD]:16.2f}{mb(r['read_bytes']):>15}{mb(r['rchar']):>10}"
                  f"{mb(r['bin']):>10}{load:6.1f}")
        if "int4" in results and "f16" in results:
            print(f"int4/f16 .bin size ratio: {results['int4']['bin'] / results['f16']['bin']:.3f}")
        if a.moe and not a.no_latency:
            forms = run_child([str(Path(__file__).parent / "bench_moe.py"), "--geometry", "reference"])
            print(forms["out"])
    finally:
        if not a.keep and a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
