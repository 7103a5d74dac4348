"""The generic loader: a checkpoint checked against a family's tensor table (irsurgeon.weights.table).

The loader checks the stored tensor set against one layout of the table (missing, extra and mis-shaped tensors are
errors naming them), the dtypes, and returns `LazyWeights`, role -> float32 array decoded when read (or float16,
decoded slice by slice, for the f16 build). Nothing here knows a family.

Any float storage dtype is read as stored (transformers loads a tensor whatever float dtype it has, casting it to the
model's), FP8 through its block scales (`fp8.py`), int4 packed modules (compressed-tensors, AWQ, GPTQ) unpacked to
the values their library dequantizes (`int4.py`); both are read whole when asked for. What cannot hold a weight
(integers, bool, other quantized layouts, `quant.py`) is refused by name.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from irsurgeon.core.errors import CheckpointError, with_hint
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.fp8 import SCALE_SUFFIX, FP8Scheme, check_scale, dequantize_blocks, split_scales
from irsurgeon.weights.half import SLICE, NotHalf, Tally, bf16_slice, round_slice
from irsurgeon.weights.int4 import Int4Layout, Packed
from irsurgeon.weights.quant import SUPPORTED, refuse_foreign, source_format, stored_scheme, tensor_scheme
from irsurgeon.weights.safetensors_io import bf16_to_f32
from irsurgeon.weights.table import Part, Source, Stack, Table, Tensor, Transform, Whole, choose_layout


def check_tensor_set(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]], present: set[str], prefix: str,
                     context: str = "", packed: dict[str, Packed] | None = None) -> None:
    """Missing, extra and mis-shaped tensors (names relative to prefix) are errors naming the tensor and shapes."""
    if not present:
        raise CheckpointError(f"{ckpt.root}: no '{prefix}*' tensors: this checkpoint carries no such head")
    note = f", {context}" if context else ""
    missing = sorted(set(expected) - present)
    if missing:
        raise CheckpointError(f"{ckpt.root}: missing tensor {prefix}{missing[0]} "
                              f"(expected shape {list(expected[missing[0]])}{note})"
                              + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    extra = sorted(present - set(expected))
    if extra:
        raise CheckpointError(f"{ckpt.root}: unexpected tensor {prefix}{extra[0]} not used by a "
                              f"head of this config{note}"
                              + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        if packed and name in packed:  # an int4 module: the shape its packed tensors (and config) give W
            if packed[name].shape != shape:
                raise CheckpointError(f"tensor {prefix}{name}: expected shape {list(shape)} from the config, "
                                      f"found {list(packed[name].shape)} unpacked from {packed[name].stored[0]}")
            continue
        info = ckpt.info(prefix + name)
        if info.shape != shape:
            raise CheckpointError(f"tensor {prefix}{name}: expected shape {list(shape)} from the config, "
                                  f"found {list(info.shape)} in {ckpt.shard_of[prefix + name].name}")


# config.json dtype -> the safetensors dtype a checkpoint that declares it stores
DECLARED = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64"}
WEIGHT_DTYPES = ("F64", "F32", "F16", "BF16")  # read as stored; F8_E4M3 only with its block scales


@dataclass(frozen=True)
class Stored:
    """What a checkpoint's tensors under a prefix are: weight names (relative to it, scales split off, a packed
    module as its `<module>.weight`), which of them are dequantized when read (`scaled`: FP8 with block scales and
    the int4 packed ones, read whole), the FP8 scheme of its quantization_config, and the packed modules with the
    int4 layout that reads them. Quantized layouts (weights/quant.py) are one table; these are the ones read."""
    prefix: str
    names: set[str]
    scaled: set[str]
    scheme: FP8Scheme
    packed: dict[str, Packed] = field(default_factory=dict)
    int4: Int4Layout | None = None

    def source_format(self, declared: str | None) -> str:
        fp8 = any(n not in self.packed for n in self.scaled)
        return source_format(fp8, self.int4 if self.packed else None, declared)

    def stored_of(self, name: str) -> list[str]:
        """The full names of the tensors one weight (relative name) is read from."""
        if name in self.packed:
            return list(self.packed[name].stored)
        full = self.prefix + name
        return [full, full + SCALE_SUFFIX] if name in self.scaled else [full]


def inspect_stored(ckpt: Checkpoint, prefix: str) -> Stored:
    """Refuse foreign quantized layouts, gather int4 packed modules, pair FP8 tensors with their scales and check
    the scales' shapes."""
    full = ckpt.names(prefix)
    if not full:
        raise CheckpointError(f"{ckpt.root}: no '{prefix}*' tensors: this checkpoint carries no such head")
    scheme, int4 = stored_scheme(ckpt, full)
    rest, packed, cut = set(full), {}, len(prefix)
    if int4 is not None:
        for module, leaves in sorted(int4.modules(rest).items()):
            found = int4.describe(ckpt, module, sorted(leaves))
            packed[module[cut:] + ".weight"] = found
            rest -= set(found.stored)
        refuse_foreign(ckpt, sorted(rest), None, tensor_scheme(sorted(rest)))  # another scheme's tensors beside
    weights, scaled = split_scales(rest, lambda n: ckpt.info(n).dtype, scheme)
    for name in sorted(scaled):
        check_scale(name, ckpt.info(name).shape, ckpt.info(name + SCALE_SUFFIX).shape, scheme.block)
    clash = sorted(n for n in packed if prefix + n in weights)
    if clash:
        raise CheckpointError(f"tensor {prefix}{clash[0]}: stored both as a float tensor and packed as int4 "
                              f"({packed[clash[0]].stored[0]})")
    return Stored(prefix, {n[cut:] for n in weights} | set(packed), {n[cut:] for n in scaled} | set(packed), scheme,
                  packed, int4)


INDEX_DTYPES = ("I64", "I32")


def check_dtypes(ckpt: Checkpoint, names, stored: Stored, declared: str | None, source: str, warn,
                 integers: frozenset[str] = frozenset()) -> None:
    """Every tensor must hold floats (an index table integers); one stored in another float dtype than
    config.json's is noted, not refused."""
    want, p = DECLARED.get(declared or ""), stored.prefix
    other: dict[str, list[str]] = {}
    for name in sorted(names):
        if name in stored.scaled:
            continue
        dtype = ckpt.info(p + name).dtype
        if name in integers:
            if dtype not in INDEX_DTYPES:
                raise CheckpointError(f"tensor {p}{name}: stored as {dtype}, expected integer indices "
                                      f"({' or '.join(INDEX_DTYPES)})")
            continue
        if dtype not in WEIGHT_DTYPES:
            raise CheckpointError(f"tensor {p}{name}: stored as {dtype}, which cannot hold a float weight; "
                                  f"{SUPPORTED}")
        if want and dtype != want:
            other.setdefault(dtype, []).append(p + name)
    for dtype, found in sorted(other.items()):
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        warn(f"note: {found[0]}{more} stored as {dtype}, not the {declared} {source} declares; read as stored")


# The draft computes in f32, and a norm squares what a weight feeds it: above sqrt(f32 max) the square is infinite
# whatever the format the weight is stored in (a weight beyond f16's range stays f32: ops.core.weight).
COMPUTABLE = float(np.sqrt(np.finfo(np.float32).max))  # 1.84e19


@dataclass
class Extremes:
    """What `finite` judges, gathered over a tensor whole or block by block: least and largest value, NaN/Inf count."""
    lo: float = 0.0
    hi: float = 0.0
    bad: int = 0
    seen: bool = False

    def add(self, w: np.ndarray) -> None:
        if not w.size:
            return
        # min and max read the block twice and allocate nothing (NaN propagates through both, an Inf is one of
        # them); isfinite/abs made a temporary the size of every tensor, and faulting those pages in dominated
        # large builds
        lo, hi = float(w.min()), float(w.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            self.bad += int(w.size - np.count_nonzero(np.isfinite(w)))
        self.lo, self.hi = (min(self.lo, lo), max(self.hi, hi)) if self.seen else (lo, hi)
        self.seen = True


def finite(name: str, w: np.ndarray, allow_nonfinite: bool, warn) -> np.ndarray:
    """Refuse NaN/Inf weights and finite ones no f32 computation can carry, or (allowed) report them and go on."""
    seen = Extremes()
    seen.add(w)
    judge(name, seen, allow_nonfinite, warn)
    return w


def judge(name: str, seen: Extremes, allow_nonfinite: bool, warn) -> None:
    """finite's verdict on a tensor's Extremes: an error, a warning (allowed), or nothing."""
    if seen.bad:
        message = f"tensor {name}: holds {seen.bad} NaN or Inf values"
    elif (largest := max(-seen.lo, seen.hi)) > COMPUTABLE:
        message = (f"tensor {name}: holds {largest:.3g}, beyond what the draft can compute in f32 (a norm squares "
                   f"it: anything above {COMPUTABLE:.3g} overflows to inf)")
    else:
        return
    if not allow_nonfinite:
        raise with_hint(CheckpointError(message), "--allow-nonfinite", "pass --allow-nonfinite to build anyway")
    warn("warning: " + message)


def apply(fn: Transform | None, w: np.ndarray) -> np.ndarray:
    if fn is None:
        return w
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are reported by `finite`, not as numpy warnings
        return fn(w)


class LazyWeights(Mapping):
    """role -> float32 array, decoded from the checkpoint (read with pread) each time it is asked for.

    `half(role)` gives the f16 build its tensor as float16 decoded slice by slice (no float32 copy of the tensor),
    or None when the tensor must take the float32 path (FP8 block scales, or values openvino's compression would
    keep f32: weights/half.py); `rows(role)` the float32 values block by block, checked as they are read (a build
    that streams them into the .bin). The graph turns each weight into a constant as it goes, so besides what the
    model keeps at most one tensor being decoded is alive; the checkpoint must stay open until the model is built.
    `table`: the rows the weights were loaded for (compress flags, ...).
    """

    def __init__(self, readers: dict[str, Callable[[], np.ndarray]], warn=print,
                 halves: dict[str, Callable[[], np.ndarray | None]] | None = None, table: Table | None = None,
                 streams: dict[str, Callable[[], Iterator[np.ndarray]] | None] | None = None,
                 half_streams: dict[str, Callable[[], Iterator[np.ndarray]] | None] | None = None):
        self.readers = readers
        self.halves = halves or {}
        self.streams = streams or {}
        self.half_streams = half_streams or {}
        self.warn = warn  # where loading reports, and building after it (a weight kept f32, ...)
        self.table = table
        self.source_format = ""  # what the weights were read from (Stored.source_format), for the draft's provenance

    def __getitem__(self, role: str) -> np.ndarray:
        return self.readers[role]()

    def __contains__(self, role: object) -> bool:  # Mapping's own would decode the tensor to answer
        return role in self.readers

    def half(self, role: str) -> np.ndarray | None:
        reader = self.halves.get(role)
        return reader() if reader else None

    def half_rows(self, role: str) -> Callable[[], Iterator[np.ndarray]] | None:
        """The role's float16 values as blocks of leading-axis rows, decoded as `half` decodes them, the last block
        followed by NotHalf where `half` would have given None (an f16 build that streams its weights into the .bin:
        irsurgeon.draft.build), or None where only the whole tensor is read."""
        return self.half_streams.get(role)

    def rows(self, role: str) -> Callable[[], Iterator[np.ndarray]] | None:
        """The role's float32 values as blocks of leading-axis rows, in order (a build that streams its weights into
        the .bin: irsurgeon.draft.build), or None where only the whole tensor is read."""
        return self.streams.get(role)

    def __iter__(self) -> Iterator[str]:
        return iter(self.readers)

    def __len__(self) -> int:
        return len(self.readers)


def decode_slice(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values (a block of rows read from the file) as a new float32 array; FP8 never comes here."""
    return bf16_to_f32(raw) if dtype == "BF16" else np.array(raw, dtype=np.float32)


def round_rows(ckpt: Checkpoint, name: str, dst: np.ndarray, tally: Tally, fn: Transform | None = None,
               select=lambda raw: raw) -> None:
    """Decode `select(stored view)` into dst (float16, same shape) a few leading-axis rows at a time (one slice of
    about `SLICE` values, or one expert), `fn` applied."""
    raw, dtype = ckpt.raw(name)
    src = select(raw)
    if src is raw and dst.flags.c_contiguous and dst.shape == src.shape:
        round_block(raw, dtype, 0, dst, tally, fn)
        return
    for rows in row_blocks(src.shape):
        if fn is None and dtype == "BF16":
            bf16_slice(src[rows], dst[rows], tally)
        else:
            round_slice(apply(fn, decode_slice(src[rows], dtype)), dst[rows], tally)


def round_block(raw, dtype: str, lo: int, dst: np.ndarray, tally: Tally, fn: Transform | None = None) -> None:
    """Rows lo.. of a stored tensor (raw: its StoredRows, whole or narrowed `[:, a:b]`) decoded into dst (float16,
    C-contiguous, as many rows) a slice at a time, `fn` applied; bf16 is read into dst itself and its bits re-biased
    there (half.py)."""
    for rows in row_blocks(dst.shape):
        part = dst[rows]
        at = slice(lo + rows.start, lo + rows.start + part.shape[0])
        if fn is None and dtype == "BF16":
            bf16_slice(raw.read_into(at, part), part, tally)
        else:
            round_slice(apply(fn, decode_slice(raw[at], dtype)), part, tally)


def row_blocks(shape: tuple[int, ...]) -> Iterator[slice]:
    """Leading-axis slices of about `SLICE` values each (at least one row): how stored tensors are decoded."""
    step = max(1, SLICE // max(1, int(np.prod(shape[1:], dtype=np.int64))))
    return (slice(lo, lo + step) for lo in range(0, shape[0], step))


def read_tensor(ckpt: Checkpoint, name: str, stored: Stored, fn: Transform | None = None,
                allow_nonfinite: bool = False, warn=print) -> np.ndarray:
    """One stored tensor as float32: FP8 dequantized by its block scales, `fn` applied, finite."""
    full = stored.prefix + name
    if name in stored.packed:
        return finite(full, apply(fn, stored.int4.dequantize(ckpt, stored.packed[name])), allow_nonfinite, warn)
    w = np.asarray(ckpt.get(full), dtype=np.float32)
    if name in stored.scaled:
        w = dequantize_blocks(w, ckpt.get(full + SCALE_SUFFIX), stored.scheme.block, full)
    return finite(full, apply(fn, w), allow_nonfinite, warn)


def _index(src: Part) -> slice | tuple[slice, ...]:
    """The part's index into its fused tensor: rows, or `[:, ..., lo:hi]` (StoredRows narrows trailing axes)."""
    return slice(src.lo, src.hi) if src.axis == 0 else (slice(None),) * src.axis + (slice(src.lo, src.hi),)


def part_name(src: Part, prefix: str, role: str) -> str:
    """How messages name a part: `mtp.x.gate_up_proj[:, 32:64] (read as mtp.x.up_proj.weight)`."""
    return f"{prefix}{src.name}[{':, ' * src.axis}{src.lo}:{src.hi}] (read as {prefix}{role})"


def read_part(ckpt: Checkpoint, src: Part, stored: Stored, t: Tensor, allow_nonfinite: bool,
              warn) -> np.ndarray:
    """A part of a fused tensor as float32, decoding only its own rows (the other part is not read); FP8 is
    dequantized whole first, as its scale blocks may straddle the cut. NaN/Inf are reported against the part, as
    each part is read and checked on its own."""
    if src.name in stored.scaled:
        whole = read_tensor(ckpt, src.name, stored, None, True, lambda _: None)
        part = np.ascontiguousarray(whole[_index(src)])
    else:
        raw, dtype = ckpt.raw(stored.prefix + src.name)
        view = raw[_index(src)]
        part = np.empty(view.shape, np.float32)
        for rows in row_blocks(view.shape):
            part[rows] = decode_slice(view[rows], dtype)
    return finite(part_name(src, stored.prefix, t.role), apply(t.transform, part), allow_nonfinite, warn)


def reader(ckpt: Checkpoint, t: Tensor, src: Source, stored: Stored, allow_nonfinite: bool,
           warn) -> Callable[[], np.ndarray]:
    """The float32 reader of one role."""
    def read(name: str) -> np.ndarray:
        return read_tensor(ckpt, name, stored, t.transform, allow_nonfinite, warn)
    if t.integer:
        return lambda: np.asarray(ckpt.get(stored.prefix + src.name), dtype=np.int64)
    if isinstance(src, Whole):
        return lambda: read(src.name)
    if isinstance(src, Part):
        return lambda: read_part(ckpt, src, stored, t, allow_nonfinite, warn)

    def stacked() -> np.ndarray:
        out = np.empty(t.shape, np.float32)
        for i in range(src.count):
            out[i] = read(src.name(i))
        return out
    return stacked


def half_reader(ckpt: Checkpoint, t: Tensor, src: Source, stored: Stored) -> Callable[[], np.ndarray | None]:
    """The float16 reader of one role: decoded slice by slice (an expert at a time) into its final array, or None
    when the float32 path must decide (FP8, or values openvino would keep f32)."""
    p = stored.prefix

    def make() -> np.ndarray | None:
        if t.integer:
            return None
        out, tally = np.empty(t.shape, np.float16), Tally()
        if isinstance(src, Stack):
            for i in range(src.count):
                name = src.name(i)
                if name in stored.scaled:
                    quiet = read_tensor(ckpt, name, stored, t.transform, True, lambda _: None)
                    round_slice(quiet, out[i], tally)
                else:
                    round_rows(ckpt, p + name, out[i], tally, t.transform)
                if tally.veto or tally.beyond or tally.nonfinite:
                    return None  # the f32 path reads it again and reports
            return out if tally.fits else None
        if src.name in stored.scaled:
            return None
        select = (lambda raw: raw[_index(src)]) if isinstance(src, Part) else (lambda raw: raw)
        round_rows(ckpt, p + src.name, out, tally, t.transform, select)
        return out if tally.fits else None
    return make


BLOCK = 1 << 21  # values per block of a streamed f16 matrix: 4 MiB, one piece of the .bin's write and hash


def streamable(t: Tensor, src: Source, stored: Stored) -> bool:
    """A role a build can stream block by block: a float matrix stored whole, as part of a fused tensor, or one
    tensor per expert, none of it FP8 (block scales may straddle a block: read whole, then dequantized)."""
    if t.integer:
        return False
    names = [src.name(i) for i in range(src.count)] if isinstance(src, Stack) else [src.name]
    return not any(n in stored.scaled for n in names)


def stored_names(src: Source, prefix: str) -> list[str]:
    """The full names of the stored tensors a role is read from."""
    return [prefix + (src.name(i) if isinstance(src, Stack) else src.name)
            for i in range(src.count if isinstance(src, Stack) else 1)]


def stored_rows(ckpt: Checkpoint, src: Whole | Part, prefix: str):
    """(rows, dtype): rows(lo, hi) reads rows lo..hi of the role (a Whole's tensor or a Part's slice of its fused
    tensor, only those bytes) as a new block in the storage dtype."""
    raw, dtype = ckpt.raw(prefix + src.name)
    if isinstance(src, Whole):
        return (lambda lo, hi: raw[lo:hi]), dtype
    if src.axis == 0:
        return (lambda lo, hi: raw[src.lo + lo:src.lo + hi]), dtype
    view = raw[_index(src)]  # StoredRows narrowed: each block read later reads only the part's bytes of its rows
    return (lambda lo, hi: view[lo:hi]), dtype


def half_row_reader(ckpt: Checkpoint, t: Tensor, src: Source,
                    stored: Stored) -> Callable[[], Iterator[np.ndarray]] | None:
    """The float16 blocks of rows (about BLOCK values each, at least one row: an expert of a stack) of one role,
    decoded slice by slice as half_reader decodes it (the same bits, the same tally); once the values seen say the
    f16 build keeps the tensor f32 (half_reader's None: Tally.fits), NotHalf is raised instead of the next block or
    after the last. None where row_reader gives none (integer tables, FP8)."""
    if not streamable(t, src, stored):
        return None
    p, names = stored.prefix, stored_names(src, stored.prefix)

    def blocks() -> Iterator[np.ndarray]:
        fill, tally = half_filler(ckpt, t, src, p), Tally()
        shape = t.shape
        step = max(1, BLOCK // max(1, int(np.prod(shape[1:], dtype=np.int64))))
        for lo in range(0, shape[0], step):
            out = np.empty((min(step, shape[0] - lo), *shape[1:]), np.float16)
            fill(lo, out, tally)
            if tally.veto or tally.beyond or tally.nonfinite:
                raise NotHalf(names[0])
            if lo + step >= shape[0]:  # the last block: every shard as opened, the build's reads long before included
                for name in dict.fromkeys(names):
                    ckpt.check_unchanged(name)
            yield out
        if not tally.fits:
            raise NotHalf(names[0])
    return blocks


def half_filler(ckpt: Checkpoint, t: Tensor, src: Source, p: str) -> Callable[[int, np.ndarray, Tally], None]:
    """fill(lo, out, tally): the role's rows lo.. decoded into out (float16, as many rows) as half_reader decodes
    them; a whole tensor's bf16 is read into out itself (round_block)."""
    fn = t.transform
    if isinstance(src, Stack):
        def stack(lo: int, out: np.ndarray, tally: Tally) -> None:
            for k in range(out.shape[0]):
                round_rows(ckpt, p + src.name(lo + k), out[k], tally, fn)
        return stack
    if isinstance(src, Whole) or src.axis <= 1:  # a whole tensor, or a part whose rows are contiguous per leading row
        raw, dtype = ckpt.raw(p + src.name)
        if isinstance(src, Part):
            view, first = (raw, src.lo) if src.axis == 0 else (raw[_index(src)], 0)
        else:
            view, first = raw, 0
        return lambda lo, out, tally: round_block(view, dtype, first + lo, out, tally, fn)
    rows_of, dtype = stored_rows(ckpt, src, p)

    def part(lo: int, out: np.ndarray, tally: Tally) -> None:
        for rows in row_blocks(out.shape):
            dst = out[rows]
            block = rows_of(lo + rows.start, lo + rows.start + dst.shape[0])
            if fn is None and dtype == "BF16":
                bf16_slice(block, dst, tally)
            else:
                round_slice(apply(fn, decode_slice(block, dtype)), dst, tally)
    return part


def row_reader(ckpt: Checkpoint, t: Tensor, src: Source, stored: Stored, allow_nonfinite: bool,
               warn) -> Callable[[], Iterator[np.ndarray]] | None:
    """The float32 blocks of rows of one role, `fn` applied per block as the f16 path applies it, judged by `finite`
    as the whole-tensor reader judges it (a stored tensor or a part once its last block is read, named as `reader`
    names it; a stack's each expert as it is read); None for integer tables and FP8 (read whole)."""
    if not streamable(t, src, stored):
        return None
    p, names = stored.prefix, stored_names(src, stored.prefix)
    if isinstance(src, Stack):
        def experts() -> Iterator[np.ndarray]:
            for i in range(src.count):
                block = read_tensor(ckpt, src.name(i), stored, t.transform, allow_nonfinite, warn)[None]
                if i == src.count - 1:
                    for name in dict.fromkeys(names):
                        ckpt.check_unchanged(name)  # read long after the build's reads (half_row_reader)
                yield block
        return experts
    label = names[0] if isinstance(src, Whole) else part_name(src, p, t.role)

    def blocks() -> Iterator[np.ndarray]:
        rows_of, dtype = stored_rows(ckpt, src, p)
        seen = Extremes()
        for rows in row_blocks(t.shape):
            block = apply(t.transform, decode_slice(rows_of(rows.start, rows.stop), dtype))
            seen.add(block)
            if rows.stop >= t.shape[0]:
                ckpt.check_unchanged(names[0])  # read long after the build's reads (half_row_reader)
            yield block
        judge(label, seen, allow_nonfinite, warn)
    return blocks


def check_tied(ckpt: Checkpoint, table: Table, stored: Stored, expected: dict) -> list[str]:
    """The stored copies of a tied tensor (Table.tied), each proven to hold exactly the bytes of the tensor the table
    reads in its place; returns their names. A copy that differs is refused: the head would silently use one of two
    different matrices."""
    copies = sorted(n for n in stored.names if n in table.tied and n not in expected)
    p = table.prefix
    for name in copies:
        other = table.tied[name]
        if other not in stored.names or not _same_bytes(ckpt, p + name, p + other):
            raise CheckpointError(f"{ckpt.root}: tensor {p}{name} differs from {p}{other}, which {table.tied_because} "
                                  f"makes it equal to; expected one of them, or equal bytes")
    return copies


def _same_bytes(ckpt: Checkpoint, a: str, b: str) -> bool:
    """Both tensors stored with the same dtype, shape and bytes (compared in blocks of rows: nothing decoded); an
    int4 packed module has no such tensor, and is never proven equal."""
    if a not in ckpt.shard_of or b not in ckpt.shard_of:
        return False
    (ra, da), (rb, db) = ckpt.raw(a), ckpt.raw(b)
    if da != db or ra.shape != rb.shape or not ra.shape:
        return False
    return all(ra[rows].tobytes() == rb[rows].tobytes() for rows in row_blocks(ra.shape))


def resolve(ckpt: Checkpoint, table: Table) -> tuple[Stored, str | None, dict[str, tuple[int, ...]]]:
    """What the checkpoint stores under the table's prefix, the one layout it is in, and the stored names (relative
    to the prefix, with shapes) a build of that layout reads."""
    stored = inspect_stored(ckpt, table.prefix)
    layout = choose_layout(table, stored.names, ckpt.root)
    return stored, layout, table.stored(layout)


def read_names(ckpt: Checkpoint, table: Table) -> list[str]:
    """The full names of the stored tensors a build of the table reads (FP8 scales and packed int4 tensors
    included)."""
    stored, _, expected = resolve(ckpt, table)
    return [full for n in sorted(expected) if n in stored.names for full in stored.stored_of(n)]


def load_weights(ckpt: Checkpoint, table: Table, declared: str | None = None, allow_nonfinite: bool = False,
                 warn=print) -> LazyWeights:
    """Check the tensor set (one layout), shapes and dtypes now; decode each role when it is read."""
    stored, layout, expected = resolve(ckpt, table)
    copies = check_tied(ckpt, table, stored, expected)
    ignored = sorted(n for n in stored.names if n in table.ignored and n not in expected)
    for note in dict.fromkeys(table.ignored[n] for n in ignored if table.ignored[n]):
        names = ", ".join(table.prefix + n for n in ignored if table.ignored[n] == note)
        warn(f"note: {ckpt.root}: {names} not read ({note})")
    check_tensor_set(ckpt, expected, stored.names - set(ignored) - set(copies), table.prefix,
                     f"{layout} layout" if layout else "", stored.packed)
    check_dtypes(ckpt, expected, stored, declared, table.source, warn,
                 frozenset(t.role for t in table.tensors if t.integer))
    sources = {t.role: (t, t.source(layout)) for t in table.tensors}
    readers = {role: reader(ckpt, t, src, stored, allow_nonfinite, warn) for role, (t, src) in sources.items()}
    halves = {role: half_reader(ckpt, t, src, stored) for role, (t, src) in sources.items()}
    streams = {role: row_reader(ckpt, t, src, stored, allow_nonfinite, warn) for role, (t, src) in sources.items()}
    half_streams = {role: half_row_reader(ckpt, t, src, stored) for role, (t, src) in sources.items()}
    weights = LazyWeights(readers, warn, halves, table, streams, half_streams)
    weights.source_format = stored.source_format(declared)
    if stored.packed:
        warn(f"note: {ckpt.root}: {len(stored.packed)} {table.prefix}* matrices unpacked from "
             f"{weights.source_format}")
    return weights
