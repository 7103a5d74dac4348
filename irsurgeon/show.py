"""What an IR or an exported model directory holds, as one JSON-able dict (the `show` command prints it).

For an IR (`show_ir`), keys in this order (IR_KEYS):
    kind="ir", path, inputs/outputs [{name, names, type, shape}], states [{id, type, shape}], rt_info (nested
    strings), hidden_states (the `hidden_states_decoder_layers` table: layer, producer, output_index, op, type, shape,
    problem; None when absent), runtime_options, op_histogram {"Type-opsetN": n}, constants {type: {count, bytes}}
    over every Constant, weights (precision.weight_summary: compressed, bits, modes, group_sizes, by_type).
For a directory (`show_directory`, DIR_KEYS): kind="directory", path, layout, family (whose draft contract `mtp`
checks: "gemma4" for a gemma4_text / gemma4 config, the Gemma 4 MTP assistant in mtp_assistant/; else "qwen3_5",
the MTP head in openvino_mtp_model.xml), config (model_type, layers,
mtp_num_hidden_layers, ...), irs (one entry per IR, a Gemma 4 assistant's as `mtp_assistant/openvino_model.xml`, ENTRY_KEYS: file, ok, error, summary (the text line), ops,
inputs/outputs [{name, dtype, shape}], states [{id, dtype, shape}] (shape: a list of ints, null for a dynamic
dimension, or null for a dynamic rank), weights {precision, compressed, bits, count, modes, group_sizes},
runtime_options, annotation ({layers: [{layer, producer, output_index, dtype, shape, problem}]} or null); on an IR
that cannot be read only file, ok=false, error and summary are set), mtp {ready, reasons, checks} (openvino-genai
MTP readiness, verify_directory's checks: for Qwen3.5 the decomposed VLM layout, an `openvino_mtp_model.xml` that
meets the contract, the hidden-state annotation; for Gemma 4 the target's five outputs and the assistant),
footprint (footprint.FOOTPRINT_KEYS: weights per part, target and MTP KV cache per token and at `context` tokens,
a runtime-overhead estimate), computed from the IR descriptions above.
Nothing is written and nothing from the files is executed; every `.xml` is byte-checked before OpenVINO reads it.
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.config import read_json, text_section
from irsurgeon.errors import IRError, IRSurgeonError
from irsurgeon.families.gemma4.layout import ASSISTANT_DIR, MODEL_XML
from irsurgeon.families.gemma4.layout import target_type as gemma4_type
from irsurgeon.footprint import footprint
from irsurgeon.ir import files, graph
from irsurgeon.ir.export import CONFIG, LANGUAGE_MODEL, MTP_XML, TEXT_EMBEDDINGS, ExportDir
from irsurgeon.ir.hidden_states import parse_annotation
from irsurgeon.ir.storage import weight_summary
from irsurgeon.rtinfo import HIDDEN_STATES_LAYERS, RUNTIME_OPTIONS
from irsurgeon.verify import verify_directory

IR_KEYS = ("kind", "path", "inputs", "outputs", "states", "rt_info", "hidden_states", "runtime_options",
           "op_histogram", "constants", "weights")
DIR_KEYS = ("kind", "path", "layout", "family", "config", "irs", "mtp", "footprint")
ENTRY_KEYS = ("file", "ok", "error", "summary", "ops", "inputs", "outputs", "states", "weights", "runtime_options",
              "annotation")
DEFAULT_CONTEXT = 4096
CONFIG_KEYS = ("model_type", "text_model_type", "num_hidden_layers", "hidden_size", "mtp_num_hidden_layers", "error")


def show(path: str | Path, context: int = DEFAULT_CONTEXT) -> dict:
    """show_directory for a directory (footprint at `context` tokens), show_ir for an `.xml`."""
    path = Path(path)
    if path.is_dir():
        return show_directory(path, context)
    if not path.exists():
        raise IRError(f"{path}: no such file or directory")
    if path.suffix != ".xml":
        raise IRError(f"{path}: expected an OpenVINO IR .xml file or a directory")
    return show_ir(path)


def show_ir(xml: Path) -> dict:
    model = _load(xml)
    rt = graph.rt_tree(model)
    value = rt.get(HIDDEN_STATES_LAYERS)
    return {
        "kind": "ir",
        "path": str(xml),
        "inputs": [graph.port(i) for i in model.inputs],
        "outputs": [graph.port(o) for o in model.outputs],
        "states": graph.states(model),
        "rt_info": rt,
        "hidden_states": hidden_state_table(model, value) if isinstance(value, str) else None,
        "runtime_options": rt.get(RUNTIME_OPTIONS) or {},
        "op_histogram": graph.op_histogram(model),
        "constants": constant_totals(model),
        "weights": weights(model),
    }


def hidden_state_table(model, value: str) -> list[dict]:
    """One row per annotated layer: the producer op, its type, and the annotated output's type and shape."""
    layers = parse_annotation(value, HIDDEN_STATES_LAYERS)
    by_name: dict[str, list] = {}
    for op in model.get_ops():
        by_name.setdefault(op.get_friendly_name(), []).append(op)
    rows = []
    for layer, (producer, index) in sorted(layers.items()):
        found = by_name.get(producer, [])
        row = {"layer": layer, "producer": producer, "output_index": index, "op": None, "type": None,
               "shape": None, "problem": None}
        if len(found) != 1:
            row["problem"] = "no such op" if not found else f"{len(found)} ops share this name"
        elif index >= found[0].get_output_size():
            row["problem"] = f"op has {found[0].get_output_size()} output(s)"
        else:
            out = found[0].output(index)
            row.update(op=found[0].get_type_name(), type=out.get_element_type().get_type_name(),
                       shape=graph.shape_text(out.get_partial_shape()))
        rows.append(row)
    return rows


def constant_totals(model) -> dict[str, dict]:
    """Count and bytes of every Constant, per element type."""
    totals: dict[str, list[int]] = {}
    for op in model.get_ops():
        if op.get_type_name() == "Constant":
            t = totals.setdefault(op.get_element_type().get_type_name(), [0, 0])
            t[0], t[1] = t[0] + 1, t[1] + op.get_byte_size()
    return {k: {"count": c, "bytes": b} for k, (c, b) in sorted(totals.items())}


def weights(model) -> dict:
    """Weight precision: storage modes, lowest bit width, group sizes (-1 = per channel), totals per type."""
    s = weight_summary(model)
    return {
        "count": len(s.weights),
        "compressed": s.compressed,
        "bits": s.bits,
        "modes": dict(sorted(s.modes.items())),
        "group_sizes": {str(g): n for g, n in sorted(s.group_sizes.items())},
        "by_type": {k: {"count": t.count, "bytes": t.nbytes} for k, t in s.by_type.items()},
    }


def show_directory(directory: Path, context: int = DEFAULT_CONTEXT) -> dict:
    family = "gemma4" if gemma4_type(directory) else "qwen3_5"
    xmls = files.list_irs(directory)
    if family == "gemma4" and (directory / ASSISTANT_DIR / MODEL_XML).is_file():
        xmls.append(directory / ASSISTANT_DIR / MODEL_XML)  # the draft lives in its own folder
    described = {xml.relative_to(directory).as_posix(): _describe(xml) for xml in xmls}
    irs = [_brief(name, info) for name, info in described.items()]
    return {
        "kind": "directory",
        "path": str(directory),
        "layout": ExportDir(directory).layout().value,
        "family": family,
        "config": config_facts(directory),
        "irs": irs,
        "mtp": mtp_verdict(directory, {r["file"]: r for r in irs}),
        "footprint": footprint({k: v for k, v in described.items() if isinstance(v, dict)}, context),
    }


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


def mtp_verdict(directory: Path, irs: dict[str, dict]) -> dict:
    """Whether openvino-genai can run MTP speculative decoding from this directory, and why not."""
    needed = (LANGUAGE_MODEL, TEXT_EMBEDDINGS, MTP_XML)
    unreadable = [f"{name}: {irs[name]['summary']}" for name in needed if name in irs and not irs[name]["ok"]]
    if unreadable:
        return {"ready": False, "reasons": unreadable, "checks": []}
    checks = [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in verify_directory(directory)]
    reasons = [f"{c['name']}: {c['detail']}" for c in checks if not c["ok"]]
    return {"ready": not reasons and bool(checks), "reasons": reasons, "checks": checks}


def summary_line(info: dict) -> str:
    """One line for an IR: ops, inputs, outputs, states, weights, annotation."""
    w = info["weights"]
    if w["compressed"]:
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


def shape_list(text: str) -> list[int | None] | None:
    """"[?,2,64]" -> [None, 2, 64]; a bounded dimension ("1..8") is dynamic (None); a dynamic rank -> None."""
    inner = text.strip()[1:-1]
    if text.strip() in ("[...]", "...") or not text.strip().startswith("["):
        return None
    return [int(d) if d.isdigit() else None for d in inner.split(",")] if inner else []


def weight_precision(w: dict) -> str | None:
    """int4/int8 for a compressed model (its lowest bit width), else the float type holding most weight bytes."""
    if w["compressed"]:
        return f"int{w['bits']}"
    floats = {t: v["bytes"] for t, v in w["by_type"].items() if t in ("f32", "f16", "bf16")}
    return max(floats, key=floats.get) if floats else None


def _ports(ports: list[dict]) -> list[dict]:
    return [{"name": p["name"], "dtype": p["type"], "shape": shape_list(p["shape"])} for p in ports]


def ir_entry(name: str, info: dict) -> dict:
    """The structured per-IR entry of a directory description (ENTRY_KEYS)."""
    w = info["weights"]
    rows = info["hidden_states"]
    return {
        "file": name, "ok": True, "error": None, "summary": summary_line(info),
        "ops": sum(info["op_histogram"].values()),
        "inputs": _ports(info["inputs"]), "outputs": _ports(info["outputs"]),
        "states": [{"id": s["id"], "dtype": s["type"], "shape": shape_list(s["shape"])} for s in info["states"]],
        "weights": {"precision": weight_precision(w), **{k: w[k] for k in
                                                          ("compressed", "bits", "count", "modes", "group_sizes")}},
        "runtime_options": dict(info["runtime_options"]),
        "annotation": None if rows is None else {"layers": [
            {"layer": r["layer"], "producer": r["producer"], "output_index": r["output_index"], "dtype": r["type"],
             "shape": None if r["shape"] is None else shape_list(r["shape"]), "problem": r["problem"]}
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


def _load(xml: Path):
    data = files.read_ir_bytes(xml)
    if b'version="extension"' in data:
        _load_tokenizer_ops(xml)
    return files.read_model(xml, checked=True)


def _load_tokenizer_ops(xml: Path) -> None:
    try:
        import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops with openvino.Core)
    except ImportError:
        raise IRError(f"{xml}: uses tokenizer extension ops; install openvino-tokenizers to read it") from None
