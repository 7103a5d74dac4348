"""The interrupt lab: a command run with Ctrl-C (SIGINT) delivered at its N-th audit event, from the first one
Python reports once irsurgeon is about to run (its import) to the last before the process exits.

Python's audit events (sys.addaudithook: every import, open, listdir, exec, ... CPython raises) number the moments
of a run without a test hook in the product, so a new step in a flow is a new interrupt point automatically. The hook
signals the process itself (os.kill): CPython's C handler records it and the Python handler runs at the next
instruction, as for a Ctrl-C from the terminal. tests/test_signals.py runs it over a patch at sampled points and
holds every end to the rule of docs/reliability.md: one line, exit 130 (or, when the signal came after the command
had ended, that command's own end), the target original or complete, never a traceback.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from lab import forkrun

ROOT = Path(__file__).resolve().parents[1]

# $INTERRUPT_AT: signal at the N-th audit event counted from the import of irsurgeon.entry (the first instruction
# of irsurgeon's own: irsurgeon/__main__.py); $INTERRUPT_END: at the N-th profile event (call, return, C call) from
# the moment the command starts saying how it ended (cli.document) to the process's exit. 0: count them, writing the
# total to the file $INTERRUPT_COUNT at exit.
INTERRUPTER = r"""
import os, signal, sys
AT, END = int(os.environ.get("INTERRUPT_AT", "-1")), int(os.environ.get("INTERRUPT_END", "-1"))
counts = {"at": 0, "end": 0}
def hook(event, args):
    if not counts["at"] and not (event == "import" and args[0] == "irsurgeon.entry"):
        return
    counts["at"] += 1
    if counts["at"] == AT:
        os.kill(os.getpid(), signal.SIGINT)
def profile(frame, event, arg):
    counts["end"] += 1
    if counts["end"] == END:
        os.kill(os.getpid(), signal.SIGINT)
if 0 in (AT, END):
    import atexit
    def _count(path=os.environ["INTERRUPT_COUNT"]):
        with open(path, "w") as f:
            f.write(str(counts["at" if AT == 0 else "end"]))
    atexit.register(_count)
if AT >= 0:
    sys.addaudithook(hook)
if END >= 0:
    import irsurgeon.cli as cli
    said = cli.document
    def document(*args, **kwargs):
        sys.setprofile(profile)
        return said(*args, **kwargs)
    cli.document = document
sys.argv = ["irsurgeon", *sys.argv[1:]]
import runpy
runpy.run_module("irsurgeon", run_name="__main__", alter_sys=True)
"""


def interrupted_run(args: list[str], at: int, where: str = "AT", cwd: Path | None = None):
    """`irsurgeon args` with SIGINT at its event `at` (where: "AT" audit events from the start, "END" profile events
    from the end), Ctrl-C not ignored whatever the caller's; what subprocess.run(capture_output=True, text=True)
    gives."""
    return _run(args, {f"INTERRUPT_{where}": str(at)}, where, cwd)


def count_events(args: list[str], where: str = "AT", cwd: Path | None = None) -> tuple[int, object]:
    """The number of events (as interrupted_run's `where`) of an uninterrupted run, and the run."""
    with tempfile.TemporaryDirectory() as folder:
        counted = Path(folder, "count")
        proc = _run(args, {f"INTERRUPT_{where}": "0", "INTERRUPT_COUNT": str(counted)}, where, cwd)
        return int(counted.read_text() or 0) if counted.exists() else 0, proc


def _run(args: list[str], settings: dict[str, str], where: str, cwd: Path | None):
    """AT counts every import from irsurgeon.entry's on, so it runs in a fresh interpreter; END counts from the
    command's end, which a run forked from lab.forkrun's server (its modules imported already) reaches as a fresh
    one does, for a third of the CPU."""
    env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
    if where == "END":
        return forkrun.completed(INTERRUPTER, args, env, cwd=cwd or ROOT, timeout=600)
    return subprocess.run([sys.executable, "-c", INTERRUPTER, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=600, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job's ignored SIGINT is not what a terminal gives


def sample(total: int, near_end: int = 6, factor: int = 2) -> list[int]:
    """Interrupt points: the first event, then each `factor` times the last, then the last `near_end` events of the
    run."""
    points, n = [], 1
    while n < total:
        points.append(n)
        n *= factor
    return sorted(set(points) | set(range(max(1, total - near_end), total + 1)))
