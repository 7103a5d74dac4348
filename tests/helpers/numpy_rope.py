"""An independent float64 numpy reference of the RoPE tables an EAGLE-3 draft layer trains with, written from the
trainers' PyTorch code (not from irsurgeon's rope modules). tests/helpers/check_rope_reference.py compares it with
transformers itself.

transformers 5.2.0 (speculators drafts: `transformers.models.llama.modeling_llama.LlamaRotaryEmbedding` over the
draft layer's config, speculators src/speculators/models/eagle3/core.py `Eagle3DraftModel.__init__`):
    modeling_rope_utils.py  RotaryEmbeddingConfigMixin.convert_rope_params_to_dict / standardize_rope_params (which
                            dict, which theta, which original_max_position_embeddings), `_compute_*_parameters` (the
                            tables: `transformers_tables`), `dynamic_rope_update` (dynamic and longrope pick their
                            table per forward from seq_len = max(position_ids) + 1: `transformers_at`)
    modeling_llama.py       LlamaRotaryEmbedding.forward: cos, sin = cos/sin(cat(freqs, freqs)) * attention_scaling
sgl-project/SpecForge specforge/modeling/draft/llama3_eagle.py at a6b6b02 (LlamaAttention._init_rope and the
rotary classes it picks: `specforge_at`): linear scales the positions (t / factor), dynamic builds its cache at
max_position_embeddings + 20 and grows it, yarn takes beta_fast, beta_slow, mscale, mscale_all_dim as given and
always truncates, longrope is unknown to it.

Every function returns (inv_freq [D/2] float64, attention scale of cos and sin) for one call's positions.
"""
from __future__ import annotations

import math

import numpy as np

SCALED = ("llama3", "yarn", "longrope")  # the types standardize_rope_params gives an original_max_position_embeddings
TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")
SPECFORGE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")  # _init_rope raises on any other
SPECFORGE_MARGIN = 20  # LlamaRotaryEmbedding.__init__: _set_cos_sin_cache(seq_len=max_position_embeddings + 20)


def parameters(layer: dict, computed: bool = True) -> dict:
    """The rope dict as transformers 5.2.0 holds it: convert_rope_params_to_dict (`rope_scaling or
    rope_parameters`, the dict's rope_theta first) and standardize_rope_params, which defaults the dict's
    original_max_position_embeddings to max_position_embeddings (llama3 / yarn / longrope). computed: as
    `_compute_*_parameters` see it, after their own standardize_rope_params call on the finished config, where a
    top-level original_max_position_embeddings (an attribute by then) overwrites the dict's; else as the config
    holds it right after loading (PreTrainedConfig.__init__ standardizes before it sets the other keys)."""
    params = dict(layer.get("rope_scaling") or layer.get("rope_parameters") or {})
    params.setdefault("rope_theta", layer.get("rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    if params["rope_type"] in SCALED:
        if computed and "original_max_position_embeddings" in layer:
            params["original_max_position_embeddings"] = layer["original_max_position_embeddings"]
        else:
            params.setdefault("original_max_position_embeddings", layer.get("max_position_embeddings", 2048))
    return params


def default_freqs(base: float, dim: int) -> np.ndarray:
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def linear(p: dict, layer: dict, dim: int, seq_len=None):
    """_compute_linear_scaling_rope_parameters."""
    return default_freqs(p["rope_theta"], dim) / p["factor"], 1.0


def dynamic(p: dict, layer: dict, dim: int, seq_len=None):
    """_compute_dynamic_ntk_parameters: seq_len at least max_position_embeddings (its value at init)."""
    max_pos = layer.get("max_position_embeddings", 2048)
    seq_len = max_pos if seq_len is None else max(seq_len, max_pos)
    factor = p["factor"]
    base = p["rope_theta"] * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return default_freqs(base, dim), 1.0


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_ramp(p: dict, dim: int, beta_fast: float, beta_slow: float, truncate: bool) -> np.ndarray:
    """_compute_yarn_parameters' find_correction_range and linear_ramp_factor, [D/2]."""
    base, original = p["rope_theta"], p["original_max_position_embeddings"]

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    return np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)


def yarn_freqs(p: dict, dim: int, factor: float, ramp: np.ndarray) -> np.ndarray:
    pos_freqs = p["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def yarn(p: dict, layer: dict, dim: int, seq_len=None):
    """_compute_yarn_parameters: factor None -> max_position_embeddings / original; attention_factor, else
    mscale / mscale_all_dim when both are truthy, else get_mscale(factor); beta_fast/beta_slow `or` 32 / 1."""
    factor = p["factor"]
    if factor is None:
        factor = layer.get("max_position_embeddings", 2048) / p["original_max_position_embeddings"]
    attention = p.get("attention_factor")
    if attention is None:
        mscale, mscale_all_dim = p.get("mscale"), p.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention = yarn_mscale(factor)
    ramp = yarn_ramp(p, dim, p.get("beta_fast") or 32, p.get("beta_slow") or 1, p.get("truncate", True))
    return yarn_freqs(p, dim, factor, ramp), float(attention)


def longrope(p: dict, layer: dict, dim: int, seq_len=None):
    """_compute_longrope_parameters: long_factor when seq_len > original_max_position_embeddings, else short."""
    original = p["original_max_position_embeddings"]
    factor = p.get("factor")
    if factor is None:
        factor = layer.get("max_position_embeddings", 2048) / original
    attention = p.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    ext = np.asarray(p["long_factor"] if seq_len and seq_len > original else p["short_factor"], np.float64)
    return 1.0 / (ext * p["rope_theta"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim)), float(attention)


def llama3(p: dict, layer: dict, dim: int, seq_len=None):
    """_compute_llama3_parameters."""
    inv = default_freqs(p["rope_theta"], dim)
    factor, low, high = p["factor"], p["low_freq_factor"], p["high_freq_factor"]
    old = p["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, smoothed, scaled), 1.0


COMPUTE = {"linear": linear, "dynamic": dynamic, "yarn": yarn, "longrope": longrope, "llama3": llama3}


def transformers_at(layer: dict, head_dim: int, position_ids) -> tuple[np.ndarray, float]:
    """LlamaRotaryEmbedding with dynamic_rope_update for the positions of one forward: dynamic recomputes at
    seq_len when it exceeds max_position_embeddings, longrope takes its long table when seq_len exceeds
    original_max_position_embeddings (seq_len = max(position_ids) + 1); the others keep their init table."""
    p = parameters(layer)
    kind = p["rope_type"]
    if kind not in TYPES:
        raise NotImplementedError(f"rope type {kind!r}")
    if kind == "default":
        return default_freqs(p["rope_theta"], head_dim), 1.0
    seq_len = int(np.max(position_ids)) + 1
    if kind == "dynamic" and seq_len <= layer.get("max_position_embeddings", 2048):
        seq_len = None  # the table made at init (the reset branch's original_inv_freq)
    return COMPUTE[kind](p, layer, head_dim, seq_len if kind in ("dynamic", "longrope") else None)


def specforge_at(layer: dict, head_dim: int, position_ids) -> tuple[np.ndarray, float]:
    """SpecForge's rotary classes for one call whose cache spans seq_len = max(position_ids) + 1 positions
    (the positions of its training and test-time-training steps run 0..seq_len-1): dynamic's base is computed at
    max(seq_len, max_position_embeddings + 20) (its cache, built at init for max_position_embeddings + 20, grows
    to seq_len); linear divides the positions by factor (the same angles as dividing inv_freq); yarn's attention is
    get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) whatever attention_factor says, its range always
    truncated; llama3 as transformers (its all-four-set condition; transformers requires the four keys)."""
    p = parameters(layer, computed=False)  # get_rope_config: config.rope_parameters as loaded (transformers 5)
    kind = p["rope_type"]
    if kind not in SPECFORGE_TYPES:
        raise NotImplementedError(f"rope type {kind!r} (SpecForge's _init_rope raises)")
    base, max_pos = p["rope_theta"], layer.get("max_position_embeddings", 2048)
    if kind == "default":
        return default_freqs(base, head_dim), 1.0
    if kind == "llama3":
        return llama3(p, layer, head_dim)
    if kind == "linear":
        return default_freqs(base, head_dim) / p["factor"], 1.0
    if kind == "dynamic":
        seq_len = max(int(np.max(position_ids)) + 1, max_pos + SPECFORGE_MARGIN)
        new_base = base * ((p["factor"] * seq_len / max_pos) - (p["factor"] - 1)) ** (head_dim / (head_dim - 2))
        return default_freqs(new_base, head_dim), 1.0
    factor = p["factor"]
    ramp = yarn_ramp(p, head_dim, p["beta_fast"], p["beta_slow"], True)
    attention = yarn_mscale(factor, p["mscale"]) / yarn_mscale(factor, p["mscale_all_dim"])
    return yarn_freqs(p, head_dim, factor, ramp), float(attention)


def cos_sin(inv: np.ndarray, attention: float, position_ids) -> tuple[np.ndarray, np.ndarray]:
    """[B, S, D] cos and sin (LlamaRotaryEmbedding.forward: cat(freqs, freqs), times attention_scaling)."""
    freqs = np.asarray(position_ids, np.float64)[..., None] * inv
    emb = np.concatenate([freqs, freqs], -1)
    return np.cos(emb) * attention, np.sin(emb) * attention
