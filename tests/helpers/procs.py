"""Real second processes for the transaction tests: one killed inside a commit, one holding a directory lock.

Both run this checkout's irsurgeon (PYTHONPATH first) and use the product's own functions, so what they leave or
hold is exactly what a real run would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Stages {name: text} in a DirectoryTransaction and SIGKILLs itself just before the AT-th call of os.CALL in the
# commit: for os.replace 1 is the journal into place, 2..n+1 each file moved in, n+2 the journal renamed
# `committed`; os.unlink calls come after that, while the staging folder is cleared.
KILL_IN_COMMIT = r'''
import json, os, signal, sys
import irsurgeon.transaction as t
target, at, files, call = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
real, calls = getattr(os, call), []
def counted(*args, **kwargs):
    calls.append(args)
    if len(calls) == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
setattr(t.os, call, counted)
with t.DirectoryTransaction(target) as tx:
    for name, text in files.items():
        tx.stage(name).write_text(text)
    tx.commit()
'''

# Holds the product's directory lock on argv[1] until the file argv[2] is removed; creates argv[2].held once held.
HOLD_LOCK = r'''
import os, sys, time
from irsurgeon.transaction import directory_lock
with directory_lock(sys.argv[1]):
    open(sys.argv[2] + ".held", "w").close()
    while os.path.exists(sys.argv[2]):
        time.sleep(0.02)
'''


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def killed_commit(target: Path, files: dict[str, str], at: int, call: str = "replace") -> int:
    """Run a commit of files into target in a child killed before its at-th os.<call>; returns its exit code."""
    proc = subprocess.run([sys.executable, "-c", KILL_IN_COMMIT, str(target), str(at), json.dumps(files), call],
                          env=env(), capture_output=True, text=True, timeout=60)
    return proc.returncode


@contextmanager
def lock_held(directory: Path, gate: Path):
    """A child process holding directory's lock; yields a function that releases it (and waits for the exit)."""
    gate.write_text("")
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(directory), str(gate)], env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = Path(str(gate) + ".held")
    deadline = time.monotonic() + 60
    while not held.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)

    def release() -> None:
        gate.unlink(missing_ok=True)
        proc.wait(30)
    try:
        yield release
    finally:
        gate.unlink(missing_ok=True)
        proc.wait(30)
        held.unlink(missing_ok=True)
