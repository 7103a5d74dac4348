"""Reliability figures for `irsurgeon patch` and the readers: kill-point sweep, timed kills, long fuzz run.

    python benchmarks/bench_reliability.py [--fuzz-examples 300] [--timed-kills 24] [--work DIR]

1. Kill-point sweep: patch on a copy of fixtures/qwen3_5/target is stopped (SIGKILL, then SIGINT) just before each
   numbered filesystem write it makes in the target (lab/kills.py: KILLER); after each kill the
   directory is judged (as before / completely patched / interrupted commit that verify reports) and patched again.
2. Timed kills: the same, but the signal comes from outside after a delay spread over the whole run (imports,
   checkpoint load, build, compression, staging, commit), alternating SIGKILL and SIGINT.
3. Fuzz: lab/fuzz.py's mutators, --fuzz-examples seeds per input kind of every registered family, each
   through a command reading it.
4. Hostile inputs (attack_inputs; --attack-inputs-only runs just this): every input file of every registered family
   (its checkpoint's config, safetensors and a sharded copy with its index, its target's configs,
   openvino_config.json and IR .xml/.bin, the files its patch writes, a prompts file; lab/hostile_forms.py
   derives them from the registry) made a FIFO, a /dev/zero link, a sparse 2 GiB file, a directory, a link to a
   secret file, deep JSON, huge integers, absurd IR numbers, wrong-typed values, plus a family's own content forms
   (FAMILY_FORMS: the Gemma 4 assistant's tensors get wrong dtypes, NaN, a token_ordering that is not a permutation,
   extra and missing tensors), through every command reading it; counted per family. Then an absurd but consistent
   128 GiB checkpoint, synth at its largest sizes, and a checkpoint truncated by another process during a build.
5. Link and journal attacks (lab/attack_links.py; --only-link-attacks runs just these): leftover staging folders
   and journals irsurgeon did not write, links out of a checkpoint, folders swapped mid-run, concurrent writers.
Prints the figures and exits 1 if any rule was broken (the broken rules are listed).
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # irsurgeon and the lab package of this checkout

from lab import hostile, hostile_forms  # noqa: E402  (sys.path set above)
from lab.fuzz import KINDS, TARGETS, Bench, Tally  # noqa: E402  (sys.path set above)
from lab.kills import CLI, KillLab, Sweep, child_env, patch_args  # noqa: E402  (sys.path set above)


def point_sweep(lab: KillLab) -> Sweep:
    sweep = Sweep()
    for sig in (signal.SIGKILL, signal.SIGINT):
        for at in range(1, len(lab.points) + 1):
            lab.kill(at, sig, sweep)
    return sweep


STACKS = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True); "


def during_import(err: str) -> bool:
    """A Ctrl-C traceback raised before irsurgeon's entry point could guard anything: no frame runs irsurgeon code
    beyond its package and entry module bodies (Python's own start-up: site, .pth finders, the stdlib imports
    they pull in). Counted apart from irsurgeon's tracebacks."""
    frames = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("File ")]
    ours = [f for f in frames if "/irsurgeon/" in f and not any(
        f"/irsurgeon/{m}.py" in f and "in <module>" in f for m in ("__init__", "entry"))]
    return err.strip().endswith("KeyboardInterrupt") and not ours


def timed_kills(lab: KillLab, count: int, run_seconds: float, startup: list[str]) -> Sweep:
    """Signals sent from outside after delays spread evenly over one uninterrupted run's wall time."""
    sweep = Sweep()
    for k in range(count):
        sig = signal.SIGKILL if k % 2 == 0 else signal.SIGINT
        delay = run_seconds * (k + 0.5) / count
        target = lab.fresh(f"timed{k}")
        proc = subprocess.Popen([sys.executable, "-c", STACKS + CLI, *patch_args(target)], env=child_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # record where it hangs, then SIGKILL it and judge what it left
            proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            proc.kill()
            _, err = proc.communicate()
            frames = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("File ")][:6]
            sweep.problems.append(f"{sig.name} after {delay:.2f} s: still running 60 s later; stacks: {frames}")
        sweep.kills += 1
        if "Traceback" in err and during_import(err):
            startup.append(f"{sig.name} after {delay:.2f} s")
        elif "Traceback" in err:
            sweep.tracebacks += 1
            frames = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("File ")][-6:]
            sweep.problems.append(f"{sig.name} after {delay:.2f} s: traceback: {err.strip().splitlines()[-1]}; "
                                  f"innermost frames: {frames}")  # rare and not reproduced so far: keep where
        where = f"{sig.name} after {delay:.2f} s"
        if proc.returncode not in (0, -sig, 130, 1):
            sweep.problems.append(f"{where}: exit {proc.returncode}: {err[-300:]}")
        lab.judge(target, where, sig, sweep)
    return sweep


def fuzz(root: Path, examples: int) -> Tally:
    import random

    bench, total = Bench(root), Tally()
    rng = random.Random(20261129)
    for key, kind in TARGETS:
        for _ in range(examples):
            bench.example(key, kind, rng.randrange(2 ** 32), rng.choice(KINDS[key][kind].commands), total)
    return total


def attack_inputs(root: Path) -> dict:
    """Every hostile-input case once (figures per family), plus an absurd consistent checkpoint; figures and one line
    per broken rule."""
    lab, outcomes, families = hostile.Lab(root), [], {}
    for case in hostile_forms.all_cases():
        outcomes.append(lab.run(case))
        families.setdefault(case.family, []).append(outcomes[-1])
    absurd = root / "absurd"
    hostile_forms.absurd_checkpoint(absurd / "ckpt")
    code, out, err, seconds, peak = hostile.run_cli(["build-mtp", str(absurd / "ckpt"), "-o", str(absurd / "out")])
    outcomes.append(hostile.judge("absurd consistent checkpoint (128 GiB, sparse) / build-mtp", code, out, err, seconds,
                                  peak, ["out"] if (absurd / "out").exists() else []))
    code, out, err, seconds, peak = hostile.run_cli(["synth", str(root / "synth"), "--hidden", "8192", "--vocab",
                                                      "262144", "--layers", "64", "--heads", "64", "--kv-heads", "8",
                                                      "--head-dim", "128"])
    outcomes.append(hostile.judge("synth at its largest sizes", code, out, err, seconds, peak,
                                  ["synth"] if (root / "synth").exists() and code != 0 else []))
    outcomes += [hostile.truncation_race(root / f"race{k}", keep) for k, keep in enumerate((0.95, 0.7, 0.4, 0.1))]
    families["house (absurd checkpoint, largest synth, truncation races)"] = outcomes[-6:]
    return {**figures_of(outcomes), "families": {key: figures_of(found) for key, found in families.items()}}


PROBLEMS = ("hung", "killed by signal", "traceback", "not one Error", "echoed", "peak RSS", "changed outside",
            "long stderr")
LONG = 1000  # characters of stderr


def figures_of(outcomes: list) -> dict:
    for o in outcomes:  # tests/test_bounds.py holds every case's stderr to this too
        if len(o.stderr) >= LONG and not any(p.startswith("long stderr") for p in o.problems):
            o.problems.append(f"long stderr: {len(o.stderr)} characters")
    bad = [o for o in outcomes if o.problems]
    figures = {k: sum(any(p.startswith(k) for p in o.problems) for o in outcomes) for k in PROBLEMS}
    return {"cases": len(outcomes), "accepted": sum(o.code == 0 and not o.problems for o in outcomes),
            "refused": sum(o.refused for o in outcomes), "usage errors": sum(o.code == 2 and not o.problems
                                                                               for o in outcomes),
            "slowest": max(o.seconds for o in outcomes), "peak_rss": max(o.peak_rss for o in outcomes), **figures,
            "problems": [f"{o.case}: {'; '.join(o.problems)}" for o in bad]}


def report_attack(figures: dict, seconds: float) -> None:
    print(f"hostile inputs: {figures['cases']} cases in {seconds:.0f} s; accepted {figures['accepted']}, refused with "
          f"one Error: line {figures['refused']}, refused by click's usage check {figures['usage errors']}; hangs "
          f"{figures['hung']}, signal deaths {figures['killed by signal']}, tracebacks or unexpected errors "
          f"{figures['traceback']}, malformed refusals {figures['not one Error']}, echoed file bytes "
          f"{figures['echoed']}, over {hostile.RSS_LIMIT >> 30} GiB RSS {figures['peak RSS']}, changed files outside "
          f"the output {figures['changed outside']}, stderr of {LONG}+ characters {figures['long stderr']}; slowest "
          f"{figures['slowest']:.1f} s, largest peak RSS "
          f"{figures['peak_rss'] / 2**20:.0f} MB")
    for key, fam in figures["families"].items():
        print(f"  {key}: {fam['cases']} cases; accepted {fam['accepted']}, refused with one Error: line "
              f"{fam['refused']}, usage errors {fam['usage errors']}; broken rules {len(fam['problems'])} (hangs "
              f"{fam['hung']}, signal deaths {fam['killed by signal']}, tracebacks {fam['traceback']}, malformed "
              f"refusals {fam['not one Error']}, echoed bytes {fam['echoed']}, over RSS {fam['peak RSS']}, changed "
              f"outside {fam['changed outside']}, long stderr {fam['long stderr']}); slowest {fam['slowest']:.1f} s")


def timed_run(lab: KillLab) -> float:
    target = lab.fresh("timing")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CLI, *patch_args(target)], env=child_env(), capture_output=True, check=True)
    return time.perf_counter() - start


def report(name: str, sweep: Sweep, seconds: float) -> None:
    print(f"{name}: {sweep.kills} kills in {seconds:.0f} s; left as before {sweep.intact}, completely patched "
          f"{sweep.completed}, interrupted commit reported by verify and rolled back by the next run "
          f"{sweep.interrupted_commits}; leftovers reported by the next run {sweep.leftovers_reported}; "
          f"tracebacks {sweep.tracebacks}; broken rules {len(sweep.problems)}")


def attack_links_and_journals(work: Path) -> list[str]:
    """Section 5: every case is refused cleanly or (a control) accepted; nothing outside a target may change."""
    from lab.attack_links import run_all

    start = time.perf_counter()
    tally = run_all(work)
    for line in tally.lines:
        print(f"  {line}")
    print(f"link and journal attacks: {tally.tried} cases in {time.perf_counter() - start:.0f} s; refused cleanly "
          f"{tally.refused}, legitimate forms accepted {tally.accepted}, refused leftovers named by verify "
          f"{tally.verify_reports}; runs that changed anything outside the target {tally.outside_changed}")
    return tally.problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz-examples", type=int, default=300, help="seeds per input kind (default 300)")
    parser.add_argument("--timed-kills", type=int, default=24, help="externally timed kills (default 24)")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--attack-inputs-only", action="store_true", help="run only the hostile-input attack")
    parser.add_argument("--only-link-attacks", action="store_true", help="run only the link/journal attacks")
    args = parser.parse_args()
    if args.only_link_attacks:
        with tempfile.TemporaryDirectory(prefix="irsurgeon-attacks-", dir=args.work) as tmp:
            attacks = attack_links_and_journals(Path(tmp))
        for line in attacks:
            print(f"BROKEN: {line}")
        return 1 if attacks else 0
    with tempfile.TemporaryDirectory(prefix="irsurgeon-reliability-", dir=args.work) as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        attack = attack_inputs(work / "attack")
        report_attack(attack, time.perf_counter() - start)
        if args.attack_inputs_only:
            for line in attack["problems"]:
                print(f"BROKEN: {line}")
            return 1 if attack["problems"] else 0
        start = time.perf_counter()
        lab = KillLab(work / "kills")
        print(f"patch makes {len(lab.points)} filesystem writes in the target: {', '.join(lab.points)}")
        points = point_sweep(lab)
        report("kill-point sweep", points, time.perf_counter() - start)
        start, wall = time.perf_counter(), timed_run(lab)
        startup: list[str] = []
        timed = timed_kills(lab, args.timed_kills, wall, startup)
        report(f"timed kills over a {wall:.1f} s run", timed, time.perf_counter() - start)
        print(f"Ctrl-C during Python's own start-up (KeyboardInterrupt traceback from the interpreter, before "
              f"irsurgeon's entry point runs): {len(startup)} ({', '.join(startup) or 'none'})")
        start = time.perf_counter()
        tally = fuzz(work / "fuzz", args.fuzz_examples)
        print(f"fuzz: {tally.inputs} inputs in {time.perf_counter() - start:.0f} s over {len(TARGETS)} kinds of "
              f"{len(KINDS)} families; "
              f"accepted {tally.accepted}, refused with one Error: line {tally.refused - tally.unexpected}; "
              f"tracebacks {tally.tracebacks}; unexpected-error fallbacks {tally.unexpected}; "
              f"runs that changed files outside their output {tally.outside_changes}")
        attacks = attack_links_and_journals(work / "attacks")
    problems = points.problems + timed.problems + tally.problems + attack["problems"] + attacks
    intact = points.intact + points.completed + points.interrupted_commits + timed.intact + timed.completed \
        + timed.interrupted_commits
    print(f"total: {tally.inputs} inputs tried, {attack['cases']} hostile-input cases, "
          f"{points.kills + timed.kills} kills performed, {intact} targets left "
          f"intact or recoverable, {points.tracebacks + timed.tracebacks + tally.tracebacks} tracebacks seen from irsurgeon "
          f"(+{len(startup)} from Ctrl-C during interpreter start-up)")
    for line in problems:
        print(f"BROKEN: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
