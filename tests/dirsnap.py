"""Byte-level snapshots of a directory tree, to assert that a failed or refused run changed nothing."""
from __future__ import annotations

import hashlib
from pathlib import Path


def snapshot(directory: Path) -> dict[str, str]:
    """relative path -> sha256 for files, 'dir' for folders (so stray empty folders show too)."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(directory.rglob("*"))}
