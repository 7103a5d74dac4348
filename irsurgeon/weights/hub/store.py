"""irsurgeon's own cache of what it fetched from a hub by byte range, inside huggingface_hub's cache directory (its
default or --cache-dir), keyed by repo id, commit and file name:

    <cache>/irsurgeon/models--<owner>--<name>/snapshots/<commit>/
        config.json, model.safetensors.index.json   copies of the snapshot's: the folder is a checkpoint directory
        <shard>.safetensors                          the shard's needed tensors alone (partial.py)
        <shard>.safetensors.ranges                   byte ranges read of the shard (ranges.HubBytes: its header,
                                                     the identity check's rows), the shard's size and ETag

Laid out as huggingface_hub lays out a snapshot (so fetch.snapshot_commit reads the commit from the path) but under
a root of its own, so huggingface_hub never takes a partial shard for the file.

Runs sharing the cache: a file is checked and written under its lock (Folder.writing), as huggingface_hub 2.4.0
downloads a blob under `<cache>/.locks/<repo folder>/<etag>.lock` (file_download.py _hf_hub_download_to_cache_dir,
`with WeakFileLock(lock_path)`, which looks again whether the blob exists once it holds the lock). The lock is an
exclusive flock(2) on `<cache>/irsurgeon/.locks/models--<owner>--<name>/<commit>/<file>.lock`: a run that needs a
file another run is writing waits, says so once, then finds that run's file complete and reads it, never writing one
over it (a file renamed over another that a run is reading is what that run's reader refuses as changed under it).
The lock belongs to the open descriptor, so the kernel releases it when its holder dies, even by SIGKILL; the lock
file stays and means nothing by itself (nothing to clean up, nothing to break). It is not filelock's FileLock (a
dependency of huggingface_hub, whose WeakFileLock wraps it): that flocks too, but opens the lock by path, its
folders followed if they are links (filelock 4.3.2 _native/_unix.py _open_lock_file: O_NOFOLLOW on the last name
only), and where flock is missing falls back to a SoftFileLock, a marker file that is the lock, removed on release
and taken over from a dead holder by its pid (_soft/_exclusive/_marker.py _try_break_stale_lock); here every folder
is entered by descriptor without following a link, as everywhere in this module, and the kernel alone ends a lock.
Where the file system has no flock (ENOLCK, EOPNOTSUPP: some network mounts), a note says so on stderr and the run
goes on unlocked, as before. The `.ranges` files are written without it: each is replaced whole by rename
and read whole, so two runs at worst keep one's spans, and the other's are read again later.

A complete copy is read without taking the lock (partial.kept): a writer replaces a file only when, under the lock,
it is not complete for the tensor prefix that writer needs, and every run of one repo id needs the same prefix (its
family's hub_prefix). Only a run of another family needing a wider prefix of the same shard (none of the registered
families reads another's repos) would replace a complete file, and a run reading it then fails with one line.

Every write is a temp file (O_EXCL, never through a link) fsynced and renamed into place inside a folder held by
descriptor, and every folder on the way is opened without following a link: a run killed mid-write leaves only a
temp file, which no reader opens and the next run removes once its writer is gone. A name in the folder that is not a
regular file (a link, a FIFO) is never read: the writer replaces it.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import secrets
import struct
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from irsurgeon.core import fsat, limits
from irsurgeon.core.errors import CheckpointError
from irsurgeon.core.text import shown as shown_text
from irsurgeon.weights.hub.fetch import looks_like_repo_id
from irsurgeon.weights.hub.names import COMMIT, shown
from irsurgeon.weights.safetensors_io import MAX_HEADER_BYTES, parse_header

ROOT = "irsurgeon"
LOCKS = ".locks"  # <cache>/irsurgeon/.locks/models--<owner>--<name>/<commit>/<file>.lock (never a repo folder name)
LOCK_SUFFIX = ".lock"
NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL})  # no flock on this file system
RANGES_SUFFIX = ".ranges"
RANGES_BYTES = 64 << 20  # a .ranges file holds headers and rows: kilobytes to a few MiB; a larger one is rewritten
_TEMP = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{8}\.tmp")


class Folder:
    """One commit's folder of the cache, held open by descriptor (see the module docstring)."""

    def __init__(self, cache: Path, repo_id: str, commit: str):
        if not (looks_like_repo_id(repo_id) and COMMIT.fullmatch(commit)):  # both become path components
            raise CheckpointError(f"{shown(repo_id)}@{shown(commit)}: not a repo id and a commit hash; not making a "
                                  f"cache path of them")
        self.cache, self.commit = cache, commit
        self.repo = "models--" + repo_id.replace("/", "--")
        self.path = cache.joinpath(ROOT, self.repo, "snapshots", commit)
        try:
            os.makedirs(cache, exist_ok=True)  # the cache itself may be a link: the user's choice
            fd = os.open(cache, fsat.DIR_FLAGS & ~os.O_NOFOLLOW)
            for name in self.path.relative_to(cache).parts:
                fd = _enter(fd, name)
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot make irsurgeon's cache folder: "
                                  f"{e.strerror or type(e).__name__} (a link or a file on the way?)") from None
        self.fd = fd
        self.sweep()

    def __enter__(self) -> "Folder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def regular(self, name: str) -> os.stat_result | None:
        """The entry's stat when it is a regular file (not a link), else None."""
        st = fsat.lstat_at(self.fd, name)
        return st if st is not None and limits.not_regular(st.st_mode) is None else None

    def read(self, name: str, limit: int) -> bytes | None:
        """A regular file's bytes, when it is one of at most `limit` bytes; else None (it will be rewritten)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if limits.not_regular(st.st_mode) or st.st_size > limit:
                return None
            return os.pread(fd, st.st_size, 0)
        finally:
            os.close(fd)

    def write(self, name: str, fill: Callable[[int], None]) -> None:
        """name, written by fill(fd) into a temp file, fsynced and renamed over whatever name was (a link too)."""
        temp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=self.fd)
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot write {name}: {e.strerror or type(e).__name__}") from None
        try:
            try:
                fill(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)
        except OSError as e:
            _unlink(self.fd, temp)
            raise CheckpointError(f"{self.path}: cannot write {name}: {e.strerror or type(e).__name__}") from None
        except BaseException:
            _unlink(self.fd, temp)
            raise

    @contextmanager
    def writing(self, name: str, echo: Callable[[str], None]) -> Iterator[None]:
        """Hold `name`'s lock (see the module docstring) while it is checked and written: when another run holds it,
        say so once through echo and wait for it (Ctrl-C stops waiting). Once it is held, every temp file of `name` is
        a dead writer's (its writer held this lock; the kernel released it, even before that process was reaped) and
        is removed. Look again whether the file is complete once this returns: the holder may have written it."""
        where = self.cache.joinpath(ROOT, LOCKS, self.repo, self.commit, name + LOCK_SUFFIX)
        fd = self._lock_file(name, where)
        try:
            try:
                if not _lock(fd, wait=False):
                    echo(shown_text(f"{self.path / name}: another irsurgeon run is writing it into the cache; waiting "
                                    f"for it to finish (Ctrl-C stops waiting)"))
                    _lock(fd, wait=True)
                self.sweep(held=name)
            except OSError as e:
                if e.errno not in NO_FLOCK:
                    raise CheckpointError(f"{shown_text(where)}: cannot lock it: "
                                          f"{e.strerror or type(e).__name__}") from None
                print(shown_text(f"note: {where}: cannot lock it ({e.strerror}); two runs sharing this cache are not "
                                 f"kept apart"), file=sys.stderr)
            yield
        finally:
            os.close(fd)

    def _lock_file(self, name: str, where: Path) -> int:
        """The lock file of `name` opened for writing (flock over NFS needs that), made when missing, every folder on
        the way entered without following a link; a name there that is not a regular file is refused."""
        try:
            fd = os.open(self.cache, fsat.DIR_FLAGS & ~os.O_NOFOLLOW)  # the cache itself may be a link
            for part in (ROOT, LOCKS, self.repo, self.commit):
                fd = _enter(fd, part)
            try:
                lock = os.open(name + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                               | os.O_CLOEXEC, 0o644, dir_fd=fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise CheckpointError(f"{shown_text(where)}: cannot make the lock of {shown_text(name)} in irsurgeon's "
                                  f"cache: {e.strerror or type(e).__name__} (a link or a file on the way?)") from None
        why = limits.not_regular(os.fstat(lock).st_mode)
        if why:
            os.close(lock)
            raise CheckpointError(f"{shown_text(where)}: expected irsurgeon's lock file, found {why}; remove it")
        return lock

    def sweep(self, held: str | None = None) -> None:
        """Remove the temp files of runs that are gone (a writer that is alive keeps its own), and with `held` (a
        name whose lock this run holds: Folder.writing) every temp file of that name."""
        for name in os.listdir(self.fd):
            m = _TEMP.fullmatch(name)
            if m and (m.group(1) == held or not _alive(int(m.group(2)))):
                try:
                    _unlink(self.fd, name)
                except OSError:  # one that cannot be removed is still never read: only final names are
                    continue


def write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until every byte is written (a pwrite may write less)."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class Stored(NamedTuple):
    """What irsurgeon's cache holds of a file read by range: its size, (offset, bytes) spans, and the ETag the hub
    gave the file when they were read (None: not recorded)."""
    size: int
    spans: list[tuple[int, bytes]]
    etag: str | None


def read_ranges(folder: Folder, filename: str) -> Stored | None:
    """What is stored for `filename`, or None when nothing usable is stored. The form, like a safetensors file:
    8-byte little-endian N, N bytes of JSON {"size": S, "etag": E, "spans": [[offset, length], ...]}, the spans'
    bytes in that order. Spans holding the file's whole safetensors header must parse as one (the local reader's
    checks): a header cut short, an absurd length or a header of tensors outside the file is not usable."""
    raw = folder.read(filename + RANGES_SUFFIX, RANGES_BYTES)
    if raw is None or len(raw) < 8:
        return None
    (n,) = struct.unpack("<Q", raw[:8])
    try:
        head = limits.parse_json(raw[8:8 + n], filename, CheckpointError) if 8 + n <= len(raw) else None
    except CheckpointError:
        return None
    spans = head.get("spans") if isinstance(head, dict) else None
    size = head.get("size") if isinstance(head, dict) else None
    etag = head.get("etag") if isinstance(head, dict) else None
    if not (isinstance(size, int) and isinstance(spans, list) and isinstance(etag, (str, type(None)))) or not all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(v, int) and v >= 0 for v in s) for s in spans):
        return None
    if sum(length for _, length in spans) != len(raw) - 8 - n or any(o + k > size for o, k in spans):
        return None  # cut short, or not of this file: fetched again
    out, at = [], 8 + n
    for offset, length in spans:
        out.append((offset, raw[at:at + length]))
        at += length
    return Stored(size, out, etag) if header_usable(size, out, filename) else None


def header_usable(size: int, spans: list[tuple[int, bytes]], filename: str) -> bool:
    """False when the stored bytes at offset 0 hold a safetensors length and header that the local reader refuses
    (parse_header): a copy spoiled in the cache would otherwise refuse the file on every run, offline or not."""
    first = next((data for offset, data in spans if offset == 0), b"")
    if not filename.endswith(".safetensors") or len(first) < 8:
        return True
    (n,) = struct.unpack("<Q", first[:8])
    if n > MAX_HEADER_BYTES or 8 + n > size:
        return False
    if len(first) < 8 + n:
        return True  # the header's rest is fetched when it is needed, and checked then

    def read(offset: int, length: int) -> bytes:
        if offset + length > len(first):
            raise CheckpointError(f"{filename}: stored header cut short")
        return first[offset:offset + length]
    try:
        parse_header(read, size, filename)
    except CheckpointError:
        return False
    return True


def write_ranges(folder: Folder, filename: str, size: int, spans: list[tuple[int, bytes]],
                 etag: str | None = None) -> None:
    head = json.dumps({"size": size, "etag": etag, "spans": [[o, len(b)] for o, b in spans]}).encode()
    body = b"".join(b for _, b in spans)
    if 8 + len(head) + len(body) > RANGES_BYTES:
        return  # not kept: the next run reads them again
    folder.write(filename + RANGES_SUFFIX, lambda fd: write_all(fd, struct.pack("<Q", len(head)) + head + body, 0))


def _enter(parent: int, name: str) -> int:
    """The folder `name` under parent (made when missing), opened without following a link; parent is closed."""
    try:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
        return os.open(name, fsat.DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)


def _lock(fd: int, wait: bool) -> bool:
    """An exclusive flock on fd: False when another descriptor holds it and wait is False."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:  # EWOULDBLOCK: held by another open file description (another run, or thread)
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
