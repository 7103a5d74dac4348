"""A MoE layer's output made tappable by openvino-genai 2026.4.1: an edit of the target's openvino_model.xml only.

genai's rule (openvino.genai src/cpp/src/speculative_decoding/eagle3_model_transforms.cpp, transform_hidden_state ->
find_decoder_layer_hidden_state_outputs -> find_hidden_state_outputs_by_patterns, is_hidden_state_residual_node):
for tap i, the first op in get_ordered_ops() that is a v1::Add whose friendly name contains "layers.{i}/" and whose
input 1 is a v0::MatMul whose input 0 is a v1::Multiply. A MoE layer's output Add (optimum-intel 2.2.0's Qwen3-MoE
export: Add(attention residual, Reshape(ReduceSum(experts)))) is no such Add, so genai adds no last_hidden_state
output and the first step fails ("Port for tensor name last_hidden_state was not found"; openvino.genai issue 4390).

The edit, for each such layer i whose output is `out` (the last Add named layers.{i}/ whose input 0 is another Add
named layers.{i}/: the residual chain's end):

    zero = Const [1, 0]                                   # no element: offset 0, size 0, the .bin is not touched
    tap  = Add(out, MatMul(Multiply(zero, zero), zero, transpose_b=true))    # "<...>layers.{i}/eagle3_tap/Add"
    every consumer of out reads tap

MatMul over an empty inner dimension is a [1, 1] of +0, so tap = out + 0 = out for every value (a -0 becomes +0;
NaN and Inf pass unchanged). The branch holds constants only: OpenVINO folds it at compile and drops the Add of
zero (the CPU plugin's runtime graph of the edited target has the same nodes as the unedited one), so plain
generation pays nothing; genai reads the model before compiling and finds tap by its own rule. Text edits only:
every other byte of the file stays as it was.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from irsurgeon.core.errors import IRError
from irsurgeon.ir import xmlsafe

LAYER_NAME = re.compile(r"layers\.(\d+)/")
TAP = "eagle3_tap"
ELEMENT = {"FP32": "f32", "FP16": "f16", "BF16": "bf16"}  # port precision -> Const element_type
_LAYER = re.compile(rb'<layer id="(\d+)" name="([^"]*)" type="([^"]*)"')
_OUTPUT_PORT = re.compile(rb'<output>\s*<port id="(\d+)" precision="([A-Z0-9]+)"[^>]*>(.*?)</port>', re.S)
_DIM = re.compile(rb"<dim>(-?\d+)</dim>")


@dataclass(frozen=True)
class Tap:
    layer: int
    name: str       # the friendly name of the layer's output Add


def layer_of(name: str) -> int | None:
    found = {int(m) for m in LAYER_NAME.findall(name)}
    return found.pop() if len(found) == 1 else None


def layer_outputs(model) -> dict[int, str]:
    """Decoder layer index -> the friendly name of its output Add (the residual chain's last Add in the layer)."""
    adds = {op.get_friendly_name(): layer_of(op.get_friendly_name()) for op in model.get_ordered_ops()
            if op.get_type_name() == "Add" and op.get_input_size() == 2}
    out: dict[int, str] = {}
    for op in model.get_ordered_ops():
        i = adds.get(op.get_friendly_name()) if op.get_type_name() == "Add" else None
        src = op.input_value(0).get_node() if i is not None else None
        if src is not None and src.get_type_name() == "Add" and adds.get(src.get_friendly_name()) == i:
            out[i] = op.get_friendly_name()
    return out


def tap_name(out_name: str, layer: int) -> str:
    """'<prefix>layers.{i}/eagle3_tap/Add': genai matches the "layers.{i}/" in it."""
    key = f"layers.{layer}/"
    return out_name[:out_name.index(key) + len(key)] + f"{TAP}/Add"


def edit_xml(data: bytes, taps: list[Tap], source: str) -> bytes:
    """data with each tap's branch added after its output Add and that Add's consumers moved onto the tap."""
    for tap in taps:
        data = _edit_one(data, tap, source)
    return data


def _edit_one(data: bytes, tap: Tap, source: str) -> bytes:
    end, out_id, port, precision, dims = _find_output(data, tap.name, source)
    first = max(int(m) for m in re.findall(rb'<layer id="(\d+)"', data)) + 1
    zero, mul, mm, add = (str(first + k) for k in range(4))
    data = re.sub(rb'from-layer="%s" from-port="%s"' % (out_id.encode(), port.encode()),
                  f'from-layer="{add}" from-port="2"'.encode(), data)
    layers = _branch(tap, (zero, mul, mm, add), precision, dims)
    edges = [(zero, 0, mul, 0), (zero, 0, mul, 1), (mul, 2, mm, 0), (zero, 0, mm, 1), (out_id, port, add, 0),
             (mm, 2, add, 1)]
    edge_text = "".join(f'\t\t<edge from-layer="{a}" from-port="{p}" to-layer="{b}" to-port="{q}" />\n'
                        for a, p, b, q in edges).encode()
    close = data.rfind(b"\t</edges>")
    if close < 0:
        raise IRError(f"{source}: no </edges> line where OpenVINO writes it; not editing this IR")
    return data[:end] + layers + data[end:close] + edge_text + data[close:]


def _find_output(data: bytes, name: str, source: str) -> tuple[int, str, str, str, list[str]]:
    """Where the Add named `name` ends (after its </layer> line), its id, output port, precision and output dims."""
    hits = [m for m in _LAYER.finditer(data) if m.group(2) == xmlsafe.escape_attr(name).encode()]
    if len(hits) != 1 or hits[0].group(3) != b"Add":
        raise IRError(f"{source}: {len(hits)} layers named {name!r}, expected one Add; not editing this IR")
    close = data.find(b"</layer>", hits[0].end())
    port = _OUTPUT_PORT.search(data, hits[0].end(), close)
    if close < 0 or port is None or port.group(2).decode() not in ELEMENT:
        raise IRError(f"{source}: layer {name!r} has no f32/f16/bf16 output port where OpenVINO writes it")
    end = data.index(b"\n", close) + 1
    dims = [d.decode() for d in _DIM.findall(port.group(3))]
    return end, hits[0].group(1).decode(), port.group(1).decode(), port.group(2).decode(), dims


def _port(pid: int, precision: str, dims: list[str], indent: str = "\t\t\t\t") -> str:
    inner = "".join(f"{indent}\t<dim>{d}</dim>\n" for d in dims)
    return f'{indent}<port id="{pid}" precision="{precision}">\n{inner}{indent}</port>\n'


def _layer(lid: str, name: str, kind: str, data: str, ins: list[list[str]], outs: list[list[str]],
           precision: str) -> str:
    text = f'\t\t<layer id="{lid}" name="{xmlsafe.escape_attr(name)}" type="{kind}" version="opset1">\n' \
           f"\t\t\t<data {data} />\n"
    if ins:
        text += "\t\t\t<input>\n" + "".join(_port(i, precision, d) for i, d in enumerate(ins)) + "\t\t\t</input>\n"
    first = len(ins)
    text += "\t\t\t<output>\n" + "".join(_port(first + i, precision, d) for i, d in enumerate(outs))
    return text + "\t\t\t</output>\n\t\t</layer>\n"


def _branch(tap: Tap, ids: tuple[str, str, str, str], precision: str, dims: list[str]) -> bytes:
    zero, mul, mm, add = ids
    base = tap_name(tap.name, tap.layer)[:-len("Add")]
    empty, one = ["1", "0"], ["1", "1"]
    return (_layer(zero, base + "Zero", "Const", f'element_type="{ELEMENT[precision]}" shape="1, 0" offset="0" '
                   f'size="0"', [], [empty], precision)
            + _layer(mul, base + "Multiply", "Multiply", 'auto_broadcast="numpy"', [empty, empty], [empty], precision)
            + _layer(mm, base + "MatMul", "MatMul", 'transpose_a="false" transpose_b="true"', [empty, empty], [one],
                     precision)
            + _layer(add, base + "Add", "Add", 'auto_broadcast="numpy"', [dims, one], [dims], precision)).encode()
