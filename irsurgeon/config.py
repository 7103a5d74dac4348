"""The MTP head's configuration, read from a Hugging Face `config.json` and validated.

The text part of a Qwen3.5 config sits under `text_config` for VLM checkpoints (`qwen3_5`, `qwen3_5_moe`) and at
the top level for text-only ones (`qwen3_5_text`, `qwen3_5_moe_text`). Every dimension of the head comes from here;
nothing about any particular checkpoint size is assumed.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from irsurgeon.errors import ConfigError

DENSE_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")

# Bounds that reject absurd configs before anything is allocated (a hostile hidden_size of 10**9 ...).
MAX_WIDTH = 1 << 17
MAX_HEADS = 1 << 12
MAX_EXPERTS = 1 << 12
MAX_VOCAB = 1 << 23


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    expert_size: int
    shared_expert_size: int
    norm_topk_prob: bool = True


@dataclass(frozen=True)
class MTPConfig:
    model_type: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    intermediate_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None = None
    moe: MoEConfig | None = None
    dtype: str | None = None  # the checkpoint's declared storage dtype ("bfloat16", ...), when it declares one
    quantized: bool = False  # a quantization_config is present (FP8 releases): stored dtypes may differ from dtype
    source: str = field(default="", compare=False)

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


def read_json(path: Path) -> dict:
    """Read a JSON object from path (bounded: irsurgeon.limits); any failure is a ConfigError naming the file."""
    from irsurgeon import limits

    data = limits.read_json(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def text_section(cfg: dict) -> dict:
    """The text-model part of a config: `text_config` when present, else the top level."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) else cfg


def load_config(path: str | Path) -> MTPConfig:
    """Read and validate the MTP configuration in a config.json."""
    return parse_config(read_json(Path(path)), source=str(path))


def parse_config(cfg: dict, source: str = "config.json") -> MTPConfig:
    tc = text_section(cfg)
    reader = _Reader(tc, source)
    model_type = tc.get("model_type", cfg.get("model_type"))
    if model_type not in DENSE_TYPES + MOE_TYPES:
        raise ConfigError(f"{source}: model_type {model_type!r} has no supported MTP head "
                          f"(expected one of {', '.join(DENSE_TYPES + MOE_TYPES)})")
    n_mtp = tc.get("mtp_num_hidden_layers", 0)
    if not n_mtp:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is absent or 0: this checkpoint has no MTP head")
    if n_mtp != 1:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is {n_mtp!r}; only a one-layer MTP head is supported")

    hidden = reader.int("hidden_size", MAX_WIDTH)
    heads = reader.int("num_attention_heads", MAX_HEADS)
    kv_heads = reader.int("num_key_value_heads", MAX_HEADS, default=heads)
    head_dim = reader.int("head_dim", MAX_WIDTH, default=hidden // heads if hidden % heads == 0 else None)
    rope = tc.get("rope_parameters") if isinstance(tc.get("rope_parameters"), dict) else {}
    theta = reader.float("rope_theta", default=rope.get("rope_theta", 10000.0))
    prf = reader.float("partial_rotary_factor", default=rope.get("partial_rotary_factor", 1.0))
    eps = reader.float("rms_norm_eps", default=1e-6)
    if heads % kv_heads:
        raise ConfigError(f"{source}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    if not 0.0 < prf <= 1.0:
        raise ConfigError(f"{source}: partial_rotary_factor must be in (0, 1], found {prf}")
    rot = int(head_dim * prf)
    if rot < 2 or rot % 2:
        raise ConfigError(f"{source}: head_dim {head_dim} x partial_rotary_factor {prf} = {rot} rotary dims; "
                          f"expected an even number >= 2")
    if not (theta > 1.0 and math.isfinite(theta)):
        raise ConfigError(f"{source}: rope_theta must be a finite number > 1, found {theta}")
    if not (0.0 < eps < 1.0):
        raise ConfigError(f"{source}: rms_norm_eps must be in (0, 1), found {eps}")

    moe = None
    intermediate = None
    if model_type in MOE_TYPES:
        moe = MoEConfig(
            num_experts=reader.int("num_experts", MAX_EXPERTS),
            top_k=reader.int("num_experts_per_tok", MAX_EXPERTS),
            expert_size=reader.int("moe_intermediate_size", MAX_WIDTH * 4),
            shared_expert_size=reader.int("shared_expert_intermediate_size", MAX_WIDTH * 4),
            norm_topk_prob=bool(tc.get("norm_topk_prob", True)),
        )
        if moe.top_k > moe.num_experts:
            raise ConfigError(f"{source}: num_experts_per_tok {moe.top_k} exceeds num_experts {moe.num_experts}")
    else:
        intermediate = reader.int("intermediate_size", MAX_WIDTH * 4)
    return MTPConfig(
        model_type=model_type, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        rms_norm_eps=eps, rope_theta=theta, partial_rotary_factor=prf, intermediate_size=intermediate,
        vocab_size=reader.int("vocab_size", MAX_VOCAB, default=None, required=False),
        num_hidden_layers=reader.int("num_hidden_layers", 4096, default=None, required=False),
        moe=moe, dtype=_declared_dtype(cfg, tc, source),
        quantized=isinstance(tc.get("quantization_config", cfg.get("quantization_config")), dict), source=source,
    )


def _declared_dtype(cfg: dict, tc: dict, source: str) -> str | None:
    value = tc.get("dtype", tc.get("torch_dtype", cfg.get("dtype", cfg.get("torch_dtype"))))
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{source}: dtype must be a string such as 'bfloat16', found {value!r}")
    return value


class _Reader:
    """Typed, bounded access to one config section; errors name the file and the key."""

    def __init__(self, section: dict, source: str):
        self.section, self.source = section, source

    def int(self, key: str, upper: int, default: Any = ..., required: bool = True) -> Any:
        value = self.section.get(key, default)
        if value is ... or (value is None and required):
            raise ConfigError(f"{self.source}: missing required key {key!r}")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.source}: {key} must be an integer, found {value!r}")
        if not 1 <= value <= upper:
            raise ConfigError(f"{self.source}: {key} = {value} is out of range (expected 1..{upper})")
        return value

    def float(self, key: str, default: Any = ...) -> float:
        value = self.section.get(key, default)
        if value is ...:
            raise ConfigError(f"{self.source}: missing required key {key!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{self.source}: {key} must be a number, found {value!r}")
        return float(value)
