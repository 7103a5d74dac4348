"""A staged file hashed in the background while the flow checks it, for the commit's journal.

The commit journal records each staged file's size and sha256 (irsurgeon.journal_format): hashing a 0.85 GB head is
about a second of CPU, and at commit time nothing else runs beside it. `Digests.start` hashes a staged file in a
thread as soon as it is written, while the staged files are read back, checked and run; the commit's `take(name, st)`
gives that digest only when the file is still, by the fstat the commit takes before touching it, the one hashed:
same device, inode, size, mtime and ctime, unchanged from before the hash to after it (a write, a truncation or a
chmod moves ctime, which no call can set back). Otherwise it gives None and the commit hashes the file itself, as it
always did. The thread only opens the file read-only and reads it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from irsurgeon.journal_format import digest


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass
class _Job:
    fd: int
    key: tuple[int, ...] | None = None
    result: dict | None = None

    def run(self) -> None:
        try:
            before = stat_key(os.fstat(self.fd))
            found = digest(self.fd)
            if stat_key(os.fstat(self.fd)) == before:
                self.key, self.result = before, found
        except OSError:  # no result: the commit hashes the file itself and reports what fails there
            self.result = None
        finally:
            os.close(self.fd)


class Digests:
    """Background digests of staged files, by staged name."""

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[threading.Thread, _Job]] = {}

    def start(self, dir_fd: int, name: str) -> None:
        """Hash dir_fd/name (never through a link) in a thread."""
        self.take(name, None)  # a name staged again: its earlier job is void
        job = _Job(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd))
        thread = threading.Thread(target=job.run, name=f"digest {name}", daemon=True)
        thread.start()
        self._jobs[name] = (thread, job)

    def take(self, name: str, st: os.stat_result | None) -> dict | None:
        """The digest of `name` when st is the file it was computed on, else None (waits for the thread)."""
        thread, job = self._jobs.pop(name, (None, None))
        if thread is None:
            return None
        thread.join()
        return job.result if st is not None and job.key == stat_key(st) else None
