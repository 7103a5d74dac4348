"""Read a few rows of one safetensors tensor without reading the file: from a local mapping or by HTTP range requests.

    ByteSource.read(ranges) -> bytes per (offset, length)     LocalBytes: pread (POSIX_FADV_RANDOM: no read-around)
                                                               HubBytes:   GET with `Range: bytes=a-b`, 206 only
    read_rows(source, names, pick) -> TableRows                header (8 + N bytes), then only the rows picked

A local `.bin` (torch.save zip) is read the same way, its tensors placed by torch_bin's zip directory and pickle.

Used for the checkpoint-identity check: 16 rows of the token-embedding table are kilobytes, the shard gigabytes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError
from irsurgeon.weights import torch_bin
from irsurgeon.weights.safetensors_io import STORAGE, TensorInfo, decode, parse_header

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
    """A local regular file, read with pread: only the pages of the ranges read are touched, and a file that shrinks
    meanwhile is a short read (CheckpointError), never SIGBUS as under a memory map."""

    def __init__(self, path: Path):
        self.label = str(path)
        self._fd, self._size = limits.open_regular(path, CheckpointError)
        if hasattr(os, "posix_fadvise"):  # rows are far apart: read-around would fetch 128 KiB per row
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_RANDOM)

    def size(self) -> int:
        return self._size

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        out = []
        for offset, n in ranges:
            try:
                data = os.pread(self._fd, n, offset)
            except OSError as e:
                raise CheckpointError(f"{self.label}: cannot read: {e.strerror or type(e).__name__}") from None
            if len(data) != n:
                raise CheckpointError(f"{self.label}: the file ends at byte {offset + len(data)}, before byte "
                                      f"{offset + n}: truncated while being read")
            out.append(data)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def merge_ranges(ranges: list[tuple[int, int]], gap: int = MERGE_GAP,
                 waste: int | None = None) -> list[tuple[int, int]]:
    """Sorted (offset, length) ranges with neighbours closer than `gap` bytes joined; `waste`: at most that many
    bytes between them joined in all (the rest stay apart)."""
    merged: list[list[int]] = []
    left = float("inf") if waste is None else waste
    for offset, length in sorted(ranges):
        between = offset - (merged[-1][0] + merged[-1][1]) if merged else gap + 1
        if between <= gap and max(between, 0) <= left:
            left -= max(between, 0)
            merged[-1][1] = max(merged[-1][1], offset + length - merged[-1][0])
        else:
            merged.append([offset, length])
    return [(o, n) for o, n in merged]


def table_entry(tensors: dict[str, TensorInfo], name: str, label: str) -> TensorInfo:
    """The header's (already checked) entry of a table tensor: it must be a 2-D float table."""
    info = tensors[name]
    where = f"{label}: tensor {name!r}"
    if info.dtype not in ("F32", "F16", "BF16", "F64"):
        raise CheckpointError(f"{where}: dtype {info.dtype}, expected a float table (F32, F16, BF16)")
    if len(info.shape) != 2 or 0 in info.shape:
        raise CheckpointError(f"{where}: shape {list(info.shape)}, expected [vocab, hidden]")
    return info


def tensor_table(src: ByteSource) -> tuple[dict[str, TensorInfo], int]:
    """The file's tensors and where their offsets count from: a safetensors header, or a torch.save zip's (a `.bin`
    file, by name as Checkpoint takes it; its offsets are the file's) read by the restricted reader."""
    if Path(src.label).suffix == torch_bin.SUFFIX:
        return torch_bin.read_tensors(lambda n, offset, what: src.read([(offset, n)])[0], src.size(), src.label), 0
    tensors, _, start = parse_header(lambda offset, n: src.read([(offset, n)])[0], src.size(), src.label)
    return tensors, start


def read_rows(src: ByteSource, names: tuple[str, ...], pick: Callable[[int], np.ndarray]) -> TableRows | None:
    """Rows `pick(vocab)` of the first 2-D tensor of `names` the file holds, as float32; None when it holds none."""
    tensors, start = tensor_table(src)
    name = next((n for n in names if n in tensors), None)
    if name is None:
        return None
    info = table_entry(tensors, name, src.label)
    dtype, shape, begin = info.dtype, (info.shape[0], info.shape[1]), info.begin
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
