"""The weight format a target directory uses (for `--weight-format auto`), and the format a build will use.

A target's format comes from `openvino_config.json` (`quantization_config.quantization_configs.lm_model`, as
optimum-intel writes it; irsurgeon.quant.formats reads it) when present, else from the language model's own weight
constants.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from irsurgeon.quant.compress import resolve_params
from irsurgeon.core.errors import CompressionError, IRError, with_hint
from irsurgeon.ir import files
from irsurgeon.ir.export import LANGUAGE_MODELS, OPENVINO_CONFIG
from irsurgeon.ir.storage import WeightSummary, weight_summary
from irsurgeon.quant.formats import (DEFAULTS, QUANTIZED_FORMATS, WEIGHT_FORMATS, CompressionParams,
                                    TargetFormat, openvino_config_format)

OPTION_HINT = {"group_size": "--group-size", "ratio": "--ratio", "backup": "--backup-precision", "sym": "--sym/--asym",
               "all_layers": "--all-layers"}  # the CLI's flags of those options, for the hint of a refusal
OPTION_WORDS = {"group_size": "group size", "ratio": "ratio", "backup": "backup precision", "sym": "symmetry",
                "all_layers": "all layers"}


def detect_target_format(target_dir: str | Path) -> TargetFormat:
    """The weight format of a target directory: its openvino_config.json lm_model entry, else its LM's weights."""
    target = Path(target_dir)
    if not target.is_dir():
        raise IRError(f"{target}: target is not a directory")
    recorded = openvino_config_format(target)
    if recorded is not None:
        return recorded
    for name in LANGUAGE_MODELS:
        if (target / name).is_file():
            return _from_weights(target / name)
    raise IRError(f"{target}: neither {OPENVINO_CONFIG} with quantization_configs.lm_model nor "
                  f"{' / '.join(LANGUAGE_MODELS)}: cannot tell the target's weight format")


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
            raise with_hint(CompressionError("weight format auto mirrors a target model directory, and none was given"),
                            "--target", "pass --target TARGET_DIR")
        found = detect_target_format(target)
        weight_format, base = found.weight_format, found.params
        note = f"auto: {weight_format}" + (f" ({_params_text(base)})" if base else "") + \
            f" from {found.source}: {found.reason}"
    elif target is not None:
        raise with_hint(CompressionError(f"a target to mirror is read only by weight format auto (got "
                                         f"{weight_format})"), "--target", "--target")
    if weight_format not in QUANTIZED_FORMATS:
        if given:
            words = ", ".join(OPTION_WORDS.get(k, k) for k in sorted(given))
            flags = [OPTION_HINT.get(k, k) for k in sorted(given)]
            raise with_hint(CompressionError(f"{words}: only for int4/int8 compression, not for {weight_format} "
                                             f"weights"), flags[0].split("/")[0], ", ".join(flags))
        return Choice(weight_format, None, note)
    return Choice(weight_format, resolve_params(weight_format, base, **given), note)


def _params_text(p: CompressionParams) -> str:
    if p.bits == 8:
        return f"{p.mode} per-channel"
    group = "per-channel" if p.group_size == -1 else f"group size {p.group_size}"
    return f"{p.mode}, {group}, ratio {p.ratio}, backup {p.backup}" + (", all layers" if p.all_layers else "")
