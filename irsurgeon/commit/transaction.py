"""Change files of a directory all at once or not at all: stage, verify, then commit under a rollback journal.

    with DirectoryTransaction(target, writable=names) as tx:  # takes the directory lock, recovers what a killed run left
        write(tx.stage("openvino_model.xml"))         # new versions are written into a staging folder in target
        write(tx.stage("mtp_assistant/config.json"))  # one subdirectory level down too (made when missing)
        ... verify the staged files ...
        tx.commit()                                   # journal -> move each file in (originals kept as hard links)

Leaving the block without commit() removes the staging folder: the directory is as it was. The commit, in order:
  1. each subdirectory is checked again: still the folder stage() opened, or still missing
  2. for each missing one a folder is made in the staging folder (and held open)
  3. each staged file is fsynced, hashed (or the digest recorded as it was written taken, `written`; one changed
     since is refused) and given its original's mode; each original is hard-linked as its backup
  4. the journal is written whole (journal.json.tmp, fsync, renamed into place; irsurgeon.commit.journal_format),
     the staging folder fsynced, then the target: the staging folder's own name is durable before anything in the
     target changes (else a power cut could keep a file moved in and lose the folder holding the journal and the
     only other name of the original it replaced)
  5. each made folder is renamed into the target (never over anything there), the target fsynced
  6. each file is renamed into place, the directories fsynced
  7. the journal is renamed `committed`: the commit is complete; then the staging folder is removed
A process killed in between leaves the journal; the next transaction (or recover()) on the directory rolls the
half-done commit back, or clears a complete one's leftovers, before anything else (irsurgeon.commit.recovery, after
irsurgeon.commit.journal has proven every step against the disk). A call that fails in between runs that same recovery at
once: the error says "rolled back" only when it finished, else that the next run finishes it. Ctrl-C during a
commit, its rollback or a recovery is held until it is done.

Nothing here follows a link, in or out of the target. The target, the staging folder and each subdirectory are held
open as directory descriptors (opened with O_NOFOLLOW: a subdirectory that is a link, a file or anything but a
folder is refused when first staged into, before anything is written); every rename, link, unlink, mkdir and rmdir
is made relative to those descriptors, and the paths handed out for writing staged files go through the held
descriptor (/proc/self/fd/N/name), so swapping any of these folders for a link mid-run redirects nothing.

Every command that writes into a directory takes `directory_lock` first: a flock on the directory itself (nothing
stray is created, and a dead process's lock is released by the kernel).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat
import sys
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from irsurgeon.commit import recovery
from irsurgeon.core.signals import deferred_sigint as _deferred_sigint, no_exit
from irsurgeon.core.errors import CommitError, OutputError, cause, with_hint
from irsurgeon.core.fsat import DIR_FLAGS, lstat_at, open_dir, rename_noreplace
from irsurgeon.commit.journal import (BACKUP_SUFFIX, COMMITTED, JOURNAL, SLASH, STAGE_DIR,
                               ForeignLeftovers, check_writable, digest, encode, identity, leaf, leftover_state,
                               staged, staged_dir, subdir)

__all__ = ["BACKUP_SUFFIX", "COMMITTED", "JOURNAL", "STAGE_DIR", "DirectoryTransaction",
           "ForeignLeftovers", "clear_interrupted", "directory_lock", "leftover_state", "recover", "shown"]
_SPELLED: dict[str, str] = {}  # "/proc/self/fd/N" of an open staging folder -> its spelled path, for messages


def acquire(path: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None) -> int:
    """Open directory `path` and take its exclusive flock; returns the descriptor (closing it releases the lock).
    With `wait`, a held lock is waited for, said once through `echo`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise OutputError(f"{path}: cannot open directory: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if not wait or e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            (echo or _to_stderr)(f"{path}: another irsurgeon run holds this directory; waiting for it to finish "
                                 f"(Ctrl-C stops waiting)")
            fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise with_hint(OutputError(f"{path}: another irsurgeon run holds this directory; try again when it "
                                        f"has finished"), "--wait", "or pass --wait") from None
        raise OutputError(f"{path}: cannot lock directory: {e.strerror}") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@contextmanager
def directory_lock(path: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None) -> Iterator[int]:
    """Hold the directory lock every writing command takes; yields the directory's descriptor."""
    fd = acquire(path, wait, echo)
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


def recover(target: str | Path, target_fd: int | None = None, *, writable: frozenset[str]) -> list[str]:
    """Undo (or clear) what an interrupted run left in target; returns what was done, one line each.

    Call it holding the directory lock (target_fd: the locked descriptor). Anything irsurgeon cannot prove it
    wrote raises ForeignLeftovers before a single file is touched. Ctrl-C is held until it is done. writable: the
    names the interrupted run may have written (the flows: families.registry.writable()).
    """
    where, fd = Path(target), target_fd
    with _deferred_sigint():
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY) if target_fd is None else target_fd
            return recovery.recover_at(fd, where, writable)
        except OSError as e:
            raise OutputError(f"{where}: cannot clear an interrupted run's {STAGE_DIR}: {e.strerror or e}") from None
        finally:
            if target_fd is None and fd is not None:
                os.close(fd)


def clear_interrupted(target: str | Path, wait: bool = False, echo: Callable[[str], None] | None = None, *,
                      writable: frozenset[str], held: int | None = None) -> None:
    """Under the directory lock, roll back or clear what an interrupted run left in target (nothing if clean).
    held: the descriptor of the lock the caller already holds on target (taken here otherwise)."""
    with nullcontext(held) if held is not None else directory_lock(target, wait, echo) as fd:
        for note in recover(target, fd, writable=writable):
            (echo or (lambda _m: None))(note)


class DirectoryTransaction:
    """Stage, then commit or drop, files of target whose names are in `writable` (the flows: every name any family
    writes, families.registry.writable(), so a run recovers any family's killed run first). recorded: every
    staged file must be recorded as written (`write`, `written`), or the commit is refused. held: the descriptor
    of the directory lock the caller took for its whole run (`acquire`: a flow that judges and builds before it
    stages, so that no second run builds beside it); the transaction then works under that lock, never releasing
    it, instead of taking its own."""

    def __init__(self, target: str | Path, *, writable: frozenset[str], wait: bool = False,
                 echo: Callable[[str], None] | None = None, recorded: bool = False, held: int | None = None):
        self.target = Path(target)
        self.held = held
        self.recorded = recorded  # every staged file must come with `written` (patch, build-mtp)
        self.wait = wait
        self.echo = echo or (lambda _msg: None)
        self.writable = check_writable(writable)
        self.names: list[str] = []
        self.run = uuid.uuid4().hex
        self.committed = False
        self._fd: int | None = None
        self._stage_fd: int | None = None
        self._dirs: dict[str, int | None] = {}  # subdirectory -> its held descriptor (None: missing, to be made)
        self._made: list[str] = []  # subdirectories this commit makes
        self._written: dict[str, tuple] = {}  # name -> (its digest, a Tail or Known; the file's stat key once written)
        self._doing = ""  # the commit step under way, for its error message
        self._no_exit = None

    @property
    def stage_dir(self) -> Path:
        """The staging folder, reached through its held descriptor."""
        return fd_path(self._stage_fd, self.target / STAGE_DIR)

    def __enter__(self) -> "DirectoryTransaction":
        # a duplicate of the caller's descriptor shares its open file description, and so its flock: closing it
        # (in _release) leaves the caller's lock held (flock(2): a lock belongs to the open file description)
        self._fd = os.dup(self.held) if self.held is not None else acquire(self.target, self.wait, self.echo)
        self._no_exit = no_exit()  # no exit at once (a second Ctrl-C) while its staging folder or commit is open
        self._no_exit.__enter__()
        try:
            for note in recover(self.target, self._fd, writable=self.writable):
                self.echo(note)
            with _deferred_sigint():  # a Ctrl-C here would orphan the new folder
                self._make_stage()
        except BaseException as e:
            if self._stage_fd is not None:  # made, then Ctrl-C (delivered when the block ended)
                recovery.remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
            self._release()
            if isinstance(e, OSError):
                raise OutputError(f"{self.target}: cannot prepare staging folder: {e.strerror or e}") from None
            raise
        return self

    def _make_stage(self) -> None:
        os.mkdir(STAGE_DIR, 0o700, dir_fd=self._fd)
        self._stage_fd = os.open(STAGE_DIR, DIR_FLAGS, dir_fd=self._fd)
        _SPELLED[str(self.stage_dir)] = str(self.target / STAGE_DIR)
        if os.listdir(self._stage_fd):  # swapped between mkdir and open for a folder that is not ours
            raise OSError(errno.EEXIST, f"{STAGE_DIR} was replaced while being created")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.committed and self._stage_fd is not None:
                with _deferred_sigint():  # drop the staged files: nothing in the target has changed
                    recovery.remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
        finally:
            self._release()

    def _close_stage(self) -> None:
        if self._stage_fd is not None:
            _SPELLED.pop(str(self.stage_dir), None)
            os.close(self._stage_fd)
            self._stage_fd = None

    def _release(self) -> None:
        for recorded, _key in self._written.values():
            recorded.stop()
        self._close_stage()
        for fd in self._dirs.values():
            if fd is not None:
                os.close(fd)
        self._dirs = {}
        if self._fd is not None:
            os.close(self._fd)  # releases the flock (a held one stays: the caller still has it open)
            self._fd = None
        if self._no_exit is not None:
            self._no_exit.__exit__(None, None, None)
            self._no_exit = None

    def stage(self, name: str) -> Path:
        """Where to write the new version of target/name (a name of the writable set, maybe folder/name). The
        first name in a subdirectory opens it: one that is a link, a file or not a folder is an OutputError."""
        if name not in self.writable:
            raise ValueError(f"not a file irsurgeon writes into a target: {name}")
        folder = subdir(name)
        if folder is not None and folder not in self._dirs:
            self._dirs[folder] = self._open_subdir(folder)
        if name not in self.names:
            self.names.append(name)
        return self.stage_dir / staged(name)

    def written(self, name: str, digest, st: os.stat_result) -> None:
        """What the caller wrote into stage(name) and checked, and its digest (anything with digest() and stop():
        irsurgeon.ir.streamed.Tail hashing it on a thread, or Known; st: the file's stat once written). The commit
        journals that digest, and refuses the file (nothing moves in) if it is no longer the one written: another
        inode, size, modification or change time. Dropping the transaction stops the hash."""
        self._written[name] = (digest, _stat_key(st))

    def write(self, name: str, data: bytes) -> Path:
        """Stage data as target/name, recorded as written (`written`); returns the staged path."""
        path = self.stage(name)
        write_staged(path, lambda p: p.write_bytes(data))
        self.written(name, Known({"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}), os.stat(path))
        return path

    def _open_subdir(self, folder: str) -> int | None:
        """The held descriptor of target/folder, never through a link (None: missing)."""
        where = self.target / folder
        try:
            fd = open_dir(self._fd, folder)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OutputError(f"{where}: a link or a file, not a folder; irsurgeon writes nothing through it "
                                  f"(make it a folder, or remove it)") from None
            raise OutputError(f"{where}: cannot open it: {e.strerror}") from None
        if fd is not None and os.fstat(fd).st_dev != os.fstat(self._stage_fd).st_dev:
            os.close(fd)
            raise OutputError(f"{where}: on another file system than {self.target}; files cannot move into it whole")
        return fd

    def commit(self) -> None:
        missing = [n for n in self.names if not _regular(lstat_at(self._stage_fd, staged(n)))]
        if missing:
            raise OutputError(f"{self.target}: staged file {missing[0]} was never written")
        with _deferred_sigint():
            if not self.names:  # nothing to move in, so no journal: an empty one would prove nothing
                self._finish()
                return
            self._check_dirs()
            try:
                self._commit()
            except OSError as e:
                self._fail(e)

    def _check_dirs(self) -> None:
        """The staging folder is still under its name (the next run finds the journal there, nowhere else), and
        each subdirectory is still the folder stage() opened; one that appeared since is opened now."""
        self._check_stage()
        for folder, fd in list(self._dirs.items()):
            named = lstat_at(self._fd, folder)
            if fd is None and named is not None:
                self._dirs[folder] = self._open_subdir(folder)
            elif fd is not None and (named is None or not os.path.samestat(named, os.fstat(fd))):
                raise OutputError(f"{self.target / folder}: replaced or removed since files were staged for it; "
                                  f"nothing was written")

    def _check_stage(self) -> None:
        named = lstat_at(self._fd, STAGE_DIR)
        if named is None or not os.path.samestat(named, os.fstat(self._stage_fd)):
            raise OutputError(f"{self.target / STAGE_DIR}: replaced or moved since files were staged in it; nothing "
                              f"was written")

    def _commit(self) -> None:
        for folder in [d for d, fd in self._dirs.items() if fd is None]:
            self._make_dir(folder)
        self._write_journal([self._prepare(name) for name in self.names])
        try:  # again: hashing the files took long enough for the folder to be moved meanwhile
            self._check_stage()
        except OutputError:
            os.unlink(JOURNAL, dir_fd=self._stage_fd)  # a journal the next run cannot find proves nothing
            raise
        for folder in self._made:
            self._doing = f"moving {folder}/ in"
            rename_noreplace(staged_dir(folder), folder, self._stage_fd, self._fd)
        if self._made:
            os.fsync(self._fd)
        for name in self.names:
            self._doing = f"moving {name} in"
            os.replace(staged(name), leaf(name), src_dir_fd=self._stage_fd, dst_dir_fd=self._dir_fd(name))
        self._doing = "syncing the target"
        for fd in [*self._dirs.values(), self._fd]:
            os.fsync(fd)
        self._doing = "marking the commit complete"
        os.replace(JOURNAL, COMMITTED, src_dir_fd=self._stage_fd, dst_dir_fd=self._stage_fd)
        os.fsync(self._stage_fd)
        self._finish()

    def _finish(self) -> None:
        self.committed = True
        try:
            recovery.remove_stage(self._fd, self._stage_fd, os.listdir(self._stage_fd))
        except OSError as e:  # the commit is complete: what is left holds no journal, and the next run clears it
            self.echo(f"{self.target / STAGE_DIR}: not removed after the commit ({e.strerror or e})")

    def _fail(self, e: OSError) -> None:
        """Undo a commit a failed call stopped, as the next run would after a kill; say whether it was undone."""
        failed = f"{self._doing}: {e.strerror or e}"
        try:
            if lstat_at(self._stage_fd, COMMITTED) is not None and lstat_at(self._stage_fd, JOURNAL) is None:
                self.echo(f"{self.target}: committed, then {failed}")  # the call came after the commit mark
                self._finish()
                return
            recovery.recover_at(self._fd, self.target, self.writable)
        except ForeignLeftovers as r:
            raise CommitError(f"{self.target}: commit failed ({failed}), and its rollback stopped: {r}") from None
        except OSError as r:
            raise CommitError(f"{self.target}: commit failed ({failed}), and undoing it failed too "
                              f"({r.strerror or r}); the next irsurgeon run on it finishes undoing it") from None
        finally:
            if not self.committed:
                self._close_stage()
        raise CommitError(f"{self.target}: commit failed and was rolled back: {failed}")

    def _dir_fd(self, name: str) -> int:
        folder = subdir(name)
        return self._fd if folder is None else self._dirs[folder]

    def _make_dir(self, folder: str) -> None:
        """A folder for the missing target/folder, made in the staging folder and held open."""
        self._doing = f"making {folder}/"
        os.mkdir(staged_dir(folder), 0o777, dir_fd=self._stage_fd)
        fd = os.open(staged_dir(folder), DIR_FLAGS, dir_fd=self._stage_fd)
        self._dirs[folder] = fd
        self._made.append(folder)
        if os.listdir(fd):  # swapped between mkdir and open for a folder that is not ours
            raise OSError(errno.EEXIST, f"{staged_dir(folder)} was replaced while being made")

    def _prepare(self, name: str) -> dict:
        """fsync and hash the staged file, give it its original's mode, keep the original as a hard link beside
        it; the file's journal entry."""
        self._doing = f"preparing {name}"
        dir_fd, backup = self._dir_fd(name), staged(name) + BACKUP_SUFFIX
        original = lstat_at(dir_fd, leaf(name))
        fd = os.open(staged(name), os.O_RDONLY | os.O_NOFOLLOW, dir_fd=self._stage_fd)
        try:
            st = os.fstat(fd)
            recorded, key = self._written.get(name, (None, None))
            if key is None and self.recorded:  # a writer that bypassed `write`/`written`: nothing proves the file
                raise OutputError(f"{self.target / name}: staged with no record of what was written; nothing was "
                                  f"written")
            if key is not None and key != _stat_key(st):
                raise OutputError(f"{self.target / name}: its staged copy changed after it was written and checked "
                                  f"(another file, size or time); nothing was written")
            if original is not None and stat.S_ISREG(original.st_mode):  # a link keeps its own mode
                os.fchmod(fd, original.st_mode & 0o7777)
            os.fsync(fd)
            known = recorded.digest() if recorded is not None else None
            new = {**(known or digest(fd)), "dev": st.st_dev, "ino": st.st_ino}
        finally:
            os.close(fd)
        old = None
        if original is not None:
            os.link(leaf(name), backup, src_dir_fd=dir_fd, dst_dir_fd=self._stage_fd, follow_symlinks=False)
            old = identity(lstat_at(self._stage_fd, backup))
        return {"name": name, "new": new, "old": old}

    def _write_journal(self, entries: list[dict]) -> None:
        """The journal, written whole: journal.json.tmp, fsync, renamed into place, the staging folder fsynced, then
        the target (the staging folder's name in it: module docstring, step 4)."""
        self._doing = "writing the journal"
        here = os.fstat(self._stage_fd)
        dirs = [{"name": d, "made": d in self._made, "dev": s.st_dev, "ino": s.st_ino}
                for d, s in ((d, os.fstat(fd)) for d, fd in self._dirs.items())]
        data = memoryview(encode(self.run, entries, {"dev": here.st_dev, "ino": here.st_ino}, dirs))
        partial = JOURNAL + ".tmp"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=self._stage_fd)
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, JOURNAL, src_dir_fd=self._stage_fd, dst_dir_fd=self._stage_fd)
        os.fsync(self._stage_fd)
        os.fsync(self._fd)


@dataclass
class Known:
    """A digest known when the file was written (DirectoryTransaction.written)."""
    value: dict

    def digest(self) -> dict:
        return self.value

    def stop(self) -> None:
        return None


def _stat_key(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _regular(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISREG(st.st_mode)


@dataclass
class PatchResult:
    target: Path
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: bool = False
    run_hint: str = ""  # how to run the result, when it is not the Qwen3.5 VLMPipeline line
    family: str | None = None  # the key of the checkpoint's family, once resolved
    plan: list[str] = field(default_factory=list)  # a dry run's steps, in order


def write_staged(path: Path, write: Callable[[Path], object]) -> None:
    """Write one staged file; a failure (full disk, quota, I/O error) names the file and the space left there."""
    try:
        write(path)
    except (OSError, RuntimeError) as e:  # ov.save_model reports a full disk as a bare iostream RuntimeError
        raise cannot_write(path, e) from None


def cannot_write(path: Path, e: BaseException) -> OutputError:
    """The one line for a staged file that could not be written: the file, the reason, the space left there."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else cause(e)
    free = shutil.disk_usage(path.parent).free
    meant = f" (the new {path.name.replace(SLASH, '/')})" if SLASH in path.name else ""  # a subfolder's file
    return OutputError(f"{shown(path)}{meant}: cannot write it: {reason} ({free / 1e6:.1f} MB free there)")
