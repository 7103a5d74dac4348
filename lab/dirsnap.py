"""Byte-level snapshots of a directory tree, to assert that a failed or refused run changed nothing, and a fault
injector for every call a directory transaction makes that changes the disk."""
from __future__ import annotations

import errno
import hashlib
import os
import signal
import stat
from contextlib import contextmanager
from pathlib import Path

# The calls of a commit (and of a recovery) that change the disk; `rename_noreplace` is the product's own
# no-replace rename (renameat2), looked up in irsurgeon.commit.transaction. lab/procs.py counts the same ones.
MUTATING = ("replace", "rename", "link", "unlink", "mkdir", "rmdir", "chmod", "fchmod", "fsync", "write")


def snapshot(directory: Path, modes: bool = False) -> dict[str, str]:
    """relative path -> sha256 for files, 'dir' for folders (so stray empty folders show too), 'link -> where' for
    symbolic links (never followed: a link out of the tree is recorded, not read); with modes, each entry also
    carries its permission bits."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): _entry(p, modes) for p in sorted(directory.rglob("*"))}


def _entry(p: Path, modes: bool) -> str:
    st = p.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"link -> {os.readlink(p)}"
    if stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = hashlib.sha256(p.read_bytes()).hexdigest()
    else:  # a fifo, socket or device: never opened (a fifo would block)
        kind = f"special {stat.filemode(st.st_mode)}"
    return f"{kind} {st.st_mode & 0o7777:o}" if modes else kind


def full_disk_on_nth_replace(monkeypatch, n: int = 2) -> None:
    """Make the n-th os.replace of a directory transaction fail as a full disk would (ENOSPC)."""
    import irsurgeon.commit.transaction as transaction

    real, calls = transaction.os.replace, []

    def replace(src, dst, **dir_fds):
        calls.append(dst)
        if len(calls) == n:
            raise OSError(28, "No space left on device")
        return real(src, dst, **dir_fds)
    monkeypatch.setattr(transaction.os, "replace", replace)


class Faults:
    """Numbers every MUTATING call made while `armed()` and disturbs call number `at` (0: only count them).

    mode "before": the call fails with `err` without doing anything; "after": it is done, then reports `err`
    (an fsync that lost the data, a rename whose success was not reported); "persistent": it and every later
    call fail (a disk gone bad, until `monkeypatch.undo()`); "sigint": SIGINT is delivered just before it, and
    nothing fails. With sigint_at, SIGINT is (also) delivered just before that call. `names` records each numbered
    call as "<call> <last path argument>".
    """

    def __init__(self, monkeypatch, at: int = 0, err: int = errno.ENOSPC, mode: str = "before", sigint_at: int = 0):
        import irsurgeon.commit.transaction as transaction

        self.at, self.err, self.mode, self.on, self.names, self.hit = at, err, mode, False, [], False
        self.sigint_at = at if mode == "sigint" else sigint_at
        for name in MUTATING:
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))
        monkeypatch.setattr(transaction, "rename_noreplace", self._wrap("rename_noreplace",
                                                                        transaction.rename_noreplace))

    @property
    def count(self) -> int:
        return len(self.names)

    @contextmanager
    def armed(self):
        self.on = True
        try:
            yield self
        finally:
            self.on = False

    def _wrap(self, name, real):
        def call(*args, **kwargs):
            if not self.on:
                return real(*args, **kwargs)
            self.names.append(f"{name} {_label(args)}")
            n = len(self.names)
            if n == self.sigint_at:
                os.kill(os.getpid(), signal.SIGINT)
            failing = n == self.at or (self.mode == "persistent" and self.at and n > self.at)
            if failing and self.mode in ("before", "persistent"):
                self.hit = True
                raise OSError(self.err, os.strerror(self.err))
            result = real(*args, **kwargs)
            if failing and self.mode == "after":
                self.hit = True
                raise OSError(self.err, os.strerror(self.err))
            return result
        return call


def _label(args) -> str:
    paths = [a for a in args if isinstance(a, (str, bytes))]
    return os.fsdecode(paths[-1]) if paths else "<fd>"


def digest(d: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file, plus the set of directories: byte identity of a tree."""
    files = {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(d.rglob("*")) if p.is_file()}
    files["<dirs>"] = ",".join(sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_dir()))
    return files
