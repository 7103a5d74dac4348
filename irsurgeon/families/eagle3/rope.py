"""The RoPE an EAGLE-3 draft layer's config names: default, or llama3 (the Llama 3.1 drafts').

transformers 5.2.0 modeling_rope_utils.py: _compute_default_rope_parameters (inv_freq = 1 / theta^(2i/D)) and
_compute_llama3_parameters (wavelengths above original/low_freq_factor divided by factor, below
original/high_freq_factor kept, smoothly mixed between; attention factor 1). rope_scaling, when set, replaces
rope_parameters; its type is `rope_type`, else `type`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import MISSING, ROPE_THETA, Range, lookup
from irsurgeon.core.errors import ConfigError
from irsurgeon.ops.core import const, named

TYPES = ("default", "llama3")


@dataclass(frozen=True)
class Rope:
    kind: str
    theta: float
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original: int = 8192


def read(section: dict, theta: float, max_positions: int, source: str) -> Rope:
    """The layer's RoPE (rope_scaling, else rope_parameters), each value checked before it is computed with."""
    home = "rope_scaling" if section.get("rope_scaling") else "rope_parameters"
    r = lookup(section, home)
    if r in (MISSING, None):
        return Rope("default", theta)
    if not isinstance(r, dict):
        raise ConfigError(f"{source}: {home} must be a JSON object, found {type(r).__name__}")
    kind = r.get("rope_type", r.get("type", "default"))
    if kind not in TYPES:
        raise ConfigError(f"{source}: {home}.rope_type {kind!r:.40} is not one of {', '.join(TYPES)}")
    theta = number(r, "rope_theta", theta, home, source, ROPE_THETA)
    if kind == "default":
        return Rope(kind, theta)
    factor = number(r, "factor", None, home, source, Range(1, 1e12))
    low = number(r, "low_freq_factor", None, home, source, Range(0, 1e12, lo_open=True))
    high = number(r, "high_freq_factor", None, home, source, Range(low, 1e12, lo_open=True))  # llama3 divides by
    original = number(r, "original_max_position_embeddings", None, home, source, Range(1, 1e12))  # their difference
    return Rope(kind, theta, factor, low, high, int(original))


def number(r: dict, key: str, default, home: str, source: str, bounds: Range) -> float:
    value = r.get(key, default)
    if value is None:
        raise ConfigError(f"{source}: {home}.{key} is required for its rope_type")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in bounds:
        raise ConfigError(f"{source}: {home}.{key} must be a number in {bounds}, found {value!r:.40}")
    return float(value)


def inv_freq(rope: Rope, head_dim: int) -> np.ndarray:
    freq = 1.0 / rope.theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if rope.kind == "llama3":
        low_wavelen, high_wavelen = rope.original / rope.low_freq_factor, rope.original / rope.high_freq_factor
        wavelen = 2 * math.pi / freq
        scaled = np.where(wavelen > low_wavelen, freq / rope.factor, freq)
        smooth = (rope.original / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
        smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        freq = np.where(medium, smoothed, scaled)
    return freq.astype(np.float32)


def cos_sin(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> tuple[ov.Output, ov.Output]:
    """cos and sin tables [B, 1, S, D] for int64 position_ids [B, S] (rotate_half layout: the angles twice)."""
    pos = ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), const([-1], np.int64))  # [B, S, 1]
    ang = named(ops.multiply(pos, const(inv_freq(rope, head_dim), name=f"{name}.inv_freq")), f"{name}/angles")
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], np.int64))
    return named(ops.cos(emb), f"{name}/cos"), named(ops.sin(emb), f"{name}/sin")
