"""The commit journal of a directory transaction: what it records, how it proves its origin, how it is undone.

A journal is written whole (renamed into place) before the first file moves into the target:
    {"format": "irsurgeon-journal/2", "run": "<uuid4 hex>",
     "files": [{"name": N, "new": {"size": s, "sha256": h}, "old": {"size": s, "dev": d, "ino": i} | null}, ...],
     "checksum": "<sha256 of the canonical JSON of everything above>"}
`new` identifies the staged file by content; `old` identifies the original by inode: its backup `N.orig` in the
staging folder is a hard link to it, so a backup is provably the original when dev, inode and size all match.
Names are limited to the files irsurgeon writes (WRITABLE). A journal that is malformed, fails its checksum, or
has an entry that matches nothing on disk is foreign or inconsistent: recovery refuses it whole and touches nothing.

Everything here reads through directory descriptors (`dir_fd`, no symlink followed); it never writes.
"""
from __future__ import annotations

import hashlib
import json
import os
import errno
import stat
from dataclasses import dataclass
from pathlib import Path

from irsurgeon.errors import OutputError
from irsurgeon.ir.export import (CONFIG, GENERATION_CONFIG, HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG,
                                 TEXT_ONLY_MODEL, bin_of)

FORMAT = "irsurgeon-journal/2"
JOURNAL = "journal.json"
COMMITTED = "committed"  # the journal renamed once every file has moved in: the commit is complete
BACKUP_SUFFIX = ".orig"
# The only names a transaction moves into a directory (the head, the annotated language model, the config; for
# Gemma 4, the target's openvino_model.xml and the files of its mtp_assistant/ folder).
WRITABLE = frozenset({*HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG,
                      TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL), CONFIG, GENERATION_CONFIG})
STAGE_DIR = ".irsurgeon-staging"  # inside the target: staged files, backups and the journal
STAGE_NAMES = frozenset({*WRITABLE, *(n + BACKUP_SUFFIX for n in WRITABLE), JOURNAL, JOURNAL + ".tmp", COMMITTED})
MAX_JOURNAL_BYTES = 1 << 16


class ForeignLeftovers(OutputError):
    """A staging folder or journal that irsurgeon cannot prove it wrote; it is reported and left alone."""


@dataclass(frozen=True)
class Step:
    """One rollback action: 'restore' (backup -> name), 'remove' (a file the run added) or 'keep'."""
    action: str
    name: str


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def content_at(dir_fd: int, name: str) -> dict:
    """{"size", "sha256"} of a regular file, read through dir_fd without following a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        digest, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 22):
            digest.update(chunk)
            size += len(chunk)
        return {"size": size, "sha256": digest.hexdigest()}
    finally:
        os.close(fd)


def identity(st: os.stat_result) -> dict:
    return {"size": st.st_size, "dev": st.st_dev, "ino": st.st_ino}


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode(run: str, files: list[dict]) -> bytes:
    body = {"format": FORMAT, "run": run, "files": files}
    return json.dumps({**body, "checksum": _checksum(body)}).encode()


def read(stage_fd: int, name: str, where: str) -> dict:
    """The journal `name` in the staging folder, checked for form and checksum; ForeignLeftovers otherwise."""
    st = lstat_at(stage_fd, name)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JOURNAL_BYTES:
        raise ForeignLeftovers(f"{where}/{name}: not a journal irsurgeon wrote (a link, a folder or too large); "
                               f"nothing was touched: inspect and remove {where} by hand")
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=stage_fd)
    try:
        data = os.read(fd, MAX_JOURNAL_BYTES + 1)
    finally:
        os.close(fd)
    try:
        entry = json.loads(data)
        body = {k: entry[k] for k in ("format", "run", "files")}
        valid = entry["checksum"] == _checksum(body) and body["format"] == FORMAT and _names_ok(body["files"])
    except (ValueError, TypeError, KeyError, RecursionError):  # 64 KiB of '[' nests deeper than Python parses
        valid = False
    if not valid:
        raise ForeignLeftovers(f"{where}/{name}: not a journal irsurgeon wrote (expected its format, checksum and "
                               f"file names); nothing was touched: inspect and remove {where} by hand")
    return body


def _names_ok(files) -> bool:
    names = [f["name"] for f in files]
    return bool(names) and len(set(names)) == len(names) and all(n in WRITABLE for n in names) and all(
        isinstance(f["new"], dict) and (f["old"] is None or isinstance(f["old"], dict)) for f in files)


def plan_rollback(journal: dict, target_fd: int, stage_fd: int, where: str) -> list[Step]:
    """What undoing the journal's commit takes, checked entry by entry against the disk (reads only)."""
    steps = []
    for entry in reversed(journal["files"]):
        name, old, new = entry["name"], entry["old"], entry["new"]
        current, backup = lstat_at(target_fd, name), lstat_at(stage_fd, name + BACKUP_SUFFIX)
        is_new = current is not None and _is_new(target_fd, name, current, new)
        if old is None:
            ok, step = current is None or is_new, Step("remove" if is_new else "keep", name)
        elif backup is not None:
            ok = _same(backup, old) and (is_new or (current is not None and _same(current, old)))
            step = Step("restore" if is_new else "keep", name)
        else:  # restored by an earlier, interrupted recovery
            ok, step = current is not None and _same(current, old), Step("keep", name)
        if not ok:
            raise ForeignLeftovers(f"{where}/{JOURNAL}: its entry for {name} (run {journal['run']}) matches neither "
                                   f"the original nor the file that run moved in; nothing was touched: inspect "
                                   f"{name} and remove {where} by hand")
        steps.append(step)
    return steps


def _same(st: os.stat_result, old) -> bool:
    return isinstance(old, dict) and identity(st) == {k: old.get(k) for k in ("size", "dev", "ino")}


def _is_new(dir_fd: int, name: str, st: os.stat_result, new: dict) -> bool:
    if not stat.S_ISREG(st.st_mode) or st.st_size != new.get("size"):
        return False
    return content_at(dir_fd, name) == {"size": new.get("size"), "sha256": new.get("sha256")}


def check_entries(stage_fd: int, where: str) -> list[str]:
    """The staging folder's entries, each a regular file with a name irsurgeon writes there (a backup may be the
    hard link of an original that is itself a symbolic link); else ForeignLeftovers."""
    names = sorted(os.listdir(stage_fd))
    for name in names:
        st = lstat_at(stage_fd, name)
        kind_ok = st is None or stat.S_ISREG(st.st_mode) or (name.endswith(BACKUP_SUFFIX) and stat.S_ISLNK(st.st_mode))
        if name not in STAGE_NAMES or not kind_ok:
            raise ForeignLeftovers(f"{where}/{name}: not a file irsurgeon writes there; nothing was touched: "
                                   f"inspect and remove {where} by hand")
    if JOURNAL in names and COMMITTED in names:
        raise ForeignLeftovers(f"{where}: holds both {JOURNAL} and {COMMITTED}, which irsurgeon never leaves; "
                               f"nothing was touched: inspect and remove {where} by hand")
    return names


def open_stage(target_fd: int, where: Path) -> int | None:
    """The staging folder as a descriptor (None when there is none); a link or a non-folder is refused."""
    try:
        return os.open(STAGE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=target_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ForeignLeftovers(f"{where / STAGE_DIR}: a link or a file, not a staging folder irsurgeon made; "
                                   f"nothing was touched: inspect and remove it by hand") from None
        raise


def examine(target_fd: int, stage_fd: int, stage: str) -> tuple[list[str], dict | None, list[Step]]:
    """Check everything recovery would act on, reading only: the entries, the commit mark, the journal and each
    rollback step. Returns (entries, journal or None, steps)."""
    names = check_entries(stage_fd, stage)
    if COMMITTED in names:
        read(stage_fd, COMMITTED, stage)
    if JOURNAL not in names:
        return names, None, []
    record = read(stage_fd, JOURNAL, stage)
    return names, record, plan_rollback(record, target_fd, stage_fd, stage)


def leftover_state(target: str | Path) -> tuple[bool, str] | None:
    """For verify, without changing anything: None when target has no staging folder, else (ok, what it holds)."""
    where, fd, stage_fd = Path(target), None, None
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        stage_fd = open_stage(fd, where)
        if stage_fd is None:
            return None
        if examine(fd, stage_fd, str(where / STAGE_DIR))[1] is None:
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
