"""Change files of a directory all at once or not at all: stage, verify, then commit under a rollback journal.

    with DirectoryTransaction(target) as tx:      # takes an exclusive lock on the directory, recovers leftovers
        write(tx.stage("openvino_mtp_model.xml"))  # new versions are written into a staging folder inside target
        ... verify the staged files ...
        tx.commit()                               # journal -> move each file in (originals kept as hard links)

Leaving the block without commit() removes the staging folder: the directory is as it was. A process killed while
committing leaves the journal behind; the next transaction on the directory rolls the half-done commit back (or,
when the journal says the commit completed, just clears it) before doing anything else. Ctrl-C during the commit
is held until the commit is finished. The lock is a flock on the directory itself: nothing stray is created, and a
dead process's lock is released by the kernel.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from irsurgeon.errors import OutputError

STAGE_DIR = ".irsurgeon-staging"
JOURNAL = "journal.json"
COMMITTED = "committed"
BACKUP_SUFFIX = ".orig"


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(target: Path) -> list[str]:
    """Undo (or finish clearing) an interrupted commit in target; returns what was done, one line each."""
    stage = target / STAGE_DIR
    if not stage.exists():
        return []
    journal = stage / JOURNAL
    notes = []
    if journal.exists() and not (stage / COMMITTED).exists():
        names, replaced = _journal_names(journal)
        for name in reversed(names):
            backup = stage / (name + BACKUP_SUFFIX)
            if backup.exists():
                os.replace(backup, target / name)
                notes.append(f"restored {name}")
            elif name not in replaced and (target / name).exists():  # a replaced file without backup: restored
                (target / name).unlink()                                # by an earlier, interrupted recovery
                notes.append(f"removed {name} (written by an interrupted run)")
        fsync_path(target)
        journal.unlink()  # first: whatever rmtree leaves behind is then plain leftovers, never a journal to obey
        notes.insert(0, f"rolled back an interrupted commit in {target}")
    else:
        notes.append(f"removed leftover staging folder {stage}")
    shutil.rmtree(stage)
    return notes


def _journal_names(journal: Path) -> tuple[list[str], list[str]]:
    """(files moved in, files that had an original); a journal not written by a commit is refused, not obeyed."""
    try:
        entry = json.loads(journal.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        entry = None
    if isinstance(entry, list):  # the earlier form, a bare list: a file with its backup still here had an original
        entry = {"files": entry, "replaced": [n for n in entry if isinstance(n, str) and _plain(n)
                                              and (journal.parent / (n + BACKUP_SUFFIX)).exists()]}
    lists = [entry.get("files"), entry.get("replaced")] if isinstance(entry, dict) else [None]
    if not all(isinstance(names, list) and all(isinstance(n, str) and _plain(n) for n in names) for names in lists):
        raise OutputError(f"{journal}: not a journal irsurgeon wrote (expected lists of plain file names); "
                          f"inspect and remove {journal.parent} by hand")
    return lists[0], lists[1]


def _plain(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def clear_interrupted(target: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None) -> None:
    """Under the directory lock, roll back or clear what an interrupted run left in target (nothing if clean)."""
    tx = DirectoryTransaction(target, wait, echo)
    if not tx.stage_dir.exists():
        return
    tx._lock()
    try:
        for note in recover(tx.target):
            tx.echo(note)
    except OSError as e:
        raise OutputError(f"{tx.target}: cannot clear an interrupted run's {STAGE_DIR}: {e.strerror or e}") from None
    finally:
        tx._unlock()


class DirectoryTransaction:
    def __init__(self, target: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None):
        self.target = Path(target)
        self.stage_dir = self.target / STAGE_DIR
        self.wait = wait
        self.echo = echo or (lambda _msg: None)
        self.names: list[str] = []
        self._fd: int | None = None
        self.committed = False

    def __enter__(self) -> "DirectoryTransaction":
        self._lock()
        made = False
        try:
            with _deferred_sigint():  # a Ctrl-C here would stop a rollback halfway or orphan the new folder
                for note in recover(self.target):
                    self.echo(note)
                self.stage_dir.mkdir()
                made = True
        except OSError as e:
            self._unlock()
            raise OutputError(f"{self.target}: cannot prepare staging folder: {e.strerror}") from None
        except BaseException:
            if made:
                shutil.rmtree(self.stage_dir, ignore_errors=True)
            self._unlock()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.committed:
                shutil.rmtree(self.stage_dir, ignore_errors=True)
        finally:
            self._unlock()

    def _lock(self) -> None:
        try:
            self._fd = os.open(self.target, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise OutputError(f"{self.target}: cannot open directory: {e.strerror}") from None
        flags = fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(self._fd, flags)
        except OSError as e:
            os.close(self._fd)
            self._fd = None
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutputError(f"{self.target}: another irsurgeon run is changing this directory; "
                                  f"wait for it to finish (or pass --wait)") from None
            raise OutputError(f"{self.target}: cannot lock directory: {e.strerror}") from None

    def _unlock(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def stage(self, name: str) -> Path:
        """Where to write the new version of target/name."""
        if not _plain(name):
            raise ValueError(f"not a plain file name: {name}")
        if name not in self.names:
            self.names.append(name)
        return self.stage_dir / name

    def commit(self) -> None:
        missing = [n for n in self.names if not (self.stage_dir / n).is_file()]
        if missing:
            raise OutputError(f"{self.target}: staged file {missing[0]} was never written")
        with _deferred_sigint():
            try:
                self._commit()
            except OSError as e:
                for note in recover(self.target):
                    self.echo(note)
                raise OutputError(f"{self.target}: commit failed and was rolled back: {e.strerror or e}") from None

    def _commit(self) -> None:
        for name in self.names:
            with open(self.stage_dir / name, "rb+") as f:
                os.fsync(f.fileno())
            if (self.target / name).exists():
                os.chmod(self.stage_dir / name, (self.target / name).stat().st_mode & 0o7777)
                os.link(self.target / name, self.stage_dir / (name + BACKUP_SUFFIX))
        journal = self.stage_dir / JOURNAL
        partial = self.stage_dir / (JOURNAL + ".tmp")  # renamed into place whole: a journal is never half-written
        replaced = [n for n in self.names if (self.stage_dir / (n + BACKUP_SUFFIX)).exists()]
        partial.write_text(json.dumps({"files": self.names, "replaced": replaced}))
        fsync_path(partial)
        os.replace(partial, journal)
        fsync_path(self.stage_dir)
        for name in self.names:
            os.replace(self.stage_dir / name, self.target / name)
        fsync_path(self.target)
        (self.stage_dir / COMMITTED).touch()
        fsync_path(self.stage_dir)
        self.committed = True
        journal.unlink()  # before rmtree, which may take `committed` first and leave a journal that reads as undone
        shutil.rmtree(self.stage_dir)


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
