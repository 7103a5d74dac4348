"""The only place a draft's `ov.Model` is made and written: checkpoint -> builder -> weights -> graph -> model -> files.

Every family's draft goes through here (families.builder.Builder gives its config, table and graph), so the strict
accounting is the house's: the checkpoint's tensors are checked against the table (missing, extra, misshaped, tied
copies proven equal: irsurgeon.weights.spec), and every row loaded must be used by the graph, every weight the graph
asks for must be loaded. Finding the builder of a checkpoint by its model_type is the flows' (irsurgeon.head).
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon import limits, rtinfo
from irsurgeon.config import read_json
from irsurgeon.errors import CheckpointError, CompressionError, OutputError, cause, with_hint
from irsurgeon.families.builder import Builder
from irsurgeon.ir.export import MTP_BIN, MTP_XML
from irsurgeon.ops.core import WeightFormat, half_weight, weight
from irsurgeon.transaction import DirectoryTransaction, shown, write_staged
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import LazyWeights, load_weights
from irsurgeon.weights.table import Table


def load_with(builder: Builder, checkpoint: str | Path, config: str | Path | None = None,
              allow_nonfinite: bool = False, warn=print):
    """Open a checkpoint, read its config as `builder` does, and check its tensors against its table (only the
    shards holding them are opened; no tensor is decoded yet). Returns (config, weights, open checkpoint)."""
    ckpt = open_checkpoint(checkpoint, config)
    try:
        cfg = builder.parse_config(read_json(ckpt.config_path), str(ckpt.config_path))
        for line in cfg.warnings:
            warn(line)
        weights = load_tensors(ckpt, builder, cfg, checkpoint, allow_nonfinite, warn)
    except BaseException:
        ckpt.close()
        raise
    return cfg, weights, ckpt


def open_checkpoint(checkpoint: str | Path, config: str | Path | None = None) -> Checkpoint:
    """The checkpoint's files, with its config.json (or `config`) present."""
    ckpt = Checkpoint.open(checkpoint, config)
    if not ckpt.config_path.exists():  # Checkpoint.open always names one; a FIFO or device is refused by its reader
        ckpt.close()
        raise with_hint(CheckpointError(f"{checkpoint}: no config.json beside the weights"), "--config",
                        "pass --config with the checkpoint's config.json")
    return ckpt


def load_tensors(ckpt: Checkpoint, family: Builder, cfg, checkpoint: str | Path, allow_nonfinite: bool = False,
                 warn=print) -> LazyWeights:
    """The family's table for cfg, checked against the checkpoint, within the memory budget (no tensor decoded)."""
    table = family.tensors(cfg)
    weights = load_weights(ckpt, table, cfg.dtype, allow_nonfinite, warn)
    # the headers now match the config; no tensor is read yet, and none is if the head cannot fit
    limits.check_memory(memory_need(table.shapes()), f"{checkpoint}: building its MTP head", CheckpointError)
    return weights


def memory_need(shapes: dict[str, tuple[int, ...]]) -> int:
    """A lower bound of a build's peak memory: every weight kept at 2 bytes (f16 is the smallest form a head is
    built in; int4/int8 are compressed from it) and the largest one decoded to float32 at the same time."""
    sizes = [math.prod(s) for s in shapes.values()]
    return 2 * sum(sizes) + 4 * max(sizes, default=0)


def build_model(cfg, weights: LazyWeights | dict[str, np.ndarray], fmt: str | WeightFormat = WeightFormat.F16,
                warn=None, moe_form: str | None = None, family: Family | None = None) -> ov.Model:
    """The head as an ov.Model from weights keyed by their roles (names relative to the table's prefix).

    family: by default the one of cfg.model_type (irsurgeon.models.registry). Every weight loaded must be used by the
    graph and every weight the graph asks for must be loaded. warn: where a weight kept f32 in an f16 build is
    reported (default: the loader's channel, else print). moe_form: the routed experts' graph form
    (irsurgeon.ops.moe.FORMS).
    """
    fmt = float_format(fmt)
    warn = warn or getattr(weights, "warn", print)
    family = family or cfg.builder
    table = getattr(weights, "table", None) or family.tensors(cfg)
    params, inputs = family.parameters(cfg)
    source = GraphWeights(weights, table, fmt, warn, family.name)
    outputs, sinks = family.graph(inputs, source, cfg, **({"moe_form": moe_form} if moe_form else {}))
    unused = sorted(set(weights) - source.used)
    if unused:
        raise CheckpointError(f"tensor {table.prefix}{unused[0]} was loaded but the {family.name} graph never used it"
                              + (f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""))
    results = []
    for out_name, out in outputs.items():
        result = ops.result(out)
        result.set_friendly_name(out_name)
        result.output(0).get_tensor().set_names({out_name})
        out.set_names({out_name})
        results.append(result)
    model = ov.Model(results, sinks, params, family.name)
    for key, value in family.rt_info.items():
        model.set_rt_info(value, key)
    rtinfo.set_provenance(model, **{rtinfo.KEEP_FLOAT: keep_float(table)})
    return model


class GraphWeights:
    """What a family's graph calls `w`: w(name) is the weight constant of the tensor `name` (table prefix + role),
    made once however often it is asked for; w.array(name) the tensor itself (an index table). Records what was used.
    """

    def __init__(self, weights, table: Table, fmt: WeightFormat, warn, family: str):
        self.weights, self.table, self.fmt, self.warn, self.family = weights, table, fmt, warn, family
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
        half = self.weights.half(role) if self.fmt is WeightFormat.F16 and hasattr(self.weights, "half") else None
        if half is not None:  # decoded straight to f16 (no float32 copy); None: the f32 path decides and reports
            self.made[name] = half_weight(half, name)
        else:
            self.made[name] = weight(self.weights[role], name, self.fmt, self.warn)
        return self.made[name]


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
                               "(int4/int8: compress the result with irsurgeon.compress.compress_model)") from None


def existing_head(out_dir: Path) -> OutputError:
    return with_hint(OutputError(f"{out_dir}: already holds {MTP_XML}; not replaced"), "--force",
                     "pass --force to replace it")


def name_anonymous_nodes(model: ov.Model) -> None:
    """Name every node left with openvino's default name after its position; keep only the I/O tensor names.

    Default node names (and the tensor names openvino's compression pass copies from them) embed a process-wide
    instance counter, so without this two identical builds in one process serialize differently.
    """
    public = {n for port in [*model.inputs, *model.outputs] for n in port.get_names()}
    counts: dict[str, int] = {}
    for node in model.get_ordered_ops():
        for out in node.outputs():
            if out.get_names() - public:
                out.get_tensor().set_names(out.get_names() & public)
        if node.get_friendly_name() != node.get_name():
            continue
        kind = node.get_type_name()
        counts[kind] = counts.get(kind, 0) + 1
        node.set_friendly_name(f"{kind}_{counts[kind]}")


def stage_ir(tx: DirectoryTransaction, xml_name: str, model: ov.Model) -> Path:
    """Save `model` as xml_name and its .bin into the transaction's staging folder, exactly as built (no implicit
    fp16 compression), its anonymous nodes named first; returns the staged .xml. Every family's draft is staged
    through here."""
    name_anonymous_nodes(model)
    tx.stage(xml_name.removesuffix(".xml") + ".bin")
    xml = tx.stage(xml_name)
    write_staged(xml, lambda p: ov.save_model(model, p, compress_to_fp16=False))
    return xml


FEED_FORWARD = re.compile(r"mlp\.(?:shared_expert\.|experts\.)?(gate_proj|up_proj|down_proj)\.weight$")
SMOKE_WIDTH = 8  # feed-forward rows kept for the one-step check


def narrow_feed_forward(model: ov.Model, width: int = SMOKE_WIDTH) -> int:
    """Narrow every float feed-forward matrix (dense MLP, shared expert, routed experts) to `width` along the
    intermediate axis, filled with its first staged values, in place; returns how many were cut. For the families'
    one-step check of a staged draft: the intermediate width appears in no other constant of a draft (reshapes use
    -1), so the graph keeps every op, connection and other shape; the cut matrices are most of a draft's bytes, and
    without them the CPU plugin's repack of the weights stays small."""
    cut = 0
    for op in model.get_ops():
        match = FEED_FORWARD.search(op.get_friendly_name())
        if op.get_type_name() != "Constant" or not match or not op.get_element_type().is_real():
            continue
        data = op.get_data()
        shape = list(data.shape)
        axis = len(shape) - (1 if match.group(1) == "down_proj" else 2)
        if shape[axis] <= width:
            continue
        shape[axis] = width  # the matrix's first values in the narrow shape: only those pages of the .bin are read
        narrow = ov.op.Constant(data.reshape(-1)[:int(np.prod(shape))].reshape(shape).copy())
        narrow.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(narrow.output(0))
        cut += 1
    model.validate_nodes_and_infer_types()
    return cut


def save_mtp_model(model: ov.Model, out_dir: str | Path, wait: bool = False, echo=None, replace: bool = True) -> Path:
    """Write openvino_mtp_model.xml/.bin into out_dir (created if missing) under its directory lock.

    The files go through the same staged transaction as `patch` (irsurgeon.transaction): written into a staging
    folder inside out_dir, then moved in under a rollback journal. Weights are written exactly as built (no implicit
    fp16 compression). On failure out_dir is as it was (a folder this call created is removed again). echo gets
    one line per thing done to what an interrupted run left there. replace=False refuses an out_dir that holds a
    head once what an interrupted run left there is undone.
    """
    out_dir = Path(out_dir)
    created = not os.path.lexists(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create output directory: {e.strerror}") from None
    try:
        with DirectoryTransaction(out_dir, wait=wait, echo=echo) as tx:
            if not replace and os.path.lexists(out_dir / MTP_XML):
                raise existing_head(out_dir)
            tx.stage(MTP_BIN)
            xml = tx.stage(MTP_XML)
            name_anonymous_nodes(model)
            try:
                ov.save_model(model, xml, compress_to_fp16=False)
            except RuntimeError as e:  # a full disk comes back as a bare iostream error
                raise OutputError(f"{shown(xml)}: cannot write it: {cause(e)}") from None
            tx.commit()
    except BaseException:
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    return out_dir / MTP_XML
