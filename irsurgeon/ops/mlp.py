"""SwiGLU MLP:  down(silu(gate(x)) * up(x))."""
from __future__ import annotations

import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ops.core import linear, named


def swiglu(x: ov.Output, gate_w: ov.Output, up_w: ov.Output, down_w: ov.Output, name: str) -> ov.Output:
    gate = named(ops.swish(linear(x, gate_w, f"{name}.gate_proj")), f"{name}.act_fn")
    up = linear(x, up_w, f"{name}.up_proj")
    return linear(named(ops.multiply(gate, up), f"{name}/mul"), down_w, f"{name}.down_proj")
