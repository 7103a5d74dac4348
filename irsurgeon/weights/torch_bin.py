"""A restricted reader of torch.save's zip files (`pytorch_model.bin`): a state dict's tensors, each placed on its
storage's bytes in the file, never an object of the file's choosing, and no tensor's bytes read before it is asked for.

The format (torch >= 1.6; torch 2.13.0 torch/serialization.py `_save`, read back by `_load`): a zip archive whose
entries sit in one folder, `<archive>/`:
    data.pkl      the pickled dict (protocol 2); each tensor `torch._utils._rebuild_tensor_v2(storage, storage_offset,
                  size, stride, requires_grad, backward_hooks[, metadata])`, or `_rebuild_tensor_v3` with a dtype
                  after backward_hooks for the dtypes of torch.storage._new_dtypes() (float8, uint16/32/64); its
                  storage a persistent id ('storage', torch.<Type>Storage or torch.storage.UntypedStorage, key,
                  location, numel)
    data/<key>    a storage's bytes, stored uncompressed, 64-byte aligned by padding in the local header's extra field
                  and followed by a data descriptor (so the local header holds no sizes)
    byteorder     b"little" or b"big" (absent: little, as _load takes it)
    version, .format_version, .storage_alignment, .data/serialization_id: not needed to place a tensor
and a zip64 end record, which torch's writer (miniz) always adds.

The zip is read here, not by zipfile: its directory is bounded (limits.TORCH_DIRECTORY_BYTES, an entry a tensor)
before it is read, and a storage's bytes start where its local header says (30 bytes + its name + its extra field),
that header's signature, name and method checked against the directory's entry. A storage must be stored, of the
size its persistent id gives (numel x element size); a tensor must be row-major contiguous (torch's is_contiguous:
the stride of an axis of length 1 does not count) and lie within its storage, so it is one byte range [begin, end)
of the file: TensorInfo's begin and end are file offsets (data_start 0). Tensors may share a storage (tied weights).

The pickle is read by pickle.Unpickler with find_class and persistent_load overridden, as torch's `weights_only=True`
does in spirit (torch 2.13.0 torch/_weights_only_unpickler.py: a subset of the opcodes, GLOBAL only from
`_get_allowed_globals()`, REDUCE only of what GLOBAL pushed, persistent ids only ('storage', ...)). It runs no code of
the file's choosing: the opcodes that call something (REDUCE calls the object under its arguments, BUILD an object's
__setstate__; NEWOBJ, INST and OBJ are refused before, below) call an object already on the stack, and what gets
there is built by the unpickler (str, int, float, bool, None, tuple, list, dict: none callable nor with a
__setstate__), returned by persistent_load (a record), or handed out by find_class, which admits only
    collections.OrderedDict                       the type (a state_dict() is one, its `_metadata` set by BUILD)
    torch._utils._rebuild_tensor_v2, _v3          a tensor record (storage, offset, shape, stride, dtype)
    torch._utils._rebuild_parameter(_with_state)  the record of its data (requires_grad and Python state dropped)
    torch.<Type>Storage, torch.storage.UntypedStorage, torch.<dtype>   markers naming a dtype of DTYPES
and refuses every other global by name (os.system, builtins.eval, posix.system; also _codecs.encode, protocol 2's
bytes, torch.Size, torch.device, torch.Tensor: torch admits them, a state dict of tensors needs none). Markers,
records and the rebuild callables are NamedTuples: not types, without __dict__ or __setstate__, so BUILD can give
them no attribute and nothing of one load reaches the next. A bytes or str value is data, never read as a pickle.

Before the unpickler runs, pickletools.genops walks the opcodes once: only torch's weights_only set (less NEWOBJ,
which no admitted global needs, and EMPTY_SET, which no state dict holds and whose empty set is the largest object one
opcode makes, 216 bytes), at most limits.TORCH_PICKLE_OPCODES of them, and no memo index (BINPUT) above the number of
memo writes before it. The C unpickler grows its memo to twice the index it is given: a 12-byte pickle
with `LONG_BINPUT 10**9` held 15 GB (measured, CPython 3.11), where torch's own unpickler keeps a dict.
"""
from __future__ import annotations

import io
import math
import pickle
import pickletools
import struct
from collections import OrderedDict
from typing import Callable, NamedTuple

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError
from irsurgeon.core.text import shown
from irsurgeon.weights.safetensors_io import STORAGE, TensorFile, TensorInfo, quoted_name

Read = Callable[[int, int, str], bytes]  # (n, offset, what): exactly n bytes of the file at offset

# torch dtype -> safetensors dtype, for the dtypes STORAGE holds (torch 2.13.0 torch/_utils.py, torch/storage.py)
DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3",
          "float8_e5m2": "F8_E5M2", "uint16": "U16", "uint32": "U32", "uint64": "U64"}
# the legacy storage types torch.save names (torch/storage.py _dtype_to_storage_type_map)
STORAGE_TYPES = {"DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16", "BFloat16Storage": "BF16",
                 "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
                 "ByteStorage": "U8", "BoolStorage": "BOOL"}
OPCODES = frozenset({  # torch 2.13.0 _weights_only_unpickler.py Unpickler.load's opcodes, less NEWOBJ and EMPTY_SET
    "PROTO", "STOP", "GLOBAL", "REDUCE", "BUILD", "BINPERSID", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "NONE",
    "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING",
    "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT"})
BYTEORDER_BYTES = 16
SUFFIX = ".bin"  # a checkpoint file is read as a torch.save zip by its name, as transformers picks its reader


class Refused(Exception):
    """What the pickle holds that no state dict of tensors does; TorchBinFile says it with the file's name."""


class Marker(NamedTuple):
    """A storage type or a dtype global, as the safetensors dtype it names (None: UntypedStorage, typed by v3)."""
    kind: str
    dtype: str | None


class Storage(NamedTuple):
    key: str
    dtype: str | None
    nbytes: int


class Tensor(NamedTuple):
    storage: Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str


class Rebuild(NamedTuple):
    """The callable find_class hands out for one admitted torch function."""
    build: Callable[..., Tensor]

    def __call__(self, *args) -> Tensor:
        return self.build(*args)


def _ints(value: object, what: str) -> tuple[int, ...]:
    if type(value) is not tuple or not all(type(d) is int and d >= 0 for d in value):
        raise Refused(f"a tensor's {what} is not a tuple of non-negative integers")
    return value


def _tensor(storage: object, offset: object, size: object, stride: object, requires_grad: object, hooks: object,
            dtype: str | None, metadata: object = None) -> Tensor:
    if type(storage) is not Storage:
        raise Refused("a tensor is rebuilt from something other than a storage")
    if type(offset) is not int or offset < 0 or type(requires_grad) is not bool:
        raise Refused("a tensor's storage offset or requires_grad is not what torch writes")
    if type(hooks) not in (dict, OrderedDict) or hooks:
        raise Refused("a tensor carries backward hooks; torch.save writes an empty OrderedDict")
    if metadata is not None and (type(metadata) is not dict or any(metadata.values())):
        raise Refused("a tensor carries a conj or neg bit (its values are not its bytes)")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise Refused(f"a tensor's size {list(shape)} and stride {list(strides)} differ in length")
    return Tensor(storage, offset, shape, strides, dtype or "?")


def _rebuild_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None) -> Tensor:
    typed = storage.dtype if type(storage) is Storage else None
    return _tensor(storage, offset, size, stride, requires_grad, hooks, typed, metadata)


def _rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None) -> Tensor:
    if type(dtype) is not Marker or dtype.kind != "dtype" or type(storage) is not Storage or storage.dtype:
        raise Refused("_rebuild_tensor_v3 takes an untyped storage and a dtype")
    return _tensor(storage, offset, size, stride, requires_grad, hooks, dtype.dtype, metadata)


def _parameter(data, requires_grad, hooks, state=None) -> Tensor:
    if type(data) is not Tensor:
        raise Refused("a parameter's data is not a tensor")
    return data


def _admitted() -> dict[str, object]:
    found: dict[str, object] = {"collections.OrderedDict": OrderedDict,
                                "torch._utils._rebuild_tensor_v2": Rebuild(_rebuild_v2),
                                "torch._utils._rebuild_tensor_v3": Rebuild(_rebuild_v3),
                                "torch._utils._rebuild_parameter": Rebuild(_parameter),
                                "torch._utils._rebuild_parameter_with_state": Rebuild(_parameter),
                                "torch.storage.UntypedStorage": Marker("storage", None)}
    found.update({f"torch.{name}": Marker("storage", dtype) for name, dtype in STORAGE_TYPES.items()})
    found.update({f"torch.{name}": Marker("dtype", dtype) for name, dtype in DTYPES.items()})
    return found


ADMITTED = _admitted()


def _cut(text: str, limit: int = 120) -> str:
    return shown(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


def _described(value: object, depth: int = 0) -> str:
    """A persistent id or a value for a message, never by its repr (which recurses, and may be megabytes)."""
    if type(value) is str:
        return _cut(repr(value[:60]) + ("..." if len(value) > 60 else ""), 80)
    if type(value) in (int, bool, float) or value is None:
        return _cut(repr(value), 60)
    if type(value) is tuple and depth < 2:
        return "(" + ", ".join(_described(v, depth + 1) for v in value[:5]) + (", ..." if len(value) > 5 else "") + ")"
    return f"a {type(value).__name__}"


class Unpickler(pickle.Unpickler):
    """data.pkl's unpickler: the globals of ADMITTED, persistent ids of torch's storage form (see the docstring)."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.storages: dict[str, Storage] = {}

    def find_class(self, module: str, name: str) -> object:
        found = ADMITTED.get(f"{module}.{name}")
        if found is None:
            raise Refused(f"refused global {_cut(f'{module}.{name}')}: a state dict of tensors needs only "
                          f"OrderedDict, torch's tensor rebuilds, storage types and dtypes")
        return found

    def persistent_load(self, pid: object) -> Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage" and type(pid[1]) is Marker
                and pid[1].kind == "storage" and type(pid[2]) is str and type(pid[3]) is str
                and type(pid[4]) is int and pid[4] >= 0):
            raise Refused(f"refused persistent id {_described(pid)}: torch's are ('storage', a storage type, key, "
                          f"location, numel)")
        _, kind, key, _, numel = pid
        storage = Storage(key, kind.dtype, numel * (STORAGE[kind.dtype].itemsize if kind.dtype else 1))
        if self.storages.setdefault(key, storage) != storage:
            raise Refused(f"storage {quoted_name(key)} is named twice, with different types or sizes")
        if len(self.storages) > limits.SAFETENSORS_TENSORS:
            raise Refused(f"more than {limits.SAFETENSORS_TENSORS} storages (irsurgeon's limit per file)")
        return storage


def check_opcodes(data: bytes) -> None:
    """The pickle's opcodes, walked once before it is read (see the module docstring)."""
    count = puts = 0
    try:
        for op, arg, pos in pickletools.genops(data):
            count += 1
            if op.name not in OPCODES:
                raise Refused(f"refused opcode {op.name} at byte {pos}: not one torch.save writes for a state dict")
            if op.name in ("BINPUT", "LONG_BINPUT"):
                if arg > puts:
                    raise Refused(f"memo index {arg} at byte {pos} skips ahead of the {puts} entries written")
                puts += 1
            if count > limits.TORCH_PICKLE_OPCODES:
                raise Refused(f"more than {limits.TORCH_PICKLE_OPCODES} opcodes (irsurgeon's limit)")
    except ValueError as e:  # pickletools: an unknown opcode, an argument cut short, no STOP
        raise Refused(f"not a pickle ({_cut(str(e))})") from None


def load_state_dict(data: bytes) -> tuple[dict[str, Tensor], dict[str, Storage]]:
    """The name -> tensor record table of a data.pkl, and its storages by key; Refused for anything else."""
    check_opcodes(data)
    unpickler = Unpickler(data)
    try:
        state = unpickler.load()
    except Refused:
        raise
    except (pickle.UnpicklingError, ValueError, TypeError, AttributeError, KeyError, IndexError, EOFError,
            OverflowError, UnicodeDecodeError, MemoryError, RecursionError) as e:
        raise Refused(f"not a pickle torch.load reads ({type(e).__name__}: {_cut(str(e))})") from None
    if type(state) not in (dict, OrderedDict):
        raise Refused(f"holds {_described(state)}, not a state dict (a dict of tensors)")
    if len(state) > limits.SAFETENSORS_TENSORS:
        raise Refused(f"holds {len(state)} entries; irsurgeon's limit per file is {limits.SAFETENSORS_TENSORS}")
    for name, value in state.items():
        if type(name) is not str or type(value) is not Tensor:
            raise Refused(f"entry {_described(name)} is {_described(value)}, not a tensor: expected a state dict "
                          f"of tensors")
    return state, unpickler.storages


# --- the zip ------------------------------------------------------------------------------------------------------
END = struct.Struct("<4sHHHHIIH")                 # end of central directory record
END64_LOCATOR = struct.Struct("<4sIQI")
END64 = struct.Struct("<4sQHHIIQQQQ")
CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")    # a central directory entry
LOCAL = struct.Struct("<4sHHHHHIIIHH")            # a local file header
STORED = 0


class Member(NamedTuple):
    name: str
    method: int
    flags: int
    size: int     # compressed
    usize: int    # uncompressed
    header: int   # offset of its local header


def _end_record(read: Read, size: int, label: str) -> tuple[int, int, int, int]:
    """(entries, directory size, directory offset, where the end records begin) from the (zip64) end record."""
    tail = read(min(size, END.size + 0xFFFF), size - min(size, END.size + 0xFFFF), "the zip end record")
    at = len(tail)
    while (at := tail.rfind(b"PK\x05\x06", 0, at)) >= 0:  # the last signature its comment's length ends the file at
        if at + END.size <= len(tail) and at + END.size + END.unpack_from(tail, at)[7] == len(tail):
            break
    if at < 0:
        first = read(2, 0, "the file's first bytes") if size >= 2 else b""
        bare = first[:1] == pickle.PROTO and 2 <= first[1:2][0] <= pickle.HIGHEST_PROTOCOL if first else False
        raise CheckpointError(f"{label}: " + ("a bare pickle, not a torch.save zip (the format before torch 1.6): "
                                              "not read; re-save it with torch >= 1.6, or as safetensors" if bare else
                                              "no zip end record: not a torch.save zip file, or truncated"))
    _, _, _, _, entries, cd_size, cd_offset, _ = END.unpack_from(tail, at)
    where = size - len(tail) + at
    if where >= END64_LOCATOR.size:
        sig, _, end64, _ = END64_LOCATOR.unpack(read(END64_LOCATOR.size, where - END64_LOCATOR.size, "the zip end"))
        if sig == b"PK\x06\x07":
            if end64 + END64.size > where - END64_LOCATOR.size:
                raise CheckpointError(f"{label}: its zip64 end record lies outside the file: truncated or corrupt")
            sig, _, _, _, _, _, _, entries, cd_size, cd_offset = END64.unpack(read(END64.size, end64, "the zip end"))
            if sig != b"PK\x06\x06":
                raise CheckpointError(f"{label}: no zip64 end record where its locator points: corrupt")
            where = end64
    if cd_offset + cd_size > where:
        raise CheckpointError(f"{label}: its zip directory ({cd_size} bytes at {cd_offset}) runs past where it ends "
                              f"({where}): truncated or corrupt")
    return entries, cd_size, cd_offset, where


def _zip64(extra: bytes, fields: tuple[int, int, int]) -> tuple[int, ...] | None:
    """A directory entry's (uncompressed size, size, header offset), those it marks 0xFFFFFFFF read from its zip64
    extra field (id 1, 8 bytes each, in that order); None when the field lacks one."""
    at = 0
    while at + 4 <= len(extra):
        kind, n = struct.unpack_from("<HH", extra, at)
        if kind == 1:
            body = extra[at + 4:at + 4 + n]
            values = list(struct.unpack_from(f"<{len(body) // 8}Q", body))
            full = [values.pop(0) if v == 0xFFFFFFFF and values else v for v in fields]
            return None if 0xFFFFFFFF in full else tuple(full)
        at += 4 + n
    return None if 0xFFFFFFFF in fields else fields


def read_directory(read: Read, size: int, label: str) -> tuple[dict[str, Member], int]:
    """The zip's entries by name, and where its directory begins (no entry's bytes lie past it)."""
    entries, cd_size, cd_offset, _ = _end_record(read, size, label)
    if cd_size > limits.TORCH_DIRECTORY_BYTES or entries > limits.SAFETENSORS_TENSORS + 64:
        raise CheckpointError(f"{label}: its zip directory lists {entries} entries in {cd_size} bytes; irsurgeon's "
                              f"limits are {limits.SAFETENSORS_TENSORS + 64} and {limits.TORCH_DIRECTORY_BYTES}")
    raw, at, members = read(cd_size, cd_offset, "the zip directory"), 0, {}
    for _ in range(entries):
        if at + CENTRAL.size > len(raw) or raw[at:at + 4] != b"PK\x01\x02":
            raise CheckpointError(f"{label}: its zip directory ends before its {entries} entries: corrupt")
        (_, _, _, flags, method, _, _, _, csize, usize, n, m, k, _, _, _, header) = CENTRAL.unpack_from(raw, at)
        name = raw[at + CENTRAL.size:at + CENTRAL.size + n].decode("utf-8", "surrogateescape")
        sizes = _zip64(raw[at + CENTRAL.size + n:at + CENTRAL.size + n + m], (usize, csize, header))
        if sizes is None or at + CENTRAL.size + n + m + k > len(raw):
            raise CheckpointError(f"{label}: zip entry {quoted_name(name)}: its directory entry is cut short: corrupt")
        usize, csize, header = sizes
        if name in members:
            raise CheckpointError(f"{label}: its zip directory lists {quoted_name(name)} twice")
        members[name] = Member(name, method, flags, csize, usize, header)
        at += CENTRAL.size + n + m + k
    if at != cd_size:
        raise CheckpointError(f"{label}: its zip directory is {cd_size} bytes, its entries {at}: corrupt")
    return members, cd_offset


def member_span(read: Read, member: Member, limit: int, label: str) -> tuple[int, int]:
    """[begin, end) of a stored entry's bytes, from its local header, within the bytes before the directory."""
    what = f"zip entry {quoted_name(member.name)}"
    if member.method != STORED or member.flags & 1 or member.size != member.usize:
        raise CheckpointError(f"{label}: {what} is compressed or encrypted (method {member.method}); torch.save "
                              f"stores every entry as is")
    if member.header + LOCAL.size > limit:
        raise CheckpointError(f"{label}: {what}: its local header at {member.header} lies past the entries")
    sig, _, flags, method, _, _, _, _, _, n, m = LOCAL.unpack(read(LOCAL.size, member.header, f"{what}'s header"))
    name = read(n, member.header + LOCAL.size, f"{what}'s header").decode("utf-8", "surrogateescape") if n else ""
    if sig != b"PK\x03\x04" or name != member.name or method != STORED or flags & 1:
        raise CheckpointError(f"{label}: {what}: its local header (at {member.header}) is not the directory's "
                              f"entry: corrupt")
    begin = member.header + LOCAL.size + n + m
    if begin + member.size > limit:
        raise CheckpointError(f"{label}: {what}: its {member.size} bytes at {begin} run past the entries "
                              f"(which end at {limit}): truncated or corrupt")
    return begin, begin + member.size


def archive_of(members: dict[str, Member], label: str) -> str:
    """The folder the entries sit in (torch's reader takes the first entry's), holding data.pkl."""
    first = next(iter(members), "")
    prefix = first.split("/", 1)[0] if "/" in first else ""
    if f"{prefix}/data.pkl" not in members:
        raise CheckpointError(f"{label}: no <archive>/data.pkl in the zip: not a torch.save file")
    return prefix


def contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Row-major contiguous, as torch's is_contiguous: an axis of length 1 may have any stride, an empty tensor too."""
    expected = 1
    for n, s in zip(reversed(shape), reversed(stride)):
        if n != 1 and s != expected:
            return math.prod(shape) == 0
        expected *= n
    return True


def read_tensors(read: Read, size: int, label: str) -> dict[str, TensorInfo]:
    """Every tensor of a torch.save zip file as a TensorInfo whose begin and end are offsets in the file."""
    members, limit = read_directory(read, size, label)
    prefix = archive_of(members, label)
    order = members.get(f"{prefix}/byteorder")
    if order is not None:
        begin, end = member_span(read, order, limit, label)
        value = read(min(end - begin, BYTEORDER_BYTES), begin, "byteorder")
        if value != b"little":
            why = "big-endian tensors" if value == b"big" else "an unknown byte order"
            raise CheckpointError(f"{label}: byteorder says {_cut(repr(value))}: {why}; only little-endian files "
                                  f"are read")
    pickled = members[f"{prefix}/data.pkl"]
    if pickled.usize > limits.TORCH_PICKLE_BYTES:
        raise CheckpointError(f"{label}: its data.pkl is {pickled.usize} bytes; irsurgeon's limit is "
                              f"{limits.TORCH_PICKLE_BYTES}")
    begin, end = member_span(read, pickled, limit, label)
    try:
        state, storages = load_state_dict(read(end - begin, begin, "data.pkl"))
    except Refused as e:
        raise CheckpointError(f"{label}: data.pkl: {e}") from None
    spans = {key: storage_span(read, members, prefix, s, limit, label) for key, s in storages.items()}
    return {name: placed(name, t, spans[t.storage.key], label) for name, t in state.items()}


def storage_span(read: Read, members: dict[str, Member], prefix: str, storage: Storage, limit: int,
                 label: str) -> tuple[int, int]:
    member = members.get(f"{prefix}/data/{storage.key}")
    if member is None:
        raise CheckpointError(f"{label}: data.pkl names storage {quoted_name(storage.key)}, which the zip does not "
                              f"hold")
    if member.usize != storage.nbytes:
        raise CheckpointError(f"{label}: storage {quoted_name(storage.key)} holds {member.usize} bytes, its "
                              f"persistent id says {storage.nbytes}")
    return member_span(read, member, limit, label)


def placed(name: str, tensor: Tensor, span: tuple[int, int], label: str) -> TensorInfo:
    """The tensor's bytes in the file: contiguous, within its storage."""
    where = f"{label}: tensor {quoted_name(name)}"
    if tensor.dtype not in STORAGE:
        raise CheckpointError(f"{where}: its storage has no dtype (an untyped storage outside _rebuild_tensor_v3)")
    if not contiguous(tensor.shape, tensor.stride):
        raise CheckpointError(f"{where}: stride {list(tensor.stride)} of shape {list(tensor.shape)} is not "
                              f"row-major contiguous; re-save it with .contiguous()")
    itemsize = STORAGE[tensor.dtype].itemsize
    begin = tensor.offset * itemsize
    end = begin + math.prod(tensor.shape) * itemsize
    if end > span[1] - span[0]:
        raise CheckpointError(f"{where}: {tensor.dtype} {list(tensor.shape)} at element {tensor.offset} ends at byte "
                              f"{end} of storage {quoted_name(tensor.storage.key)}, which holds {span[1] - span[0]}")
    return TensorInfo(name, tensor.dtype, tensor.shape, span[0] + begin, span[0] + end)


class TorchBinFile(TensorFile):
    """One torch.save zip file (`pytorch_model.bin`): its state dict's tensors placed by read_tensors, read like a
    safetensors file's (TensorFile)."""

    def _read_header(self) -> tuple[dict[str, TensorInfo], dict]:
        return read_tensors(self._pread, self.size, str(self.path)), {}

