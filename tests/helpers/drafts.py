"""Two drafts compared as openvino reads them back: their ops (by name where the build named them), their whole graph,
their weights' bytes. A patch that streams or appends its weights must give what the build holding every weight
gives, saved by openvino."""
from __future__ import annotations

import re

import openvino as ov


def layers(model: ov.Model) -> tuple[dict, list]:
    """Every op as (type, output shapes): by name where the build named it, as a sorted list where the save did (by
    position: the placeholders shift it)."""
    ops = [(op.get_friendly_name(), op.get_type_name(), [str(o.get_partial_shape()) for o in op.outputs()])
           for op in model.get_ops()]
    named = {name: rest for name, *rest in ops if not re.fullmatch(r"[A-Za-z]+_\d+", name)}
    return named, sorted(rest for _, *rest in ops)


def weight_data(model: ov.Model) -> dict:
    return {op.get_friendly_name(): (str(op.get_element_type()), op.get_data().tobytes()) for op in model.get_ops()
            if op.get_type_name() == "Constant" and op.get_friendly_name().endswith(".weight")}


def graph(model: ov.Model) -> dict:
    """Every op by name: type, outputs (type, shape), inputs (producer name and port), rt_info, a constant's bytes."""
    out = {}
    for op in model.get_ops():
        out[op.get_friendly_name()] = (
            op.get_type_name(),
            [(str(o.get_element_type()), str(o.get_partial_shape())) for o in op.outputs()],
            [(i.get_source_output().get_node().get_friendly_name(), i.get_source_output().get_index())
             for i in op.inputs()],
            {k: str(v) for k, v in op.get_rt_info().items()},
            op.get_data().tobytes() if op.get_type_name() == "Constant" else None)
    return out
