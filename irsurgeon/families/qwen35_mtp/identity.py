"""Checkpoint identity: is this checkpoint the one the target was exported from?

Base, instruct and fine-tuned releases of one size share config.json exactly, so the dimensions cannot tell them
apart; their weights can. The check compares 16 rows of the token-embedding table, spread over the vocabulary:

    ids   = the midpoints of 16 equal slices of [0, vocab)
    ckpt  = embed_tokens.weight[ids]                      only those rows: mapped slices, or HTTP range requests
    tgt   = dequantised Gather table of openvino_text_embeddings_model.xml, rows ids (the rest is never decoded)
    ok   <=>  |ckpt - tgt| <= bound  for every element

`bound` is the rounding the two storages can add to one original weight, propagated through the target's
decompression graph: half an ulp of each float storage or float Convert (f32 2^-24, f16 2^-11, bf16 2^-8,
relative), half a quantisation step for integer codes (0.5 * |scale|; a whole step for a code clipped at either end
of its range), times 1.1 for the float arithmetic of the quantiser. Another model's rows differ by the size of the
weights themselves: tens (int4) to millions (f32) of times that.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon.core.config import present
from irsurgeon.core.errors import CheckpointError, IRError, cause, with_hint
from irsurgeon.core.limits import INDEX_SUFFIX
from irsurgeon.ir import files
from irsurgeon.ir.export import ExportDir
from irsurgeon.weights.checkpoint import SINGLE_FILE, WEIGHT_FILES, Checkpoint
from irsurgeon.weights.hub import HubBytes, HubOffline, HubOptions, HubUnreachable, is_repo_id, snapshot_commit
from irsurgeon.weights.rows import LocalBytes, read_rows
from irsurgeon.weights.safetensors_io import bf16_to_f32

EMBED_NAMES = ("model.language_model.embed_tokens.weight", "model.embed_tokens.weight")  # VLM, text-only
SAMPLES = 16
MARGIN = 1.1
HALF_ULP = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f64": 2.0 ** -53,
            "F32": 2.0 ** -24, "F16": 2.0 ** -11, "BF16": 2.0 ** -8, "F64": 2.0 ** -53}
# Integer codes are round(w / scale [+ zp]) clipped to the type's range: half a step off, or up to a whole step at
# either end (nncf 3.4.0 weight_lowering.py: _calculate_signed_scale maps the largest magnitude to -2^(b-1), so its
# opposite-signed extreme rounds to +2^(b-1) and _calculate_integer_quantized_weight clips it to 2^(b-1) - 1).
CODE_RANGE = {"u8": (0, 255), "i8": (-128, 127), "u4": (0, 15), "i4": (-8, 7)}
TINY = {"f16": 2.0 ** -25, "F16": 2.0 ** -25}  # half the smallest f16 subnormal; bf16/f32 reach far lower


@dataclass
class Identity:
    ok: bool | None  # None: could not be checked (no embedding table, or its shard out of reach)
    detail: str
    max_difference: float = float("nan")
    worst_ratio: float = float("nan")  # max |difference| / bound: <= 1 passes


def sample_ids(vocab: int, n: int = SAMPLES) -> np.ndarray:
    """n distinct token ids spread evenly over the vocabulary (the midpoints of n equal slices)."""
    n = min(n, vocab)
    return np.unique((2 * np.arange(n, dtype=np.int64) + 1) * vocab // (2 * n))


# ---- target side: the Gather table of the text embeddings model, a few rows, with its rounding bound ----

def embedding_table(model: ov.Model, xml: Path) -> ov.Output:
    """The data input of the Gather that looks token ids up in a constant [vocab, hidden] table."""
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Gather":
            continue
        data, axis = node.input_value(0), node.input_value(2).get_node()
        shape = data.get_partial_shape()
        if (shape.rank.is_static and shape.rank.get_length() == 2 and shape.is_static
                and axis.get_type_name() == "Constant" and int(axis.get_data().reshape(-1)[0]) == 0
                and not _reaches_parameter(data.get_node())):
            return data
    raise IRError(f"{xml}: no Gather over a constant [vocab, hidden] table: cannot find the token embeddings")


def _reaches_parameter(node: ov.Node) -> bool:
    return node.get_type_name() == "Parameter" or any(_reaches_parameter(i.get_node()) for i in node.input_values())


def constant_rows(node: ov.Node, ids: np.ndarray, vocab: int, table_size: int) -> tuple[np.ndarray, np.ndarray]:
    """A Constant's rows `ids` (all of it when it has no vocab rows) and its storage's rounding bound."""
    et = node.get_element_type().get_type_name()
    shape = tuple(node.get_output_shape(0))
    data = node.get_data()  # a view of the mapped .bin: only the rows indexed below are read
    rows = len(shape) > 0 and shape[0] == vocab
    if et in ("u4", "i4"):
        value = _unpack4(data, shape, ids if rows else None, signed=et == "i4")
    elif et == "bf16":  # get_data() shows bf16 bits through a float16 view: decode the bits of the rows only
        value = bf16_to_f32(np.asarray(data).view(np.uint16)[ids] if rows else np.asarray(data).view(np.uint16))
    elif et in ("f32", "f16", "f64", "i8", "u8", "i32", "i64"):
        value = np.asarray(data)[ids] if rows else np.asarray(data)
    else:
        raise IRError(f"constant {node.get_friendly_name()!r} of the embedding table is {et}: not supported")
    value = value.astype(np.float64)
    if et in HALF_ULP:
        return value, np.abs(value) * HALF_ULP[et] + TINY.get(et, 0.0)
    if int(np.prod(shape)) != table_size:  # zero points: exact integers
        return value, np.zeros_like(value)
    low, high = CODE_RANGE.get(et, (None, None))
    return value, np.where((value == low) | (value == high), 1.0, 0.5)  # a clipped code may be a whole step off


def _unpack4(packed: np.ndarray, shape: tuple[int, ...], ids: np.ndarray | None, signed: bool) -> np.ndarray:
    """4-bit codes, two per byte, low nibble first (openvino's u4/i4 layout), of rows `ids` or of everything."""
    per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    flat = packed.reshape(-1)
    if ids is not None:
        if per_row % 2:
            raise IRError(f"4-bit embedding rows of {per_row} codes do not start on a byte")
        flat = flat.reshape(shape[0], per_row // 2)[ids].reshape(-1)
    codes = np.stack([flat & 0x0F, flat >> 4], axis=-1).reshape(-1).astype(np.int16)
    if signed:
        codes = np.where(codes > 7, codes - 16, codes)
    n = len(ids) if ids is not None else shape[0] if shape else 1
    return codes[: n * per_row].reshape((n,) + tuple(shape[1:]) if ids is not None else shape)


def evaluate(out: ov.Output, ids: np.ndarray, vocab: int, table_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(value, bound) of rows `ids` of the table's decompression subgraph, in float64."""
    node = out.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        return constant_rows(node, ids, vocab, table_size)
    args = [evaluate(i, ids, vocab, table_size) for i in node.input_values()]
    if kind == "Convert":
        (v, e), dst = args[0], node.get_output_element_type(0).get_type_name()
        return v, e + np.abs(v) * HALF_ULP.get(dst, 0.0) * (dst != "f32")
    if kind in ("Subtract", "Add"):
        (a, ea), (b, eb) = args
        return (a - b if kind == "Subtract" else a + b), ea + eb
    if kind == "Multiply":
        (a, ea), (b, eb) = args
        return a * b, ea * np.abs(b) + eb * np.abs(a) + ea * eb
    if kind == "Reshape":
        (v, e), dims = args[0], tuple(out.get_shape())
        return v.reshape((len(ids),) + dims[1:]), np.broadcast_to(e, v.shape).reshape((len(ids),) + dims[1:])
    raise IRError(f"{node.get_friendly_name()!r} ({kind}) in the embedding table's decompression: not supported")


@dataclass
class MappedIR:
    model: ov.Model
    weights: object  # the ov.Tensor over the mapping the model's constants point into: must outlive them


def target_table(target: Path) -> tuple[ov.Output, int, int, MappedIR]:
    """The target's embedding table output, its vocab and hidden sizes, and the IR to keep alive while reading it."""
    xml = ExportDir(target).text_embeddings
    ir = read_mapped(xml)
    table = embedding_table(ir.model, xml)
    vocab, hidden = (int(d) for d in table.get_shape())
    return table, vocab, hidden, ir


def read_mapped(xml: Path) -> MappedIR:
    """The IR (checked by files.read_ir_bytes) over a buffer of its .bin's size that holds only what the check reads:
    every small Constant whole, and of each [vocab, ...] Constant only the sampled rows (read_rows_of). Read with
    pread, never mapped: a .bin truncated while it is read is one error line, not a SIGBUS; an untouched page of the
    buffer is never committed (calloc), so a 2 GB table costs the rows read (measured before: openvino's own mapping
    read 128 MiB around 16 rows of a 1 GB table)."""
    data = files.read_ir_bytes(xml)
    bin_path = xml.with_suffix(".bin")
    if not bin_path.is_file() or bin_path.stat().st_size == 0:
        return MappedIR(files.read_model(xml, checked=True), None)
    buffer = read_needed(bin_path, data)
    weights = ov.Tensor(buffer, shared_memory=True)  # the tensor keeps the buffer alive
    try:
        return MappedIR(ov.Core().read_model(data.decode("utf-8"), weights), weights)
    except (RuntimeError, UnicodeDecodeError) as e:
        raise IRError(f"{xml}: OpenVINO cannot read it: {cause(e)}") from None


_CONST = re.compile(rb'<data\s[^>]*?\bshape="([\d,\s]*)"[^>]*?\boffset="(\d{1,20})"\s+size="(\d{1,20})"')
WHOLE = 1 << 20  # Constants up to this size are read whole (shapes, scales of small tables, zero points)


def read_needed(bin_path: Path, data: bytes) -> np.ndarray:
    """A zero buffer of the .bin's size with the bytes identity reads filled in by pread (see read_mapped)."""
    consts = [([int(d) for d in shape.decode().replace(" ", "").split(",") if d], int(off), int(size))
              for shape, off, size in _CONST.findall(data)]
    vocab = max((shape[0] for shape, _, _ in consts if len(shape) >= 2), default=0)  # [vocab, H] or int4 [vocab, G, g]
    ids = sample_ids(vocab) if vocab else np.array([], np.int64)
    fd = os.open(bin_path, os.O_RDONLY)
    try:
        total = os.fstat(fd).st_size
        buffer = np.zeros(total, np.uint8)
        for shape, off, size in consts:
            rows = shape and shape[0] == vocab and size > WHOLE and size % vocab == 0
            spans = [(off + int(i) * (size // vocab), size // vocab) for i in ids] if rows else [(off, size)]
            for start, length in spans:
                _pread_into(fd, buffer, start, length, bin_path)
    finally:
        os.close(fd)
    return buffer


def _pread_into(fd: int, buffer: np.ndarray, start: int, length: int, where: Path) -> None:
    got = os.pread(fd, length, start) if start + length <= len(buffer) else b""
    if len(got) != length:
        raise IRError(f"{where}: holds {len(buffer)} bytes, but its IR reads bytes {start}..{start + length} (the file "
                      f"is shorter than its .xml says, or shrank while it was read)")
    buffer[start:start + length] = np.frombuffer(got, np.uint8)


def _storage(table: ov.Output) -> str:
    """The element type the table is stored in (the first Constant up its decompression chain)."""
    node = table.get_node()
    while node.get_type_name() != "Constant":
        node = node.input_value(0).get_node()
    return node.get_element_type().get_type_name()


# ---- checkpoint side: the same rows, read without reading the shard ----

def embedding_shard(root: Path, source: str | Path, hub: HubOptions | None):
    """A ByteSource for the file holding the checkpoint's embedding table (local when present, else the hub's), or
    why the table cannot be read."""
    if root.is_file():
        return LocalBytes(root)
    shard = next((n for n in WEIGHT_FILES if present(root / n)), SINGLE_FILE)  # Checkpoint.open's choice
    if shard.endswith(INDEX_SUFFIX):  # a FIFO or folder there is refused by its reader, never taken for a single file
        index = root / shard
        shard_of = Checkpoint.open(root).shard_of  # shard names validated: plain files in the directory
        shard = next((shard_of[n].name for n in EMBED_NAMES if n in shard_of), None)
        if shard is None:
            return f"not checked: {index} lists no {' / '.join(EMBED_NAMES)} to compare"
    if present(root / shard):  # anything there is read, or refused by name (LocalBytes: a regular file only)
        return LocalBytes(root / shard)
    commit = snapshot_commit(root)
    if commit and is_repo_id(source):  # its rows by range; a run before this one's are in irsurgeon's cache
        return HubBytes(str(source), shard, commit, hub or HubOptions())
    return f"not checked: {root / shard}, which holds the token embeddings, is not there"


def checkpoint_rows(root: Path, source: str | Path, hub: HubOptions | None):
    """The checkpoint's embedding rows at sample_ids(its vocab) and the byte source read, or (None, why not)."""
    src = embedding_shard(root, source, hub)
    if isinstance(src, str):
        return None, src
    try:
        rows = read_rows(src, EMBED_NAMES, sample_ids)
        return (rows, src) if rows is not None else (None, f"not checked: {src.label} holds no "
                                                           f"{' / '.join(EMBED_NAMES)} to compare")
    except HubOffline:
        return None, "not checked: the token embeddings' rows are not in the local cache and HF_HUB_OFFLINE is set"
    except HubUnreachable:  # the cache served the rest; the rows could only come from the hub
        return None, "not checked: the hub is unreachable and the cache does not hold the token embeddings"
    finally:
        if isinstance(src, LocalBytes):
            src.close()


def check_identity(target: str | Path, source: str | Path, root: str | Path | None = None,
                   hub: HubOptions | None = None) -> Identity:
    """Compare the checkpoint's embedding rows with the target's (see the module docstring)."""
    target, root = Path(target), Path(root if root is not None else source)
    got, src = checkpoint_rows(root, source, hub)
    if got is None:
        return Identity(None, src)
    table, vocab, hidden, ir = target_table(target)
    if (vocab, hidden) != got.shape:
        return Identity(False, f"the checkpoint's {got.name} is {list(got.shape)}, the target's table "
                               f"[{vocab}, {hidden}]")
    want, bound = evaluate(table, got.ids, vocab, vocab * hidden)  # copies: the mapping may go after this
    storage = _storage(table)
    del table, ir
    return compare(got, want, bound, storage, src)


def compare(got, want: np.ndarray, bound: np.ndarray, storage: str, src) -> Identity:
    """The verdict, with the largest difference and how it stands against the rounding bound."""
    if not (np.isfinite(got.rows).all() and np.isfinite(want).all()):
        side = "checkpoint's" if not np.isfinite(got.rows).all() else "target's"
        return Identity(False, f"the {side} sampled rows of {got.name} hold NaN or Inf values: they cannot be "
                               f"compared, and no trained embedding table holds them")
    ckpt = got.rows.astype(np.float64)
    allowed = (bound + np.abs(ckpt) * HALF_ULP.get(got.dtype, 0.0)) * MARGIN
    diff = np.abs(ckpt - want)
    ratio = diff / np.maximum(allowed, np.finfo(np.float64).tiny)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    largest = np.unravel_index(int(np.argmax(diff)), diff.shape)
    ok = bool(ratio[worst] <= 1.0)
    read = ""
    if isinstance(src, HubBytes):
        read = (f"; {src.bytes} bytes in {src.requests} range requests" if src.requests else
                "; read from irsurgeon's cache of an earlier run's range requests")
    what = f"{len(got.ids)} rows of {got.name}"
    if ok:
        detail = (f"{what} match the target's {storage} table (max difference {diff[largest]:.3g}, "
                  f"{ratio[worst]:.0%} of what its rounding allows){read}")
    else:
        detail = (f"{int((ratio > 1.0).sum())} of {ratio.size} values in {what} differ from the target's {storage} "
                  f"table beyond its rounding (max difference {diff[largest]:.3g} at token "
                  f"{int(got.ids[largest[0]])}, where {allowed[largest]:.3g} is allowed){read}")
    return Identity(ok, detail, float(diff.max()), float(ratio[worst]))


FOREIGN = "base, instruct and fine-tuned releases of one size share config.json, so check the path, repo id or revision"
FOREIGN_HINT = ("--allow-foreign-checkpoint", "--allow-foreign-checkpoint builds anyway (a fine-tune that knowingly "
                                              "reuses its base model's head)")


def require_identity(target: Path, source: str | Path, root: Path, hub: HubOptions | None, allow_foreign: bool,
                     echo) -> str:
    """Check identity before anything is built; returns the provenance note, raises on a mismatch (unless allowed)."""
    result = check_identity(target, source, root, hub)
    if result.ok:
        echo(f"checkpoint identity: {result.detail}")
        return f"verified: {result.detail}"
    if result.ok is None:
        echo(f"warning: checkpoint identity {result.detail}: nothing proves the head belongs to this target")
        return result.detail
    if not allow_foreign:
        raise with_hint(CheckpointError(f"checkpoint {source} does not belong to target {target}: {result.detail}; "
                                        f"{FOREIGN}"), *FOREIGN_HINT)
    echo(f"warning: a foreign checkpoint allowed: building from {source} although {result.detail}")
    return f"foreign checkpoint allowed: {result.detail}"
