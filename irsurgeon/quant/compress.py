"""Weight compression of the built head through `nncf.compress_weights` (imported only when compressing).

    int4: 4-bit asymmetric, group size 64 by default, data-free;  W [O, I] -> u4 [O, I/g, g] + u4 zero point
          [O, I/g, 1] + f16 scale [O, I/g, 1].  Layers nncf keeps at the backup precision (the last MatMul while
          all_layers is off, the rest of `ratio`) are int8_sym per channel: i8 [O, I] + f16 scale [O, 1].
    int8: 8-bit asymmetric per channel: u8 [O, I] + u8 zero point [O, 1] + f16 scale [O, 1].

The head is built with f16 weights and compressed from those (bf16 checkpoint values are exact in f16), so whatever
nncf leaves in float (norm gains, backup `none`) is stored as the f16 build stores it.

Group-size fallback, per weight with I input channels: group g when g divides I; else the largest power of two that
divides I, if it is at least `min_group_size`; else the backup precision. nncf's `GroupSizeFallbackMode.ADJUST`
applies exactly this rule; the report is read back from the compressed graph, not assumed.

Weights a family marks as never compressed stay float (the Qwen MoE router and shared-expert gate: `compress=False` in
its tensor table, recorded by the build in rt_info; see marked_consumers). Only MatMul weights are candidates: RoPE
`inv_freq` and the norm gains feed Multiply nodes, which nncf never treats as weights.

`all_layers` stays off by default, deliberately: nncf then keeps the head's last MatMul (`mlp.down_proj`, whose output
is added straight into the residual stream before the final norm) at the int8 backup, as optimum-intel's own int4 MTP
export does. It costs 12.6 M of the 73 M weights of a hidden-2048 head at 8 instead of 4 bits (+6 MB); on the
reference head all_layers=True raised the output error from 0.115 to 0.117 (relative L2 against the f32 head).
"""
from __future__ import annotations

import json
import contextlib
import logging
import math
import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path

from irsurgeon.core import rtinfo
from irsurgeon.core.config import read_optional_json
from irsurgeon.core.errors import CompressionError, cause, with_hint
from irsurgeon.ir.export import OPENVINO_CONFIG
from irsurgeon.ir.files import write_atomic
from irsurgeon.quant.formats import (DEFAULTS, INT8_DEFAULTS, QUANTIZED_FORMATS, CompressionParams,
                                    check_kv_cache_precision, check_params, quantization_section)

def resolve_params(weight_format: str, base: CompressionParams | None = None, *, group_size: int | None = None,
                   ratio: float | None = None, backup: str | None = None, sym: bool | None = None,
                   all_layers: bool | None = None) -> CompressionParams:
    """Defaults (or `base`, e.g. what `auto` read from a target) with the given overrides, validated."""
    if weight_format not in QUANTIZED_FORMATS:
        raise CompressionError(f"weight format {weight_format!r} is not compressed with nncf; "
                               f"expected one of {', '.join(QUANTIZED_FORMATS)}")
    p = base if base is not None and base.weight_format == weight_format else (
        DEFAULTS if weight_format == "int4" else INT8_DEFAULTS)
    if sym is not None:
        p = replace(p, mode=f"{weight_format}_{'sym' if sym else 'asym'}")
    if weight_format == "int8":
        if group_size not in (None, -1) or ratio not in (None, 1.0) or backup is not None:
            raise with_hint(CompressionError("int8 is per-channel for every weight: group size, ratio and backup "
                                             "precision apply to int4 only"), "--group-size",
                            "--group-size, --ratio and --backup-precision")
        return p
    p = replace(p, group_size=p.group_size if group_size is None else group_size,
                ratio=p.ratio if ratio is None else ratio, backup=p.backup if backup is None else backup,
                all_layers=p.all_layers if all_layers is None else all_layers)
    check_params(p)
    return p


def planned_group(input_channels: int, p: CompressionParams) -> int | None:
    """The group size the fallback rule gives a weight with this many input channels; None: backup precision."""
    if p.bits == 8 or p.group_size == -1:
        return -1
    if input_channels % p.group_size == 0:
        return p.group_size
    largest = input_channels & -input_channels  # the largest power of two dividing input_channels
    return largest if largest >= p.min_group_size else None


@dataclass(frozen=True)
class Fallback:
    weight: str
    input_channels: int
    applied: str  # "int4_asym group 32", "int8_sym", "f16"
    reason: str


@dataclass(frozen=True)
class CompressionReport:
    params: CompressionParams
    modes: dict[str, str]          # weight name -> "int4_asym group 64" / "int8_sym per-channel" / "f16"
    fallbacks: tuple[Fallback, ...]

    def lines(self) -> list[str]:
        counts: dict[str, int] = {}
        for m in self.modes.values():
            counts[m] = counts.get(m, 0) + 1
        out = [f"compressed {len(self.modes)} weights: " + ", ".join(f"{n} x {m}" for m, n in sorted(counts.items()))]
        out += [f"  fallback {f.weight} ({f.input_channels} input channels): {f.applied}: {f.reason}"
                for f in self.fallbacks]
        return out


def marked_consumers(model) -> tuple[str, ...]:
    """The MatMul / Gather nodes (friendly names) reading a weight constant its family marks as never compressed
    (rtinfo.keep_float: e.g. the MoE router, whose rounding would change which experts a token goes to)."""
    marked = set(rtinfo.keep_float(model))
    found = []
    for op in model.get_ops():
        if op.get_type_name() not in ("MatMul", "Gather"):
            continue
        src = op.input_value(1 if op.get_type_name() == "MatMul" else 0).get_node()
        src = src.input_value(0).get_node() if src.get_type_name() == "Convert" else src
        if src.get_friendly_name() in marked:
            found.append(op.get_friendly_name())
    return tuple(found)


def compress_model(model, params: CompressionParams, keep_float: tuple[str, ...] | None = None):
    """Compress the MatMul weights of `model` with nncf; returns (the compressed model, the report).

    keep_float: MatMuls (friendly names) whose weights stay as built; default: the ones the head's family marks.
    """
    if keep_float is None:
        keep_float = marked_consumers(model)
    # loaded here, not with the module: importing nncf takes ~1.3 s (python -X importtime, nncf 3.4.0) and the CLI
    # reads this module's option lists at start-up
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    from irsurgeon.quant.blocks import bounded  # openvino (~0.2 s): for the same reason
    from irsurgeon.ir.storage import weight_summary

    before = {w.name: w for w in weight_summary(model).weights}
    grouped = params.bits == 4 and params.group_size != -1
    advanced = AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST,
                                             min_adjusted_group_size=params.min_group_size)
    level = logging.getLogger("nncf").level
    nncf.set_log_level(logging.WARNING)  # nncf's INFO tables would interleave with the command's own report
    try:
        # nncf's progress bar (rich, printed to sys.stdout as it writes) goes to stderr when that is a terminal, and
        # nowhere otherwise: stdout carries only what the command prints there (one --json document), and a library
        # call, a pipe or a log gets no bar
        with bounded(sum(math.prod(w.shape) for w in before.values())), progress_sink() as sink, \
                contextlib.redirect_stdout(sink):
            model = nncf.compress_weights(
                model, mode=nncf.CompressWeightsMode(params.mode),
                ignored_scope=routing_scope(nncf, model, keep_float),
                group_size=params.group_size if params.bits == 4 else None,  # -1: per channel
                ratio=params.ratio if params.bits == 4 else None,
                all_layers=params.all_layers if params.bits == 4 else None,
                backup_mode=nncf.BackupMode(params.backup) if params.bits == 4 else None,
                advanced_parameters=advanced if grouped else None)
    except _nncf_input_errors(nncf) as e:
        raise CompressionError(f"nncf cannot compress the head with {params.mode}: {cause(e)}") from None
    finally:
        nncf.set_log_level(level)
    report = _report(before, weight_summary(model), params, keep_float, set(rtinfo.keep_float(model)))
    record(model, params, report)
    return model, report


@contextlib.contextmanager
def progress_sink():
    """Where nncf's progress bar goes: stderr when it is a terminal, else os.devnull."""
    if sys.stderr is not None and sys.stderr.isatty():
        yield sys.stderr
        return
    with open(os.devnull, "w", encoding="utf-8") as null:
        yield null


def routing_scope(nncf, model, keep_float: tuple[str, ...]):
    """Keep the named MatMul / Gather nodes out of compression (their float weights stay as built). Gather counts
    too: nncf compresses an embedding table read by a Gather."""
    present = {op.get_friendly_name() for op in model.get_ops() if op.get_type_name() in ("MatMul", "Gather")}
    names = [n for n in keep_float if n in present]
    return nncf.IgnoredScope(names=names) if names else None


def _nncf_input_errors(nncf) -> tuple[type, ...]:
    """nncf's errors about its input (they share no base class)."""
    e = nncf.errors
    return (e.ValidationError, e.InvalidGroupSizeError, e.ParameterNotSupportedError, e.UnsupportedModelError)


def _report(before: dict, after, params: CompressionParams, keep_float: tuple[str, ...],
            marked: set[str]) -> CompressionReport:
    modes, fallbacks = {}, []
    for w in after.weights:
        if w.name not in before:
            continue
        in_ch = before[w.name].shape[-1]
        applied = _describe_mode(w)
        modes[w.name] = applied
        if w.bits == params.bits and w.group_size == params.group_size:
            continue
        planned = planned_group(in_ch, params)
        kept = w.consumer in keep_float or w.name.removesuffix(".weight") in keep_float
        if kept and w.name in marked:
            reason = "kept float as its family marks it (routing weights: the choices stay those of the float head)"
        elif kept:
            reason = "kept float: its consumer is in the ignored scope"
        elif w.bits == params.bits:
            reason = f"group size {params.group_size} does not divide {in_ch}"
        elif planned is None:
            reason = f"no power-of-two group size from {params.min_group_size} to {params.group_size} divides {in_ch}"
        elif params.ratio < 1.0:
            reason = f"nncf's mixed precision at ratio {params.ratio} (or the last layer, all_layers off)"
        else:
            reason = "nncf keeps the last MatMul at the backup precision while all_layers is off"
        fallbacks.append(Fallback(w.name, in_ch, applied, reason))
    return CompressionReport(params, modes, tuple(fallbacks))


def _describe_mode(w) -> str:
    if w.bits is None:
        return w.element_type
    return f"{w.mode} {'per-channel' if w.group_size == -1 else f'group {w.group_size}'}"


def record(model, params: CompressionParams, report: CompressionReport) -> None:
    """irsurgeon's record of the applied format next to nncf's own `nncf/weight_compression` section."""
    rtinfo.set_provenance(model, weight_format=params.weight_format, **{
        f"compression_{f.name}": getattr(params, f.name) for f in fields(params)})
    rtinfo.set_provenance(model, compression_fallback=";".join(f"{f.weight}={f.applied}" for f in report.fallbacks))


def params_from_rt_info(model) -> CompressionParams | None:
    """The compression irsurgeon recorded in a model's rt_info; None for a float head."""
    if not model.has_rt_info([rtinfo.PROVENANCE, "compression_mode"]):
        return None
    raw = {f.name: model.get_rt_info([rtinfo.PROVENANCE, f"compression_{f.name}"]).astype(str) for f in fields(CompressionParams)}
    return CompressionParams(mode=raw["mode"], group_size=int(raw["group_size"]), ratio=float(raw["ratio"]),
                             backup=raw["backup"], all_layers=raw["all_layers"] == "True",
                             min_group_size=int(raw["min_group_size"]))


def set_kv_cache_precision(model, precision: str = "f16") -> None:
    """rt_info runtime_options/KV_CACHE_PRECISION: without it the CPU plugin compiles the head's cache as u8."""
    rtinfo.set_runtime_option(model, rtinfo.KV_CACHE_PRECISION, check_kv_cache_precision(precision))


def mtp_config_entry(params: CompressionParams, template: dict | None = None) -> dict:
    """An optimum-intel style per-part weight quantization entry for what was applied (template keys kept)."""
    entry = dict(template or {})
    entry.update({
        "bits": params.bits, "sym": params.sym, "dtype": params.weight_format, "quant_method": "default",
        "group_size": params.group_size if params.bits == 4 else -1,
        "ratio": params.ratio if params.bits == 4 else 1.0,
        "backup_precision": params.backup if params.bits == 4 else None,
        "all_layers": params.all_layers if params.bits == 4 else None,
        "group_size_fallback": "adjust" if params.bits == 4 else None,
    })
    return entry


def update_openvino_config(target_dir: str | Path, applied_params: CompressionParams | None) -> bool:
    """Make `quantization_configs.mtp_model` of target_dir/openvino_config.json describe the applied compression.

    The new file replaces the old one atomically. Returns whether the file changed (False also when there is none).
    """
    text = updated_openvino_config(target_dir, applied_params)
    if text is None:
        return False
    write_atomic(Path(target_dir) / OPENVINO_CONFIG, text.encode("utf-8"))
    return True


def updated_openvino_config(target_dir: str | Path, applied_params: CompressionParams | None) -> str | None:
    """The new text of target_dir/openvino_config.json with its `mtp_model` entry describing applied_params.

    A float head (applied_params None) drops the entry; the rest of the file is kept. None when there is no file
    or nothing would change.
    """
    path = Path(target_dir) / OPENVINO_CONFIG
    data = read_optional_json(path)  # a FIFO or folder there is refused by name, never taken for no file
    if data is None:
        return None
    section = quantization_section(data)
    if applied_params is None:
        if section is None or "mtp_model" not in section:
            return None
        del section["mtp_model"]
    else:
        if section is None:
            qc = data.setdefault("quantization_config", {})
            if not isinstance(qc, dict):
                raise CompressionError(f"{path}: quantization_config is not an object")
            section = qc["quantization_configs"] = {}
        new = mtp_config_entry(applied_params, section.get("lm_model") if isinstance(section.get("lm_model"), dict)
                               else section.get("mtp_model"))
        if section.get("mtp_model") == new:
            return None
        section["mtp_model"] = new
    return json.dumps(data, indent=2) + "\n"
