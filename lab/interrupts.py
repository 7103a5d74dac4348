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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# $INTERRUPT_AT: signal at the N-th audit event counted from the import of irsurgeon.entry (the first instruction
# of irsurgeon's own: irsurgeon/__main__.py); $INTERRUPT_END: at the N-th profile event (call, return, C call) from
# the moment the command starts saying how it ended (cli.document) to the process's exit. 0: count them, writing the
# total to fd $INTERRUPT_FD at exit.
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
    atexit.register(lambda: os.write(int(os.environ["INTERRUPT_FD"]), str(counts["at" if AT == 0 else "end"]).encode()))
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


def interrupted_run(args: list[str], at: int, where: str = "AT", cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`irsurgeon args` with SIGINT at its event `at` (where: "AT" audit events from the start, "END" profile events
    from the end), Ctrl-C not ignored whatever the caller's."""
    env = {**os.environ, f"INTERRUPT_{where}": str(at), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", INTERRUPTER, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT, timeout=600, preexec_fn=_default_sigint)


def count_events(args: list[str], where: str = "AT", cwd: Path | None = None) -> tuple[int, subprocess.CompletedProcess]:
    """The number of events (as interrupted_run's `where`) of an uninterrupted run, and the run."""
    read, write = os.pipe()
    env = {**os.environ, f"INTERRUPT_{where}": "0", "INTERRUPT_FD": str(write), "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run([sys.executable, "-c", INTERRUPTER, *map(str, args)], capture_output=True, text=True,
                              env=env, cwd=cwd or ROOT, timeout=600, pass_fds=(write,), preexec_fn=_default_sigint)
    finally:
        os.close(write)
    with os.fdopen(read) as counted:
        return int(counted.read() or 0), proc


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job's ignored SIGINT is not what a terminal gives


def sample(total: int, near_end: int = 6) -> list[int]:
    """Interrupt points: the first events, then doubling, then the last `near_end` events of the run."""
    points, n = [], 1
    while n < total:
        points.append(n)
        n *= 2
    return sorted(set(points) | set(range(max(1, total - near_end), total + 1)))
