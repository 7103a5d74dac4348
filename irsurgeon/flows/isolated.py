"""One openvino-genai measurement (flows.genai's run_equivalence, run_sweep, run_alternatives) in a process of its own.

Why: openvino-genai 2026.4.1 now and then aborts its process after some tens of pipelines built in it (glibc's
`free(): invalid next size`, `corrupted size vs. prev_size`; reported upstream for EAGLE-3 on CPU, openvino.genai
issue 4425), and `tune` builds a few pipelines per candidate. In a child process such an end costs one measurement,
which is taken again in a fresh process (RETRIES), never the run: greedy counts repeat exactly, and a speed sweep
is a sample of the machine either way.

    parent   call(name, *args, echo=..., **kwargs): starts `python -m irsurgeon.flows.isolated` in a session of its own
             (the terminal's Ctrl-C reaches only the parent, which kills the child's whole process group and goes on
             with its own interruption; nothing is left running), sends it (name, args, kwargs) pickled, then reads
             frames: ("echo", line) goes to echo, ("result", value) is returned, ("error", IRSurgeonError) raised.
             The child's stderr (genai's and glibc's own lines) is kept, and its last line names a death
    child    main(): SIGINT ignored, stdout kept for the frames alone (stray prints, and native code's writes to
             descriptor 1, go to stderr), the named function
             of flows.genai (CALLS, no other) run with an echo that sends frames
The child imports the same irsurgeon as the parent (its folder first on PYTHONPATH). Frames come only from that
child, so pickle is safe here: nothing from a file or a server is unpickled.
"""
from __future__ import annotations

import collections
import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.core.text import shown, silent

CALLS = ("run_equivalence", "run_sweep", "run_alternatives")
RETRIES = 1          # a measurement whose process died is taken again this many times in a fresh one
STDERR_LINES = 20    # of the child's stderr kept, for the line that names its death


class ChildDied(Exception):
    """The child ended without a result: its exit status and the last line it wrote to stderr."""


def call(name: str, *args, echo: Callable[[str], None] = silent, **kwargs):
    """flows.genai.<name>(*args, echo=..., **kwargs) in a child process (the module docstring), again in a fresh one
    up to RETRIES times when the child dies; an IRSurgeonError naming how it died after that."""
    if name not in CALLS:
        raise ValueError(f"not a measurement run in a child process: {name}")
    for _ in range(RETRIES):
        try:
            return _once(name, args, kwargs, echo)
        except ChildDied as e:
            echo(f"   openvino-genai ended its process ({e}): measuring again in a fresh one")
    try:
        return _once(name, args, kwargs, echo)
    except ChildDied as e:
        raise IRSurgeonError(f"openvino-genai ended its process during {name} {RETRIES + 1} times (last: {e}); "
                             f"nothing was written") from None


def _once(name: str, args: tuple, kwargs: dict, echo: Callable[[str], None]):
    import irsurgeon

    root = str(Path(irsurgeon.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "irsurgeon.flows.isolated"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    tail: collections.deque[bytes] = collections.deque(maxlen=STDERR_LINES)
    drain = threading.Thread(target=lambda: tail.extend(proc.stderr), daemon=True)  # a full pipe would block it
    drain.start()
    try:
        pickle.dump((name, args, kwargs), proc.stdin)
        proc.stdin.close()
        while True:
            try:
                kind, value = pickle.load(proc.stdout)
            except (EOFError, pickle.UnpicklingError):
                break
            if kind == "echo":
                echo(value)
            elif kind == "result":
                return value
            else:
                raise value
        proc.wait()
        drain.join(timeout=5)
        raise ChildDied(_death(proc.returncode, tail))
    finally:
        if proc.poll() is None:  # interrupted, or an error raised here: the child and anything it started go
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def _death(returncode: int, tail) -> str:
    """How a child ended without its result, in a few words."""
    how = f"signal {signal.Signals(-returncode).name}" if returncode < 0 else f"exit status {returncode}"
    last = next((ln.decode("utf-8", "replace").strip() for ln in reversed(tail) if ln.strip()), "")
    return how + (f": {shown(last[:200])}" if last else "")


def main() -> None:
    """The child: run the one measurement it is sent, answer in frames (the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout.flush()
    frames = os.fdopen(os.dup(1), "wb")  # the frames' own descriptor; 1 becomes stderr for everyone else:
    os.dup2(2, 1)                         # openvino's and genai's C++ write std::cout there, never into a frame
    sys.stdout = sys.stderr  # a stray print never corrupts a frame

    def send(kind: str, value) -> None:
        pickle.dump((kind, value), frames)
        frames.flush()

    name, args, kwargs = pickle.load(sys.stdin.buffer)
    from irsurgeon.flows import genai

    try:
        result = getattr(genai, name)(*args, echo=lambda line: send("echo", line), **kwargs) if name in CALLS \
            else None
    except IRSurgeonError as e:
        send("error", e)
        return
    except Exception as e:  # anything else the measurement raised: one line for the parent, not a traceback
        send("error", IRSurgeonError(f"{name} failed in its process: {cause(e)}"))
        return
    send("result", result)


if __name__ == "__main__":
    main()
