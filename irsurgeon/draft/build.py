"""The only place a draft's `ov.Model` is made: checkpoint (draft.load) -> recipe -> weights -> graph -> model; written
by draft.save, its large matrices streamed (draft.stream).

Every family's draft goes through here (draft.recipe.Recipe gives its config, table and graph), so the strict
accounting is the house's: the checkpoint's tensors are checked against the table (missing, extra, misshaped, tied
copies proven equal: irsurgeon.weights.spec), and every row loaded must be used by the graph, every weight the graph
asks for must be loaded. Finding the recipe of a checkpoint by its model_type is the flows' (irsurgeon.flows.standalone).

An uncompressed (f32 or f16) draft built for `patch` (build_model's `stream`) holds no matrix: each is a
placeholder that stage_ir fills from the checkpoint block by block into the staged .bin (Stream, save_appended), so
the build's peak is one block, not every weight (as float32, twice a bf16 checkpoint: 6.9 GB for a
Qwen3.5-27B-sized DFlash draft; as float16, memory the process has never touched, which on a virtual machine costs
about as much as writing it: benchmarks/profile_patch.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core import rtinfo
from irsurgeon.core.errors import CheckpointError, CompressionError
from irsurgeon.draft.recipe import Recipe
from irsurgeon.ops.core import WeightFormat, half_weight, weight
from irsurgeon.weights.spec import LazyWeights
from irsurgeon.weights.table import Table
from irsurgeon.draft.stream import _STREAMS, Stream

def build_model(cfg, weights: LazyWeights | dict[str, np.ndarray], fmt: str | WeightFormat = WeightFormat.F16,
                warn=None, moe_form: str | None = None, recipe: Recipe | None = None,
                stream: Callable[[], None] | None = None) -> ov.Model:
    """The head as an ov.Model from weights keyed by their roles (names relative to the table's prefix).

    recipe: by default the config's own (cfg.recipe). Every weight loaded must be used by the
    graph and every weight the graph asks for must be loaded. warn: where a weight kept f32 in an f16 build is
    reported (default: the loader's channel, else print). moe_form: the routed experts' graph form
    (irsurgeon.ops.moe.FORMS). stream (an f32 or f16 build from LazyWeights): every matrix the checkpoint gives
    row by row is left to stage_ir, which writes it into the staged .bin block by block (Stream); `stream` is
    called once they are written (or given up: Stream.close), to close the checkpoint they are read from.
    """
    fmt = float_format(fmt)
    warn = warn or getattr(weights, "warn", print)
    recipe = recipe or cfg.recipe
    table = getattr(weights, "table", None) or recipe.tensors(cfg)
    params, inputs = recipe.parameters(cfg)
    deferred = Stream(stream) if stream is not None and fmt in (WeightFormat.F32, WeightFormat.F16) else None
    source = GraphWeights(weights, table, fmt, warn, recipe.name, deferred)
    outputs, sinks = recipe.graph(inputs, source, cfg, **({"moe_form": moe_form} if moe_form else {}))
    unused = sorted(set(weights) - source.used)
    if unused:
        raise CheckpointError(f"tensor {table.prefix}{unused[0]} was loaded but the {recipe.name} graph never used it"
                              + (f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""))
    results = []
    for out_name, out in outputs.items():
        result = ops.result(out)
        result.set_friendly_name(out_name)
        result.output(0).get_tensor().set_names({out_name})
        out.set_names({out_name})
        results.append(result)
    model = ov.Model(results, sinks, params + (deferred.placeholders if deferred else []), recipe.name)
    for key, value in recipe.rt_info.items():
        model.set_rt_info(value, key)
    rtinfo.set_provenance(model, **{rtinfo.KEEP_FLOAT: keep_float(table)})
    if getattr(weights, "source_format", ""):  # what the checkpoint stored: bf16, FP8, int4 (packed as ...)
        rtinfo.set_provenance(model, **{rtinfo.SOURCE_FORMAT: weights.source_format})
    if deferred and deferred.placeholders:
        _STREAMS[deferred.token] = deferred
        model.set_rt_info(deferred.token, rtinfo.STREAMED)
    return model

class GraphWeights:
    """What a family's graph calls `w`: w(name) is the weight constant of the tensor `name` (table prefix + role),
    made once however often it is asked for; w.array(name) the tensor itself (an index table). Records what was used.
    """

    def __init__(self, weights, table: Table, fmt: WeightFormat, warn, family: str, stream: Stream | None = None):
        self.weights, self.table, self.fmt, self.warn, self.family = weights, table, fmt, warn, family
        self.stream, self.shapes = stream, table.shapes()
        self.used: set[str] = set()
        self.made: dict[str, ov.Output] = {}

    def role(self, name: str) -> str:
        role = name[len(self.table.prefix):] if name.startswith(self.table.prefix) else None
        if role not in self.weights:
            raise CheckpointError(f"the {self.family} graph asks for tensor {name}, which its table does not load")
        self.used.add(role)
        return role

    def array(self, name: str) -> np.ndarray:
        return self.weights[self.role(name)]

    def __call__(self, name: str) -> ov.Output:
        if name in self.made:
            return self.made[name]
        role = self.role(name)
        if self.stream is not None and len(self.shapes[role]) >= 2:  # a matrix, written by stage_ir (Stream)
            if self.fmt is WeightFormat.F16 and (rows := streams(self.weights, "half_rows", role)) is not None:
                self.made[name] = self.stream.half_placeholder(
                    name, self.shapes[role], rows, lambda: weight(self.weights[role], name, self.fmt, self.warn))
                return self.made[name]
            if self.fmt is WeightFormat.F32 and (rows := streams(self.weights, "rows", role)) is not None:
                self.made[name] = self.stream.placeholder(name, self.shapes[role], rows)
                return self.made[name]
        half = self.weights.half(role) if self.fmt is WeightFormat.F16 and hasattr(self.weights, "half") else None
        if half is not None:  # decoded straight to f16 (no float32 copy); None: the f32 path decides and reports
            self.made[name] = half_weight(half, name)
        else:
            self.made[name] = weight(self.weights[role], name, self.fmt, self.warn)
        return self.made[name]

def streams(weights, kind: str, role: str):
    """weights.half_rows / weights.rows of a role (LazyWeights), None for weights that cannot stream (a dict)."""
    reader = getattr(weights, kind, None)
    return reader(role) if reader is not None else None

def keep_float(table: Table) -> str:
    """The weight constants weight compression must leave as built (the table's compress=False rows), space-separated
    (names hold no spaces: they are checkpoint tensor names)."""
    return " ".join(table.prefix + t.role for t in table.tensors if not t.compress)

def float_format(weight_format: str | WeightFormat) -> WeightFormat:
    """The float storage build_mtp_model writes; anything else is a CompressionError naming what it takes."""
    try:
        return WeightFormat(str(getattr(weight_format, "value", weight_format)).lower())
    except ValueError:
        choices = ", ".join(f.value for f in WeightFormat)
        raise CompressionError(f"weight_format {weight_format!r}: build_mtp_model writes {choices} "
                               "(int4/int8: compress the result with irsurgeon.quant.compress.compress_model)") from None
