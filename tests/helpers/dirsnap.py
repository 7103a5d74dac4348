"""Byte-level snapshots of a directory tree, to assert that a failed or refused run changed nothing."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def snapshot(directory: Path) -> dict[str, str]:
    """relative path -> sha256 for files, 'dir' for folders (so stray empty folders show too), 'link -> where' for
    symbolic links (never followed: a link out of the tree is recorded, not read)."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): _entry(p) for p in sorted(directory.rglob("*"))}


def _entry(p: Path) -> str:
    if p.is_symlink():
        return f"link -> {os.readlink(p)}"
    return "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()


def full_disk_on_nth_replace(monkeypatch, n: int = 2) -> None:
    """Make the n-th os.replace of a directory transaction fail as a full disk would (ENOSPC)."""
    import irsurgeon.transaction as transaction

    real, calls = transaction.os.replace, []

    def replace(src, dst, **dir_fds):
        calls.append(dst)
        if len(calls) == n:
            raise OSError(28, "No space left on device")
        return real(src, dst, **dir_fds)
    monkeypatch.setattr(transaction.os, "replace", replace)


def digest(d: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file, plus the set of directories: byte identity of a tree."""
    files = {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(d.rglob("*")) if p.is_file()}
    files["<dirs>"] = ",".join(sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_dir()))
    return files
