"""A staged draft's feed-forward MLPs (and an lm_head's vocabulary rows) narrowed to a few rows, for the families'
one-step checks.

The feed-forward matrices (dense MLP, shared expert, routed experts) are most of a draft's bytes, and compiling them
whole costs the CPU plugin's repack of all of them (f32 for f16 weights; its own copy of nncf's int4/int8 weights),
for rows no check needs run. Each matrix as staged, along its intermediate axis I_ff:

    float        W [O, I] (experts [E, O, I]) -> Convert -> MatMul                 gate/up: O = I_ff; down: I = I_ff
    nncf, group  q [O, I/g, g] (experts [E, ...]), zero point z and scale s [O, I/g, 1] -> Convert, Subtract,
                 Multiply -> Reshape to [O, I] -> MatMul                           down: I/g groups = I_ff / g
    nncf, per-channel  q [O, I], z and s [O, 1] -> Convert, Subtract, Multiply -> MatMul

Every Constant on those paths (and a grouped path's Reshape target) is remade in the narrow shape from its own first
staged bytes: only those pages of the `.bin` are read, and the graph keeps every op, connection and other shape (the
intermediate width appears nowhere else; the drafts' reshapes use -1). An MLP is narrowed to the same width w in all
three matrices: SMOKE_WIDTH, or the group size of a grouped down_proj when larger (w counts whole groups); an MLP no
wider than w is left whole. Matrices are found by name: `...mlp.[shared_expert.|experts.](gate|up|down)_proj.weight`
(the checkpoint names every family's builder gives its nodes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import openvino as ov
import openvino.opset13 as ops

FEED_FORWARD = re.compile(r"(.*mlp\.(?:shared_expert\.|experts\.)?)(gate_proj|up_proj|down_proj)\.weight$")
SMOKE_WIDTH = 8  # feed-forward rows kept for the one-step check
DECOMPRESSION = ("Convert", "Subtract", "Multiply")


@dataclass
class Matrix:
    """One feed-forward matrix as staged: its weight Constant, nncf's zero point and scale Constants (compressed
    only) and the Reshape back to [.., O, I] (grouped only)."""
    weight: ov.Node
    down: bool
    experts: bool
    params: list = field(default_factory=list)
    reshape: ov.Node | None = None

    @property
    def axis(self) -> int:
        """The intermediate axis of every Constant of this matrix (in its staged layout)."""
        return (2 if self.down else 1) if self.experts else (1 if self.down else 0)

    @property
    def group(self) -> int:
        """Values per group along a grouped down_proj's intermediate axis (1: not grouped that way)."""
        return self.weight.get_shape()[-1] if self.down and self.reshape is not None else 1

    @property
    def width(self) -> int:
        """The full intermediate width."""
        return self.weight.get_shape()[self.axis] * self.group


def decompression(weight: ov.Node) -> tuple[list, ov.Node | None]:
    """The zero point / scale Constants beside an nncf weight on its way to the MatMul, and its Reshape if any."""
    params, node, own = [], weight, weight.get_friendly_name()
    while True:
        users = [t.get_node() for t in node.output(0).get_target_inputs()]
        if len(users) != 1 or users[0].get_type_name() not in (*DECOMPRESSION, "Reshape"):
            return params, None
        node = users[0]
        if node.get_type_name() == "Reshape":
            return params, node
        for value in node.input_values():
            src = value.get_node()
            src = src.input_value(0).get_node() if src.get_type_name() == "Convert" else src
            if src.get_type_name() == "Constant" and src.get_friendly_name() != own:
                params.append(src)


def feed_forward(model: ov.Model) -> dict[str, list[Matrix]]:
    """The feed-forward matrices by MLP (the name before gate_proj/up_proj/down_proj)."""
    mlps: dict[str, list[Matrix]] = {}
    for op in model.get_ops():
        match = FEED_FORWARD.search(op.get_friendly_name())
        if op.get_type_name() != "Constant" or not match:
            continue
        m = Matrix(op, match.group(2) == "down_proj", ".experts." in match.group(1))
        if not op.get_element_type().is_real():
            m.params, m.reshape = decompression(op)
        mlps.setdefault(match.group(1), []).append(m)
    return mlps


def first_values(const: ov.Node, shape: list[int]) -> None:
    """Replace const by a Constant of its type in `shape` holding its first staged bytes (packed 4-bit types too)."""
    tensor = ov.Tensor(const.get_output_element_type(0), ov.Shape(shape))
    dst = tensor.data.view(np.uint8).reshape(-1)
    dst[:] = const.get_data().view(np.uint8).reshape(-1)[:dst.size]
    narrow = ov.op.Constant(tensor)
    narrow.set_friendly_name(const.get_friendly_name())
    const.output(0).replace(narrow.output(0))


def narrow_matrix(m: Matrix, width: int) -> None:
    """m's Constants (and Reshape target) cut to `width` along the intermediate axis."""
    for const in [m.weight, *m.params]:
        shape = list(const.get_shape())
        if shape[m.axis] > 1:  # a per-channel down_proj's scale [.., O, 1] has no intermediate axis
            shape[m.axis] = width // m.group
            first_values(const, shape)
    if m.reshape is not None:
        target = list(m.reshape.get_output_shape(0))
        target[-1 if m.down else -2] = width
        shape = ops.constant(np.array(target, np.int64))
        shape.set_friendly_name(m.reshape.input_value(1).get_node().get_friendly_name())
        m.reshape.input(1).replace_source_output(shape.output(0))


def narrow_feed_forward(model: ov.Model, width: int = SMOKE_WIDTH) -> int:
    """Narrow every feed-forward MLP of the staged head in place (module docstring); returns how many matrices."""
    cut = 0
    for matrices in feed_forward(model).values():
        w = max([width, *(m.group for m in matrices)])
        if len(matrices) != 3 or any(m.width <= w for m in matrices):
            continue  # no narrower shape keeps the three matrices and their groups consistent
        for m in matrices:
            narrow_matrix(m, w)
        cut += len(matrices)
    model.validate_nodes_and_infer_types()
    return cut


def narrow_rows(model: ov.Model, weight: str, width: int = SMOKE_WIDTH) -> int:
    """Keep the first `width` output rows of the matrix whose weight Constant is named `weight` (an lm_head: its rows
    are the vocabulary), float or nncf-compressed, for the same one-step checks; returns the rows kept (the matrix's
    own count when it is no wider)."""
    found = [op for op in model.get_ops() if op.get_type_name() == "Constant" and op.get_friendly_name() == weight]
    if len(found) != 1:
        return 0
    m = Matrix(found[0], down=False, experts=False)
    if not found[0].get_element_type().is_real():
        m.params, m.reshape = decompression(found[0])
    if m.width <= width:
        return m.width
    narrow_matrix(m, width)
    model.validate_nodes_and_infer_types()
    return width
