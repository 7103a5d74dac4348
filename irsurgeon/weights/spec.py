"""Which `mtp.*` tensors a head needs, their shapes from the config, and the arithmetic applied on load.

Names are the checkpoint's own, relative to `MTP_PREFIX`; the graph's friendly names are the same paths, so this
table is the only place a checkpoint name is spelled. The one transform: Qwen3.5 RMSNorm weights are stored
zero-centred, so every norm gain becomes `1 + w` (done here once, never in the graph).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Iterator

import numpy as np

from irsurgeon.config import MTPConfig
from irsurgeon.errors import CheckpointError
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.safetensors_io import FLOAT_DTYPES

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
    """Missing, extra, mis-shaped and non-float `mtp.*` tensors are errors naming the tensor and both shapes.

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
        if info.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"tensor {MTP_PREFIX}{name}: expected a floating-point dtype, found {info.dtype}")


# config.json dtype -> the safetensors dtype a checkpoint that declares it stores
DECLARED = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float64": "F64"}


def check_dtype(ckpt: Checkpoint, name: str, cfg: MTPConfig) -> None:
    """A tensor must be stored in the dtype config.json declares (quantized releases excepted)."""
    stored = ckpt.info(name).dtype
    want = DECLARED.get(cfg.dtype or "")
    if want and stored != want and not cfg.quantized:
        raise CheckpointError(f"tensor {name}: stored as {stored}, but {cfg.source} declares dtype {cfg.dtype} "
                              f"({want})")


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
    """name -> float32 array, decoded from the (memory-mapped) checkpoint each time it is asked for.

    The graph turns each weight into a constant as it goes, so at most one float32 tensor is alive at a time
    besides what the model keeps; the checkpoint must stay open until the model is built.
    """

    def __init__(self, readers: dict[str, Callable[[], np.ndarray]]):
        self.readers = readers

    def __getitem__(self, name: str) -> np.ndarray:
        return self.readers[name]()

    def __iter__(self) -> Iterator[str]:
        return iter(self.readers)

    def __len__(self) -> int:
        return len(self.readers)


def load_weights(ckpt: Checkpoint, expected: dict[str, tuple[int, ...]], cfg: MTPConfig,
                 allow_nonfinite: bool = False, warn=print) -> LazyWeights:
    """Check the tensor set and dtypes now; decode each tensor (float32, transforms applied, finite) when read."""
    check_tensor_set(ckpt, expected)
    for name in expected:
        check_dtype(ckpt, MTP_PREFIX + name, cfg)

    def reader(name: str) -> Callable[[], np.ndarray]:
        return lambda: finite(MTP_PREFIX + name, transform(name, np.asarray(ckpt.get(MTP_PREFIX + name), np.float32)),
                              allow_nonfinite, warn)
    return LazyWeights({name: reader(name) for name in expected})
