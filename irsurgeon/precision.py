"""The weight format a target directory uses (for `--weight-format auto`), and the format a build will use.

A target's format comes from `openvino_config.json` (`quantization_config.quantization_configs.lm_model`, as
optimum-intel writes it) when present, else from the language model's own weight constants.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from irsurgeon.compress import (BACKUP_PRECISIONS, DEFAULTS, QUANTIZED_FORMATS, WEIGHT_FORMATS, CompressionParams,
                                check_params, quantization_section, resolve_params)
from irsurgeon.config import read_json
from irsurgeon.errors import CompressionError, ConfigError, IRError
from irsurgeon.ir import files
from irsurgeon.ir.export import LANGUAGE_MODELS, OPENVINO_CONFIG
from irsurgeon.ir.storage import WeightSummary, weight_summary

OPTION_FLAGS = {"group_size": "--group-size", "ratio": "--ratio", "backup": "--backup-precision", "sym": "--sym/--asym",
                "all_layers": "--all-layers"}


@dataclass(frozen=True)
class TargetFormat:
    """What `auto` picked for a target directory, and why."""

    weight_format: str                 # int4, int8, f16, f32
    params: CompressionParams | None   # None for float formats
    source: str                        # the file it was read from
    reason: str


def detect_target_format(target_dir: str | Path) -> TargetFormat:
    """The weight format of a target directory: its openvino_config.json lm_model entry, else its LM's weights."""
    target = Path(target_dir)
    if not target.is_dir():
        raise IRError(f"{target}: target is not a directory")
    config = target / OPENVINO_CONFIG
    if config.is_file():
        entry = (quantization_section(read_json(config)) or {}).get("lm_model")
        if isinstance(entry, dict):
            return _from_config_entry(entry, config)
    for name in LANGUAGE_MODELS:
        if (target / name).is_file():
            return _from_weights(target / name)
    raise IRError(f"{target}: neither {OPENVINO_CONFIG} with quantization_configs.lm_model nor "
                  f"{' / '.join(LANGUAGE_MODELS)}: cannot tell the target's weight format")


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
            mode=mode, group_size=group or DEFAULTS.group_size, ratio=float(ratio or 1.0),
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


def _from_weights(xml: Path) -> TargetFormat:
    summary = weight_summary(files.read_model(xml))  # byte-checked first: --target may be a stranger's export
    if not summary.weights:
        raise IRError(f"{xml}: no weight constants found: cannot tell the target's weight format")
    if summary.compressed:
        return _from_quantized(summary, xml)
    by_type = Counter()
    for w in summary.weights:
        by_type[w.element_type] += w.nbytes
    etype = by_type.most_common(1)[0][0]
    fmt = "f32" if etype == "f32" else "f16"
    why = "" if etype in ("f16", "f32") else ": stored as f16, exact for bf16 values from 6e-5 to 65504"
    return TargetFormat(fmt, None, str(xml), f"language model weights are mostly {etype}{why}")


def _from_quantized(summary: WeightSummary, xml: Path) -> TargetFormat:
    bits = summary.bits
    primary = [w for w in summary.weights if w.bits == bits]
    sym = all(w.zero_point is None for w in primary)
    mode = f"int{bits}_{'sym' if sym else 'asym'}"
    if bits == 8:
        return TargetFormat("int8", CompressionParams(mode=mode, group_size=-1), str(xml),
                            f"language model weights are {mode} per-channel ({len(primary)} weights)")
    group = summary.group_sizes.most_common(1)[0][0]
    backup_layers = [w for w in summary.weights if w.bits == 8]
    backup = ("int8_sym" if all(w.zero_point is None for w in backup_layers) else "int8_asym") \
        if backup_layers else DEFAULTS.backup
    defining = [w for w in summary.weights if w.bits and w.consumer_type == "MatMul" and not w.feeds_output]
    p4 = sum(w.params for w in defining if w.bits == 4)
    ratio = round(p4 / max(1, sum(w.params for w in defining)), 2)
    params = CompressionParams(mode=mode, group_size=group, ratio=ratio, backup=backup)
    return TargetFormat("int4", params, str(xml),
                        f"language model weights: {len(primary)} {mode} with group size {group}, "
                        f"{len(backup_layers)} at {backup}; ratio {ratio}")


@dataclass(frozen=True)
class Choice:
    """The weight format a build will use; `note` says what `auto` picked and why."""

    weight_format: str                # f32, f16, int4, int8
    params: CompressionParams | None  # None for float formats
    note: str | None = None


def build_format(choice: Choice) -> str:
    """The float format a draft is built in: f16 when nncf compresses it afterwards, else the chosen one."""
    return "f16" if choice.params else choice.weight_format


def choose_format(weight_format: str, target: str | Path | None = None, **overrides) -> Choice:
    """Resolve `--weight-format` (auto reads `target`) and the compression overrides into one validated choice.

    overrides: group_size, ratio, backup, sym, all_layers (None = not given).
    """
    if weight_format not in WEIGHT_FORMATS:
        raise CompressionError(f"unknown weight format {weight_format!r}: expected one of {', '.join(WEIGHT_FORMATS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    base, note = None, None
    if weight_format == "auto":
        if target is None:
            raise CompressionError("weight format auto mirrors a target model directory: pass --target TARGET_DIR")
        found = detect_target_format(target)
        weight_format, base = found.weight_format, found.params
        note = f"auto: {weight_format}" + (f" ({_params_text(base)})" if base else "") + \
            f" from {found.source}: {found.reason}"
    elif target is not None:
        raise CompressionError(f"--target is read only by --weight-format auto (got --weight-format {weight_format})")
    if weight_format not in QUANTIZED_FORMATS:
        if given:
            flags = ", ".join(OPTION_FLAGS.get(k, k) for k in sorted(given))
            raise CompressionError(f"{flags}: only for int4/int8 compression, not for {weight_format} weights")
        return Choice(weight_format, None, note)
    return Choice(weight_format, resolve_params(weight_format, base, **given), note)


def _params_text(p: CompressionParams) -> str:
    if p.bits == 8:
        return f"{p.mode} per-channel"
    group = "per-channel" if p.group_size == -1 else f"group size {p.group_size}"
    return f"{p.mode}, {group}, ratio {p.ratio}, backup {p.backup}" + (", all layers" if p.all_layers else "")
