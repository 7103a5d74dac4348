"""Which `mtp.*` tensors a head needs, their shapes from the config, and the arithmetic applied on load.

Names are the checkpoint's own, relative to `MTP_PREFIX`; the graph's friendly names are the same paths, so this
table is the only place a checkpoint name is spelled. The one transform: Qwen3.5 RMSNorm weights are stored
zero-centred, so every norm gain becomes `1 + w` (done here once, never in the graph).

Any float storage dtype is read as stored (transformers loads a tensor whatever float dtype it has, casting it to the
model's), FP8 through its block scales (`fp8.py`); what cannot hold a weight (integers, bool, other quantized
layouts, `quant.py`) is refused by name.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from irsurgeon.config import MTPConfig
from irsurgeon.errors import CheckpointError
from irsurgeon.weights.half import SLICE, Tally, round_slice
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.fp8 import SCALE_SUFFIX, FP8Scheme, check_scale, dequantize_blocks, split_scales
from irsurgeon.weights.quant import SUPPORTED, fp8_scheme
from irsurgeon.weights.safetensors_io import bf16_to_f32

MTP_PREFIX = "mtp."
LAYER = "layers.0."


def dense_shapes(cfg: MTPConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the dense head with its expected shape."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    return {
        **_common_shapes(cfg),
        f"{LAYER}mlp.gate_proj.weight": (I, H),
        f"{LAYER}mlp.up_proj.weight": (I, H),
        f"{LAYER}mlp.down_proj.weight": (H, I),
    }


def _common_shapes(cfg: MTPConfig) -> dict[str, tuple[int, ...]]:
    H, nH, nKV, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    return {
        "fc.weight": (H, 2 * H),
        "pre_fc_norm_embedding.weight": (H,),
        "pre_fc_norm_hidden.weight": (H,),
        "norm.weight": (H,),
        f"{LAYER}input_layernorm.weight": (H,),
        f"{LAYER}post_attention_layernorm.weight": (H,),
        f"{LAYER}self_attn.q_proj.weight": (2 * nH * hd, H),
        f"{LAYER}self_attn.k_proj.weight": (nKV * hd, H),
        f"{LAYER}self_attn.v_proj.weight": (nKV * hd, H),
        f"{LAYER}self_attn.o_proj.weight": (H, nH * hd),
        f"{LAYER}self_attn.q_norm.weight": (hd,),
        f"{LAYER}self_attn.k_norm.weight": (hd,),
    }


def is_norm(name: str) -> bool:
    """RMSNorm gains: `norm`, `q_norm`, `input_layernorm`, `pre_fc_norm_hidden`, ... (module name holds 'norm')."""
    module, _, leaf = name.rpartition(".")
    return leaf == "weight" and "norm" in module.rpartition(".")[2]


TRANSFORMS: list[tuple[Callable[[str], bool], Callable[[np.ndarray], np.ndarray]]] = [
    (is_norm, lambda w: 1.0 + w),  # zero-centred RMSNorm: x_hat * (1 + w)
]


def check_tensor_set(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]], present: set[str] | None = None,
                     context: str = "") -> None:
    """Missing, extra and mis-shaped `mtp.*` tensors are errors naming the tensor and both shapes.

    present: the stored names (relative to `mtp.`) to check, by default all of them; context: a note for messages.
    """
    if present is None:
        present = {n[len(MTP_PREFIX):] for n in ckpt.names(MTP_PREFIX)}
    if not present:
        raise CheckpointError(f"{ckpt.root}: no '{MTP_PREFIX}*' tensors: this checkpoint carries no MTP head")
    note = f", {context}" if context else ""
    missing = sorted(set(expected) - present)
    if missing:
        raise CheckpointError(f"{ckpt.root}: missing MTP tensor {MTP_PREFIX}{missing[0]} "
                              f"(expected shape {list(expected[missing[0]])}{note})"
                              + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    extra = sorted(present - set(expected))
    if extra:
        raise CheckpointError(f"{ckpt.root}: unexpected MTP tensor {MTP_PREFIX}{extra[0]} not used by a "
                              f"one-layer head of this config{note}"
                              + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        info = ckpt.info(MTP_PREFIX + name)
        if info.shape != shape:
            raise CheckpointError(f"tensor {MTP_PREFIX}{name}: expected shape {list(shape)} from the config, "
                                  f"found {list(info.shape)} in {ckpt.shard_of[MTP_PREFIX + name].name}")


# config.json dtype -> the safetensors dtype a checkpoint that declares it stores
DECLARED = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64"}
WEIGHT_DTYPES = ("F64", "F32", "F16", "BF16")  # read as stored; F8_E4M3 only with its block scales


@dataclass(frozen=True)
class Stored:
    """What a checkpoint's `mtp.*` tensors are: weight names (relative to `mtp.`, scales split off), which of them
    are FP8 with block scales, and the FP8 scheme of its quantization_config."""

    names: set[str]
    scaled: set[str]
    scheme: FP8Scheme


def inspect_stored(ckpt: Checkpoint) -> Stored:
    """Refuse foreign quantized layouts, pair FP8 tensors with their scales and check the scales' shapes."""
    full = ckpt.names(MTP_PREFIX)
    if not full:
        raise CheckpointError(f"{ckpt.root}: no '{MTP_PREFIX}*' tensors: this checkpoint carries no MTP head")
    scheme = fp8_scheme(ckpt, full)
    weights, scaled = split_scales(set(full), lambda n: ckpt.info(n).dtype, scheme)
    for name in sorted(scaled):
        check_scale(name, ckpt.info(name).shape, ckpt.info(name + SCALE_SUFFIX).shape, scheme.block)
    cut = len(MTP_PREFIX)
    return Stored({n[cut:] for n in weights}, {n[cut:] for n in scaled}, scheme)


def check_dtypes(ckpt: Checkpoint, names, stored: Stored, cfg: MTPConfig, warn) -> None:
    """Every tensor must hold floats; one stored in another float dtype than config.json's is noted, not refused."""
    want = DECLARED.get(cfg.dtype or "")
    other: dict[str, list[str]] = {}
    for name in sorted(names):
        if name in stored.scaled:
            continue
        dtype = ckpt.info(MTP_PREFIX + name).dtype
        if dtype not in WEIGHT_DTYPES:
            raise CheckpointError(f"tensor {MTP_PREFIX}{name}: stored as {dtype}, which cannot hold a float weight; "
                                  f"{SUPPORTED}")
        if want and dtype != want:
            other.setdefault(dtype, []).append(MTP_PREFIX + name)
    for dtype, found in sorted(other.items()):
        more = f" and {len(found) - 1} more" if len(found) > 1 else ""
        warn(f"note: {found[0]}{more} stored as {dtype}, not the {cfg.dtype} {cfg.source} declares; read as stored")


def finite(name: str, w: np.ndarray, allow_nonfinite: bool, warn) -> np.ndarray:
    """Refuse NaN/Inf weights, or (allowed) report them and go on."""
    if not np.isfinite(w).all():
        bad = int(w.size - np.isfinite(w).sum())
        message = f"tensor {name}: holds {bad} NaN or Inf values"
        if not allow_nonfinite:
            raise CheckpointError(message + " (pass --allow-nonfinite to build anyway)")
        warn("warning: " + message)
    return w


def transform(name: str, w: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are reported by `finite`, not as numpy warnings
        for matches, fn in TRANSFORMS:
            if matches(name):
                w = fn(w)
    return w


class LazyWeights(Mapping):
    """name -> float32 array, decoded from the checkpoint (read with pread) each time it is asked for.

    `half(name)` gives the f16 build its tensor as float16 decoded slice by slice (no float32 copy of the tensor),
    or None when the tensor must take the float32 path (FP8 block scales, or values openvino's compression would
    keep f32: weights/half.py). The graph turns each weight into a constant as it goes, so besides what the model keeps
    at most one tensor being decoded is alive; the checkpoint must stay open until the model is built.
    """

    def __init__(self, readers: dict[str, Callable[[], np.ndarray]], warn=print,
                 halves: dict[str, Callable[[], np.ndarray | None]] | None = None):
        self.readers = readers
        self.halves = halves or {}
        self.warn = warn  # where loading reports, and building after it (a weight kept f32, ...)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.readers[name]()

    def half(self, name: str) -> np.ndarray | None:
        reader = self.halves.get(name)
        return reader() if reader else None

    def __iter__(self) -> Iterator[str]:
        return iter(self.readers)

    def __len__(self) -> int:
        return len(self.readers)


def decode_slice(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored values (a block of rows read from the file) as a new float32 array; FP8 never comes here."""
    return bf16_to_f32(raw) if dtype == "BF16" else np.array(raw, dtype=np.float32)


def round_rows(ckpt: Checkpoint, name: str, dst: np.ndarray, tally: Tally, select=lambda raw: raw) -> None:
    """Decode `select(stored view)` into dst (float16, same shape) a few leading-axis rows at a time (one slice of
    about `SLICE` values, or one expert), transforms applied."""
    raw, dtype = ckpt.raw(MTP_PREFIX + name)
    src = select(raw)
    step = max(1, SLICE // max(1, int(np.prod(src.shape[1:], dtype=np.int64))))
    for lo in range(0, src.shape[0], step):
        part = transform(name, decode_slice(src[lo:lo + step], dtype))
        round_slice(part, dst[lo:lo + step], tally)


def read_half(ckpt: Checkpoint, name: str, stored: Stored) -> np.ndarray | None:
    """One tensor as float16 exactly as the f16 build stores it, or None for the float32 path (see LazyWeights)."""
    if name in stored.scaled:
        return None
    out = np.empty(ckpt.info(MTP_PREFIX + name).shape, np.float16)
    tally = Tally()
    round_rows(ckpt, name, out, tally)
    return out if tally.fits else None


def read_tensor(ckpt: Checkpoint, name: str, stored: Stored, allow_nonfinite: bool = False,
                warn=print) -> np.ndarray:
    """One tensor as float32: FP8 dequantized by its block scales, the table's transforms applied, finite."""
    w = np.asarray(ckpt.get(MTP_PREFIX + name), dtype=np.float32)
    if name in stored.scaled:
        scale = ckpt.get(MTP_PREFIX + name + SCALE_SUFFIX)
        w = dequantize_blocks(w, scale, stored.scheme.block, MTP_PREFIX + name)
    return finite(MTP_PREFIX + name, transform(name, w), allow_nonfinite, warn)


def load_weights(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]], cfg: MTPConfig,
                 allow_nonfinite: bool = False, warn=print) -> LazyWeights:
    """Check the tensor set and dtypes now; decode each tensor (float32, transforms applied, finite) when read."""
    stored = inspect_stored(ckpt)
    check_tensor_set(ckpt, expected, stored.names)
    check_dtypes(ckpt, expected, stored, cfg, warn)

    def reader(name: str) -> Callable[[], np.ndarray]:
        return lambda: read_tensor(ckpt, name, stored, allow_nonfinite, warn)

    def half(name: str) -> Callable[[], np.ndarray | None]:
        return lambda: read_half(ckpt, name, stored)
    return LazyWeights({name: reader(name) for name in expected}, warn, {name: half(name) for name in expected})
