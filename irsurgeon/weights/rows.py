"""Read a few rows of one safetensors tensor without reading the file: from a local mapping or by HTTP range requests.

    ByteSource.read(ranges) -> bytes per (offset, length)     LocalBytes: mmap (MADV_RANDOM: no read-around)
                                                               HubBytes:   GET with `Range: bytes=a-b`, 206 only
    read_rows(source, names, pick) -> TableRows                header (8 + N bytes), then only the rows picked

Used for the checkpoint-identity check: 16 rows of the token-embedding table are kilobytes, the shard gigabytes.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from irsurgeon import limits
from irsurgeon.errors import CheckpointError
from irsurgeon.weights.safetensors_io import MAX_HEADER_BYTES, STORAGE, decode

MERGE_GAP = 4096  # rows closer than this are fetched in one range: one page either way


@dataclass
class TableRows:
    name: str
    ids: np.ndarray
    rows: np.ndarray  # float32 [len(ids), hidden]
    dtype: str  # safetensors storage dtype
    shape: tuple[int, int]
    label: str  # the file they came from


class ByteSource(Protocol):
    label: str

    def size(self) -> int: ...

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]: ...


class LocalBytes:
    """A local file, mapped; only the pages of the ranges read are touched."""

    def __init__(self, path: Path):
        self.label = str(path)
        try:
            with open(path, "rb") as f:
                self._size = os.fstat(f.fileno()).st_size
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self._size else None
        except OSError as e:
            raise CheckpointError(f"{path}: cannot open: {e.strerror}") from None
        if self._map is not None and hasattr(mmap, "MADV_RANDOM"):
            self._map.madvise(mmap.MADV_RANDOM)  # rows are far apart: read-around would fetch 128 KiB per row

    def size(self) -> int:
        return self._size

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        return [bytes(self._map[o:o + n]) if self._map is not None else b"" for o, n in ranges]

    def close(self) -> None:
        if self._map is not None:
            self._map.close()


def merge_ranges(ranges: list[tuple[int, int]], gap: int = MERGE_GAP) -> list[tuple[int, int]]:
    """Sorted (offset, length) ranges with neighbours closer than `gap` bytes joined."""
    merged: list[list[int]] = []
    for offset, length in sorted(ranges):
        if merged and offset - (merged[-1][0] + merged[-1][1]) <= gap:
            merged[-1][1] = max(merged[-1][1], offset + length - merged[-1][0])
        else:
            merged.append([offset, length])
    return [(o, n) for o, n in merged]


def read_header(src: ByteSource) -> tuple[dict, int]:
    """The safetensors header (JSON object) and the offset where the data starts."""
    size = src.size()
    if size < 8:
        raise CheckpointError(f"{src.label}: not a safetensors file (only {size} bytes)")
    (n,) = struct.unpack("<Q", src.read([(0, 8)])[0])
    if n > MAX_HEADER_BYTES or 8 + n > size:  # n itself is not printed: it is the file's first 8 bytes
        raise CheckpointError(f"{src.label}: its 8-byte header length is larger than the file ({size} bytes) or "
                              f"than {MAX_HEADER_BYTES} bytes: truncated or not a safetensors file")
    header = limits.parse_json(src.read([(8, n)])[0], f"{src.label}: header", CheckpointError)
    if not isinstance(header, dict):
        raise CheckpointError(f"{src.label}: header is not a JSON object")
    return header, 8 + n


def table_entry(header: dict, name: str, data_size: int, label: str) -> tuple[str, tuple[int, int], int]:
    """dtype, 2-D shape and data offset of a table tensor, each header field checked against the file."""
    entry = header.get(name)
    where = f"{label}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: not in the file's header")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in STORAGE or dtype not in ("F32", "F16", "BF16", "F64"):
        raise CheckpointError(f"{where}: dtype {dtype!r}, expected a float table (F32, F16, BF16)")
    if not (isinstance(shape, list) and len(shape) == 2 and all(type(d) is int and d > 0 for d in shape)):
        raise CheckpointError(f"{where}: shape {shape!r}, expected [vocab, hidden]")
    nbytes = shape[0] * shape[1] * STORAGE[dtype].itemsize
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
            and 0 <= offsets[0] and offsets[1] - offsets[0] == nbytes and offsets[1] <= data_size):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} do not hold {dtype} {shape} inside the file")
    return dtype, (shape[0], shape[1]), offsets[0]


def read_rows(src: ByteSource, names: tuple[str, ...], pick: Callable[[int], np.ndarray]) -> TableRows | None:
    """Rows `pick(vocab)` of the first 2-D tensor of `names` the file holds, as float32; None when it holds none."""
    header, start = read_header(src)
    name = next((n for n in names if n in header), None)
    if name is None:
        return None
    dtype, shape, begin = table_entry(header, name, src.size() - start, src.label)
    ids = pick(shape[0])
    row = shape[1] * STORAGE[dtype].itemsize
    spans = merge_ranges([(start + begin + int(i) * row, row) for i in ids])
    chunks = src.read(spans)
    out = np.empty((len(ids), shape[1]), np.float32)
    for k, i in enumerate(ids):
        offset = start + begin + int(i) * row
        o, chunk = next((o, c) for (o, n), c in zip(spans, chunks) if o <= offset < o + n)
        out[k] = decode(np.frombuffer(chunk, STORAGE[dtype], count=shape[1], offset=offset - o), dtype)
    return TableRows(name, ids, out, dtype, shape, src.label)
