"""Hidden-state discovery on an exported IR (read only), and the `hidden_states_decoder_layers` value's form.

For a decoder stack of N layers and hidden width H, the annotation locates one value per layer:
    layer i < N-1:  the unique value of shape [?, ?, H] made by an op of layer i and consumed by an op of layer i+1
                    (in optimum's exports, the layer's final residual Add)
    layer N-1:      the [?, ?, H] input of the MatMul that produces `logits` (after the final norm)
stored as the rt_info string
    {"layers":{"<i>":{"producer":"<friendly name>","output_index":<k>}, ...}}
This is optimum-intel's rule, applied to the graph alone: the stack comes from friendly names, N from config.json
(or the graph, cross-checked), H from config.json (or the lm_head input). Producers must be unique names and no two
layers may share a value; any ambiguity is refused with what was found. Writing it: irsurgeon.commit.annotate.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.config import read_optional_json, text_section
from irsurgeon.core.errors import ConfigError, IRError
from irsurgeon.ir import export, graph
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS

Locator = tuple[str, int]


def annotation_json(layers: dict[int, Locator]) -> str:
    """The rt_info value, serialised exactly as optimum-intel writes it."""
    body = {str(i): {"producer": p, "output_index": k} for i, (p, k) in sorted(layers.items())}
    return json.dumps({"layers": body}, separators=(",", ":"))


def parse_annotation(value: str, source: str = "annotation") -> dict[int, Locator]:
    """Layers of an existing annotation; IRError when it is not the documented JSON form."""
    layers = limits.parse_json(value, source, IRError)  # bounded depth and digits; its errors quote no bytes
    try:
        layers = layers["layers"]
        return {int(i): (str(v["producer"]), int(v["output_index"])) for i, v in layers.items()}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as e:
        raise IRError(f"{source}: {HIDDEN_STATES_LAYERS} is not {{\"layers\":{{\"<i>\":{{\"producer\":...,"
                      f"\"output_index\":<n>}}}}}} JSON ({type(e).__name__})") from None


def config_facts(directory: Path) -> tuple[int | None, int | None]:
    """(num_hidden_layers, hidden_size) from config.json beside the IR (text_config for VLMs), when present (a FIFO
    or folder in its place is refused by name: config.read_optional_json)."""
    path = directory / export.CONFIG
    cfg = read_optional_json(path)
    if cfg is None:
        return None, None
    section = text_section(cfg)
    out = []
    for key in ("num_hidden_layers", "hidden_size"):
        value = section.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{path}: {key} must be a positive integer, found {value!r}")
        out.append(value)
    return out[0], out[1]


def lm_head_input(model, hidden_size: int | None = None, source: str = "model") -> tuple[object, int]:
    """The [?, ?, H] value feeding the logits MatMul, and H (checked against hidden_size when given)."""
    matmul = graph.logits_matmul(model, source)
    inputs = [matmul.input_value(i) for i in range(matmul.get_input_size())]
    fits = [v for v in inputs if graph.static_width(v) is not None
            and (hidden_size is None or graph.static_width(v) == hidden_size)]
    if len(fits) != 1:
        shapes = [graph.shape_text(v.get_partial_shape()) for v in inputs]
        want = f"[?,?,{hidden_size}] (hidden_size)" if hidden_size else "rank-3 input with a static last dimension"
        raise IRError(f"{source}: the logits MatMul {matmul.get_friendly_name()!r} has inputs {shapes}; "
                      f"expected exactly one {want}")
    return fits[0], graph.static_width(fits[0])


def decoder_stack(ops, num_layers: int | None, source: str = "model") -> tuple[str, int]:
    """The decoder stack (the module path with the most layer ops) and its layer count; refuses gaps, mismatches
    and ties (a stack whose indices are exactly 0..num_layers-1 wins a tie)."""
    found = graph.stacks(ops)
    if not found:
        raise IRError(f"{source}: no decoder layers found (no friendly name like __module.<path>.<i>/...)")

    def rank(stack: str) -> tuple[int, bool]:
        return sum(found[stack].values()), sorted(found[stack]) == list(range(num_layers or 0))

    ranked = sorted(found, key=rank, reverse=True)
    if len(ranked) > 1 and rank(ranked[0]) == rank(ranked[1]):
        raise IRError(f"{source}: two candidate decoder stacks, {ranked[0]!r} and {ranked[1]!r}; refusing to guess")
    stack, indices = ranked[0], sorted(found[ranked[0]])
    missing = sorted(set(range(indices[-1] + 1)) - set(indices))
    if missing:
        raise IRError(f"{source}: decoder stack {stack!r} has layers {_ranges(indices)} with {_ranges(missing)} "
                      f"missing; refusing to annotate across a gap")
    if num_layers is not None and num_layers != len(indices):
        raise IRError(f"{source}: num_hidden_layers is {num_layers}, but decoder stack {stack!r} has layers "
                      f"{_ranges(indices)}")
    return stack, len(indices)


def discover_hidden_states(model, num_layers: int | None = None, *, hidden_size: int | None = None,
                           source: str = "model") -> dict[int, Locator]:
    """layer -> (producer friendly name, output index) for every decoder layer of model (see module docstring)."""
    return discover(model, num_layers, hidden_size, source)[0]


def discover(model, num_layers: int | None, hidden_size: int | None, source: str) -> tuple[dict[int, Locator], int]:
    ops = model.get_ordered_ops()
    final, width = lm_head_input(model, hidden_size, source)
    stack, count = decoder_stack(ops, num_layers, source)
    by_layer = defaultdict(list)
    for op in ops:
        layer = graph.layer_of(op.get_friendly_name(), stack)
        if layer is not None:
            by_layer[layer].append(op)
    outputs = {i: _boundary(by_layer[i], stack, i, width, source) for i in range(count - 1)}
    outputs[count - 1] = final
    return _locators(outputs, graph.name_counts(ops), source), width


def _boundary(layer_ops, stack: str, i: int, width: int, source: str):
    candidates = {}
    for op in layer_ops:
        for out in op.outputs():
            if graph.is_hidden(out, width) and any(
                    graph.layer_of(t.get_node().get_friendly_name(), stack) == i + 1 for t in out.get_target_inputs()):
                candidates[(op.get_friendly_name(), out.get_index())] = out
    if len(candidates) != 1:
        what = "no" if not candidates else f"{len(candidates)} candidate"
        listed = f": {sorted(candidates)}" if candidates else ""
        raise IRError(f"{source}: {what} [?,?,{width}] value(s) cross from {stack}.{i} into {stack}.{i + 1}"
                      f"{listed}; refusing to guess")
    return next(iter(candidates.values()))


def _locators(outputs: dict, counts, source: str) -> dict[int, Locator]:
    locators = {}
    for i, out in sorted(outputs.items()):
        name = out.get_node().get_friendly_name()
        if counts[name] != 1:
            raise IRError(f"{source}: layer {i}'s hidden state is made by {name!r}, a name {counts[name]} ops share; "
                          f"a duplicate name cannot locate it")
        locators[i] = (name, out.get_index())
    if len(set(locators.values())) != len(locators):
        raise IRError(f"{source}: two layers resolve to the same value ({locators}); refusing to annotate")
    return locators


def _ranges(values: list[int]) -> str:
    spans, start = [], None
    for k, v in enumerate(values):
        if start is None:
            start = v
        if k + 1 == len(values) or values[k + 1] != v + 1:
            spans.append(f"{start}" if start == v else f"{start}..{v}")
            start = None
    return ",".join(spans) or "none"


def producers_resolve(layers: dict[int, Locator], xml: Path):
    """A read-back check: every producer still names exactly one op."""
    def check(model) -> None:
        counts = graph.name_counts(model.get_ops())
        lost = [name for name, _ in layers.values() if counts[name] != 1]
        if lost:
            raise IRError(f"{xml}: after the edit, producers {lost} no longer resolve; original kept")
    return check
