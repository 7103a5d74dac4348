"""Checkpoint variants for format tests: the same `mtp.*` tensors re-stored as another float dtype, as FP8
block-scaled copies (the layout of the official FP8 releases), or as header-only files of a foreign quantized layout.

    read_tensors(dir)                     name -> (raw storage array, safetensors dtype), every tensor
    write_variant(src, dst, tensors, qc)  src's config.json (+ quantization_config) and the tensors as one file
    fp8_tensors(tensors, block, scale)    projections -> F8_E4M3 codes + `<name>_scale_inv` (BF16 or F32)
    dequantized(tensors, block)           float64 values a loader must produce (FP8 codes x their block scales)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from irsurgeon.weights.safetensors_io import FP8_E4M3FN, SafetensorsFile, decode, f32_to_bf16, write_safetensors

FP8_MAX = 448.0  # largest finite float8_e4m3fn
# What the official FP8 releases quantize: every attention / MLP / expert projection; fc, norms, router and
# shared-expert gate stay BF16 (see tests/data/reference/real-configs/README.md).
FP8_LEAVES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
              "up_proj.weight", "down_proj.weight", "experts.gate_up_proj", "experts.down_proj")
MLP = "mtp.layers.0.mlp."
NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16}
PER_TENSOR = "per-tensor"  # block argument: one scale per matrix (quantization_config weight_block_size null)


def read_tensors(ckpt_dir: Path) -> dict[str, tuple[np.ndarray, str]]:
    f = SafetensorsFile(ckpt_dir / "model.safetensors")
    out = {n: (np.array(f.raw(n)), f.tensors[n].dtype) for n in f.tensors}
    f.close()
    return out


def write_variant(src: Path, dst: Path, tensors: dict, config_edit=None) -> Path:
    """A checkpoint directory: src's files but model.safetensors, config.json edited by config_edit(config)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors*", "config.json"))
    config = json.loads((src / "config.json").read_text())
    if config_edit:
        config_edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    write_safetensors(dst / "model.safetensors", {n: r for n, (r, _) in tensors.items()},
                      {n: dt for n, (_, dt) in tensors.items()})
    return dst


def stored_as(w: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """float32 values as a tensor stored in dtype (F64 / F32 / F16 / BF16): (raw storage array, dtype)."""
    return (f32_to_bf16(w) if dtype == "BF16" else w.astype(NUMPY[dtype])), dtype


def as_float(tensors: dict, dtype: str, only=lambda name: True) -> dict:
    """Tensors (those `only` selects) re-stored as F64 / F32 / F16 / BF16, values decoded then rounded to that
    dtype."""
    out = dict(tensors)
    for name, (raw, dt) in tensors.items():
        if dt in ("BF16", "F16", "F32") and only(name):
            out[name] = stored_as(decode(raw, dt).astype(np.float32), dtype)
    return out


def encode_e4m3fn(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest finite float8_e4m3fn code, ties to the even code; beyond +-448 saturates."""
    values = FP8_E4M3FN[:0x7F].astype(np.float64)  # codes 0x00 .. 0x7E, increasing
    mag = np.minimum(np.abs(x.astype(np.float64)), FP8_MAX)
    hi = np.clip(np.searchsorted(values, mag), 1, 0x7E)
    below, above = mag - values[hi - 1], values[hi] - mag
    pick_low = (below < above) | ((below == above) & ((hi - 1) % 2 == 0))
    codes = np.where(pick_low, hi - 1, hi)
    return (codes | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def quantize_fp8(w: np.ndarray, block: tuple[int, int], scale_dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes and scale_inv = amax(block) / 448 per block (edge blocks partial), the scale rounded to its storage
    dtype first so that codes x stored scale is what a loader reconstructs."""
    *lead, rows, cols = w.shape
    nr, nc = -(-rows // block[0]), -(-cols // block[1])
    scale = np.empty((*lead, nr, nc), np.float32)
    for i in range(nr):
        for j in range(nc):
            blk = w[..., i * block[0]:(i + 1) * block[0], j * block[1]:(j + 1) * block[1]]
            scale[..., i, j] = np.maximum(np.abs(blk).max(axis=(-2, -1)), 1e-12) / FP8_MAX
    stored = f32_to_bf16(scale) if scale_dtype == "BF16" else scale
    effective = decode(stored, scale_dtype).astype(np.float32)
    full = np.repeat(np.repeat(effective, block[0], -2), block[1], -1)[..., :rows, :cols]
    return encode_e4m3fn(w / full), stored


def fp8_tensors(tensors: dict, block=(128, 128), scale_dtype="BF16") -> dict:
    """The release layout: FP8_LEAVES -> F8_E4M3 + `<name>_scale_inv`; everything else unchanged."""
    out = {}
    for name, (raw, dt) in tensors.items():
        if not (name.startswith("mtp.") and name.endswith(FP8_LEAVES)):
            out[name] = (raw, dt)
            continue
        w = decode(raw, dt).astype(np.float32)
        codes, scale = quantize_fp8(w, w.shape[-2:] if block == PER_TENSOR else block, scale_dtype)
        if block == PER_TENSOR:
            scale = scale.reshape(scale.shape[:-2])  # FP8Linear's per-tensor weight_scale_inv is a scalar
        out[name], out[name + "_scale_inv"] = (codes, "F8_E4M3"), (scale, scale_dtype)
    return out


def fp8_config(block=None, **extra):
    """A config_edit adding the FP8 releases' quantization_config (block None: key absent, so the default;
    PER_TENSOR: null)."""
    def edit(config: dict) -> None:
        qc = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", **extra}
        if block is not None:
            qc["weight_block_size"] = None if block == PER_TENSOR else list(block)
        config["quantization_config"] = qc
    return edit


def dequantized(tensors: dict, block=(128, 128)) -> dict[str, np.ndarray]:
    """float64 `mtp.*` values (names without `mtp.`): FP8 codes times their block scales, expanded with np.repeat."""
    out = {}
    for name, (raw, dt) in tensors.items():
        if not name.startswith("mtp.") or name.endswith("_scale_inv"):
            continue
        w = decode(raw, dt).astype(np.float64)
        if dt == "F8_E4M3":
            s = decode(*tensors[name + "_scale_inv"]).astype(np.float64)
            if block == PER_TENSOR:
                w = w * s[..., None, None]
            else:
                w = w * np.repeat(np.repeat(s, block[0], -2), block[1], -1)[..., :w.shape[-2], :w.shape[-1]]
        out[name[len("mtp."):]] = w
    return out


def split_per_expert(tensors: dict) -> dict:
    """Fused experts.gate_up_proj / down_proj -> experts.<e>.{gate,up,down}_proj.weight, same raw bits."""
    out = {n: t for n, t in tensors.items() if not n.startswith(MLP + "experts.")}
    (gate_up, dt), (down, _) = tensors[MLP + "experts.gate_up_proj"], tensors[MLP + "experts.down_proj"]
    inter = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        out[f"{MLP}experts.{e}.gate_proj.weight"] = (np.ascontiguousarray(gate_up[e, :inter]), dt)
        out[f"{MLP}experts.{e}.up_proj.weight"] = (np.ascontiguousarray(gate_up[e, inter:]), dt)
        out[f"{MLP}experts.{e}.down_proj.weight"] = (np.ascontiguousarray(down[e]), dt)
    return out


def fused_view(w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-expert values (names without `mtp.`) -> the fused names tests/helpers/numpy_mtp.moe reads."""
    p = "layers.0.mlp.experts."
    per_expert = [k for k in w if k.startswith(p) and k[len(p):].split(".")[0].isdigit()]
    if not per_expert:
        return w
    n = 1 + max(int(k[len(p):].split(".")[0]) for k in per_expert)
    out = {k: v for k, v in w.items() if k not in per_expert}
    out[p + "gate_up_proj"] = np.stack([np.concatenate([w[f"{p}{e}.gate_proj.weight"], w[f"{p}{e}.up_proj.weight"]])
                                        for e in range(n)])
    out[p + "down_proj"] = np.stack([w[f"{p}{e}.down_proj.weight"] for e in range(n)])
    return out


def write_header_only(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A valid safetensors file of real-sized tensors (name -> (dtype, shape)) whose data is a sparse hole of zeros:
    enough for a loader that must refuse the layout from its names and dtypes before reading any data."""
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "I64": 8}
    header, offset = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        n = int(np.prod(shape, dtype=np.int64)) * sizes[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + offset)
