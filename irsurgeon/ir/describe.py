"""What one IR holds, as one JSON-able dict (`irsurgeon show X.xml` prints it; show.py describes directories).

Keys in this order (IR_KEYS): kind="ir", path, inputs/outputs [{name, names, dtype, shape}], states [{id, dtype,
shape}] (shape: a list of ints, null for a dynamic dimension, or null for a dynamic rank: graph.dims), rt_info (nested
strings), hidden_states (the `hidden_states_decoder_layers` table: layer, producer, output_index, op, dtype, shape,
problem; None when absent), runtime_options, op_histogram {"Type-opsetN": n},
constants {type: {count, bytes}} over every Constant, role ("tokenizer" / "detokenizer" for an IR with a string
input / output and no MatMul or Convolution, else null), weights (storage.weight_summary: compressed, bits, modes, group_sizes, by_type; none
for a tokenizer or detokenizer, whose Gathers read vocabulary tables and byte maps, not weights). Nothing is
written; every `.xml` is byte-checked before OpenVINO reads it.
"""
from __future__ import annotations

from pathlib import Path

from openvino import Type

from irsurgeon.core.errors import IRError
from irsurgeon.ir import files, graph
from irsurgeon.ir.hidden_states import parse_annotation
from irsurgeon.ir.storage import WeightSummary, weight_summary
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS, RUNTIME_OPTIONS

IR_KEYS = ("kind", "path", "inputs", "outputs", "states", "rt_info", "hidden_states", "runtime_options",
           "op_histogram", "constants", "role", "weights")
TEXT_ROLES = ("tokenizer", "detokenizer")
WEIGHT_OPS = ("MatMul", "Convolution")


def show_ir(xml: Path) -> dict:
    model = _load(xml)
    rt = graph.rt_tree(model)
    value = rt.get(HIDDEN_STATES_LAYERS)
    role = text_role(model)
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
        "role": role,
        "weights": weights(model) if role is None else weights(None),
    }


def text_role(model) -> str | None:
    """"tokenizer" for an IR taking strings, "detokenizer" for one returning them (openvino-tokenizers' IRs and
    synth's core-op pair alike), else None. An IR with a MatMul or a Convolution has weights whatever its ports
    (no tokenizer IR has one): it gets no role, so its weights are shown."""
    def strings(ports) -> bool:
        return any(p.get_element_type() == Type.string for p in ports)
    if any(op.get_type_name() in WEIGHT_OPS for op in model.get_ops()):
        return None
    return TEXT_ROLES[0] if strings(model.inputs) else TEXT_ROLES[1] if strings(model.outputs) else None


def hidden_state_table(model, value: str) -> list[dict]:
    """One row per annotated layer: the producer op, its type, and the annotated output's type and shape."""
    layers = parse_annotation(value, HIDDEN_STATES_LAYERS)
    by_name: dict[str, list] = {}
    for op in model.get_ops():
        by_name.setdefault(op.get_friendly_name(), []).append(op)
    rows = []
    for layer, (producer, index) in sorted(layers.items()):
        found = by_name.get(producer, [])
        row = {"layer": layer, "producer": producer, "output_index": index, "op": None, "dtype": None,
               "shape": None, "problem": None}
        if len(found) != 1:
            row["problem"] = "no such op" if not found else f"{len(found)} ops share this name"
        elif index >= found[0].get_output_size():
            row["problem"] = f"op has {found[0].get_output_size()} output(s)"
        else:
            out = found[0].output(index)
            row.update(op=found[0].get_type_name(), dtype=out.get_element_type().get_type_name(),
                       shape=graph.dims(out.get_partial_shape()))
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
    """Weight precision: storage modes, lowest bit width, group sizes (-1 = per channel), totals per type; a model
    of None: no weights."""
    s = weight_summary(model) if model is not None else WeightSummary((), {})
    return {
        "count": len(s.weights),
        "compressed": s.compressed,
        "bits": s.bits,
        "modes": dict(sorted(s.modes.items())),
        "group_sizes": {str(g): n for g, n in sorted(s.group_sizes.items())},
        "by_type": {k: {"count": t.count, "bytes": t.nbytes} for k, t in s.by_type.items()},
    }


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
