"""What an IR or an exported model directory holds, as one JSON-able dict (the `show` command prints it).

For an IR: irsurgeon.ir.describe.show_ir (IR_KEYS). For a checkpoint directory (weights and config.json, no IR):
show_checkpoint (CHECKPOINT_KEYS), whose draft it is. For a directory (`show_directory`, DIR_KEYS): kind="directory",
path, layout, family (the registered draft family the directory belongs to, families.registry.for_directory: its
`key`, e.g. "qwen3_5" or "gemma4"), config (model_type, layers, mtp_num_hidden_layers, ...), irs (one entry per IR,
the family's draft IR by its path relative to the directory, ENTRY_KEYS: file, ok, error, summary (the text line),
ops, inputs/outputs [{name, names, dtype, shape}], states [{id, dtype, shape}] (shape: a list of ints, null for a
dynamic dimension, or null for a dynamic rank; the ports exactly as show_ir gives them), weights {precision, compressed, bits, count, modes, group_sizes},
runtime_options, annotation ({layers: [{layer, producer, output_index, dtype, shape, problem}]} or null); on an IR
that cannot be read only file, ok=false, error and summary are set), draft {ready, reasons, checks} (openvino-genai
readiness: the family's verify checks), tuning (what `irsurgeon tune` measured and chose on the draft, its record
as flows.tune.record writes it into the draft's provenance; null when it was never tuned or the record is not
JSON), footprint (footprint.FOOTPRINT_KEYS: weights per part, target and draft KV
cache per token and at `context` tokens, a runtime-overhead estimate), computed from the IR descriptions above.
Nothing is written and nothing from the files is executed; every `.xml` is byte-checked before OpenVINO reads it.
"""
from __future__ import annotations

import os
from pathlib import Path

from irsurgeon.core.config import read_json, text_section
from irsurgeon.core.errors import IRError, IRSurgeonError
from irsurgeon.draft.protocol import Family
from irsurgeon.families import registry
from irsurgeon.ir.footprint import footprint
from irsurgeon.core import rtinfo
from irsurgeon.ir import files
from irsurgeon.ir.describe import show_ir
from irsurgeon.ir.export import CONFIG, ExportDir
from irsurgeon.flows.verify import verify_directory
from irsurgeon.weights.held import Held
from irsurgeon.weights.quant import held_format, quantization_section

DIR_KEYS = ("kind", "path", "layout", "family", "config", "irs", "draft", "tuning", "footprint")
ENTRY_KEYS = ("file", "ok", "error", "summary", "ops", "inputs", "outputs", "states", "weights", "runtime_options",
              "annotation")
DEFAULT_CONTEXT = 4096
CONFIG_KEYS = ("model_type", "text_model_type", "num_hidden_layers", "hidden_size", "mtp_num_hidden_layers", "error")


def show(path: str | Path, *, context: int = DEFAULT_CONTEXT) -> dict:
    """show_directory for a directory (footprint at `context` tokens), show_ir for an `.xml`."""
    path = Path(path)
    if path.is_dir():
        return show_directory(path, context)
    if not path.exists():
        raise IRError(f"{path}: no such file or directory")
    if path.suffix != ".xml":
        raise IRError(f"{path}: expected an OpenVINO IR .xml file or a directory")
    return show_ir(path)


CHECKPOINT_KEYS = ("kind", "path", "family", "config", "tensors", "stored", "reading", "error")


def show_checkpoint(directory: Path, held: Held) -> dict:
    """A checkpoint directory (weights and config.json, no IR): whose draft it is, by its config and what it holds
    (families.registry.for_config, Family.reading), or why no family takes it; its tensor count; what its draft's
    tensors are stored as (`stored`: a float dtype, FP8, or int4 and its packing: weights.quant.held_format). Reads
    no weight."""
    info = {"kind": "checkpoint", "path": str(directory), "family": None, "config": config_facts(directory),
            "tensors": len(held.names), "stored": None, "reading": [], "error": None}
    try:
        config = read_json(directory / CONFIG)
        family = registry.for_config(config, str(directory / CONFIG), held)
        info["family"] = family.key
        prefix = family.hub_prefix or ""
        info["stored"] = held_format(quantization_section(config), sorted(n for n in held.names
                                                                         if n.startswith(prefix)),
                                     text_section(config).get("dtype") or config.get("torch_dtype"))
        info["reading"] = family.reading(config, held, str(directory / CONFIG))[1]
    except IRSurgeonError as e:
        info["error"] = str(e)
    return info


def show_directory(directory: Path, context: int = DEFAULT_CONTEXT) -> dict:
    xmls = files.list_irs(directory)
    if not xmls and (held := Held(directory)).known:  # a checkpoint, not an export
        return show_checkpoint(directory, held)
    if not xmls and not os.path.lexists(directory / CONFIG):
        raise IRError(f"{directory}: not an export directory (no config.json, no OpenVINO IR .xml)" + exports_in(directory))
    family = registry.for_directory(directory)
    draft = directory / family.layout.draft_xml
    if draft not in xmls and draft.is_file():
        xmls.append(draft)  # a draft in its own subfolder
    described = {xml.relative_to(directory).as_posix(): _describe(xml) for xml in xmls}
    irs = [_brief(name, info) for name, info in described.items()]
    return {
        "kind": "directory",
        "path": str(directory),
        "layout": ExportDir(directory).layout().value,
        "family": family.key,
        "config": config_facts(directory),
        "irs": irs,
        "draft": draft_verdict(directory, {r["file"]: r for r in irs}, family),
        "tuning": tuning(draft) if isinstance(described.get(family.layout.draft_xml), dict) else None,
        "footprint": footprint({k: v for k, v in described.items() if isinstance(v, dict)}, context,
                               family.layout.draft_xml, target=family.layout.target_in(directory),
                               runtime=(family.runtime_overhead, f"the {family.title}'s bundled pair")),
    }


def tuning(xml: Path) -> dict | None:
    """The draft's tuning record (rt_info irsurgeon/tuning); None when it holds none, or one that is not a JSON
    object."""
    return files.rt_info_object(xml, (rtinfo.PROVENANCE, rtinfo.TUNING))


def exports_in(directory: Path) -> str:
    """A hint naming the export directories one level down (a bundled pair's target/), else nothing."""
    below = sorted(d.name for d in directory.iterdir() if d.is_dir() and not d.is_symlink()
                   and (d / CONFIG).is_file() and files.list_irs(d))[:3]
    return f"; it holds {', '.join(below)}: irsurgeon show {directory / below[0]}" if below else ""


def config_facts(directory: Path) -> dict | None:
    """What config.json says about the text model (None when there is no config.json)."""
    path = directory / CONFIG
    if not path.exists():  # not is_file(): a FIFO or device there is reported as such by the reader
        return None
    facts = dict.fromkeys(CONFIG_KEYS)
    try:
        cfg = read_json(path)
    except IRSurgeonError as e:
        facts["error"] = str(e)
        return facts
    tc = text_section(cfg)
    facts.update(model_type=cfg.get("model_type"), text_model_type=tc.get("model_type"),
                 num_hidden_layers=tc.get("num_hidden_layers"), hidden_size=tc.get("hidden_size"),
                 mtp_num_hidden_layers=tc.get("mtp_num_hidden_layers"))
    return facts


def draft_verdict(directory: Path, irs: dict[str, dict], family: Family) -> dict:
    """Whether openvino-genai can run speculative decoding from this directory with its family's draft, and why
    not (an unreadable target or draft IR is named; else the family's verify checks)."""
    needed = (family.layout.target_in(directory), family.layout.draft_xml)
    unreadable = [f"{name}: {irs[name]['summary']}" for name in needed if name in irs and not irs[name]["ok"]]
    if unreadable:
        return {"ready": False, "reasons": unreadable, "checks": []}
    checks = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in verify_directory(directory, family=family)]
    reasons = [f"{c['name']}: {c['detail']}" for c in checks if not c["ok"]]
    return {"ready": not reasons and bool(checks), "reasons": reasons, "checks": checks}


def summary_line(info: dict) -> str:
    """One line for an IR: ops, inputs, outputs, states, weights (or what a tokenizer IR is), annotation."""
    w = info["weights"]
    if info["role"]:
        stored = f"{info['role']}: string ops over vocabulary tables, no weights"
    elif w["compressed"]:
        groups = ",".join("per-channel" if g == "-1" else f"g{g}" for g in w["group_sizes"])
        modes = " + ".join(f"{m} x{n}" for m, n in w["modes"].items())
        stored = f"weights {modes}" + (f" ({groups})" if groups else "")
    else:
        stored = f"weights {'/'.join(w['modes'])}" if w["modes"] else "no weights"
    ops = sum(info["op_histogram"].values())
    annotated = f", annotated {len(info['hidden_states'])} layers" if info["hidden_states"] else ""
    return (f"{ops} ops; in: {', '.join(p['name'] for p in info['inputs'])}; "
            f"out: {', '.join(p['name'] for p in info['outputs'])}; {len(info['states'])} states; "
            f"{stored}{annotated}")


def weight_precision(w: dict) -> str | None:
    """int4/int8 for a compressed model (its lowest bit width), else the float type holding most weight bytes."""
    if w["compressed"]:
        return f"int{w['bits']}"
    floats = {t: v["bytes"] for t, v in w["by_type"].items() if t in ("f32", "f16", "bf16")}
    return max(floats, key=floats.get) if floats else None


def ir_entry(name: str, info: dict) -> dict:
    """The structured per-IR entry of a directory description (ENTRY_KEYS)."""
    w = info["weights"]
    rows = info["hidden_states"]
    return {
        "file": name, "ok": True, "error": None, "summary": summary_line(info),
        "ops": sum(info["op_histogram"].values()),
        "inputs": info["inputs"], "outputs": info["outputs"], "states": info["states"],
        "weights": {"precision": weight_precision(w), **{k: w[k] for k in
                                                          ("compressed", "bits", "count", "modes", "group_sizes")}},
        "runtime_options": dict(info["runtime_options"]),
        "annotation": None if rows is None else {"layers": [
            {k: r[k] for k in ("layer", "producer", "output_index", "dtype", "shape", "problem")}
            for r in rows]},
    }


def _describe(xml: Path) -> dict | IRSurgeonError:
    try:
        return show_ir(xml)
    except IRSurgeonError as e:
        return e


def _brief(name: str, info: dict | IRSurgeonError) -> dict:
    if isinstance(info, IRSurgeonError):
        return {**dict.fromkeys(ENTRY_KEYS), "file": name, "ok": False, "error": str(info), "summary": str(info)}
    return ir_entry(name, info)
