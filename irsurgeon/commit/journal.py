"""The commit journal of a directory transaction read back against the disk: what recovery would do, and when it
refuses (the journal's format and the staging folder's names: irsurgeon.commit.journal_format).

A journal binds itself to the run that wrote it. Recovery acts on it only when
  - the staging folder it is read from is the one it was written in (dev and inode),
  - every subdirectory it names is the folder it recorded (opened with O_NOFOLLOW: a link is never followed),
  - every file it would remove or put back is, by dev, inode and content, the staged file the run moved in, and
    every backup it would restore is, by dev, inode and size, the original it linked.
A journal copied or downloaded with a directory, or crafted to name files that are there, matches none of this: it
is ForeignLeftovers, reported in one line, and nothing is touched. The same holds for a malformed one, one that
fails its checksum, a staging folder that is a link, or one holding anything irsurgeon does not write there.

Everything here reads through directory descriptors (`dir_fd`, no symbolic link followed); it never writes.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from irsurgeon.core.errors import OutputError
from irsurgeon.core.fsat import DIR_FLAGS, lstat_at, open_dir
from irsurgeon.commit.journal_format import (BACKUP_SUFFIX, COMMITTED, FORMAT, JOURNAL, MAX_JOURNAL_BYTES, SLASH,
                                      STAGE_DIR, check_writable, decode, digest, encode, identity, leaf,
                                      made_dirs, stage_names, staged, staged_dir, subdir)

# Its own names, and journal_format's that recovery, transaction and the tests take from here.
__all__ = ["BACKUP_SUFFIX", "COMMITTED", "FORMAT", "JOURNAL", "SLASH", "STAGE_DIR", "ForeignLeftovers",
           "Plan", "Step", "check_entries", "check_writable", "content_at", "digest", "encode", "examine", "foreign",
           "identity", "leaf", "leftover_state", "open_stage", "read", "same", "staged", "staged_dir", "subdir"]


class ForeignLeftovers(OutputError):
    """A staging folder or journal that irsurgeon cannot prove it wrote; it is reported and left alone."""


def foreign(what: str, why: str, stage: str) -> ForeignLeftovers:
    return ForeignLeftovers(f"{what}: {why}; nothing was touched: inspect and remove {stage} by hand")


@dataclass(frozen=True)
class Step:
    """One rollback action: 'restore' (backup -> name), 'remove' (a file the run added) or 'keep'."""
    action: str
    name: str


@dataclass
class Plan:
    """What recovering a staging folder takes: its entries, its journal (None: plain leftovers or a finished
    commit) and, for a journal, each file's step and the held descriptor of each subdirectory the run wrote into
    that is in the target (None: nothing of it is). close() releases the descriptors."""
    entries: list[str]
    record: dict | None = None
    steps: list[Step] = field(default_factory=list)
    dirs: dict[str, int | None] = field(default_factory=dict)

    def dir_fd(self, name: str, target_fd: int) -> int | None:
        folder = subdir(name)
        return target_fd if folder is None else self.dirs.get(folder)

    def made(self) -> list[str]:
        return [d["name"] for d in self.record["dirs"] if d["made"] and self.dirs.get(d["name"]) is not None]

    def close(self) -> None:
        for fd in self.dirs.values():
            if fd is not None:
                os.close(fd)
        self.dirs = {}


def content_at(dir_fd: int, name: str) -> dict:
    """{"size", "sha256"} of a regular file, read through dir_fd without following a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        return digest(fd)
    finally:
        os.close(fd)


def same(st: os.stat_result | None, recorded: dict) -> bool:
    """st is the recorded file or folder: same dev and inode (and size, when recorded)."""
    return st is not None and all(identity(st)[k] == recorded[k] for k in ("size", "dev", "ino") if k in recorded)


def read(stage_fd: int, name: str, stage: str, writable: frozenset[str]) -> dict:
    """The journal `name` in the staging folder, checked for form, checksum and names; ForeignLeftovers otherwise."""
    st = lstat_at(stage_fd, name)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JOURNAL_BYTES:
        raise foreign(f"{stage}/{name}", "not a journal irsurgeon wrote (a link, a folder or too large)", stage)
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=stage_fd)
    try:
        data = os.read(fd, MAX_JOURNAL_BYTES + 1)
    finally:
        os.close(fd)
    body = decode(data, writable)
    if body is None:
        raise foreign(f"{stage}/{name}", f"not a journal irsurgeon wrote (expected {FORMAT}, its checksum and "
                      f"names it writes)", stage)
    if not same(os.fstat(stage_fd), body["stage"]):
        raise foreign(f"{stage}/{name}", f"written in another staging folder (run {body['run']}; copied or "
                      f"downloaded with this directory?)", stage)
    return body


def check_entries(stage_fd: int, stage: str, writable: frozenset[str]) -> list[str]:
    """The staging folder's entries: regular files with names irsurgeon writes there (a backup may be the hard link
    of an original that is itself a symbolic link) and empty made folders; else ForeignLeftovers."""
    names, files, folders = sorted(os.listdir(stage_fd)), stage_names(writable), made_dirs(writable)
    for name in names:
        st = lstat_at(stage_fd, name)
        if st is None:
            continue
        if name in folders and stat.S_ISDIR(st.st_mode) and not _listing(stage_fd, name):
            continue
        if name not in files or not (stat.S_ISREG(st.st_mode) or (
                name.endswith(BACKUP_SUFFIX) and stat.S_ISLNK(st.st_mode))):
            raise foreign(f"{stage}/{name}", "not a file irsurgeon writes there", stage)
    if JOURNAL in names and COMMITTED in names:
        raise foreign(stage, f"holds both {JOURNAL} and {COMMITTED}, which irsurgeon never leaves", stage)
    return names


def _listing(dir_fd: int, name: str) -> list[str]:
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def open_stage(target_fd: int, where: Path) -> int | None:
    """The staging folder as a descriptor (None when there is none); a link or a non-folder is refused."""
    try:
        return open_dir(target_fd, STAGE_DIR)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ForeignLeftovers(f"{where / STAGE_DIR}: a link or a file, not a staging folder irsurgeon made; "
                                   f"nothing was touched: inspect and remove it by hand") from None
        raise


def examine(target_fd: int, stage_fd: int, where: Path, writable: frozenset[str]) -> Plan:
    """Check everything recovery would act on, reading only: the entries, the commit mark, the journal and each
    rollback step. The caller closes the plan."""
    writable, stage = check_writable(writable), str(where / STAGE_DIR)
    names = check_entries(stage_fd, stage, writable)
    if COMMITTED in names:
        read(stage_fd, COMMITTED, stage, writable)
    if JOURNAL not in names:
        return Plan(names)
    plan = Plan(names, read(stage_fd, JOURNAL, stage, writable))
    try:
        _open_dirs(plan, target_fd, stage_fd, where)
        plan.steps = [_step(entry, plan, target_fd, stage_fd, stage) for entry in reversed(plan.record["files"])]
    except BaseException:
        plan.close()
        raise
    return plan


def _open_dirs(plan: Plan, target_fd: int, stage_fd: int, where: Path) -> None:
    """Hold each subdirectory of the journal that is in the target, after proving it is the recorded folder."""
    stage, record = str(where / STAGE_DIR), plan.record
    waiting = {n for n in plan.entries if n in made_dirs(frozenset(f["name"] for f in record["files"]))}
    unknown = [n for n in plan.entries if n.endswith(staged_dir("")) and n not in waiting]
    if unknown:
        raise foreign(f"{stage}/{unknown[0]}", f"a folder the journal of run {record['run']} did not make", stage)
    for entry in record["dirs"]:
        name = entry["name"]
        if staged_dir(name) in waiting:  # made, never moved into the target: nothing of it is there
            if not entry["made"] or not same(lstat_at(stage_fd, staged_dir(name)), entry):
                raise foreign(f"{stage}/{staged_dir(name)}", f"not the folder run {record['run']} made", stage)
            plan.dirs[name] = None
            continue
        plan.dirs[name] = _held_dir(target_fd, name, entry, where, record["run"])


def _held_dir(target_fd: int, name: str, entry: dict, where: Path, run: str) -> int | None:
    stage = str(where / STAGE_DIR)
    try:
        fd = open_dir(target_fd, name)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise foreign(str(where / name), f"a link or a file, not the folder run {run} wrote into", stage) from None
    if fd is None and entry["made"]:  # removed again by an interrupted recovery, after its files
        return None
    if fd is None or not same(os.fstat(fd), entry):
        if fd is not None:
            os.close(fd)
        raise foreign(str(where / name), f"not the folder run {run} wrote into (gone or replaced)", stage)
    return fd


def _step(entry: dict, plan: Plan, target_fd: int, stage_fd: int, stage: str) -> Step:
    """The rollback step of one journal entry, checked against the disk."""
    name, old, new = entry["name"], entry["old"], entry["new"]
    dir_fd = plan.dir_fd(name, target_fd)
    if dir_fd is None:  # its folder is not in the target: the file never moved in, or went with the folder
        return Step("keep", name)
    current, backup = lstat_at(dir_fd, leaf(name)), lstat_at(stage_fd, staged(name) + BACKUP_SUFFIX)
    is_new = same(current, new) and stat.S_ISREG(current.st_mode) and _holds(dir_fd, name, new)
    if old is None:
        ok, step = current is None or is_new, Step("remove" if is_new else "keep", name)
    elif backup is not None:
        ok, step = same(backup, old) and (is_new or same(current, old)), Step("restore" if is_new else "keep", name)
    else:  # restored by an earlier, interrupted recovery
        ok, step = same(current, old), Step("keep", name)
    if not ok:
        raise foreign(f"{stage}/{JOURNAL}", f"its entry for {name} (run {plan.record['run']}) matches neither the "
                      f"original nor the file that run moved in; inspect {name}", stage)
    return step


def _holds(dir_fd: int, name: str, new: dict) -> bool:
    return content_at(dir_fd, leaf(name)) == {"size": new["size"], "sha256": new["sha256"]}


def leftover_state(target: str | Path, writable: frozenset[str]) -> tuple[bool, str] | None:
    """For verify, without changing anything: None when target has no staging folder, else (ok, what it holds)."""
    where, fd, stage_fd = Path(target), None, None
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        stage_fd = open_stage(fd, where)
        if stage_fd is None:
            return None
        plan = examine(fd, stage_fd, where, writable)
        plan.close()
        if plan.record is None:
            return True, f"{where / STAGE_DIR} holds leftovers; the next patch clears them"
        return False, f"{where / STAGE_DIR} holds a half-done commit; the next patch rolls it back"
    except ForeignLeftovers as e:
        return False, str(e)
    except OSError as e:
        return False, f"{where / STAGE_DIR}: cannot inspect it: {e.strerror or e}"
    finally:
        for held in (stage_fd, fd):
            if held is not None:
                os.close(held)
