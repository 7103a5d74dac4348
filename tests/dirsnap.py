"""Byte-level snapshots of a directory tree, to assert that a failed or refused run changed nothing."""
from __future__ import annotations

import hashlib
from pathlib import Path


def snapshot(directory: Path) -> dict[str, str]:
    """relative path -> sha256 for files, 'dir' for folders (so stray empty folders show too)."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(directory.rglob("*"))}


def full_disk_on_nth_replace(monkeypatch, n: int = 2) -> None:
    """Make the n-th os.replace of a directory transaction fail as a full disk would (ENOSPC)."""
    import irsurgeon.transaction as transaction

    real, calls = transaction.os.replace, []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == n:
            raise OSError(28, "No space left on device")
        return real(src, dst)
    monkeypatch.setattr(transaction.os, "replace", replace)
