"""Filesystem calls relative to held directory descriptors (`dir_fd`), none of which follows a symbolic link: what
the directory transaction (irsurgeon.commit.transaction, irsurgeon.commit.journal, irsurgeon.commit.recovery) is built from."""
from __future__ import annotations

import ctypes
import errno
import functools
import os

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
RENAME_NOREPLACE = 1  # linux/fs.h


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir(dir_fd: int, name: str) -> int | None:
    """name under dir_fd as a held descriptor, never through a link: None when missing; OSError ELOOP or ENOTDIR
    when a link, a file or anything but a folder."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not glibc >= 2.28
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def rename_noreplace(src: str, dst: str, src_dir_fd: int, dst_dir_fd: int) -> None:
    """Rename src to dst, each relative to its directory descriptor, failing (EEXIST) when dst exists: Linux's
    renameat2(RENAME_NOREPLACE); where the C library or the file system lacks it, a check, then a plain rename."""
    fn = _renameat2()
    if fn is not None:
        if fn(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    if lstat_at(dst_dir_fd, dst) is not None:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
