"""What a finished run may not leave behind: irsurgeon's threads, streams of the draft build, descriptors into the
target or the checkpoint."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from irsurgeon.draft import stream as draft_stream


def hint_ended(seconds: float = 10) -> None:
    """Wait for the read-ahead hint's thread (irsurgeon.weights.prefetch: a daemon patch starts and never joins, by
    design) to end on its own; one still running after `seconds` is then listed by house_threads."""
    for t in threading.enumerate():
        if t.name == "irsurgeon-prefetch":
            t.join(seconds)


def house_threads() -> list[str]:
    """irsurgeon's threads still running, but the background fsync's (never joined: its own case in
    tests/test_staged_writes.py), once the read-ahead hint had its time to end (it may still be closing the
    checkpoint when a patch returns)."""
    hint_ended()
    return [t.name for t in threading.enumerate() if t.name.startswith("irsurgeon")
            and not t.name.startswith("irsurgeon-sync")]


def fds_into(*dirs: Path) -> list[str]:
    out = []
    for n in os.listdir("/proc/self/fd"):
        try:
            where = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue
        if any(where.startswith(str(d)) for d in dirs):
            out.append(where)
    return sorted(out)


def left_behind(*dirs: Path) -> tuple:
    """What a finished run may not leave: streams, threads, descriptors into the target or checkpoint (the threads
    first: the read-ahead hint holds the checkpoint open until it ends)."""
    threads = house_threads()
    return draft_stream._STREAMS, threads, fds_into(*dirs)


CLEAN = ({}, [], [])
