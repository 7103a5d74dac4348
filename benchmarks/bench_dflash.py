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

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lab.bench_runs import (Pair, arguments, cost, fixture_pair, run_irsurgeon, run_optimum,  # noqa: E402  (sys.path set above)
                            run_sizes)

TARGETS = {"wall": 0.1, "rss": 0.3, "step": 1.0}
STEP = {"tiny": dict(rounds=9, steps=64, one_at_a_time=""), "real": dict(rounds=7, steps=12, one_at_a_time="f32")}
DRAFT_BIN = Path("dflash_draft") / "openvino_model.bin"


def prepare(size: str, work: Path) -> Pair:
    if size == "tiny":
        return fixture_pair("dflash", size, work)
    made = work / size / "pair"
    t = time.perf_counter()
    subprocess.run([sys.executable, ROOT / "scripts" / "make_dflash_real_size.py", made], check=True)
    print(f"{size}: pair made in {time.perf_counter() - t:.0f} s")
    return Pair(size, made / "target", made / "ckpt", work / size)


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
    a = arguments(__doc__, Path("/tmp/irsurgeon-bench-dflash"), Path("/tmp/dflash-ref"),
                  "scripts/make_dflash_reference.py", "draft calls timed a round (default: 64 tiny, 12 real)",
                  "keep --work (the real pair takes 3.5 GB, the IRs 14 GB)")

    def sized(pair: Pair) -> None:
        rows = cost(pair, a, lambda p: run_irsurgeon(p, "f32", DRAFT_BIN, sample=True),
                    lambda p: run_optimum(p, a.venv, "fp32", sample=True), digits=1)
        print_cost(pair.size, rows)
        if not a.no_step:
            step(pair, a)

    run_sizes(a, prepare, sized)


if __name__ == "__main__":
    main()
