"""The numbers of each RoPE type an EAGLE-3 draft layer names, as its trainer computes them (rope.py reads and checks
the values; this module computes with them).

transformers 5.2.0 modeling_rope_utils.py, D = head_dim, theta^(-2j/D) the default inverse frequencies, j < D/2:
    linear    _compute_linear_scaling_rope_parameters: theta^(-2j/D) / factor
    dynamic   _compute_dynamic_ntk_parameters at seq_len: theta' = theta ((factor L / M) - (factor - 1))^(D/(D-2)),
              L = max(seq_len, M), M = max_position_embeddings (the dynamic type's own threshold)
    yarn      _compute_yarn_parameters: a ramp over the correction range [floor(low), ceil(high)] (not rounded when
              truncate is false) of find_correction_dim(beta_fast / beta_slow) at original_max_position_embeddings
              mixes theta^(-2j/D) / factor (ramp 1) and theta^(-2j/D) (ramp 0); cos and sin times attention
    longrope  _compute_longrope_parameters: 1 / (ext_j theta^(2j/D)), ext = long_factor when seq_len >
              original_max_position_embeddings, else short_factor; cos and sin times attention
    llama3    _compute_llama3_parameters (rope.py's docstring)
`dynamic_rope_update` (LlamaRotaryEmbedding.forward's decorator) picks the dynamic and longrope tables per forward
from seq_len = max(position_ids) + 1; so does the graph, from the positions of each call (`dynamic_inv`,
`longrope_inv`). SpecForge's dynamic class computes theta' at L = max(seq_len, M + 20) (`Rope.floor`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.core import const, named

I64 = np.int64


@dataclass(frozen=True)
class Rope:
    kind: str
    theta: float
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original: int = 8192  # original_max_position_embeddings; dynamic: max_position_embeddings, its threshold
    mrope_section: tuple[int, ...] = ()  # kind "mrope": the frequencies of rows T, H, W
    interleaved: bool = True  # kind "mrope": AngelSlim's interleaved rows; False: SpecForge's chunked ones
    attention: float = 1.0  # yarn, longrope: the scale of cos and sin
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0
    truncate: bool = True
    short_factor: tuple[float, ...] = ()  # longrope: D/2 divisors each
    long_factor: tuple[float, ...] = ()
    floor: int = 0  # dynamic: the least length theta' is computed at (transformers: M; SpecForge: M + 20)

    @property
    def per_call(self) -> bool:
        """Whether the table depends on the positions of the call (dynamic_rope_update)."""
        return self.kind in ("dynamic", "longrope")


def default_inv(theta: float, head_dim: int) -> np.ndarray:
    return 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def llama3(rope: Rope, freq: np.ndarray) -> np.ndarray:
    low_wavelen, high_wavelen = rope.original / rope.low_freq_factor, rope.original / rope.high_freq_factor
    wavelen = 2 * math.pi / freq
    scaled = np.where(wavelen > low_wavelen, freq / rope.factor, freq)
    smooth = (rope.original / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """_compute_yarn_parameters' get_mscale (SpecForge's yarn_get_mscale is the same function)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def longrope_attention(factor: float, original: int) -> float:
    """_compute_longrope_parameters' attention factor when the config gives none."""
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def yarn(rope: Rope, freq: np.ndarray, head_dim: int) -> np.ndarray:
    def correction_dim(rotations: float) -> float:  # find_correction_dim
        return head_dim * math.log(rope.original / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # linear_ramp_factor: "Prevent singularity"
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    return freq / rope.factor * ramp + freq * (1 - ramp)


def dynamic_theta(rope: Rope, head_dim: int, length: float) -> float:
    return rope.theta * (rope.factor * length / rope.original - (rope.factor - 1)) ** (head_dim / (head_dim - 2))


def inv_freq(rope: Rope, head_dim: int) -> np.ndarray:
    """[D/2] f32: the table of a call whose positions stay at or below the threshold (dynamic: at `floor`;
    longrope: the short factors), the only one of the other types."""
    freq = default_inv(rope.theta, head_dim)
    if rope.kind == "linear":
        freq = freq / rope.factor
    elif rope.kind == "llama3":
        freq = llama3(rope, freq)
    elif rope.kind == "yarn":
        freq = yarn(rope, freq, head_dim)
    elif rope.kind == "longrope":
        freq = freq / np.asarray(rope.short_factor, np.float64)
    elif rope.kind == "dynamic" and rope.floor > rope.original:
        freq = default_inv(dynamic_theta(rope, head_dim, rope.floor), head_dim)
    return freq.astype(np.float32)


def seq_len(position_ids: ov.Output, name: str) -> ov.Output:
    """f32 scalar max(position_ids) + 1 over every row of the call (dynamic_rope_update: torch.max(position_ids))."""
    top = ops.reduce_max(position_ids, const([0, 1], I64), keep_dims=False)
    return named(ops.convert(ops.add(top, const(1, I64)), ov.Type.f32), f"{name}/seq_len")


def dynamic_inv(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> ov.Output:
    """[D/2] f32 per call: theta'^(-2j/D) at L = max(seq_len, floor) when L > M, else the table at M (the default)."""
    length = ops.maximum(seq_len(position_ids, name), const(float(rope.floor)))
    ratio = ops.subtract(ops.multiply(length, const(rope.factor / rope.original)), const(rope.factor - 1))
    theta = ops.multiply(const(rope.theta), ops.power(ratio, const(head_dim / (head_dim - 2))))
    exponents = const(np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaled = ops.divide(const(1.0), ops.power(theta, exponents))  # [D/2]: 1 / theta'^(2j/D), as transformers
    at_threshold = const(inv_freq(Rope("default", rope.theta), head_dim), name=f"{name}.inv_freq")
    above = ops.greater(length, const(float(rope.original)))
    return named(ops.select(above, scaled, at_threshold), f"{name}/inv_freq")


def longrope_inv(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> ov.Output:
    """[D/2] f32 per call: the long factors' table when seq_len > original_max_position_embeddings, else the short."""
    long = default_inv(rope.theta, head_dim) / np.asarray(rope.long_factor, np.float64)
    above = ops.greater(seq_len(position_ids, name), const(float(rope.original)))
    return named(ops.select(above, const(long.astype(np.float32), name=f"{name}.long_inv_freq"),
                            const(inv_freq(rope, head_dim), name=f"{name}.short_inv_freq")), f"{name}/inv_freq")


def call_inv(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> ov.Output:
    """[D/2] f32: the table of this call (a constant unless the type picks it per call)."""
    if rope.kind == "dynamic":
        return dynamic_inv(position_ids, rope, head_dim, name)
    if rope.kind == "longrope":
        return longrope_inv(position_ids, rope, head_dim, name)
    return const(inv_freq(rope, head_dim), name=f"{name}.inv_freq")
