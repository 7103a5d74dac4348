"""What the benchmarks that time whole commands share (bench_dflash, bench_eagle3: irsurgeon's patch against
optimum-cli's export of the same draft; bench_tune: `irsurgeon tune` itself): a command timed as a child process, its
peak memory, the bundled pairs, alternating rounds, their spread, and the sizes loop with its work folder.

    measure(cmd, env, log)   a child under /usr/bin/time -v: wall seconds around it, user + system CPU seconds, the
                             kernel's peak RSS of its largest process; with sample=True also the tree's summed PSS
                             read at 5 Hz from /proc (a page shared by forked helpers counted once)
    fixture_pair(key, ...)   fixtures/<key>/target and fixtures/<key>/ckpt as a Pair
    run_irsurgeon / run_optimum   `irsurgeon patch` of a sparse copy of the target / `optimum-cli export openvino`
                             of the checkpoint, the previous output removed and the page cache written back first
    cost(pair, a, ...)       --warmup untimed then --rounds timed pairs of the two, alternating
    spread(values, fmt)      min / median / max
    arguments(...), run_sizes(...)   the two export benchmarks' common options and their loop over --sizes
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 0.2  # the tree's PSS is read this often (reading smaps_rollup walks the page tables: not free)
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
    cpu: float  # user + system seconds
    rss: int  # bytes: the kernel's peak of the largest process
    tree: int  # bytes: the largest sampled PSS sum over the process tree (0: not sampled)
    bin_bytes: int  # the .bin written (0: none named)


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


def measure(cmd: list, env: dict, log: Path, out_bin: Path | None = None, sample: bool = False,
            stdout: Path | None = None) -> Run:
    """cmd under /usr/bin/time -v, its output to log (stdout alone to `stdout` when given): wall, user + sys, the
    kernel's peak RSS, the sampled tree PSS peak (sample), the size of out_bin."""
    timing = log.with_suffix(".time")
    start = time.perf_counter()
    with open(log, "w") as sink, open(stdout or os.devnull, "w") as out:
        proc = subprocess.Popen(["/usr/bin/time", "-v", "-o", str(timing), *map(str, cmd)],
                                stdout=out if stdout else sink, stderr=sink if stdout else subprocess.STDOUT,
                                env={**os.environ, **env})
        peak, stop = [0], threading.Event()

        def sampler() -> None:
            while not stop.wait(SAMPLE_S):
                peak[0] = max(peak[0], tree_pss(proc.pid))

        thread = threading.Thread(target=sampler)
        if sample:
            thread.start()
        rc = proc.wait()
        wall = time.perf_counter() - start
        stop.set()
        if sample:
            thread.join()
    if rc:
        raise SystemExit(f"{cmd[0]} ... failed (exit {rc}); its output:\n{log.read_text()[-3000:]}")
    fields = dict(line.strip().rsplit(": ", 1) for line in timing.read_text().splitlines() if ": " in line)
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return Run(wall, cpu, int(fields["Maximum resident set size (kbytes)"]) * 1024, peak[0],
               out_bin.stat().st_size if out_bin else 0)


def fixture_pair(key: str, size: str, work: Path) -> Pair:
    """The family's bundled pair, its work folder under `work`."""
    return Pair(size, ROOT / "fixtures" / key / "target", ROOT / "fixtures" / key / "ckpt", work / size)


def run_irsurgeon(pair: Pair, weight_format: str, draft_bin: Path, sample: bool = False) -> Run:
    """`irsurgeon patch COPY --checkpoint CKPT --weight-format F`, COPY a sparse copy of the target made first."""
    out = pair.work / "irsurgeon"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(pair.target), str(out)], check=True)
    os.sync()
    cmd = [sys.executable, "-m", "irsurgeon", "patch", out, "--checkpoint", pair.ckpt, "--weight-format",
           weight_format]
    return measure(cmd, {"PYTHONPATH": str(ROOT)}, pair.work / "irsurgeon.log", out / draft_bin, sample)


def run_optimum(pair: Pair, venv: Path, weight_format: str, sample: bool = False) -> Run:
    """optimum-cli's export of the checkpoint (the --venv's, offline; no tokenizer converted)."""
    out = pair.work / "optimum"
    shutil.rmtree(out, ignore_errors=True)
    os.sync()
    cmd = [venv / "bin" / "optimum-cli", "export", "openvino", "--model", pair.ckpt, "--task",
           "text-generation-with-past", "--trust-remote-code", "--disable-convert-tokenizer", "--weight-format",
           weight_format, out]
    return measure(cmd, OFFLINE, pair.work / "optimum.log", out / "openvino_model.bin", sample)


def cost(pair: Pair, a, irsurgeon: Callable[[Pair], Run], optimum: Callable[[Pair], Run],
         digits: int = 2) -> list[dict]:
    """--warmup untimed pairs, then --rounds pairs: irsurgeon then optimum, each with the load average before it."""
    rows = []
    for r in range(a.warmup + a.rounds):
        load = os.getloadavg()[0]
        irs, opt = irsurgeon(pair), optimum(pair)
        if r >= a.warmup:
            rows.append({"load": load, "irsurgeon": irs, "optimum": opt})
        print(f"{pair.size}: {'warm-up' if r < a.warmup else 'round'} {r + 1 - a.warmup * (r >= a.warmup)}: "
              f"irsurgeon {irs.wall:.{digits}f} s, optimum {opt.wall:.{digits}f} s (load {load:.2f})", flush=True)
    return rows


def spread(values: list[float], fmt: Callable[[float], str]) -> str:
    return f"{fmt(min(values))} / {fmt(statistics.median(values))} / {fmt(max(values))}"


def arguments(doc: str, work: Path, venv: Path, maker: str, step_help: str, keep_help: str) -> argparse.Namespace:
    """The export benchmarks' options (their docstrings say them), parsed; refused unless the sizes are known and
    the venv has optimum-cli."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--sizes", default="tiny,real", help="comma-separated, from tiny, real")
    ap.add_argument("--rounds", type=int, default=3, help="timed cost rounds (pairs)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed cost rounds first")
    ap.add_argument("--work", type=Path, default=work)
    ap.add_argument("--venv", type=Path, default=venv, help=f"optimum-intel 2.2.0's environment ({maker} says how "
                    "it is made)")
    ap.add_argument("--step-rounds", type=int, help="draft-step rounds (default: 9 tiny, 7 real)")
    ap.add_argument("--steps", type=int, help=step_help)
    ap.add_argument("--keep", action="store_true", help=keep_help)
    ap.add_argument("--no-step", action="store_true", help="the cost only")
    a = ap.parse_args()
    a.sizes = a.sizes.split(",")
    if set(a.sizes) - {"tiny", "real"} or not (a.venv / "bin" / "optimum-cli").is_file():
        raise SystemExit(f"sizes are tiny, real; optimum-cli must be in {a.venv}/bin")
    return a


def run_sizes(a, prepare: Callable[[str, Path], Pair], sized: Callable[[Pair], None]) -> None:
    """Each of --sizes: its pair prepared, its work folder made, `sized` run on it; --work removed at the end unless
    --keep; the load averages before and after."""
    print(f"load {os.getloadavg()}, {os.cpu_count()} CPUs")
    try:
        for size in a.sizes:
            pair = prepare(size, a.work)
            pair.work.mkdir(parents=True, exist_ok=True)
            sized(pair)
    finally:
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    print(f"\nload {os.getloadavg()}")
