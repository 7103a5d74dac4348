"""Weight formats and nncf compression parameters as data, and optimum-intel's record of them in a target's
openvino_config.json: no nncf, no OpenVINO, nothing written (verify reads the record with the check patch makes).

    CompressionParams      mode (int4_asym ...), group size (-1: per channel), ratio, backup, all_layers
    openvino_config_format TARGET/openvino_config.json `quantization_config.quantization_configs.lm_model`, as
                           optimum-intel writes it, read into a TargetFormat (None: no file, or no such entry); a
                           file that cannot be read or an entry of the wrong JSON types is a ConfigError naming it
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from irsurgeon.core.config import read_optional_json
from irsurgeon.core.errors import CompressionError, ConfigError
from irsurgeon.ir.export import OPENVINO_CONFIG

WEIGHT_FORMATS = ("auto", "f32", "f16", "int8", "int4")  # one order in every message and help text
QUANTIZED_FORMATS = ("int4", "int8")
BACKUP_PRECISIONS = ("none", "int8_sym", "int8_asym")
KV_CACHE_PRECISIONS = ("f16", "bf16", "f32", "u8", "u4")
MAX_GROUP_SIZE = 1 << 16


@dataclass(frozen=True)
class CompressionParams:
    mode: str = "int4_asym"      # int4_asym, int4_sym, int8_asym, int8_sym (nncf's CompressWeightsMode values)
    group_size: int = 64         # -1: per channel
    ratio: float = 1.0           # share of the ratio-defining weights at 4 bits; the rest at `backup`
    backup: str = "int8_sym"     # none, int8_sym, int8_asym
    all_layers: bool = False
    min_group_size: int = 32     # the smallest group the fallback may pick before going to `backup`

    @property
    def bits(self) -> int:
        return 4 if self.mode.startswith("int4") else 8

    @property
    def sym(self) -> bool:
        return self.mode.endswith("_sym")

    @property
    def weight_format(self) -> str:
        return f"int{self.bits}"


DEFAULTS = CompressionParams()
INT8_DEFAULTS = CompressionParams(mode="int8_asym", group_size=-1)


def check_params(p: CompressionParams) -> None:
    g = p.group_size
    if g != -1 and not (2 <= g <= MAX_GROUP_SIZE and g & (g - 1) == 0):
        raise CompressionError(f"group size {g} is impossible: expected a power of two from 2 to {MAX_GROUP_SIZE}, "
                               f"or -1 for per-channel")
    if not 0.0 < p.ratio <= 1.0:
        raise CompressionError(f"ratio {p.ratio} is out of range: expected 0 < ratio <= 1")
    if p.backup not in BACKUP_PRECISIONS:
        raise CompressionError(f"backup precision {p.backup!r} is unknown: expected one of {', '.join(BACKUP_PRECISIONS)}")


def check_kv_cache_precision(precision: str) -> str:
    if precision not in KV_CACHE_PRECISIONS:
        raise CompressionError(f"KV cache precision {precision!r} is unknown: expected one of "
                               f"{', '.join(KV_CACHE_PRECISIONS)}")
    return precision


def quantization_section(openvino_config: dict) -> dict | None:
    """`quantization_config.quantization_configs` of an optimum-intel openvino_config.json, if it has one."""
    qc = openvino_config.get("quantization_config")
    section = qc.get("quantization_configs") if isinstance(qc, dict) else None
    return section if isinstance(section, dict) else None


@dataclass(frozen=True)
class TargetFormat:
    """What `auto` picked for a target directory, and why."""

    weight_format: str                 # int4, int8, f16, f32
    params: CompressionParams | None   # None for float formats
    source: str                        # the file it was read from
    reason: str


def openvino_config_format(target_dir: str | Path) -> TargetFormat | None:
    """The lm_model entry of target_dir/openvino_config.json (see the module docstring): what `patch` reads for
    `--weight-format auto` and refuses when unreadable, and what `verify` checks the same way."""
    path = Path(target_dir) / OPENVINO_CONFIG
    data = read_optional_json(path)
    entry = (quantization_section(data) or {}).get("lm_model") if data is not None else None
    return _from_config_entry(entry, path) if isinstance(entry, dict) else None


def _from_config_entry(entry: dict, path: Path) -> TargetFormat:
    where = f"{path}: quantization_configs.lm_model"
    bits = _typed(entry, "bits", int, where, "4 or 8", required=True)
    if bits not in (4, 8):
        raise ConfigError(f"{where}: bits is {bits}; expected 4 or 8")
    sym = bool(_typed(entry, "sym", bool, where, "true, false or null"))
    backup = _typed(entry, "backup_precision", str, where, f"one of {', '.join(BACKUP_PRECISIONS)} or null")
    if backup is not None and backup not in BACKUP_PRECISIONS:
        raise ConfigError(f"{where}: backup_precision is not one of {', '.join(BACKUP_PRECISIONS)}")
    group = _typed(entry, "group_size", int, where, "an integer or null")
    ratio = _typed(entry, "ratio", (int, float), where, "a number or null")
    all_layers = bool(_typed(entry, "all_layers", bool, where, "true, false or null"))
    mode = f"int{bits}_{'sym' if sym else 'asym'}"
    if bits == 8:
        params = CompressionParams(mode=mode, group_size=-1, ratio=1.0, backup=DEFAULTS.backup)
    else:
        params = CompressionParams(
            mode=mode, group_size=DEFAULTS.group_size if group is None else group,
            ratio=1.0 if ratio is None else float(ratio),  # 0 is no default: check_params refuses it
            # optimum-intel leaves backup_precision null and nncf then applies int8_asym: mirror what was applied
            backup=backup or "int8_asym", all_layers=all_layers)
        try:
            check_params(params)
        except CompressionError as e:
            raise ConfigError(f"{where}: {e}") from None
    return TargetFormat(f"int{bits}", params, str(path),
                        f"lm_model: bits {bits}, sym {str(sym).lower()}, group_size {group}, "
                        f"ratio {ratio}, backup_precision {backup}")


def _typed(entry: dict, key: str, kind, where: str, expected: str, required: bool = False):
    """entry[key] when it has the JSON type optimum-intel writes (null: None), else a ConfigError naming the key.
    bool is not accepted as a number: JSON true is not 1 bit."""
    value = entry.get(key)
    if value is None and not required:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ConfigError(f"{where}: {key} must be {expected}, found {_json_type(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {key} must be a finite number")
    return value


def _json_type(value) -> str:
    return {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
