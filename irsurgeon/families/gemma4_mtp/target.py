"""The five outputs openvino-genai's Gemma 4 MTP path reads from the target, added to its `.xml` only.

    mtp_last_hidden_state        the lm_head MatMul's input (the final norm), found by following `logits` back
    mtp_{full,sliding}_attention_{key,value}   the values the store layers write into their KV cache (the inputs of
                                 their Assign nodes): the last non-KV-shared layer of each type (Gemma4TextConfig
                                 .kv_sharing_modes, transformers 5.24.0 configuration_gemma4.py)

The edit is textual: one `<layer type="Result">` per output appended to the top-level `<layers>` and one `<edge>`
per output appended to the top-level `<edges>`; every other byte of the `.xml` stays, the `.bin` is never opened for
writing. genai finds the pair by these port names (gemma4_mtp_strategy.cpp is_gemma4_mtp_model_pair) and builds its
embedding model from the node whose friendly name holds `embed_tokens/aten::mul/Multiply` (or
`embed_tokens/aten::embedding/Gather`) and the `input_ids` parameter (create_embedding_model): both are checked.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import openvino as ov

from irsurgeon.core.errors import IRError
from irsurgeon.ir import files, xmlsafe

LOGITS = "logits"
HIDDEN = "mtp_last_hidden_state"
KV_OUTPUTS = tuple(f"mtp_{t}_{kv}" for t in ("full_attention", "sliding_attention") for kv in ("key", "value"))
OUTPUTS = (HIDDEN, *KV_OUTPUTS)
EMBEDDING_NAMES = ("embed_tokens/aten::mul/Multiply", "embed_tokens/aten::embedding/Gather")
PASS_THROUGH = {"Multiply", "Divide", "Tanh", "Convert", "Add"}  # final_logit_softcapping: tanh(x / c) * c


@dataclass(frozen=True)
class Source:
    """Where a new output reads: a node's friendly name and its output index."""
    output: str
    node: str
    index: int


def lm_head_input(model: ov.Model, where: str) -> ov.Output:
    """The lm_head MatMul's data input, following `logits` back through a softcap."""
    found = [o for o in model.outputs if LOGITS in o.get_names()]
    if not found:
        raise IRError(f"{where}: no '{LOGITS}' output")
    node = found[0].get_node().input_value(0).get_node()
    for _ in range(8):
        if node.get_type_name() == "MatMul":
            return node.input_value(0)
        if node.get_type_name() not in PASS_THROUGH:
            break
        data = [v for v in node.input_values() if v.get_node().get_type_name() != "Constant"]
        if len(data) != 1:
            break
        node = data[0].get_node()
    raise IRError(f"{where}: '{LOGITS}' is not produced by an lm_head MatMul (found {node.get_type_name()} "
                  f"'{node.get_friendly_name()}')")


_LAYER_KV = re.compile(r"\.(\d+)\.(key|value)$")


def cache_writes(model: ov.Model) -> dict[tuple[int, str], ov.Output]:
    """(decoder layer, 'key'|'value') -> the value its Assign writes; the layer read from optimum's variable ids
    (`past_key_values.{i}.keypresent.{i}.key`: MakeStateful joins the input and output names)."""
    writes = {}
    for sink in model.get_sinks():
        match = _LAYER_KV.search(sink.get_variable_id())
        if sink.get_type_name() == "Assign" and match:
            writes[(int(match.group(1)), match.group(2))] = sink.input_value(0)
    return writes


def store_layers(layer_types: list[str], num_kv_shared: int) -> dict[str, int]:
    """layer type -> the last non-KV-shared layer of that type (kv_sharing_modes' 'store' layers, or simply the
    last layer of each type when nothing is shared)."""
    first_shared = len(layer_types) - num_kv_shared
    return {kind: max(i for i in range(first_shared) if layer_types[i] == kind)
            for kind in ("full_attention", "sliding_attention") if kind in layer_types[:first_shared]}


def find_sources(model: ov.Model, layer_types: list[str], num_kv_shared: int, where: str) -> list[Source]:
    """The producer of each new output, checked against the shapes genai expects."""
    hidden = lm_head_input(model, where)
    sources = [Source(HIDDEN, hidden.get_node().get_friendly_name(), hidden.get_index())]
    writes, stores = cache_writes(model), store_layers(layer_types, num_kv_shared)
    for kind in ("full_attention", "sliding_attention"):
        if kind not in stores:
            raise IRError(f"{where}: config has no non-KV-shared {kind} layer to read the assistant's K/V from")
        for kv in ("key", "value"):
            out = writes.get((stores[kind], kv))
            if out is None:
                raise IRError(f"{where}: no KV-cache Assign for layer {stores[kind]} {kv} (the {kind} store layer)")
            if out.get_partial_shape().rank.get_length() != 4:
                raise IRError(f"{where}: layer {stores[kind]} {kv} cache is not rank 4")
            sources.append(Source(f"mtp_{kind}_{kv}", out.get_node().get_friendly_name(), out.get_index()))
    return sources


def check_embedding_path(model: ov.Model, where: str) -> None:
    """genai's create_embedding_model needs the named embedding node and an `input_ids` parameter."""
    names = [n.get_friendly_name() for n in model.get_ordered_ops()]
    if not any(e in n and "embed_tokens_per_layer" not in n for n in names for e in EMBEDDING_NAMES):
        raise IRError(f"{where}: no node named like '{EMBEDDING_NAMES[0]}' (or '{EMBEDDING_NAMES[1]}'): openvino-genai "
                      f"builds its Gemma 4 embedding model from it")
    if not any(p.get_friendly_name() == "input_ids" for p in model.get_parameters()):
        raise IRError(f"{where}: no 'input_ids' parameter (openvino-genai embeds draft tokens through it)")


# ---- the textual edit -------------------------------------------------------------------------------------------

TOP_LAYERS_END = b"\n\t</layers>\n"
TOP_EDGES_END = b"\n\t</edges>\n"
_LAYER_OPEN = re.compile(rb'<layer id="(\d+)" name="([^"]*)"[^>]*>')


def _once(data: bytes, token: bytes, where: str) -> int:
    at = data.find(token)
    if at < 0 or data.find(token, at + 1) >= 0:
        raise IRError(f"{where}: expected exactly one top-level {token.strip().decode()} (OpenVINO's IR layout)")
    return at


def _producer_port(data: bytes, node: str, index: int, where: str) -> tuple[int, int, bytes]:
    """(layer id, output port id, the port's <dim> lines) of a node's index-th output in the XML."""
    wanted = xmlsafe.escape_attr(node).encode()
    hits = [m for m in _LAYER_OPEN.finditer(data) if m.group(2) == wanted]
    if len(hits) != 1:
        raise IRError(f"{where}: expected one layer named '{node}', found {len(hits)}")
    end = data.find(b"</layer>", hits[0].end())
    body = data[hits[0].end():end]
    out_at = body.find(b"<output>")
    ports = re.findall(rb'<port id="(\d+)"[^>]*?precision="(\w+)"[^>]*>(.*?)</port>', body[out_at:], re.S)
    if out_at < 0 or index >= len(ports):
        raise IRError(f"{where}: layer '{node}' has no output port {index}")
    port_id, precision, dims = ports[index]
    if precision != b"FP32":
        raise IRError(f"{where}: layer '{node}' output {index} is {precision.decode()}, genai needs f32")
    return int(hits[0].group(1)), int(port_id), b"".join(re.findall(rb"<dim>[^<]*</dim>", dims))


def _result(layer_id: int, name: str, dims: bytes) -> bytes:
    dim_lines = b"".join(b"\t\t\t\t\t" + d + b"\n" for d in re.findall(rb"<dim>[^<]*</dim>", dims))
    return (f'\t\t<layer id="{layer_id}" name="{name}" type="Result" version="opset1" output_names="{name}">\n'
            f'\t\t\t<input>\n\t\t\t\t<port id="0" precision="FP32">\n').encode() + dim_lines + \
        b"\t\t\t\t</port>\n\t\t\t</input>\n\t\t</layer>"


def add_results(data: bytes, sources: list[Source], where: str) -> bytes:
    """The IR text with one Result (named as the output) and one edge per source appended; nothing else moves."""
    layers_end = _once(data, TOP_LAYERS_END, where)
    edges_end = _once(data, TOP_EDGES_END, where)
    if not layers_end < edges_end:
        raise IRError(f"{where}: top-level </layers> does not precede </edges>")
    next_id = max(int(m.group(1)) for m in _LAYER_OPEN.finditer(data)) + 1
    layers, edges = [], []
    for k, src in enumerate(sources):
        layer_id, port, dims = _producer_port(data, src.node, src.index, where)
        layers.append(b"\n" + _result(next_id + k, src.output, dims))
        edges.append(f'\n\t\t<edge from-layer="{layer_id}" from-port="{port}" to-layer="{next_id + k}" '
                     f'to-port="0" />'.encode())
    return (data[:layers_end] + b"".join(layers) + data[layers_end:edges_end] + b"".join(edges)
            + data[edges_end:])


def present_outputs(model: ov.Model) -> set[str]:
    return {n for o in model.outputs for n in o.get_names()} & set(OUTPUTS)


def expose(xml: Path, model: ov.Model, layer_types: list[str], num_kv_shared: int) -> bytes | None:
    """The new `.xml` text exposing the five outputs, or None when all five are there already."""
    where = str(xml)
    check_embedding_path(model, where)
    have = present_outputs(model)
    if have == set(OUTPUTS):
        return None
    if have:
        raise IRError(f"{where}: has {sorted(have)} but not all of {list(OUTPUTS)}; refusing to add the rest")
    return add_results(files.read_ir_bytes(xml), find_sources(model, layer_types, num_kv_shared, where), where)
