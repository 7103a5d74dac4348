"""Read-only queries on an `ov.Model`: module scopes from friendly names, the lm_head, ports, states, op counts.

optimum-intel names every activation op after the PyTorch module that made it:
    __module.model.layers.3/aten::add/Add_1                       text-only decoder, layer 3
    __module.model.model.language_model.layers.3.mlp/...          language model inside a VLM export
A *stack* is the module path before the first numeric component (`__module.model.layers`); an op belongs to layer
i of that stack when its name is `<stack>.<i>` or starts with `<stack>.<i>.` or `<stack>.<i>/`.
"""
from __future__ import annotations

from collections import Counter, defaultdict

from irsurgeon.core.errors import IRError

MODULE_PREFIX = "__module"
LOGITS = "logits"


def stack_and_index(name: str) -> tuple[str, int] | None:
    """(stack, layer index) of a friendly name, from its first numeric module component; None if it has none."""
    if not name.startswith(MODULE_PREFIX):
        return None
    parts = name.split("/", 1)[0].split(".")
    for j, part in enumerate(parts):
        if is_index(part):
            return ".".join(parts[:j]), int(part)
    return None


def is_index(text: str) -> bool:
    """A layer index in a name: ASCII digits, few enough for int() (str.isdigit also takes '²', which int refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 9


def stacks(ops) -> dict[str, Counter]:
    """For every stack in the graph: op count per layer index."""
    found: dict[str, Counter] = defaultdict(Counter)
    for op in ops:
        hit = stack_and_index(op.get_friendly_name())
        if hit is not None:
            found[hit[0]][hit[1]] += 1
    return dict(found)


def layer_of(name: str, stack: str) -> int | None:
    """Layer index of an op named `name` in `stack`, or None when it lies outside the stack."""
    if not name.startswith(stack) or name[len(stack):len(stack) + 1] != ".":
        return None
    rest = name[len(stack) + 1:]
    end = next((k for k, c in enumerate(rest) if c in "./"), len(rest))
    digits = rest[:end]
    return int(digits) if is_index(digits) else None


def is_hidden(output, width: int) -> bool:
    """True for a rank-3 value whose last dimension is statically `width` (a hidden state [B, S, H])."""
    shape = output.get_partial_shape()
    if shape.rank.is_dynamic or shape.rank.get_length() != 3:
        return False
    last = shape[2]
    return last.is_static and last.get_length() == width


def logits_matmul(model, source: str = "model"):
    """The MatMul that produces the output named `logits` (genai requires it to feed the Result directly)."""
    outs = [o for o in model.outputs if LOGITS in o.get_names()]
    if len(outs) != 1:
        names = sorted(n for o in model.outputs for n in o.get_names())
        raise IRError(f"{source}: expected one output named {LOGITS!r}, found outputs {names}")
    producer = outs[0].get_node().input_value(0).get_node()
    capped = softcapped(producer)
    if capped is not None:
        return capped
    if producer.get_type_name() != "MatMul":
        raise IRError(f"{source}: output {LOGITS!r} is produced by {producer.get_type_name()} "
                      f"{producer.get_friendly_name()!r}, expected the lm_head MatMul (or a logit softcap on it)")
    return producer


def softcapped(node):
    """The MatMul under a logit softcap, MatMul -> Divide -> Tanh -> Multiply (Gemma's final_logit_softcapping), or
    None: the one pattern openvino.genai (da1db864d, the 2026.4.1 build) src/cpp/src/utils.cpp find_llm_matmul
    follows back from the logits besides a bare MatMul (and Add / Transpose on it, which no export here writes)."""
    chain = [node]
    for kind in ("Multiply", "Tanh", "Divide"):
        if chain[-1].get_type_name() != kind:
            return None
        chain.append(chain[-1].input_value(0).get_node())
    return chain[-1] if chain[-1].get_type_name() == "MatMul" else None


def static_width(output) -> int | None:
    """Static last dimension of a rank-3 value, else None."""
    shape = output.get_partial_shape()
    if shape.rank.is_dynamic or shape.rank.get_length() != 3 or shape[2].is_dynamic:
        return None
    return shape[2].get_length()


def name_counts(ops) -> Counter:
    return Counter(op.get_friendly_name() for op in ops)


def op_histogram(model) -> dict[str, int]:
    """`Type-opsetN` -> count, sorted by key."""
    counts = Counter(f"{op.get_type_name()}-{op.get_type_info().version_id}" for op in model.get_ops())
    return dict(sorted(counts.items()))


def shape_text(shape) -> str:
    return str(shape).replace(" ", "")


def dims(shape) -> list[int | None] | None:
    """A partial shape as JSON: its dimensions, None for a dynamic one (a bounded "1..8" too); None for a dynamic
    rank."""
    if shape.rank.is_dynamic:
        return None
    return [d.get_length() if d.is_static else None for d in shape]


def port(output) -> dict:
    """Name(s), element type and partial shape (dims) of a model input or output: the one form `show` gives a port,
    of an IR and of a directory's IRs."""
    names = sorted(output.get_names())
    return {"name": output.get_any_name() if names else "", "names": names,
            "dtype": output.get_element_type().get_type_name(), "shape": dims(output.get_partial_shape())}


def states(model) -> list[dict]:
    """State variables: id, element type, partial shape (dims)."""
    out = []
    for var in model.get_variables():
        info = var.get_info()
        out.append({"id": info.variable_id, "dtype": info.data_type.get_type_name(), "shape": dims(info.data_shape)})
    return sorted(out, key=lambda s: s["id"])


NOT_UTF8 = "<not UTF-8 text>"


def rt_tree(model) -> dict:
    """The model's rt_info as nested dicts of strings (sections come back as dicts, leaves as OVAny)."""
    def walk(node) -> object:
        if isinstance(node, dict):
            return {str(k): walk(v) for k, v in sorted(node.items())}
        try:
            return str(node.value) if hasattr(node, "value") else str(node)
        except UnicodeDecodeError:  # OpenVINO keeps the bytes of an XML character reference naming no character
            return NOT_UTF8

    return walk(dict(model.get_rt_info().items()))
