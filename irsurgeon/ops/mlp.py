"""SwiGLU MLP:  down(silu(gate(x)) * up(x))."""
from __future__ import annotations

import openvino as ov
import openvino.opset13 as ops
from openvino.utils.node_factory import NodeFactory

from irsurgeon.ops.core import linear, named


def silu(x: ov.Output, name: str) -> ov.Output:
    """Swish with its single data input (beta 1). The CPU plugin's MLP and MoE fusions match only this form
    (openvino intel_cpu x64/pass/mlp_fusion.cpp: `makePattern<opset4::Swish>({gate_proj})`); opset13.swish adds a
    beta input."""
    return named(NodeFactory("opset4").create("Swish", [x], {}), name)


def swiglu(x: ov.Output, gate_w: ov.Output, up_w: ov.Output, down_w: ov.Output, name: str,
           fusable: bool = False) -> ov.Output:
    """fusable: with `silu`, so the CPU plugin runs gate, up and down as one LLMMLP node (a DFlash draft's
    16-row block: 164 instead of 185 ms a call at Qwen3.5-27B-DFlash size, bf16); else opset13's two-input Swish,
    the form the Qwen3.5 MTP head was measured in."""
    act = f"{name}.act_fn"
    gate = linear(x, gate_w, f"{name}.gate_proj")
    gate = silu(gate, act) if fusable else named(ops.swish(gate), act)
    up = linear(x, up_w, f"{name}.up_proj")
    return linear(named(ops.multiply(gate, up), f"{name}/mul"), down_w, f"{name}.down_proj")
