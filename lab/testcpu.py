"""Where the test suite's CPU goes: a pytest plugin charging each test the CPU time its process and its children used.

    PYTHONPATH=$PWD python3 -m pytest -q -p lab.testcpu [-n 2] [tests...]
    python3 -m lab.testcpu report [N]        # the files, then the N costliest tests (default 40)

Each test is charged user + system seconds of `resource.getrusage` (RUSAGE_SELF and RUSAGE_CHILDREN) across its
setup, call and teardown, so a module- or session-scoped fixture is charged to the first test that asks for it, and a
child process counts once it has been waited for (every subprocess.run is); the children's share and how many
subprocess.Popen and lab.forkrun runs the test made are stored beside it, with its wall time. Each
process (an xdist worker, or the only one) writes its rows to `$IRSURGEON_TESTCPU_DIR` (default `out/testcpu`), one
JSON line per test; `report` sums them per file.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = Path(os.environ.get("IRSURGEON_TESTCPU_DIR", "out/testcpu"))
SPAWNED = [0]  # subprocess.Popen objects made in this process


class _Counted(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        SPAWNED[0] += 1
        super().__init__(*args, **kwargs)


subprocess.Popen = _Counted  # subprocess.run and check_output make their Popen through this name


def cpu_seconds() -> tuple[float, float]:
    """(this process, its children waited for, the fork server's children among them): user + system seconds."""
    from lab.forkrun import FORKED
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + FORKED["cpu"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    from lab.forkrun import FORKED
    (own, kids), wall, spawned = cpu_seconds(), time.monotonic(), SPAWNED[0] + FORKED["runs"]
    yield
    own_after, kids_after = cpu_seconds()
    row = {"test": item.nodeid, "cpu": round(own_after - own + kids_after - kids, 3),
           "children": round(kids_after - kids, 3), "spawned": SPAWNED[0] + FORKED["runs"] - spawned,
           "wall": round(time.monotonic() - wall, 3)}
    OUT.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(OUT / f"{worker}-{os.getpid()}.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def report(top: int) -> None:
    rows = [json.loads(ln) for p in sorted(OUT.glob("*.jsonl")) for ln in p.read_text().splitlines()]
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0.0, 0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += r["cpu"]
        f[1] += r["children"]
        f[2] += r["spawned"]
        f[3] += r["wall"]
        f[4] += 1
    total, kids = sum(r["cpu"] for r in rows), sum(r["children"] for r in rows)
    print(f"{len(rows)} tests, {total:.1f} s CPU charged to tests, {kids:.1f} s of it in child processes")
    print(f"{'cpu s':>8} {'child s':>8} {'spawned':>8} {'wall s':>8} {'tests':>6}  file")
    for name, (cpu, child, spawned, wall, n) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        print(f"{cpu:8.1f} {child:8.1f} {spawned:8d} {wall:8.1f} {n:6d}  {name}")
    print(f"\n{'cpu s':>8} {'child s':>8} {'spawned':>8} {'wall s':>8}  test")
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:8.2f} {r['children']:8.2f} {r['spawned']:8d} {r['wall']:8.2f}  {r['test']}")


if __name__ == "__main__":
    if sys.argv[1:2] != ["report"]:
        sys.exit(__doc__)
    report(int(sys.argv[2]) if len(sys.argv) > 2 else 40)
