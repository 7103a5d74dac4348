"""torch.save zip files written without torch: the layout torch 2.13.0 writes (serialization.py _save), and any
pickle, so that a test can make every file the restricted reader (irsurgeon.weights.torch_bin) meets, valid or not.

    pickled = dumps(state_dict_object(arrays)[0])           # protocol-2 opcodes of an object tree
    write(path, pickled, storages, byteorder=b"little")     # <archive>/data.pkl, data/<key>, byteorder, version
    from_safetensors(src, dest)                             # a .safetensors file's tensors as a .bin

The object tree holds plain values (str, int, float, bool, None, tuple, list, dict) and three stand-ins for what torch
pickles by reference: Global (a GLOBAL opcode), Call (REDUCE of a callable on arguments), PersistentId (BINPERSID).
Nothing is memoized (torch's BINPUTs only let a pickle name an object twice; the reader needs none).
"""
from __future__ import annotations

import pickle
import struct
import zipfile
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np

from irsurgeon.weights.safetensors_io import NUMPY_TO_ST, SafetensorsFile
from irsurgeon.weights.torch_bin import STORAGE_TYPES

STORAGE_TYPE = {dtype: name for name, dtype in STORAGE_TYPES.items()}  # safetensors dtype -> torch storage type


class Global(NamedTuple):
    module: str
    name: str


class Call(NamedTuple):
    func: object
    args: tuple


class PersistentId(NamedTuple):
    pid: tuple


REBUILD_V2 = Global("torch._utils", "_rebuild_tensor_v2")
ORDERED_DICT = Global("collections", "OrderedDict")


def dumps(obj: object) -> bytes:
    """The protocol-2 pickle of obj, as torch writes it (PROTO 2 ... STOP)."""
    out = bytearray(pickle.PROTO + b"\x02")
    _emit(obj, out)
    return bytes(out + pickle.STOP)


def _emit(obj: object, out: bytearray) -> None:
    if isinstance(obj, Global):
        out += pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode()
    elif isinstance(obj, Call):
        _emit(obj.func, out)
        _emit(tuple(obj.args), out)
        out += pickle.REDUCE
    elif isinstance(obj, PersistentId):
        _emit(tuple(obj.pid), out)
        out += pickle.BINPERSID
    elif obj is None or isinstance(obj, bool):
        out += {None: pickle.NONE, True: pickle.NEWTRUE, False: pickle.NEWFALSE}[obj]
    elif isinstance(obj, int) and -2**31 <= obj < 2**31:
        out += pickle.BININT + struct.pack("<i", obj)
    elif isinstance(obj, int):
        raw = pickle.encode_long(obj)
        out += pickle.LONG1 + bytes([len(raw)]) + raw
    elif isinstance(obj, float):
        out += pickle.BINFLOAT + struct.pack(">d", obj)
    elif isinstance(obj, str):
        raw = obj.encode("utf-8", "surrogatepass")
        out += pickle.BINUNICODE + struct.pack("<I", len(raw)) + raw
    elif isinstance(obj, tuple):
        out += pickle.MARK
        for item in obj:
            _emit(item, out)
        out += pickle.TUPLE
    elif isinstance(obj, list):
        out += pickle.EMPTY_LIST + pickle.MARK
        for item in obj:
            _emit(item, out)
        out += pickle.APPENDS
    elif isinstance(obj, dict):
        out += pickle.EMPTY_DICT + pickle.MARK
        for key, value in obj.items():
            _emit(key, out)
            _emit(value, out)
        out += pickle.SETITEMS
    else:
        raise TypeError(f"torch_zip.dumps cannot write a {type(obj).__name__}")


def storage_id(key: str, dtype: str, numel: int) -> PersistentId:
    return PersistentId(("storage", Global("torch", STORAGE_TYPE[dtype]), key, "cpu", numel))


def tensor_call(storage: PersistentId, shape: tuple[int, ...], offset: int = 0,
                stride: tuple[int, ...] | None = None) -> Call:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()), as torch pickles a
    tensor; stride defaults to row-major."""
    if stride is None:
        stride = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return Call(REBUILD_V2, (storage, offset, tuple(shape), tuple(stride), False, Call(ORDERED_DICT, ())))


def state_dict_object(arrays: dict[str, np.ndarray], dtypes: dict[str, str] | None = None,
                      ordered: bool = False) -> tuple[object, dict[str, bytes]]:
    """(the object torch pickles for a state dict of these arrays, {storage key: bytes}); each array its own
    storage; dtypes[name] names a safetensors dtype for raw bits ("BF16" for uint16 bit patterns)."""
    dtypes, entries, storages = dtypes or {}, {}, {}
    for key, (name, arr) in enumerate(arrays.items()):
        arr = np.ascontiguousarray(arr)
        dtype = dtypes.get(name) or NUMPY_TO_ST[arr.dtype]
        entries[name] = tensor_call(storage_id(str(key), dtype, arr.size), arr.shape)
        storages[str(key)] = arr.tobytes()
    return (Call(ORDERED_DICT, (list(entries.items()),)) if ordered else entries), storages


def write(path: Path, pickled: bytes, storages: dict[str, bytes | Iterable[bytes]], archive: str = "archive",
          byteorder: bytes | None = b"little", compressed: Iterable[str] = ()) -> Path:
    """A torch.save zip: <archive>/data.pkl, byteorder, data/<key> for each storage (bytes, or chunks streamed in
    order: a large storage is never held whole), version. Entries named in `compressed` are deflated."""
    deflate = set(compressed)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        def put(name: str, chunks: Iterable[bytes]) -> None:
            kind = zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED
            info = zipfile.ZipInfo(f"{archive}/{name}", (1980, 1, 1, 0, 0, 0))
            info.compress_type = kind
            with zf.open(info, "w", force_zip64=True) as out:
                for chunk in chunks:
                    out.write(chunk)
        put("data.pkl", [pickled])
        if byteorder is not None:
            put("byteorder", [byteorder])
        for key, data in storages.items():
            put(f"data/{key}", [data] if isinstance(data, bytes) else data)
        put("version", [b"3\n"])
    return Path(path)


def from_safetensors(src: Path, dest: Path) -> Path:
    """dest: a torch.save zip (an OrderedDict, as state_dict() is) of the tensors of the .safetensors file src, each
    as stored (bf16 as its bits)."""
    f = SafetensorsFile(src)
    try:
        arrays = {name: f.raw(name) for name in f.tensors}
        dtypes = {name: info.dtype for name, info in f.tensors.items()}
    finally:
        f.close()
    obj, storages = state_dict_object(arrays, dtypes, ordered=True)
    return write(dest, dumps(obj), storages)
