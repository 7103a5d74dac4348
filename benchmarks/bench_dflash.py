"""DFlash drafts, irsurgeon vs optimum-intel 2.2.0's export: the cost to produce one, and one draft call; ratios.

    python benchmarks/bench_dflash.py [--sizes tiny,real] [--rounds 3] [--warmup 1] [--work DIR] [--keep]
        [--venv /tmp/dflash-ref] [--step-rounds N] [--steps N] [--no-step]

Sizes, each one draft checkpoint and its target, the same for both tools:
    tiny  fixtures/dflash: a 2-layer draft of hidden 32 and its 4-layer Qwen3 target
    real  scripts/make_dflash_real_size.py, made under --work: z-lab's Qwen3.5-27B-DFlash shape (5 layers, hidden
          5120, 1.73 G parameters, random bf16: 3.46 GB) and a target of the geometry the pair check reads
1. Cost, each command a fresh child process, alternating irsurgeon, optimum, irsurgeon, ... after --warmup untimed
   pairs (the libraries and the checkpoint then come from the page cache for both):
     irsurgeon  python -m irsurgeon patch COPY --checkpoint CKPT --weight-format f32   (COPY: a sparse copy of the
                target, made before the clock starts; the patch builds the draft and annotates the target)
     optimum    optimum-cli export openvino --model CKPT --task text-generation-with-past --trust-remote-code
                --disable-convert-tokenizer --weight-format fp32 OUT   (the --venv's, offline)
   wall seconds around the child; peak RSS as the kernel accounts it (/usr/bin/time -v "Maximum resident set size":
   the largest process of the tree) and the tree's summed PSS, sampled at 5 Hz from /proc. Before each run the
   tool's previous output is removed and the page cache written back (sync), so no run pays for another's writes
   (irsurgeon fsyncs what it commits; optimum's last dirty pages are written back after its clock stops).
2. The draft step: benchmarks/dflash_step.py in a fresh process on the last round's two draft IRs (both modes,
   alternating rounds, median over --steps calls; the memory-bandwidth floor beside it). At the real size each IR
   is compiled for f32 for its own round only (memory).
Every ratio is irsurgeon/optimum pair by pair, its median printed against its target (cost: wall <= 0.1, peak RSS
<= 0.3; step <= 1.0), with the load averages. Everything under --work is removed at the end unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.2  # the tree's PSS is read this often (reading smaps_rollup walks the page tables: not free)
TARGETS = {"wall": 0.1, "rss": 0.3, "step": 1.0}
STEP = {"tiny": dict(rounds=9, steps=64, one_at_a_time=""), "real": dict(rounds=7, steps=12, one_at_a_time="f32")}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class Pair:
    size: str
    target: Path
    ckpt: Path
    work: Path


@dataclass(frozen=True)
class Run:
    wall: float  # seconds
    rss: int  # bytes: the kernel's peak of the largest process
    tree: int  # bytes: the largest sampled PSS sum over the process tree
    bin_bytes: int  # the draft .bin written


def children(pid: int) -> list[int]:
    """pid's descendants, from /proc/PID/task/TID/children (gone processes are skipped)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            kids = [int(k) for k in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
        for k in kids:
            out += [k, *children(k)]
    return out


def tree_pss(pid: int) -> int:
    """Bytes of the tree's summed PSS: a page shared by processes (optimum-cli forks helpers) is counted once."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            rollup = Path(f"/proc/{p}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def measure(cmd: list, env: dict, log: Path, out_bin: Path) -> Run:
    """Run cmd under /usr/bin/time -v (output to log); wall, the kernel's peak RSS, the sampled tree PSS peak."""
    timing = log.with_suffix(".time")
    start = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(["/usr/bin/time", "-v", "-o", str(timing), *map(str, cmd)], stdout=sink,
                                stderr=subprocess.STDOUT, env={**os.environ, **env})
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.wait(SAMPLE_S):
            peak[0] = max(peak[0], tree_pss(proc.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    if rc:
        raise SystemExit(f"{cmd[0]} ... failed (exit {rc}); its output:\n{log.read_text()[-3000:]}")
    kb = next(int(line.split(":")[1]) for line in timing.read_text().splitlines()
              if "Maximum resident set size" in line)
    return Run(wall, kb * 1024, peak[0], out_bin.stat().st_size)


def prepare(size: str, work: Path) -> Pair:
    if size == "tiny":
        return Pair(size, ROOT / "fixtures" / "dflash" / "target", ROOT / "fixtures" / "dflash" / "ckpt", work / size)
    made = work / size / "pair"
    t = time.perf_counter()
    subprocess.run([sys.executable, ROOT / "scripts" / "make_dflash_real_size.py", made], check=True)
    print(f"{size}: pair made in {time.perf_counter() - t:.0f} s")
    return Pair(size, made / "target", made / "ckpt", work / size)


def run_irsurgeon(pair: Pair) -> Run:
    out = pair.work / "irsurgeon"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(pair.target), str(out)], check=True)
    os.sync()
    cmd = [sys.executable, "-m", "irsurgeon", "patch", out, "--checkpoint", pair.ckpt, "--weight-format", "f32"]
    return measure(cmd, {"PYTHONPATH": str(ROOT)}, pair.work / "irsurgeon.log",
                   out / "dflash_draft" / "openvino_model.bin")


def run_optimum(pair: Pair, venv: Path) -> Run:
    out = pair.work / "optimum"
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    cmd = [venv / "bin" / "optimum-cli", "export", "openvino", "--model", pair.ckpt, "--task",
           "text-generation-with-past", "--trust-remote-code", "--disable-convert-tokenizer", "--weight-format",
           "fp32", out]
    return measure(cmd, OFFLINE, pair.work / "optimum.log", out / "openvino_model.bin")


def cost(pair: Pair, a) -> list[dict]:
    """--warmup untimed pairs, then --rounds pairs: irsurgeon then optimum, each with the load average before it."""
    rows = []
    for r in range(a.warmup + a.rounds):
        load = os.getloadavg()[0]
        irs = run_irsurgeon(pair)
        opt = run_optimum(pair, a.venv)
        if r >= a.warmup:
            rows.append({"load": load, "irsurgeon": irs, "optimum": opt})
        print(f"{pair.size}: {'warm-up' if r < a.warmup else 'round'} {r + 1 - a.warmup * (r >= a.warmup)}: "
              f"irsurgeon {irs.wall:.1f} s, optimum {opt.wall:.1f} s (load {load:.2f})", flush=True)
    return rows


def mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e3:.0f} KB"


def verdict(ratio: float, key: str) -> str:
    return f"{ratio:.3f} (target <= {TARGETS[key]}: {'met' if ratio <= TARGETS[key] else 'MISSED'})"


def print_cost(size: str, rows: list[dict]) -> None:
    print(f"\n{size}: cost to produce the draft (f32 weights), {len(rows)} alternating rounds")
    print(f"{'round':>5} {'load':>5} | {'irs wall':>9} {'opt wall':>9} {'ratio':>6} | {'irs RSS':>9} {'opt RSS':>9} "
          f"{'ratio':>6} | {'irs PSS':>9} {'opt PSS':>9} {'ratio':>6} | {'irs .bin':>9} {'opt .bin':>9}")
    for i, row in enumerate(rows, 1):
        s, o = row["irsurgeon"], row["optimum"]
        print(f"{i:>5} {row['load']:>5.2f} | {s.wall:>7.2f} s {o.wall:>7.2f} s {s.wall / o.wall:>6.3f} | "
              f"{mb(s.rss):>9} {mb(o.rss):>9} {s.rss / o.rss:>6.3f} | {mb(s.tree):>9} {mb(o.tree):>9} "
              f"{s.tree / o.tree:>6.3f} | {mb(s.bin_bytes):>9} {mb(o.bin_bytes):>9}")
    med = {k: statistics.median(getattr(r["irsurgeon"], k) / getattr(r["optimum"], k) for r in rows)
           for k in ("wall", "rss", "tree")}
    print(f"median ratio: wall {verdict(med['wall'], 'wall')}, peak RSS {verdict(med['rss'], 'rss')}, "
          f"tree PSS {verdict(med['tree'], 'rss')}")


def step(pair: Pair, a) -> None:
    """benchmarks/dflash_step.py on the two IRs the last round left; its JSON printed as a table."""
    opts = dict(STEP[pair.size], **{k: v for k, v in (("rounds", a.step_rounds), ("steps", a.steps)) if v})
    cmd = [sys.executable, Path(__file__).with_name("dflash_step.py"),
           f"irsurgeon={pair.work / 'irsurgeon' / 'dflash_draft' / 'openvino_model.xml'}",
           f"optimum={pair.work / 'optimum' / 'openvino_model.xml'}", "--rounds", opts["rounds"],
           "--steps", opts["steps"], "--one-at-a-time", opts["one_at_a_time"]]
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode:
        raise SystemExit(f"draft step failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    g, bw = res["geometry"], res["bandwidth"]
    print(f"\n{pair.size}: one draft call (block {g['block']}, 4 new target rows after a 128-row context), median of "
          f"{opts['steps']} calls a round, {opts['rounds']} alternating rounds; numpy read {bw / 1e9:.1f} GB/s")
    print(f"{'mode':>8} | {'irs ms':>9} {'opt ms':>9} {'ratio':>26} | {'floor ms':>9} {'weights':>9} | "
          f"{'precision':>9} {'KV':>4} | {'max |diff|':>10} | loads")
    for mode, m in res["modes"].items():
        s, o = m["irsurgeon"], m["optimum"]
        print(f"{mode:>8} | {s['ms']:>9.3f} {o['ms']:>9.3f} {verdict(m['ratio'], 'step'):>26} | "
              f"{s['weight_bytes'] / bw * 1e3:>9.3f} {mb(s['weight_bytes']):>9} | {s['INFERENCE_PRECISION_HINT']:>9} "
              f"{s['KV_CACHE_PRECISION']:>4} | {m['max_abs_diff']:>10.3g} | {m['loads']}")
        print(f"{'':>8}   rounds irsurgeon {s['rounds_ms']}, optimum {o['rounds_ms']}; best rounds' ratio "
              f"{min(s['rounds_ms']) / min(o['rounds_ms']):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,real", help="comma-separated, from tiny, real")
    ap.add_argument("--rounds", type=int, default=3, help="timed cost rounds (pairs)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed cost rounds first")
    ap.add_argument("--work", type=Path, default=Path("/tmp/irsurgeon-bench-dflash"))
    ap.add_argument("--venv", type=Path, default=Path("/tmp/dflash-ref"), help="optimum-intel 2.2.0's environment "
                    "(scripts/make_dflash_reference.py says how it is made)")
    ap.add_argument("--step-rounds", type=int, help="draft-step rounds (default: 9 tiny, 7 real)")
    ap.add_argument("--steps", type=int, help="draft calls timed a round (default: 64 tiny, 12 real)")
    ap.add_argument("--keep", action="store_true", help="keep --work (the real pair takes 3.5 GB, the IRs 14 GB)")
    ap.add_argument("--no-step", action="store_true", help="the cost only")
    a = ap.parse_args()
    sizes = a.sizes.split(",")
    if set(sizes) - set(STEP) or not (a.venv / "bin" / "optimum-cli").is_file():
        raise SystemExit(f"sizes are tiny, real; optimum-cli must be in {a.venv}/bin")
    print(f"load {os.getloadavg()}, {os.cpu_count()} CPUs")
    try:
        for size in sizes:
            pair = prepare(size, a.work)
            pair.work.mkdir(parents=True, exist_ok=True)
            print_cost(size, cost(pair, a))
            if not a.no_step:
                step(pair, a)
    finally:
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    print(f"\nload {os.getloadavg()}")


if __name__ == "__main__":
    main()
