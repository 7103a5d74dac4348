"""Undo or clear what an interrupted directory transaction left, after irsurgeon.commit.journal has checked it all.

Order, so that a recovery killed at any point is finished by the next one: each file is put back (its backup
renamed over it) or removed; then each folder the run made is removed, when it is empty and still that folder;
the directories are synced; the journal goes (from then on what is left is plain leftovers, never a journal);
then the staging folder's entries and the folder itself. Every call is relative to a held directory descriptor,
so nothing follows a link.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from irsurgeon.core.fsat import lstat_at
from irsurgeon.commit.journal import BACKUP_SUFFIX, JOURNAL, SLASH, STAGE_DIR, Plan, examine, leaf, open_stage, staged


def remove_stage(target_fd: int, stage_fd: int, names: list[str]) -> None:
    """Remove the staging folder's entries through its descriptor, then the folder, if its name is still ours."""
    for name in sorted(names):
        try:
            if name.endswith(SLASH):  # a made folder that never moved into the target: empty
                os.rmdir(name, dir_fd=stage_fd)
            else:
                os.unlink(name, dir_fd=stage_fd)
        except FileNotFoundError:
            pass
    named = lstat_at(target_fd, STAGE_DIR)
    if named is not None and os.path.samestat(named, os.fstat(stage_fd)):
        os.rmdir(STAGE_DIR, dir_fd=target_fd)


def recover_at(target_fd: int, where: Path, writable: frozenset[str]) -> list[str]:
    """Roll back or clear what an interrupted run left in the target held by target_fd (under its lock); what was
    done, one line each."""
    stage_fd = open_stage(target_fd, where)
    if stage_fd is None:
        return []
    try:
        plan = examine(target_fd, stage_fd, where, writable)
        try:
            notes = [f"removed leftover staging folder {where / STAGE_DIR}"] if plan.record is None else [
                f"rolled back an interrupted commit in {where} (run {plan.record['run']})",
                *roll_back(plan, target_fd, stage_fd, where)]
        finally:
            plan.close()
        remove_stage(target_fd, stage_fd, [n for n in plan.entries if n != JOURNAL])
        return notes
    finally:
        os.close(stage_fd)


def roll_back(plan: Plan, target_fd: int, stage_fd: int, where: Path) -> list[str]:
    """Undo a half-done commit whose every step journal.examine checked against the disk."""
    notes = []
    for step in plan.steps:
        dir_fd = plan.dir_fd(step.name, target_fd)
        if step.action == "restore":
            os.replace(staged(step.name) + BACKUP_SUFFIX, leaf(step.name), src_dir_fd=stage_fd, dst_dir_fd=dir_fd)
            notes.append(f"restored {step.name}")
        elif step.action == "remove":
            os.unlink(leaf(step.name), dir_fd=dir_fd)
            notes.append(f"removed {step.name} (written by the interrupted run)")
    for fd in plan.dirs.values():
        if fd is not None:
            os.fsync(fd)
    notes += [note for name in plan.made() if (note := _remove_made(target_fd, name, plan.dirs[name], where))]
    os.fsync(target_fd)
    os.unlink(JOURNAL, dir_fd=stage_fd)  # first: what is left after this is plain leftovers, never a journal
    os.fsync(stage_fd)
    return notes


def _remove_made(target_fd: int, name: str, fd: int, where: Path) -> str | None:
    """rmdir a folder the run made, when it is still that folder and empty; else say why it stays."""
    named = lstat_at(target_fd, name)
    if named is None or not os.path.samestat(named, os.fstat(fd)):
        return f"left {where / name} alone: it is no longer the folder the interrupted run made"
    if os.listdir(fd):
        return f"kept {where / name}/: it holds files the interrupted run did not write"
    try:
        os.rmdir(name, dir_fd=target_fd)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        return f"kept {where / name}/: it holds files the interrupted run did not write"
    return f"removed {name}/ (made by the interrupted run)"
