"""A staged IR's weights written by irsurgeon, not by openvino's serializer: placeholders made Const layers, the
bytes appended to the `.bin` and hashed as they go.

stage_ir (irsurgeon.draft.build) saves every draft this way. Each weight a build leaves as a placeholder Parameter (an
f32 or f16 matrix streamed from the checkpoint, build.Stream) or that is detached from a built model (a constant of
at least DETACH_BYTES: every matrix of a compressed draft) is written by Tail.append after openvino has
serialized the graph and the small constants: 64-byte aligned, where it went recorded (Place). openvino's
serializer spends about as long again as the write itself on the constants it writes (measured in
benchmarks/profile_patch.py: 1.8-2.1 s for an 849 MB f16 head); this only copies them. The `.bin` is hashed on a
thread as it is written and fsynced on another once written (Tail), and the transaction's journal takes that digest
(DirectoryTransaction.written) instead of reading the file again at the commit. Two constants over one buffer are
written once (as the serializer, which compares contents, would); a build makes one constant per tensor.

Here, bytes to bytes: each placeholder's layer in the `.xml` becomes the Const layer openvino writes for a weight
(the same output port; `offset`/`size` into the .bin):

        <layer id="3" name="fc.weight" type="Parameter" version="opset1">
            <data shape="32,64" element_type="f32" />
    ->
        <layer id="3" name="fc.weight" type="Const" version="opset1">
            <data element_type="f32" shape="32, 64" offset="8576" size="8192" />

The caller reads the result back (openvino) before it counts.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO, Iterable

import numpy as np

from irsurgeon.core.errors import IRError
from irsurgeon.ir.xmlsafe import unescape_attr

ALIGN = 64           # each appended weight starts on a cache line (the serializer packs its constants)
PIECE = 1 << 24      # bytes written (and handed to the hashing thread) at a time
AHEAD = 4            # pieces the worker may lag behind the appends: what is kept alive for it


@dataclass(frozen=True)
class Place:
    shape: tuple[int, ...]
    offset: int
    size: int
    element_type: str = "f32"


_PLACEHOLDER = re.compile(rb'(<layer id="\d+" name="([^"]*)" type=")Parameter(" version="opset1">\s*)'
                          rb'<data shape="([^"]*)" element_type="([^"]*)" />')


def constants_from_parameters(xml: bytes, places: dict[str, Place], source: str) -> bytes:
    """The .xml with each named placeholder Parameter layer made the Const layer of its Place (exactly one each);
    one pass over the text."""
    out, pos, found = [], 0, {}
    for m in _PLACEHOLDER.finditer(xml):
        name = unescape_attr(m.group(2))
        place = places.get(name)
        if place is None:
            continue
        found[name] = found.get(name, 0) + 1
        if m.group(4).decode() != ",".join(map(str, place.shape)) or m.group(5).decode() != place.element_type:
            raise IRError(f"{source}: placeholder {name} is {m.group(5).decode()!r} of shape "
                          f"{m.group(4).decode()!r}, the weight {place.element_type!r} of {list(place.shape)}")
        data = (f'<data element_type="{place.element_type}" shape="{", ".join(map(str, place.shape))}" '
                f'offset="{place.offset}" size="{place.size}" />').encode()
        out += [xml[pos:m.start()], m.group(1), b"Const", m.group(3), data]
        pos = m.end()
    for name in places:
        if found.get(name, 0) != 1:
            raise IRError(f"{source}: expected one placeholder layer for weight {name}, found {found.get(name, 0)}")
    return b"".join(out) + xml[pos:]


class Tail:
    """Appends weights to an open `.bin` after the serializer's part, writing every byte of the file in order on one
    worker thread and hashing it in order on another (the writes and hashlib release the GIL) while the caller makes
    the next piece: on 2 cores a write of fresh page-cache pages costs about as much CPU as the decode and the hash
    together, so neither waits for the other (benchmarks/profile_patch.py).

        tail = Tail(bin_file)
        place = tail.append("fc.weight", (32, 64), "f32", blocks)
        tail.settle()                   # written: its fsync starts on a thread
        tail.digest()                   # {"size", "sha256"} as journal_format.digest reads the file (waits)

    The workers lag at most AHEAD pieces behind the appends, so a block appended is released soon after (stage_ir
    frees each constant as it goes). stop() gives the writes and the hash up (a run that will not commit).
    """

    def __init__(self, bin_file: BinaryIO):
        self.file = bin_file
        self.hash = hashlib.sha256()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="irsurgeon-write")
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="irsurgeon-hash")
        self.pending: deque[Future] = deque()
        self.stopped = False
        self.synced: Future | None = None  # settle()'s fsync
        bin_file.seek(0)
        while prefix := bin_file.read(PIECE):  # the serializer's constants: small
            self._hash(prefix)
        self.size = bin_file.tell()

    def _submit(self, pool: ThreadPoolExecutor, work, piece) -> None:
        """work(piece) queued on `pool`'s one thread, in order; the caller waits only once AHEAD pieces are in
        flight on each (the oldest first, whichever thread it is on)."""
        self.pending.append(pool.submit(work, piece))
        while len(self.pending) > 2 * AHEAD:
            self.pending.popleft().result()

    def _drain(self) -> None:
        """Every queued piece done (the first error met raised)."""
        while self.pending:
            self.pending.popleft().result()

    def _hash(self, piece) -> None:
        self._submit(self.hasher, self._update, piece)

    def _update(self, piece) -> None:
        if not self.stopped:
            self.hash.update(piece)

    def _write(self, piece) -> None:
        """The piece written by the writer and hashed by the hasher, each in order (one thread each): the caller
        goes on to make the next piece meanwhile (a streamed matrix's next block of rows is read and decoded while
        this one is written); a write's error is raised by the call that waits for it (a later piece, settle)."""
        view = memoryview(piece).cast("B")
        self.size += len(view)
        self._submit(self.pool, self._put, view)
        self._hash(view)

    def _put(self, view: memoryview) -> None:
        if self.stopped:
            return
        rest = view
        while rest:
            rest = rest[self.file.write(rest):]

    def append(self, name: str, shape: tuple[int, ...], element_type: str, blocks: Iterable[np.ndarray],
               itemsize: float) -> Place:
        """Write `blocks` (the weight's bytes in order, as arrays) at the aligned end; where they went.
        itemsize: bytes per element (0.5 for 4-bit types), to check the size written."""
        start = -(-self.size // ALIGN) * ALIGN
        if start > self.size:
            self._write(bytes(start - self.size))
        written = 0
        for block in blocks:
            flat = np.ascontiguousarray(block).reshape(-1).view(np.uint8)
            for lo in range(0, flat.size, PIECE):
                self._write(flat[lo:lo + PIECE])
            written += flat.size
        want = math.ceil(math.prod(shape) * itemsize)
        if written != want:
            raise IRError(f"weight {name}: {written} bytes were written for a {element_type} weight of shape "
                          f"{list(shape)} ({want} expected)")
        return Place(tuple(shape), start, written, element_type)

    def settle(self) -> None:
        """Everything is appended: wait for the writes (raising the first one's error), flush them and start
        their fsync on a thread (through a copy of the descriptor, closed when done), so the commit's own fsync,
        which reports any failure, finds little left to do."""
        self._drain()
        self.file.flush()
        dup = os.dup(self.file.fileno())

        def sync() -> None:
            try:
                os.fsync(dup)
            finally:
                os.close(dup)
        pool = ThreadPoolExecutor(1, thread_name_prefix="irsurgeon-sync")
        self.synced = pool.submit(sync)
        pool.shutdown(wait=False)

    def digest(self) -> dict | None:
        """{"size", "sha256"} of the file as written, once the hash has caught up and the fsync begun by settle()
        is done (an error it met is raised here: the kernel reports a failed write-back once, to that fsync);
        None once stopped."""
        if self.stopped:
            return None
        self._drain()
        self.pool.shutdown(wait=True)
        self.hasher.shutdown(wait=True)
        if self.synced is not None:
            self.synced.result()
        return {"size": self.size, "sha256": self.hash.hexdigest()}

    def stop(self) -> None:
        """Give the hash up, and wait for the fsync (no thread outlives the run; its error no longer matters)."""
        self.stopped = True
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.hasher.shutdown(wait=True, cancel_futures=True)
        self.pending.clear()
        if self.synced is not None:
            self.synced.exception()
