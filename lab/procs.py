"""Real second processes for the transaction tests: one killed inside a commit, one holding a directory lock, and
a sweeper whose children commit or recover and are SIGKILLed before any chosen call that changes the disk.

All run this checkout's irsurgeon (PYTHONPATH first) and use the product's own functions, so what they leave or
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

from lab.dirsnap import MUTATING

ROOT = Path(__file__).resolve().parents[1]

# Stages {name: text} in a DirectoryTransaction and SIGKILLs itself just before the AT-th call of os.CALL in the
# commit: for os.replace 1 is the journal into place, 2..n+1 each file moved in, n+2 the journal renamed
# `committed`; os.unlink calls come after that, while the staging folder is cleared.
KILL_IN_COMMIT = r'''
import json, os, signal, sys
import irsurgeon.commit.transaction as t
from irsurgeon.families.registry import writable
WRITABLE = writable()
target, at, files, call = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
real, calls = getattr(os, call), []
def counted(*args, **kwargs):
    calls.append(args)
    if len(calls) == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
setattr(t.os, call, counted)
with t.DirectoryTransaction(target, writable=WRITABLE) as tx:
    for name, text in files.items():
        tx.stage(name).write_text(text)
    tx.commit()
'''

# Holds the product's directory lock on argv[1] until the file argv[2] is removed; creates argv[2].held once held.
HOLD_LOCK = r'''
import os, sys, time
from irsurgeon.commit.transaction import directory_lock
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


# A fork server for kill sweeps. It reads one JSON request a line: {"do": "commit", "target", "files": {name: hex},
# "at"} or {"do": "recover", "target", "at"}; a fresh child forked for each (it inherits nothing but the imported
# modules) stages the files and commits them, or recovers the target, SIGKILLing itself just before its at-th
# MUTATING call (0: never). Answers one JSON line: {"status": exit code (-9 when killed), "calls": how many calls
# it made, "notes": what recover() said, "error": "<type>: <message>" or null}.
SWEEP_SERVER = r'''
import json, os, signal, sys
import irsurgeon.commit.transaction as t
from irsurgeon.families.registry import writable
WRITABLE = writable()
CALLS = %s
WRITE, counted = os.write, []

def arm(at):
    def wrap(real):
        def call(*args, **kwargs):
            counted.append(1)
            WRITE(REPORT, b"c")
            if len(counted) == at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        return call
    for name in CALLS:
        setattr(os, name, wrap(getattr(os, name)))
    t.rename_noreplace = wrap(t.rename_noreplace)

def work(req):
    if req["do"] == "commit":
        with t.DirectoryTransaction(req["target"], writable=WRITABLE) as tx:
            for name, data in req["files"].items():
                tx.stage(name).write_bytes(bytes.fromhex(data))
            arm(req["at"])
            tx.commit()
        return []
    arm(req["at"])
    return t.recover(req["target"], writable=WRITABLE)

for line in sys.stdin:
    req = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        REPORT = w
        try:
            answer = {"notes": work(req), "error": None}
        except BaseException as e:
            answer = {"notes": [], "error": f"{type(e).__name__}: {e}"}
        WRITE(w, b"=" + json.dumps(answer).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    calls, _, tail = data.partition(b"=")
    answer = json.loads(tail) if tail else {"notes": [], "error": None}
    print(json.dumps({"status": status, "calls": len(calls), **answer}), flush=True)
''' % (MUTATING,)


class Sweeper:
    """A running SWEEP_SERVER; commit() and recover() each run in a new child of it."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SWEEP_SERVER], env=env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        return json.loads(line)

    def commit(self, target: Path, files: dict[str, bytes], at: int = 0) -> dict:
        return self.ask(do="commit", target=str(target), files={n: d.hex() for n, d in files.items()}, at=at)

    def recover(self, target: Path, at: int = 0) -> dict:
        return self.ask(do="recover", target=str(target), at=at)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()
        self.proc.stderr.close()
