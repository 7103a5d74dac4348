"""The RoPE an EAGLE-3 draft layer's config names: default, llama3 (the Llama 3.1 drafts'), or AngelSlim's mrope
(its VLM drafts'); an AngelSlim text draft's is the default at its trainer's base, 10000 (read_angelslim).

transformers 5.2.0 modeling_rope_utils.py: _compute_default_rope_parameters (inv_freq = 1 / theta^(2i/D)) and
_compute_llama3_parameters (wavelengths above original/low_freq_factor divided by factor, below
original/high_freq_factor kept, smoothly mixed between; attention factor 1). rope_scaling, when set, replaces
rope_parameters; its type is `rope_type`, else `type`.

mrope: Tencent/AngelSlim compressor/speculative/train/models/draft/llama_eagle3.py LlamaAttention._init_rope takes
MRotaryEmbedding when rope_scaling's type is "mrope" or it sets mrope_interleaved; MRotaryEmbedding.forward computes
the default inv_freq (theta: rope_scaling.rope_theta, else rope_theta) against each of the 3 position rows
[T, H, W] of position_ids [3, B, S] and always interleaves them (apply_interleaved_mrope: frequency j takes row H
for j = 1, 4, .. < 3 * mrope_section[1], row W for j = 2, 5, .. < 3 * mrope_section[2], row T otherwise), whatever
the target's own layout (Qwen2.5-VL's is chunked): the draft runs as it was trained.

AngelSlim text drafts (Eagle3LlamaForCausalLM without modal_type VLM): the same LlamaAttention._init_rope makes
LlamaRotaryEmbedding(head_dim, max_position_embeddings=...) and passes no base, so the draft trains with that class's
default 10000 whatever rope_theta says (every version of the file: 917de3a 2025-10-31 to 67394ce, the release/0.2 to
0.5 branches; under transformers 5 rope_scaling reads {"rope_type": "default", ...}, the same branch). Its
rope_scaling types: "default" (that class), "linear" / "dynamic" (scaled classes, also base 10000, not built here),
any other raises ValueError("Unknown RoPE scaling type"). SafeAILab/SpecForge drafts keep the config's theta: SpecForge
specforge/modeling/draft/llama3_eagle.py LlamaAttention._init_rope passes base=rope_theta (since d3472dde, PR #270,
2025-10-30; get_rope_config at its head), as SafeAILab eagle/model/cnets.py LlamaAttention._init_rope does
(base=self.config.rope_theta) and the runtimes these drafts are served and measured with (SGLang, vLLM). SafeAILab's
training copy, eagle/traineagle3/cnets.py, and SpecForge before d3472dde pass no base either; a checkpoint does not
say which code trained it, so those drafts are built at the config's theta.
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
MROPE_TYPES = ("default", "mrope")  # the rope_type an mrope rope_scaling may name (AngelSlim: "mrope" -> default)
MROPE_ROWS = 3  # position_ids [T, H, W] rows
MROPE_DEFAULT_SECTION = (24, 20, 20)  # MRotaryEmbedding.__init__: rope_scaling.get("mrope_section", [24, 20, 20])
ANGELSLIM_THETA = 10000.0  # llama_eagle3.py LlamaRotaryEmbedding.__init__(dim, max_position_embeddings=2048, base=10000)


@dataclass(frozen=True)
class Rope:
    kind: str
    theta: float
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original: int = 8192
    mrope_section: tuple[int, ...] = ()  # kind "mrope": the frequencies of rows T, H, W


def is_mrope(section: dict) -> bool:
    """Whether AngelSlim's draft would take MRotaryEmbedding for this layer config (LlamaAttention._init_rope)."""
    r = section.get("rope_scaling")
    return isinstance(r, dict) and (r.get("type", r.get("rope_type")) == "mrope" or bool(r.get("mrope_interleaved")))


def read_mrope(section: dict, theta: float, head_dim: int, source: str) -> Rope:
    """AngelSlim's MRotaryEmbedding from rope_scaling, each value checked (the module docstring)."""
    r = section["rope_scaling"]
    kind = r.get("rope_type", r.get("type", "default"))
    if kind not in MROPE_TYPES:
        raise ConfigError(f"{source}: rope_scaling.rope_type {kind!r:.40} with mrope: only {', '.join(MROPE_TYPES)} "
                          f"is built (AngelSlim's MRotaryEmbedding computes any other by transformers' ROPE_INIT_FUNCTIONS)")
    factor = section.get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise ConfigError(f"{source}: partial_rotary_factor is {factor!r:.20}: only full-width mrope is built")
    theta = number(r, "rope_theta", theta, "rope_scaling", source, ROPE_THETA)
    got = r.get("mrope_section", list(MROPE_DEFAULT_SECTION))
    if (not isinstance(got, list) or len(got) != MROPE_ROWS
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in got) or sum(got) != head_dim // 2):
        raise ConfigError(f"{source}: rope_scaling.mrope_section must be {MROPE_ROWS} positive integers summing to "
                          f"head_dim / 2 = {head_dim // 2}, found {got!r:.60}")
    return Rope("mrope", theta, mrope_section=tuple(got))


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


def read_angelslim(section: dict, theta: float, source: str) -> tuple[Rope, list[str]]:
    """An AngelSlim text draft's RoPE as its trainer computes it: the default at base 10000 (the module docstring),
    with one line when the config names another theta."""
    home = "rope_scaling" if section.get("rope_scaling") else "rope_parameters"
    r = lookup(section, home)
    if r not in (MISSING, None):
        if not isinstance(r, dict):
            raise ConfigError(f"{source}: {home} must be a JSON object, found {type(r).__name__}")
        kind = r.get("type", r.get("rope_type", "default"))  # _init_rope reads "type" first, then "rope_type"
        if kind != "default":
            raise ConfigError(f"{source}: {home} type {kind!r:.40} in an AngelSlim text draft: only the default RoPE "
                              f"is built (AngelSlim's LlamaAttention._init_rope scales linear / dynamic ones, which "
                              f"are not built here, and raises on any other)")
        theta = number(r, "rope_theta", theta, home, source, ROPE_THETA)
    if theta == ANGELSLIM_THETA:
        return Rope("default", ANGELSLIM_THETA), []
    return Rope("default", ANGELSLIM_THETA), [
        f"{source}: rope_theta {theta:.12g} overridden by 10000: AngelSlim's trainer gives a text draft's "
        f"LlamaRotaryEmbedding no base (llama_eagle3.py LlamaAttention._init_rope), so the draft was trained at 10000"]


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


def mrope_rows(section: tuple[int, ...], head_dim: int) -> np.ndarray:
    """One-hot [3, 1, 1, D/2] f32: which position row (T, H, W) frequency j reads (apply_interleaved_mrope)."""
    rows = np.zeros(head_dim // 2, np.int64)
    for row in (1, 2):
        rows[row:section[row] * MROPE_ROWS:MROPE_ROWS] = row
    return (np.arange(MROPE_ROWS)[:, None] == rows[None]).astype(np.float32)[:, None, None, :]


def cos_sin(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> tuple[ov.Output, ov.Output]:
    """cos and sin tables [B, 1, S, D] for int64 position_ids [B, S], or [3, B, S] for mrope (rotate_half layout:
    the angles twice)."""
    pos = ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), const([-1], np.int64))  # [B, S, 1] / [3, B, S, 1]
    ang = named(ops.multiply(pos, const(inv_freq(rope, head_dim), name=f"{name}.inv_freq")), f"{name}/angles")
    if rope.kind == "mrope":  # each frequency from its row: a one-hot sum over the rows is exact
        pick = const(mrope_rows(rope.mrope_section, head_dim), name=f"{name}.mrope_rows")
        ang = named(ops.reduce_sum(ops.multiply(ang, pick), const([0], np.int64), keep_dims=False),
                    f"{name}/mrope_angles")  # [B, S, D/2]
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], np.int64))
    return named(ops.cos(emb), f"{name}/cos"), named(ops.sin(emb), f"{name}/sin")
