"""`irsurgeon tune` against a separately measured K x format grid: is its choice within the spread of the grid's best?

    python benchmarks/bench_tune.py [--pairs qwen3_5,gemma4,dflash,eagle3,dflash-cycle,eagle3-trained,perf]
        [--formats f32,f16,int8,int4] [--grid-max-k 6] [--prompts 6] [--max-new-tokens 48] [--rounds 5]
        [--max-k 8] [--chat-template] [--perf-size 512x8] [--work DIR] [--keep] [--json FILE]

Pairs, each patched (default weight format) into a copy under --work first:
    qwen3_5, gemma4, dflash, eagle3   the bundled pairs, fixtures/<family>/target and ckpt (random drafts: their
                                      proposals are accepted about never)
    dflash-cycle, eagle3-trained      `irsurgeon synth DIR --kind ...`: the synthesized pairs whose drafts are accepted
    perf                              the performance fixture, lab/perf_pair.py: the dflash-cycle construction with a
                                      target of hidden H and L layers (--perf-size HxL, default 512x8: 122 MB of f32
                                      weights), where speculative decoding pays on a 2-core CPU beyond the rounds'
                                      spread (at 64x4, the synth kind's size, genai's per-step overhead bounds both
                                      and the best K is within noise of plain generation)
Per pair:
1. tune: `python -m irsurgeon tune COPY --dry-run --json --formats F,...` in a fresh child process (the formats the
   family's patch takes, the present one left out as tune leaves it), timed as a whole: wall, user + system CPU, the
   kernel's peak RSS (lab/bench_runs.measure). Its choice is (format, K); no K chosen means tune found none that
   beats plain generation beyond the spread.
2. grid: the draft patched in every format into copies, then in one fresh child process plain generation and every
   (format, K <= --grid-max-k) side by side in --rounds alternating rounds (lab/spec_grid.py), on the same prompts,
   tokens and prompt rendering tune used.
3. the verdict, by flows.measure.judge: a chosen (format, K) is within the grid's best when its cell is not slower
   than the best cell beyond the spread; no K chosen agrees with the grid when the grid's best cell does not beat
   plain generation beyond the spread. Ratios are medians against plain generation of the same run.
Prompts: the first --prompts bundled ones, as text (--chat-template: through the target's chat template, tune's own
default; the synthesized tokenizer's template ends every prompt in the same tokens, which on the cycle pairs falls on
a cycle the draft never predicts: nothing accepted). Never a pass/fail exit on a timing: the numbers are printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lab.bench_runs import measure, spread  # noqa: E402  (sys.path set above)

FIXTURES = ("qwen3_5", "gemma4", "dflash", "eagle3")
SYNTH = ("dflash-cycle", "eagle3-trained")
PAIRS = (*FIXTURES, *SYNTH, "perf")
ENV = {"PYTHONPATH": str(ROOT)}
LAYERS = (2, 4)       # the real-size estimate times targets of these many layers
PREFILL, VERIFY = 64, 5
DRAFT_STEP_MS = 62.0  # docs/performance.md, EAGLE-3: the Llama-3.1-8B-size draft step, default precision, 61.6 ms
BUILD_S = 3.3  # docs/performance.md, EAGLE-3: patch of the Llama-3.1-8B-size draft, f16


def cli(*args, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "irsurgeon", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **ENV}, check=check)


def prepare(name: str, work: Path, perf_size: tuple[int, int]) -> tuple[Path, Path]:
    """(the patched copy of the pair's target, its checkpoint) under work/name."""
    here = work / name
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir(parents=True)
    if name in FIXTURES:
        target, ckpt = here / "target", ROOT / "fixtures" / name / "ckpt"
        shutil.copytree(ROOT / "fixtures" / name / "target", target)
    elif name in SYNTH:
        cli("synth", here / "pair", "--kind", name)
        target, ckpt = here / "pair" / "target", here / "pair" / "ckpt"
    else:
        from lab import perf_pair
        target, ckpt = perf_pair.synthesize(here / "pair", *perf_size)
    cli("patch", target, "--checkpoint", ckpt)
    return target, ckpt


def format_dirs(target: Path, ckpt: Path, formats: list[str], present: str) -> tuple[dict[str, Path], list[str]]:
    """The draft in each format a copy of the patched target (the present one: the target itself), and the formats
    the family's patch refused (each with its error line)."""
    dirs, refused = {present: target}, []
    for fmt in formats:
        if fmt == present:
            continue
        copy = target.parent / f"format-{fmt}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(target, copy)
        r = cli("patch", copy, "--checkpoint", ckpt, "--weight-format", fmt, "--force", check=False)
        if r.returncode:
            refused.append(f"{fmt}: {r.stderr.strip().splitlines()[-1][:160]}")
            shutil.rmtree(copy)
        else:
            dirs[fmt] = copy
    return dirs, refused


def present_format(target: Path) -> str:
    """The patched draft's weight format as tune reads it (flows.patch.draft_format)."""
    from irsurgeon.families import registry
    from irsurgeon.flows.patch import draft_format

    return draft_format(target / registry.for_directory(target).layout.draft_xml) or "auto"


def run_tune(target: Path, formats: list[str], a) -> tuple[dict, object]:
    log, out = target.parent / "tune.log", target.parent / "tune.json"
    cmd = [sys.executable, "-m", "irsurgeon", "tune", target, "--dry-run", "--json", "--prompts", a.prompts,
           "--max-new-tokens", a.max_new_tokens, "--rounds", a.rounds, "--max-k", a.max_k,
           "--chat-template" if a.chat_template else "--no-chat-template"]
    if formats:
        cmd += ["--formats", ",".join(formats)]
    run = measure(cmd, ENV, log, stdout=out)
    return json.loads(out.read_text())["result"], run


def run_grid(dirs: dict[str, Path], a, attempts: int = 2) -> dict | None:
    """lab/spec_grid.run_grid in a fresh child process (--grid-child); its JSON. A child that dies (openvino-genai
    2026.4.1 has ended one with `free(): invalid next size` after loading an EAGLE-3 pair's pipelines side by side)
    is run again, up to `attempts` in all; None when every attempt died."""
    args = [sys.executable, __file__, "--grid-child", json.dumps({k: str(v) for k, v in dirs.items()}),
            "--grid-max-k", a.grid_max_k, "--prompts", a.prompts, "--max-new-tokens", a.max_new_tokens,
            "--rounds", a.rounds] + (["--chat-template"] if a.chat_template else [])
    for attempt in range(1, attempts + 1):
        r = subprocess.run(list(map(str, args)), capture_output=True, text=True, env={**os.environ, **ENV})
        if r.returncode == 0:
            print(r.stderr.rstrip(), flush=True)
            return json.loads(r.stdout.strip().splitlines()[-1])
        print(f"the grid's child died (attempt {attempt} of {attempts}, exit {r.returncode}): "
              f"{r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}", flush=True)
    return None


def grid_child(a) -> None:
    from irsurgeon.flows.genai import genai_module
    from irsurgeon.flows.prompts import prompt_list, rendered
    from lab.spec_grid import run_grid as grid_of

    dirs = {k: Path(v) for k, v in json.loads(a.grid_child).items()}
    texts, _ = rendered(genai_module(), next(iter(dirs.values())), prompt_list(a.prompts), a.chat_template)
    grid = grid_of(dirs, range(1, a.grid_max_k + 1), texts, a.max_new_tokens, a.rounds,
                   echo=lambda line: print(line, file=sys.stderr, flush=True))

    def cell(m) -> dict:
        return {"rates": list(m.spread.rates), "speedup": m.speedup, "accepted": m.draft_accepted,
                "drafted": m.draft_proposed}

    print(json.dumps({"plain": cell(grid.plain), "seconds": grid.seconds,
                      "cells": {f"{fmt} {k}": cell(m) for (fmt, k), m in grid.cells.items()}}))


def verdict(tuned: dict, grid: dict) -> dict:
    """Tune's choice against the grid (the module docstring, 3)."""
    from irsurgeon.flows.measure import FASTER, SLOWER, Spread, judge

    spreads = {key: Spread.of(c["rates"]) for key, c in grid["cells"].items()}
    plain = Spread.of(grid["plain"]["rates"])
    best = max(spreads, key=lambda key: spreads[key].median)
    k, fmt = tuned["k"]["chosen"], tuned["format"]["chosen"]
    if k is None:
        chosen, agrees = "no K", judge(spreads[best], plain) != FASTER
        how = f"grid's best vs plain: {judge(spreads[best], plain)}"
    else:
        chosen = f"{fmt} {k}"
        if chosen not in spreads:
            return {"chosen": chosen, "best": best, "agrees": None, "how": "outside the grid"}
        agrees = judge(spreads[chosen], spreads[best]) != SLOWER
        how = f"chosen vs grid's best: {judge(spreads[chosen], spreads[best])}"
    return {"chosen": chosen, "best": best, "agrees": agrees, "how": how, "plain": plain.text(),
            "best_text": spreads[best].text(), "best_speedup": spreads[best].median / plain.median,
            "chosen_text": spreads[chosen].text() if chosen in spreads else None,
            "chosen_speedup": spreads[chosen].median / plain.median if chosen in spreads else None}


def one_pair(name: str, a) -> dict:
    t = time.perf_counter()
    target, ckpt = prepare(name, a.work, a.perf_size)
    present = present_format(target)
    dirs, refused = format_dirs(target, ckpt, a.formats, present)
    print(f"\n{name}: prepared in {time.perf_counter() - t:.0f} s; present draft format {present}; formats "
          f"{', '.join(dirs)}" + (f"; refused: {'; '.join(refused)}" if refused else ""), flush=True)
    tuned, run = run_tune(target, [f for f in dirs if f != present], a)
    k = tuned["k"]
    print(f"{name}: tune chose K {k['chosen']}, format {tuned['format']['chosen']} in {run.wall:.1f} s wall, "
          f"{run.cpu:.1f} s CPU, peak RSS {run.rss / 1e6:.0f} MB; generate() without a config reads K from "
          f"generation_config.json: {k['genai_reads_generation_config']}\n  {k['why']}\n  "
          f"format: {tuned['format']['why']}", flush=True)
    row = {"pair": name, "tune_wall_s": run.wall, "tune_cpu_s": run.cpu, "tune_rss": run.rss,
           "tune_k": k["chosen"], "tune_format": tuned["format"]["chosen"], "not_tried": tuned["not_tried"],
           "genai_reads_k": k["genai_reads_generation_config"], "refused": refused}
    grid = run_grid(dirs, a)
    if grid is None:
        return {**row, "grid": None}
    v = verdict(tuned, grid)
    print(f"{name}: grid ({grid['seconds']:.0f} s): plain {v['plain']} tok/s; best {v['best']} {v['best_text']} "
          f"({v['best_speedup']:.2f}x plain); tune's {v['chosen']} "
          + (f"{v['chosen_text']} ({v['chosen_speedup']:.2f}x plain); " if v["chosen_text"] else "")
          + f"{v['how']}: {'agrees' if v['agrees'] else 'DISAGREES'}", flush=True)
    return {**row, "grid": grid, **v}


def summary(rows: list[dict]) -> None:
    print(f"\n{'pair':<15} {'tune wall':>9} {'tune':>9} {'grid best':>10} {'plain tok/s':>17} "
          f"{'best tok/s':>17} {'best/plain':>10} {'tune/plain':>10}  within spread")
    for r in rows:
        if r["grid"] is None:
            print(f"{r['pair']:<15} {r['tune_wall_s']:>7.1f} s {r['tune_k'] or 'no K':>9}  (no grid: its child died)")
            continue
        tune_ratio = "-" if r["chosen_speedup"] is None else f"{r['chosen_speedup']:.2f}x"
        print(f"{r['pair']:<15} {r['tune_wall_s']:>7.1f} s {r['chosen']:>9} {r['best']:>10} {r['plain']:>17} "
              f"{r['best_text']:>17} {r['best_speedup']:>9.2f}x {tune_ratio:>10}  {r['agrees']}")
    walls = [r["tune_wall_s"] for r in rows]
    print(f"tune wall over the pairs, min / median / max: {spread(walls, lambda v: f'{v:.1f} s')}")


# ---- the real-size estimate ----

def time_target(xml: Path, rounds: int, steps: int) -> list[dict]:
    """One target read and compiled (the CPU's default precision), then `rounds` of: reset, a PREFILL-token first
    call, `steps` one-token calls, `steps` VERIFY-token calls; each round's ms: the load, the first call, the median
    one-token call, the median VERIFY-token call."""
    import numpy as np
    import openvino as ov

    start = time.perf_counter()
    request = ov.Core().compile_model(str(xml), "CPU").create_infer_request()
    load = (time.perf_counter() - start) * 1e3
    rng, out = np.random.default_rng(0), []

    def call(pos: int, n: int) -> float:
        start = time.perf_counter()
        request.infer({"input_ids": rng.integers(0, 128256, (1, n), dtype=np.int64),
                       "attention_mask": np.ones((1, pos + n), np.int64),
                       "position_ids": np.arange(pos, pos + n, dtype=np.int64)[None],
                       "beam_idx": np.zeros(1, np.int32)})
        return (time.perf_counter() - start) * 1e3

    for _ in range(rounds + 1):  # the first round untimed: weights repacked, kernels chosen
        request.reset_state()
        first, pos = call(0, PREFILL), PREFILL
        one = [call(pos + i, 1) for i in range(steps)]
        pos += steps
        verify = [call(pos + VERIFY * i, VERIFY) for i in range(steps)]
        out.append({"load": load, "prefill": first, "one": statistics.median(one),
                    "verify": statistics.median(verify)})
    return out[1:]


def fill_weights(xml: Path, seed: int = 0) -> None:
    """Every f16 Constant over 1 MB of the IR's .bin filled with seeded values in [2^-8, 2^-4): zero weights in a
    sparse file map one shared zero page, which the cache serves, and a decode call would read no memory at all."""
    import numpy as np
    import xml.etree.ElementTree as ET

    rng = np.random.default_rng(seed)
    with open(xml.with_suffix(".bin"), "r+b") as f:
        for data in ET.parse(xml).getroot().iter("data"):
            if data.get("element_type") == "f16" and int(data.get("size", 0)) > 1 << 20:
                n = int(data.get("size")) // 2
                f.seek(int(data.get("offset")))
                for start in range(0, n, 1 << 24):
                    f.write(rng.integers(0x1C00, 0x2C00, min(1 << 24, n - start), dtype=np.uint16).tobytes())


def real_size_costs(work: Path, rounds: int, steps: int) -> dict:
    """Per-call ms of a Llama-3.1-8B-width target at 32 layers: targets of LAYERS layers timed in alternating child
    processes, each measurement scaled by the weights its calls read, (32 P + V H) / (L P + V H), P a layer's
    MatMul parameters and V H the lm_head's (the embedding reads one row a token): decode is bandwidth-bound, and
    the first call, compute-bound, does as many multiply-adds per weight. The 2- and 4-layer difference alone is
    drowned by a shared machine's noise."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_eagle3 import REAL_TARGET, write_real_target

    t = REAL_TARGET
    layer = t["hidden"] * (t["heads"] + 2 * t["kv_heads"]) * t["head_dim"] + t["heads"] * t["head_dim"] * \
        t["hidden"] + 3 * t["hidden"] * t["intermediate"]
    head = t["vocab"] * t["hidden"]
    xmls = {}
    for n in LAYERS:
        xmls[n] = work / f"real-{n}" / "openvino_model.xml"
        if not xmls[n].is_file():
            write_real_target(xmls[n].parent, n)
            fill_weights(xmls[n])
    got = {key: [] for key in ("load", "prefill", "one", "verify")}
    for r in range(rounds):
        for n in LAYERS if r % 2 == 0 else LAYERS[::-1]:
            child = subprocess.run([sys.executable, __file__, "--time-child", str(xmls[n]), str(steps)],
                                   capture_output=True, text=True, env={**os.environ, **ENV})
            if child.returncode:
                raise SystemExit(f"timing {xmls[n]} failed:\n{child.stderr[-3000:]}")
            ms = json.loads(child.stdout.strip().splitlines()[-1])[0]
            print(f"  {n} layers: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items()), flush=True)
            for key, v in ms.items():
                got[key].append(v * (32 * layer + head) / (n * layer + head))
    return got


def tune_seconds(c: dict, prompts: int, tokens: int, candidates: int, formats: int, accepted: bool,
                 rounds: int = 5, ks: int = 5) -> float:
    """Seconds of one tune run under the model of the estimate (print_estimate says it): nothing accepted, or every
    draft accepted (K + 1 tokens a step)."""
    load = c["load"] / 1e3
    plain = prompts * (c["prefill"] + tokens * c["one"]) / 1e3
    spec = [prompts * (c["prefill"] + tokens * (c["verify"] + k * DRAFT_STEP_MS) / (k + 1 if accepted else 1)) / 1e3
            for k in range(1, 9)]
    readings = candidates * (2 * load + plain + sum(spec[:4]))             # run_equivalence, K = 1..4
    sweep = 2 * load + (rounds + 1) * plain + sum((rounds + 1) * spec[k] for k in range(ks))
    fmt = (formats - 1) * (BUILD_S + 2 * load + plain + spec[ks - 1]) \
        + (formats > 1) * (formats * load + (rounds + 1) * formats * spec[ks - 1])
    return readings + sweep + fmt


def print_estimate(a) -> None:
    print(f"\nreal-size estimate: a Llama-3.1-8B-width target (hidden 4096, 32 / 8 heads, intermediate 14336, "
          f"vocabulary 128256; f16 weights, seeded, run at the CPU's default precision) of {LAYERS[0]} and {LAYERS[1]} "
          f"layers, {a.estimate_rounds} alternating rounds, each call scaled to 32 layers by the weights it reads "
          f"(the .bin holds each distinct tensor once, as the writer shares equal constants, so the load is a lower bound)", flush=True)
    c = real_size_costs(a.work, a.estimate_rounds, 16)
    med = {k: statistics.median(v) for k, v in c.items()}
    for key, what in (("load", "the target read and compiled"), ("prefill", f"a {PREFILL}-token first call"),
                      ("one", "a one-token call"), ("verify", f"a {VERIFY}-token call (K = {VERIFY - 1} verified)")):
        print(f"  32 layers, {what}: {spread(c[key], lambda v: f'{v:.0f} ms')}")
    print(f"model: a pass of P prompts of N new tokens costs P (prefill + N x one-token call) plain, and P (prefill "
          f"+ N x ({VERIFY}-token call + K x draft step) / T) speculative, T the tokens a step emits: 1 when nothing "
          f"is accepted (the most a pass can cost), K + 1 when every draft is; the EAGLE-3 draft step "
          f"{DRAFT_STEP_MS} ms (docs/performance.md: bench_eagle3's Llama-3.1-8B-size draft), a format build "
          f"{BUILD_S} s (the same), a pipeline load the target's read and compile (the draft's left out). tune: "
          f"C candidates x (plain and K = 1..4, two loads), the K sweep ({a.rounds} rounds and a warm-up pass of "
          f"plain and K = 1..5, two loads), F - 1 format builds each checked (two loads, plain and one K), then "
          f"{a.rounds} rounds and a warm-up of F formats (F loads)")
    int8 = {k: v / 2 if k in ("one", "verify") else v for k, v in med.items()}  # half the bytes a decode call reads
    print("seconds of one tune run (f16: as measured; int8: optimum's default export of a model over 1B parameters, "
          "its decode calls at half the bytes); none / all: nothing / every draft accepted")
    print(f"{'prompts':>7} {'tokens':>6} {'candidates':>10} {'formats':>7} {'f16 none':>9} {'f16 all':>8} "
          f"{'int8 none':>9} {'int8 all':>8}")
    for prompts, tokens, cands, fmts in ((1, 16, 1, 1), (1, 48, 1, 1), (2, 16, 1, 1), (3, 16, 1, 1),
                                         (1, 16, 4, 1), (1, 16, 1, 3), (6, 48, 1, 1), (9, 48, 4, 4)):
        got = [tune_seconds(c, prompts, tokens, cands, fmts, ok, a.rounds) for c in (med, int8) for ok in (0, 1)]
        print(f"{prompts:>7} {tokens:>6} {cands:>10} {fmts:>7} " + " ".join(f"{v:>8.0f}" for v in got))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated, from " + ", ".join(PAIRS))
    ap.add_argument("--formats", default="f32,f16,int8,int4", help="the draft formats of the grid (and of tune's "
                    "--formats)")
    ap.add_argument("--grid-max-k", type=int, default=6, help="the grid's Ks are 1..this")
    ap.add_argument("--prompts", type=int, default=6, help="the first N bundled prompts")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds, tune's and the grid's")
    ap.add_argument("--max-k", type=int, default=8, help="tune's --max-k")
    ap.add_argument("--chat-template", action="store_true", help="prompts through the target's chat template")
    ap.add_argument("--perf-size", default="512x8", help="the performance fixture's hidden size x layers")
    ap.add_argument("--work", type=Path, default=Path("/tmp/irsurgeon-bench-tune"))
    ap.add_argument("--keep", action="store_true", help="keep --work")
    ap.add_argument("--json", type=Path, help="write every pair's numbers here")
    ap.add_argument("--estimate", action="store_true", help="also the real-size estimate (--pairs none: only it)")
    ap.add_argument("--estimate-rounds", type=int, default=3)
    ap.add_argument("--grid-child", help=argparse.SUPPRESS)
    if sys.argv[1:2] == ["--time-child"]:
        return print(json.dumps(time_target(Path(sys.argv[2]), 1, int(sys.argv[3]))))
    a = ap.parse_args()
    if a.grid_child:
        return grid_child(a)
    a.formats = a.formats.split(",")
    a.perf_size = tuple(int(n) for n in a.perf_size.split("x"))
    pairs = [] if a.pairs == "none" else a.pairs.split(",")
    if set(pairs) - set(PAIRS):
        raise SystemExit(f"pairs are {', '.join(PAIRS)}")
    print(f"load {os.getloadavg()}, {os.cpu_count()} CPUs")
    rows = []
    try:
        for name in pairs:
            rows.append(one_pair(name, a))
            if a.json:
                a.json.write_text(json.dumps(rows, indent=1) + "\n")
    finally:
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
        if a.estimate:
            print_estimate(a)
    if rows:
        summary(rows)
    print(f"\nload {os.getloadavg()}")


if __name__ == "__main__":
    main()
