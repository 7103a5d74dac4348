"""A strict, lazy safetensors reader: never pickle, every header field checked against the file.

File layout: an 8-byte little-endian header length N, N bytes of JSON `{name: {dtype, shape, data_offsets}}`, then
the data. A tensor's bytes are read (pread) when it is asked for, so only the bytes it occupies are read from disk;
bf16 and fp8 have no numpy dtype and are decoded to float32 in pieces, straight into the result.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError

MAX_HEADER_BYTES = limits.SAFETENSORS_HEADER_BYTES
DTYPE_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,15}")  # a dtype name is shown in errors; any other value is not
READ_CHUNK = 1 << 30      # one preadv call reads at most this much (Linux caps a read at ~2 GiB)
DECODE_CHUNK = 4 << 20    # elements of bf16/fp8 decoded at a time into the float32 result

# safetensors dtype -> (numpy storage dtype, itemsize)
STORAGE = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"), "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
    # unsigned words: packed quantized layouts (MLX stores 4-bit weights in U32), recognised so they are refused
    # by scheme rather than as an unreadable header
    "U16": np.dtype("<u2"), "U32": np.dtype("<u4"), "U64": np.dtype("<u8"),
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def bf16_to_f32(raw: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32: bf16 is the top half of an f32."""
    bits = raw.astype(np.uint32)
    bits <<= 16  # in place: one float32-sized buffer per tensor, not two
    return bits.view(np.float32)


def _fp8_table(exp_bits: int, man_bits: int, bias: int, e4m3fn: bool) -> np.ndarray:
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> man_bits) & ((1 << exp_bits) - 1)
    man = codes & ((1 << man_bits) - 1)
    normal = (1.0 + man / (1 << man_bits)) * np.exp2(exp - bias)
    subnormal = (man / (1 << man_bits)) * np.exp2(1 - bias)
    value = sign * np.where(exp == 0, subnormal, normal)
    if e4m3fn:  # no infinities; only S.1111.111 is NaN
        value[(codes & 0x7F) == 0x7F] = np.nan
    else:  # e5m2 follows IEEE: exponent all ones is inf / NaN
        top = exp == (1 << exp_bits) - 1
        value[top & (man == 0)] = sign[top & (man == 0)] * np.inf
        value[top & (man != 0)] = np.nan
    return value.astype(np.float32)


FP8_E4M3FN = _fp8_table(4, 3, 7, e4m3fn=True)
FP8_E5M2 = _fp8_table(5, 2, 15, e4m3fn=False)


def decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Storage view -> a writable numpy array in a numpy dtype (bf16/fp8 become float32).

    A read-only view (of a read-only mapping) is copied: openvino shares only writable memory with a Constant, and
    the copy lets the reader drop the mapped pages at once. A writable one is returned as it is, without a copy.
    """
    if dtype == "BF16":
        return bf16_to_f32(raw)
    if dtype == "F8_E4M3":
        return FP8_E4M3FN[raw]
    if dtype == "F8_E5M2":
        return FP8_E5M2[raw]
    return raw if raw.flags.writeable else raw.copy()


def quoted_name(name: str, limit: int = 120) -> str:
    """A tensor name for a message: quoted, and cut short when a hostile header makes it megabytes long."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


def parse_header(read: Callable[[int, int], bytes], size: int,
                 label: str) -> tuple[dict[str, TensorInfo], dict, int]:
    """(tensors, metadata, data start) of a safetensors file of `size` bytes, read through `read(offset, n)` (a local
    file or HTTP range requests); every field is checked against the file.

    Bounded before anything is built: the header's bytes (MAX_HEADER_BYTES) and its entries, counted on those bytes
    (limits.SAFETENSORS_TENSORS), so a hostile header costs at most a scan of 100 MB. Refused as safetensors refuses
    them (huggingface/safetensors, safetensors/src/tensor.rs, Metadata::validate: the tensors sorted by offsets must
    each begin where the previous one ends, else InvalidOffset): two tensors sharing bytes. Refused beyond it: a
    name listed twice, which Python's json (and safetensors' serde map) silently reduce to the last one."""
    if size < 8:
        raise CheckpointError(f"{label}: not a safetensors file (only {size} bytes)")
    (n,) = struct.unpack("<Q", read(0, 8))
    if n > MAX_HEADER_BYTES or 8 + n > size:  # n itself is not printed: it is the file's first 8 bytes
        raise CheckpointError(f"{label}: its 8-byte header length is larger than the file ({size} bytes) or "
                              f"than {MAX_HEADER_BYTES} bytes: truncated or not a safetensors file")
    header = limits.parse_json(read(8, n), f"{label}: header", CheckpointError,
                               most_members=limits.SAFETENSORS_TENSORS, once=True)
    if not isinstance(header, dict):
        raise CheckpointError(f"{label}: header is not a JSON object")
    data_size = size - 8 - n
    metadata = header.pop("__metadata__", None) or {}
    tensors = {name: check_entry(name, entry, data_size, label) for name, entry in header.items()}
    check_disjoint(tensors.values(), label)
    return tensors, metadata, 8 + n


def check_disjoint(infos: Iterable[TensorInfo], label: str) -> None:
    """No two tensors share a byte of the data (an empty tensor holds none); one pass over them sorted by offset."""
    reach: TensorInfo | None = None  # of the tensors before, the one ending last
    for info in sorted((i for i in infos if i.end > i.begin), key=lambda i: i.begin):
        if reach is not None and info.begin < reach.end:
            raise CheckpointError(f"{label}: header: tensors {quoted_name(reach.name)} and {quoted_name(info.name)} "
                                  f"share bytes {info.begin}-{min(info.end, reach.end)} of the data; expected each "
                                  f"tensor its own bytes, as safetensors does")
        if reach is None or info.end > reach.end:
            reach = info


def check_entry(name: str, entry: object, data_size: int, label: str) -> TensorInfo:
    """One header entry as a TensorInfo, or a CheckpointError naming the file, the tensor and what is wrong. The
    checks run on every entry of a header (up to limits.SAFETENSORS_TENSORS): exact types, no message built unless
    it is an error."""
    if type(entry) is not dict:
        raise CheckpointError(f"{_where(name, label)}: header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    storage = STORAGE.get(dtype) if type(dtype) is str else None
    if storage is None:
        shown = f" {dtype}" if isinstance(dtype, str) and DTYPE_NAME.fullmatch(dtype) else ""
        raise CheckpointError(f"{_where(name, label)}: unsupported dtype{shown} (expected one of {', '.join(STORAGE)})")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):  # bool is not int here
        raise CheckpointError(f"{_where(name, label)}: shape is not a list of non-negative integers")
    if not (type(offsets) is list and len(offsets) == 2 and type(offsets[0]) is int and type(offsets[1]) is int
            and 0 <= offsets[0] <= offsets[1]):
        raise CheckpointError(f"{_where(name, label)}: data_offsets are not [begin, end] with 0 <= begin <= end")
    begin, end = offsets
    nbytes = math.prod(shape) * storage.itemsize
    if end - begin != nbytes:
        raise CheckpointError(f"{_where(name, label)}: data_offsets span {end - begin} bytes, "
                              f"but {dtype} {shape} needs {nbytes}")
    if end > data_size:
        raise CheckpointError(f"{_where(name, label)}: data ends at byte {end} but the file holds {data_size} "
                              f"bytes of data: truncated")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _where(name: str, label: str) -> str:
    return f"{label}: tensor {quoted_name(name)}"


class TensorFile(ABC):
    """A checkpoint file whose tensors are each one contiguous byte range, [data_start + begin, data_start + end):
    what places them is parsed when it is opened (_read_header: SafetensorsFile's JSON header, or TorchBinFile's zip
    directory and pickle, irsurgeon.weights.torch_bin), and a tensor's bytes are read on request with pread.

    Reads, not a memory map: a file that shrinks under a mapping kills the process with SIGBUS, which Python cannot
    catch, while a short read is a CheckpointError naming the file and the tensor.
    """

    data_start = 0

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd, self.size = limits.open_regular(self.path, CheckpointError)
        self.opened = self._stamp()
        try:
            self.tensors, self.metadata = self._read_header()
        except BaseException:
            self.close()
            raise

    @abstractmethod
    def _read_header(self) -> tuple[dict[str, TensorInfo], dict]:
        """The file's tensors (each checked to lie within it) and its metadata; sets data_start."""

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a new numpy array in its storage dtype (bf16/fp8 as unsigned ints).

        The array is the caller's own (writeable): openvino shares a float32 weight's memory only when it is.
        """
        info = self.tensors[name]
        storage = STORAGE[info.dtype]
        self._check_memory(info, info.end - info.begin)
        arr = np.empty((info.end - info.begin) // storage.itemsize, storage)
        self._read_into(arr, self.data_start + info.begin, name)
        return arr.reshape(info.shape)

    def advise(self, names: Iterable[str]) -> None:
        """Ask the kernel to read these tensors' bytes ahead (posix_fadvise WILLNEED; adjacent tensors one range):
        a hint, nothing is read here (irsurgeon.weights.prefetch)."""
        spans = sorted((self.tensors[n].begin, self.tensors[n].end) for n in names)
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        for lo, hi in merged:
            if hi > lo:
                os.posix_fadvise(self._fd, self.data_start + lo, hi - lo, os.POSIX_FADV_WILLNEED)

    def rows(self, name: str) -> "StoredRows":
        """The tensor's stored values, read a few leading-axis rows at a time (see StoredRows)."""
        return StoredRows(self, self.tensors[name])

    def get(self, name: str) -> np.ndarray:
        """The tensor decoded to a numpy dtype (bf16 and fp8 -> float32)."""
        info = self.tensors[name]
        storage = STORAGE[info.dtype]
        probe = np.zeros(1, storage)
        decoded = decode(probe, info.dtype)
        if decoded is probe:
            return self.raw(name)
        count = (info.end - info.begin) // storage.itemsize
        self._check_memory(info, count * decoded.dtype.itemsize)
        out = np.empty(count, decoded.dtype)
        scratch = np.empty(min(count, DECODE_CHUNK), storage)  # decoded piece by piece: no whole raw copy
        for at in range(0, count, DECODE_CHUNK):
            part = scratch[:min(DECODE_CHUNK, count - at)]
            self._read_into(part, self.data_start + info.begin + at * storage.itemsize, name)
            out[at:at + len(part)] = decode(part, info.dtype)
        return out.reshape(info.shape)

    def _check_memory(self, info: TensorInfo, nbytes: int) -> None:
        limits.check_memory(nbytes, f"{self.path}: tensor {quoted_name(info.name)} ({info.dtype} {list(info.shape)})",
                            CheckpointError)

    def _read_into(self, arr: np.ndarray, offset: int, name: str) -> None:
        """Fill arr (contiguous) from the file at offset; a short read means the file changed under us."""
        if arr.nbytes == 0:  # an empty tensor (a 0 in its shape): nothing to read, and its view cannot be cast
            return
        view = memoryview(arr).cast("B")
        got = 0
        while got < len(view):
            try:
                n = os.preadv(self._fd, [view[got:got + READ_CHUNK]], offset + got)
            except OSError as e:
                raise CheckpointError(f"{self.path}: tensor {quoted_name(name)}: cannot read: "
                                      f"{e.strerror or type(e).__name__}") from None
            if n == 0:
                raise CheckpointError(f"{self.path}: tensor {quoted_name(name)}: the file ends at byte {offset + got}, "
                                      f"before the tensor's last byte {offset + len(view)}: truncated while being read")
            got += n

    def _pread(self, n: int, offset: int, what: str) -> bytes:
        try:
            data = os.pread(self._fd, n, offset)
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot read {what}: {e.strerror or type(e).__name__}") from None
        if len(data) != n:
            raise CheckpointError(f"{self.path}: the file ends inside {what}: truncated")
        return data

    def _stamp(self) -> tuple[int, int, int]:
        st = os.fstat(self._fd)
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def check_unchanged(self, name: str) -> None:
        """The file must be as it was when opened (size, mtime, ctime of the open descriptor): a build whose matrices
        are read when they are written (an uncompressed patch) reads them long after the rest, and a file rewritten
        in place meanwhile would give a draft of two checkpoints."""
        if self._fd >= 0 and self._stamp() != self.opened:
            raise CheckpointError(f"{self.path}: changed while tensor {quoted_name(name)} and the others were being "
                                  f"read; run again once nothing writes to the checkpoint")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:  # a file object closed itself when collected; a bare descriptor must be closed here
        if getattr(self, "_fd", -1) >= 0:
            self.close()


class SafetensorsFile(TensorFile):
    """One .safetensors file, its header parsed and validated (parse_header)."""

    def _read_header(self) -> tuple[dict[str, TensorInfo], dict]:
        tensors, metadata, self.data_start = parse_header(lambda offset, n: self._pread(n, offset, "the header"),
                                                          self.size, str(self.path))
        return tensors, metadata

    def data_chunks(self, chunk: int) -> Iterator[bytes]:
        """The bytes after the header, `chunk` at a time (a file that ends early: CheckpointError)."""
        for at in range(self.data_start, self.size, chunk):
            yield self._pread(min(chunk, self.size - at), at, "the tensors' bytes")


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


NUMPY_TO_ST = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64",
               np.dtype("<i4"): "I32", np.dtype("i1"): "I8", np.dtype("u1"): "U8", np.dtype("?"): "BOOL"}


def encode_header(header: dict) -> bytes:
    """The 8-byte length and the JSON header, padded with spaces to a multiple of 8 (as safetensors writes it)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], dtypes: dict[str, str] | None = None,
                      metadata: dict[str, str] | None = None) -> None:
    """Write tensors; `dtypes[name]` names a storage dtype ("BF16", "F8_E4M3") when the array holds raw bits."""
    dtypes = dtypes or {}
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        st = dtypes.get(name) or NUMPY_TO_ST[arr.dtype]
        data = arr.tobytes()
        header[name] = {"dtype": st, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = metadata or {"format": "pt"}
    with open(path, "wb") as f:
        f.write(encode_header(header))
        for c in chunks:
            f.write(c)


class StoredRows:
    """A tensor's stored values, read on indexing: `rows[lo:hi]` reads only rows lo..hi of the leading axis (they are
    contiguous in the file) and returns them as a new array in the storage dtype. `rows[:, cols...]` first narrows
    the trailing axes of every block read later (the fused gate/up halves of an expert stack), so a large tensor is
    decoded block by block without ever being held whole; a `[:, a:b]` narrowing reads only those bytes of each row.
    """

    def __init__(self, file: TensorFile, info: TensorInfo, trailing: tuple = ()):
        self.file, self.info, self.trailing = file, info, trailing
        storage = STORAGE[info.dtype]
        self.shape = np.broadcast_to(np.zeros((), storage), info.shape)[(slice(None), *trailing)].shape

    def __getitem__(self, key):
        if isinstance(key, tuple) and key and key[0] == slice(None) and not self.trailing:
            return StoredRows(self.file, self.info, key[1:])
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("StoredRows takes [lo:hi] or [:, trailing...]")
        lo, hi, _ = key.indices(self.info.shape[0])
        storage = STORAGE[self.info.dtype]
        per_row = math.prod(self.info.shape[1:])
        start = self.file.data_start + self.info.begin
        if (narrow := self._second_axis_range()) is not None:  # contiguous within each row: read only those bytes
            a, b = narrow
            inner = math.prod(self.info.shape[2:])
            block = np.empty((max(hi - lo, 0), b - a, *self.info.shape[2:]), storage)
            for k in range(block.shape[0]):
                self.file._read_into(block[k], start + ((lo + k) * per_row + a * inner) * storage.itemsize,
                                     self.info.name)
            return block
        block = np.empty((max(hi - lo, 0), *self.info.shape[1:]), storage)
        self.file._read_into(block, start + lo * per_row * storage.itemsize, self.info.name)
        return block[(slice(None), *self.trailing)] if self.trailing else block

    def read_into(self, rows: slice, out: np.ndarray) -> np.ndarray:
        """Rows lo..hi read straight into out (contiguous, as many bytes), viewed as the storage dtype in those rows'
        shape: a decoder can then work in its output buffer, with no block of its own. The tensor is whole or
        narrowed `[:, a:b]` (one read per leading row: its a..b rows are contiguous in the file)."""
        lo, hi, _ = rows.indices(self.info.shape[0])
        storage = STORAGE[self.info.dtype]
        per_row = math.prod(self.info.shape[1:])
        start = self.file.data_start + self.info.begin
        if self.trailing:
            narrow = self._second_axis_range()
            if narrow is None:
                raise TypeError("StoredRows.read_into takes a whole tensor or one narrowed [:, a:b]")
            a, b = narrow
            inner = math.prod(self.info.shape[2:])
            block = out.view(storage).reshape(max(hi - lo, 0), b - a, *self.info.shape[2:])
            for k in range(block.shape[0]):
                self.file._read_into(block[k], start + ((lo + k) * per_row + a * inner) * storage.itemsize,
                                     self.info.name)
            return block
        block = out.view(storage).reshape(max(hi - lo, 0), *self.info.shape[1:])
        self.file._read_into(block, start + lo * per_row * storage.itemsize, self.info.name)
        return block

    def _second_axis_range(self) -> tuple[int, int] | None:
        """(a, b) when the narrowing is `[:, a:b]` (axes after the second whole): the a..b rows of each leading row
        are contiguous in the file, e.g. one half of a fused expert stack."""
        if len(self.info.shape) < 2 or not self.trailing or not isinstance(self.trailing[0], slice):
            return None
        if any(t != slice(None) for t in self.trailing[1:]):
            return None
        a, b, step = self.trailing[0].indices(self.info.shape[1])
        return (a, max(a, b)) if step == 1 else None
