"""Change files of a directory all at once or not at all: stage, verify, then commit under a rollback journal.

    with DirectoryTransaction(target) as tx:      # takes the directory lock, recovers what a killed run left
        write(tx.stage("openvino_mtp_model.xml"))  # new versions are written into a staging folder inside target
        ... verify the staged files ...
        tx.commit()                               # journal -> move each file in (originals kept as hard links)

Leaving the block without commit() removes the staging folder: the directory is as it was. A process killed while
committing leaves the journal behind; the next transaction on the directory rolls the half-done commit back (or,
when the journal was renamed `committed`, just clears it) before doing anything else. Ctrl-C during the commit is
held until the commit is finished. See irsurgeon.journal for what a journal records and when it is refused.

Nothing here follows a link out of the target. The target and the staging folder are held open as directory
descriptors (the staging folder opened with O_NOFOLLOW, so a link there is refused); every rename, link, unlink and
mkdir is made relative to those descriptors, and the paths handed out for writing staged files go through the held
descriptor (/proc/self/fd/N/name), so swapping the staging folder for a link mid-run redirects nothing.

Every command that writes into a directory takes `directory_lock` first: a flock on the directory itself (nothing
stray is created, and a dead process's lock is released by the kernel).
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import signal
import stat
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from irsurgeon import journal
from irsurgeon.errors import OutputError, cause
from irsurgeon.journal import (BACKUP_SUFFIX, COMMITTED, JOURNAL, STAGE_DIR, WRITABLE, ForeignLeftovers,  # noqa: F401
                               examine, leftover_state, lstat_at, open_stage)

__all__ = ["BACKUP_SUFFIX", "COMMITTED", "JOURNAL", "STAGE_DIR", "WRITABLE", "DirectoryTransaction",
           "ForeignLeftovers", "clear_interrupted", "directory_lock", "leftover_state", "recover", "shown"]
_SPELLED: dict[str, str] = {}  # "/proc/self/fd/N" of an open staging folder -> its spelled path, for messages


def acquire(path: str | Path, wait: bool = False) -> int:
    """Open directory `path` and take its exclusive flock; returns the descriptor (closing it releases the lock)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise OutputError(f"{path}: cannot open directory: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise OutputError(f"{path}: another irsurgeon run holds this directory; try again when it has "
                              f"finished (or pass --wait)") from None
        raise OutputError(f"{path}: cannot lock directory: {e.strerror}") from None
    return fd


@contextmanager
def directory_lock(path: str | Path, wait: bool = False) -> Iterator[int]:
    """Hold the directory lock every writing command takes; yields the directory's descriptor."""
    fd = acquire(path, wait)
    try:
        yield fd
    finally:
        os.close(fd)


def fd_path(fd: int, spelled: Path) -> Path:
    """A path that reaches the directory held by fd, whatever its name points at now (Linux's /proc magic link);
    where /proc is missing, the spelled path."""
    proc = Path(f"/proc/self/fd/{fd}")
    return proc if proc.is_dir() else spelled


def shown(path: str | Path) -> str:
    """path for a message: a staging file reached through /proc/self/fd named by its spelled path."""
    text = str(path)
    for proc, spelled in _SPELLED.items():
        if text == proc or text.startswith(proc + "/"):
            return spelled + text[len(proc):]
    return text


def _remove_stage(target_fd: int, stage_fd: int, names: list[str]) -> None:
    """Unlink the staging folder's files through its descriptor, then the folder, if its name is still ours."""
    for name in names:
        try:
            os.unlink(name, dir_fd=stage_fd)
        except FileNotFoundError:
            pass
    named = lstat_at(target_fd, STAGE_DIR)
    if named is not None and os.path.samestat(named, os.fstat(stage_fd)):
        os.rmdir(STAGE_DIR, dir_fd=target_fd)


def _recover_at(target_fd: int, where: Path) -> list[str]:
    stage_fd = open_stage(target_fd, where)
    if stage_fd is None:
        return []
    stage = where / STAGE_DIR
    try:
        names, record, steps = examine(target_fd, stage_fd, str(stage))
        notes = [f"removed leftover staging folder {stage}"]
        if record is not None:
            notes = [f"rolled back an interrupted commit in {where} (run {record['run']})"]
            notes += _roll_back(target_fd, stage_fd, steps)
            names.remove(JOURNAL)
        _remove_stage(target_fd, stage_fd, names)
        return notes
    finally:
        os.close(stage_fd)


def _roll_back(target_fd: int, stage_fd: int, steps: list[journal.Step]) -> list[str]:
    """Undo a half-done commit whose every step journal.examine checked against the disk."""
    notes = []
    for step in steps:
        if step.action == "restore":
            os.replace(step.name + BACKUP_SUFFIX, step.name, src_dir_fd=stage_fd, dst_dir_fd=target_fd)
            notes.append(f"restored {step.name}")
        elif step.action == "remove":
            os.unlink(step.name, dir_fd=target_fd)
            notes.append(f"removed {step.name} (written by the interrupted run)")
    os.fsync(target_fd)
    os.unlink(JOURNAL, dir_fd=stage_fd)  # first: what is left after this is plain leftovers, never a journal
    os.fsync(stage_fd)
    return notes


def recover(target: str | Path, target_fd: int | None = None) -> list[str]:
    """Undo (or clear) what an interrupted run left in target; returns what was done, one line each.

    Call it holding the directory lock (target_fd: the locked descriptor). Anything irsurgeon cannot prove it
    wrote raises ForeignLeftovers before a single file is touched. Ctrl-C is held until it is done.
    """
    where, fd = Path(target), target_fd
    with _deferred_sigint():
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY) if target_fd is None else target_fd
            return _recover_at(fd, where)
        except OSError as e:
            raise OutputError(f"{where}: cannot clear an interrupted run's {STAGE_DIR}: {e.strerror or e}") from None
        finally:
            if target_fd is None and fd is not None:
                os.close(fd)


def clear_interrupted(target: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None) -> None:
    """Under the directory lock, roll back or clear what an interrupted run left in target (nothing if clean)."""
    with directory_lock(target, wait) as fd:
        for note in recover(target, fd):
            (echo or (lambda _m: None))(note)


class DirectoryTransaction:
    def __init__(self, target: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None):
        self.target = Path(target)
        self.wait = wait
        self.echo = echo or (lambda _msg: None)
        self.names: list[str] = []
        self.run = uuid.uuid4().hex
        self.committed = False
        self._fd: int | None = None
        self._stage_fd: int | None = None
        self._journaled = False

    @property
    def stage_dir(self) -> Path:
        """The staging folder, reached through its held descriptor."""
        return fd_path(self._stage_fd, self.target / STAGE_DIR)

    def __enter__(self) -> "DirectoryTransaction":
        self._fd = acquire(self.target, self.wait)
        try:
            for note in recover(self.target, self._fd):
                self.echo(note)
            with _deferred_sigint():  # a Ctrl-C here would orphan the new folder
                self._make_stage()
        except BaseException as e:
            if self._stage_fd is not None:  # made, then Ctrl-C (delivered when the block ended)
                _remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
            self._release()
            if isinstance(e, OSError):
                raise OutputError(f"{self.target}: cannot prepare staging folder: {e.strerror or e}") from None
            raise
        return self

    def _make_stage(self) -> None:
        os.mkdir(STAGE_DIR, 0o700, dir_fd=self._fd)
        self._stage_fd = os.open(STAGE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self._fd)
        _SPELLED[str(self.stage_dir)] = str(self.target / STAGE_DIR)
        if os.listdir(self._stage_fd):  # swapped between mkdir and open for a folder that is not ours
            raise OSError(errno.EEXIST, f"{STAGE_DIR} was replaced while being created")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.committed and self._stage_fd is not None:
                self._abandon()
        finally:
            self._release()

    def _abandon(self) -> None:
        """Undo a commit that stopped halfway (the journal says what moved), or drop the staged files."""
        if self._journaled:
            for note in recover(self.target, self._fd):
                self.echo(note)
        else:
            with _deferred_sigint():
                _remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
        self._journaled = False

    def _release(self) -> None:
        if self._stage_fd is not None:
            _SPELLED.pop(str(self.stage_dir), None)
            os.close(self._stage_fd)
            self._stage_fd = None
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def stage(self, name: str) -> Path:
        """Where to write the new version of target/name (one of the names irsurgeon writes: WRITABLE)."""
        if name not in WRITABLE:
            raise ValueError(f"not a file irsurgeon writes into a target: {name}")
        if name not in self.names:
            self.names.append(name)
        return self.stage_dir / name

    def commit(self) -> None:
        missing = [n for n in self.names if not os.path.isfile(self.stage_dir / n)]
        if missing:
            raise OutputError(f"{self.target}: staged file {missing[0]} was never written")
        with _deferred_sigint():
            try:
                self._commit()
            except OSError as e:
                self._abandon()
                raise OutputError(f"{self.target}: commit failed and was rolled back: {e.strerror or e}") from None

    def _commit(self) -> None:
        entries = [self._prepare(name) for name in self.names]
        partial = JOURNAL + ".tmp"  # renamed into place whole: a journal is never half-written
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self._stage_fd)
        try:
            os.write(fd, journal.encode(self.run, entries))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, JOURNAL, src_dir_fd=self._stage_fd, dst_dir_fd=self._stage_fd)
        self._journaled = True
        os.fsync(self._stage_fd)
        for name in self.names:
            os.replace(name, name, src_dir_fd=self._stage_fd, dst_dir_fd=self._fd)
        os.fsync(self._fd)
        os.replace(JOURNAL, COMMITTED, src_dir_fd=self._stage_fd, dst_dir_fd=self._stage_fd)
        os.fsync(self._stage_fd)
        self.committed = True
        try:
            _remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
        except OSError as e:  # the commit is complete: what is left holds no journal, and the next run clears it
            self.echo(f"{self.target / STAGE_DIR}: not removed after the commit ({e.strerror or e})")

    def _prepare(self, name: str) -> dict:
        """fsync the staged file, keep the original as a hard link beside it; the file's journal entry."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self._stage_fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        new = journal.content_at(self._stage_fd, name)
        original = lstat_at(self._fd, name)
        old = None
        if original is not None:
            if stat.S_ISREG(original.st_mode):  # a link keeps its own mode; its backup is the link itself
                os.chmod(name, original.st_mode & 0o7777, dir_fd=self._stage_fd)
            os.link(name, name + BACKUP_SUFFIX, src_dir_fd=self._fd, dst_dir_fd=self._stage_fd,
                    follow_symlinks=False)
            old = journal.identity(lstat_at(self._stage_fd, name + BACKUP_SUFFIX))
        return {"name": name, "new": new, "old": old}


@contextmanager
def _deferred_sigint():
    """Hold SIGINT while a commit runs; re-deliver it as KeyboardInterrupt afterwards."""
    received = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    except ValueError:  # not the main thread: signals cannot be handled here anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


@dataclass
class PatchResult:
    target: Path
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: bool = False
    run_hint: str = ""  # how to run the result, when it is not the Qwen3.5 VLMPipeline line


def write_staged(path: Path, write: Callable[[Path], object]) -> None:
    """Write one staged file; a failure (full disk, quota, I/O error) names the file and the space left there."""
    try:
        write(path)
    except (OSError, RuntimeError) as e:  # ov.save_model reports a full disk as a bare iostream RuntimeError
        reason = e.strerror if isinstance(e, OSError) and e.strerror else cause(e)
        free = shutil.disk_usage(path.parent).free
        raise OutputError(f"{shown(path)}: cannot write it: {reason} ({free / 1e6:.1f} MB free there)") from None
