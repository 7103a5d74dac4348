"""FP8 block-scaled weights (transformers' "finegrained FP8" layout), for the dense and the MoE head alike.

A weight W [..., O, I] is stored as `float8_e4m3fn` codes plus a companion `<name>_scale_inv` (BF16 or F32) holding
one scale per b0 x b1 block, `quantization_config.weight_block_size = [b0, b1]` (128 x 128 when absent):

    W[..., i, j] = fp8(W)[..., i, j] * scale_inv[..., i // b0, j // b1]       scale_inv [..., ceil(O/b0), ceil(I/b1)]

Edge blocks may be partial (O or I not a multiple of the block): the scale grid is ceil-divided as transformers
5.23.0's `FP8Linear` allocates it (integrations/finegrained_fp8.py; its CPU `Fp8Dequantize` path instead derives the
block from the grid and rejects such shapes). `weight_block_size: null` means one scale per matrix (FP8Linear's scalar
`weight_scale_inv`). Tensors a release keeps in BF16 (fc, norms, router and gates) carry no scale and are read as
they are. With `activation_scheme: static` each FP8 linear also stores an `activation_scale`, which only quantizes
its input at run time; dequantizing drops it, as transformers' `Fp8Dequantize` does ("consumed by the dequant").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from irsurgeon.core.errors import CheckpointError

FP8_DTYPE = "F8_E4M3"
SCALE_SUFFIX = "_scale_inv"
ACTIVATION_SCALE = ".activation_scale"
SCALE_DTYPES = ("BF16", "F16", "F32")
DEFAULT_BLOCK = (128, 128)  # transformers 5.23.0 FineGrainedFP8Config: weight_block_size defaults to (128, 128)


@dataclass(frozen=True)
class FP8Scheme:
    """What quantization_config says about FP8 weights: block size (None: per tensor) and modules kept unconverted."""

    block: tuple[int, int] | None = DEFAULT_BLOCK
    not_convert: tuple[str, ...] = ()


def parse_scheme(qc: dict, source: object) -> FP8Scheme:
    """The FP8 scheme of a `quant_method: fp8` quantization_config; variants this loader does not decode are errors."""
    where = f"{source}: quantization_config"
    fmt, scale_fmt = qc.get("fmt", "e4m3"), qc.get("scale_fmt", "float")
    if fmt != "e4m3" or scale_fmt != "float" or qc.get("expert_dtype", "fp8") != "fp8":
        raise CheckpointError(f"{where}: FP8 with fmt {fmt!r}, scale_fmt {scale_fmt!r}, expert_dtype "
                              f"{qc.get('expert_dtype', 'fp8')!r}; supported: fmt 'e4m3' with float block scales")
    block = qc.get("weight_block_size", list(DEFAULT_BLOCK))
    if block is not None and not (isinstance(block, (list, tuple)) and len(block) == 2 and all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise CheckpointError(f"{where}.weight_block_size must be two positive integers or null, found {block!r}")
    skip = qc.get("modules_to_not_convert") or []
    if not (isinstance(skip, list) and all(isinstance(s, str) for s in skip)):
        raise CheckpointError(f"{where}.modules_to_not_convert must be a list of module names, found {skip!r}")
    return FP8Scheme(tuple(block) if block is not None else None, tuple(skip))


def unconverted_by(module: str, patterns: tuple[str, ...]) -> str | None:
    """The modules_to_not_convert entry that keeps `module` unquantized, if any.

    transformers 5.23.0 quantizers/quantizers_utils.py `should_convert_module`: an entry matches a module name as a
    regex from the start up to a module boundary ("layer.1" matches "layer.1.attn", not "layer.11.attn"), or as a
    suffix ("fc1" matches "model.decoder.layers.23.fc1").
    """
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    for key in patterns:
        try:
            if re.match(rf"(?:{key}){boundary}", module) or module.endswith(key):
                return key
        except re.error:
            if module.endswith(key):
                return key
    return None


def split_scales(names: set[str], dtype_of: Callable[[str], str], scheme: FP8Scheme) -> tuple[set[str], set[str]]:
    """(weight names, names carrying an FP8 scale): every FP8 tensor needs its scale, every scale its FP8 tensor;
    activation scales are dropped."""
    scales = {n for n in names if n.endswith(SCALE_SUFFIX)}
    activations = {n for n in names if n.endswith(ACTIVATION_SCALE)}
    weights = names - scales - activations
    for a in sorted(activations):
        base = a[: -len(ACTIVATION_SCALE)] + ".weight"
        if base + SCALE_SUFFIX not in scales:
            raise CheckpointError(f"tensor {a}: activation scale without a block-scaled {FP8_DTYPE} {base}")
    for s in sorted(scales):
        check_pair(s[: -len(SCALE_SUFFIX)], weights, dtype_of, scheme)
    for w in sorted(weights):
        if dtype_of(w) == FP8_DTYPE and w + SCALE_SUFFIX not in scales:
            raise CheckpointError(f"tensor {w}: stored as {FP8_DTYPE} but {w}{SCALE_SUFFIX} (its block scales) "
                                  f"is missing")
    return weights, {s[: -len(SCALE_SUFFIX)] for s in scales}


def check_pair(base: str, weights: set[str], dtype_of: Callable[[str], str], scheme: FP8Scheme) -> None:
    """A scale needs an FP8 weight, a float dtype, and a module quantization_config lets be quantized.

    Honouring modules_to_not_convert: transformers 5.23.0 (integrations/finegrained_fp8.py `replace_with_fp8_linear`)
    leaves a listed module a plain nn.Linear, which would load FP8 codes without their scale; so a listed module must
    be stored unquantized, and one stored as FP8 is refused rather than silently scaled.
    """
    scale = base + SCALE_SUFFIX
    if base not in weights or dtype_of(base) != FP8_DTYPE:
        raise CheckpointError(f"tensor {scale}: block scale without a {FP8_DTYPE} tensor {base} to scale")
    if dtype_of(scale) not in SCALE_DTYPES:
        raise CheckpointError(f"tensor {scale}: scales stored as {dtype_of(scale)}; expected one of "
                              f"{', '.join(SCALE_DTYPES)}")
    listed = unconverted_by(base.rpartition(".")[0], scheme.not_convert)
    if listed is not None:
        raise CheckpointError(f"tensor {base}: stored as {FP8_DTYPE}, but quantization_config."
                              f"modules_to_not_convert lists {listed!r} (that module must be unquantized)")


def scale_shape(shape: tuple[int, ...], block: tuple[int, int] | None) -> tuple[int, ...]:
    """The scale_inv shape a weight of `shape` needs: one per block, ceil-divided (partial edge blocks)."""
    *lead, rows, cols = shape
    b0, b1 = block or (rows, cols)
    return (*lead, -(-rows // max(b0, 1)), -(-cols // max(b1, 1)))


def check_scale(name: str, shape: tuple[int, ...], found: tuple[int, ...], block: tuple[int, int] | None) -> None:
    """A scale tensor of the wrong shape for its weight names both, and the block size."""
    want = scale_shape(shape, block)
    per_tensor = block is None and int(np.prod(found, dtype=np.int64)) == int(np.prod(want, dtype=np.int64))
    if len(shape) < 2 or (tuple(found) != want and not per_tensor):
        blocks = f"{block[0]}x{block[1]} blocks" if block else "one scale per matrix"
        raise CheckpointError(f"tensor {name}{SCALE_SUFFIX}: expected shape {list(want)} for {list(shape)} in "
                              f"{blocks}, found {list(found)}")


def dequantize_blocks(values: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int] | None,
                      name: str) -> np.ndarray:
    """values [..., O, I] * scale_inv per block, in place on a float32 `values` (no weight-sized temporary).

    As transformers 5.23.0 integrations/finegrained_fp8.py `_dequantize_fp8_weight` does it: expand the scales over
    rows only (a [..., O, ceil(I / b1)] array), then scale each column block of the weight in place.
    """
    check_scale(name, values.shape, scale_inv.shape, block)
    rows, cols = values.shape[-2:]
    b0, b1 = block or (rows, cols)
    if values.dtype != np.float32 or not values.flags.writeable:
        values = np.array(values, dtype=np.float32)
    scale = np.asarray(scale_inv, np.float32).reshape(scale_shape(values.shape, block))
    scale = np.repeat(scale, b0, axis=-2)[..., :rows, :]  # [..., O, ceil(I / b1)]
    for j in range(scale.shape[-1]):
        values[..., j * b1:(j + 1) * b1] *= scale[..., j:j + 1]
    return values
