"""The only place a draft's `ov.Model` is made and written: checkpoint -> recipe -> weights -> graph -> model -> files.

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

import hashlib
import math
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core import limits, rtinfo
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import CheckpointError, CompressionError, IRError, OutputError, cause, with_hint
from irsurgeon.draft.recipe import Recipe
from irsurgeon.ir import streamed
from irsurgeon.ops.core import WeightFormat, half_weight, weight
from irsurgeon.ops.half import decompressed
from irsurgeon.commit.transaction import DirectoryTransaction, Known, cannot_write, shown, write_staged
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.half import NotHalf
from irsurgeon.weights.spec import LazyWeights, load_weights
from irsurgeon.weights.table import Table


def load_with(recipe: Recipe, checkpoint: str | Path, config: str | Path | None = None,
              allow_nonfinite: bool = False, warn=print, cfg=None):
    """Open a checkpoint, read its config as `recipe` does (cfg: as the caller already read it, Family.reading), and
    check its tensors against its table (only the shards holding them are opened; no tensor is decoded yet). Returns
    (config, weights, open checkpoint)."""
    ckpt = open_checkpoint(checkpoint, config)
    try:
        if cfg is None:  # else the caller read it, and said its warnings
            cfg = recipe.parse_config(read_json(ckpt.config_path), str(ckpt.config_path))
            for line in cfg.warnings:
                warn(line)
        weights = load_tensors(ckpt, recipe, cfg, checkpoint, allow_nonfinite, warn)
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


def load_tensors(ckpt: Checkpoint, recipe: Recipe, cfg, checkpoint: str | Path, allow_nonfinite: bool = False,
                 warn=print) -> LazyWeights:
    """The family's table for cfg, checked against the checkpoint, within the memory budget (no tensor decoded)."""
    table = recipe.tensors(cfg)
    weights = load_weights(ckpt, table, cfg.dtype, allow_nonfinite, warn)
    # the headers now match the config; no tensor is read yet, and none is if the head cannot fit
    limits.check_memory(memory_need(table.shapes()), f"{checkpoint}: building its draft", CheckpointError)
    return weights


def memory_need(shapes: dict[str, tuple[int, ...]]) -> int:
    """A lower bound of a build's peak memory: every weight kept at 2 bytes (f16 is the smallest form a head is
    built in; int4/int8 are compressed from it) and the largest one decoded to float32 at the same time."""
    sizes = [math.prod(s) for s in shapes.values()]
    return 2 * sum(sizes) + 4 * max(sizes, default=0)


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


def rewire(output: ov.Output, source: ov.Output) -> None:
    """Every input that reads `output` reads `source` instead. Not ov.Output.replace, which also gives `source` the
    tensor names of `output`: a rewired graph keeps the names it was built with (the saved IR as the held build's)."""
    for consumer in output.get_target_inputs():
        consumer.replace_source_output(source)


@dataclass(eq=False)
class Stream:
    """The matrices a build left as placeholders: Parameters of their shapes, with no tensor names (openvino
    serializes the graph around them, writing no weight bytes), and each one's blocks of rows, read from the still
    open checkpoint when stage_ir writes them (irsurgeon.ir.streamed). The model holds no matrix meanwhile.

    An f32 build's placeholders are f32; an f16 build's are f16, each behind the decompression Convert the f16 build
    puts after its constant (ops.half.half_constant), decoded block by block as the build would decode it. Whether a
    matrix fits f16 is known only once its values are seen: one that does not (weights.half.NotHalf, raised by its
    blocks) is built the f32 way by `demote` and the save starts again (stage_ir), so the model written is the one
    an f16 build holding every matrix makes."""
    closer: Callable[[], None]
    blocks: dict[str, Callable[[], Iterator[np.ndarray]]] = field(default_factory=dict)  # by weight name
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)  # element type written: "f32" or "f16"
    fallbacks: dict[str, Callable[[], ov.Output]] = field(default_factory=dict)  # an f16 matrix built the f32 way
    placeholders: list[ov.Node] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def close(self) -> None:
        """Close the checkpoint and forget the stream (once written, or given up); again: nothing."""
        if _STREAMS.pop(self.token, None) is not None:
            self.closer()

    def placeholder(self, name: str, shape: tuple[int, ...], blocks: Callable[[], Iterator[np.ndarray]]) -> ov.Output:
        """An f32 matrix written from `blocks`."""
        return self._placeholder(name, shape, blocks, ov.Type.f32).output(0)

    def half_placeholder(self, name: str, shape: tuple[int, ...], blocks: Callable[[], Iterator[np.ndarray]],
                         fallback: Callable[[], ov.Output]) -> ov.Output:
        """An f16 matrix written from `blocks`, decompressed to f32 as half_constant decompresses its constant;
        fallback: the weight the f16 build makes of it when it does not fit f16 (the f32 path, its note said)."""
        p = self._placeholder(name, shape, blocks, ov.Type.f16)
        self.fallbacks[name] = fallback
        return decompressed(p.output(0), name)

    def _placeholder(self, name: str, shape: tuple[int, ...], blocks: Callable[[], Iterator[np.ndarray]],
                     etype: ov.Type) -> ov.Node:
        p = ops.parameter(list(shape), etype)
        p.set_friendly_name(name)
        p.output(0).get_tensor().set_names(set())
        self.blocks[name], self.shapes[name], self.types[name] = blocks, tuple(shape), etype.get_type_name()
        self.placeholders.append(p)
        return p

    def demote(self, model: ov.Model, name: str) -> None:
        """The f16 matrix `name` (its values do not fit f16: NotHalf) replaced in model by what the f16 build makes
        of it the f32 way (its fallback: the whole tensor read, checked and reported as that build reads it); its
        placeholder and decompression removed.

        An op that reads the f16 values themselves (the Gather of ops.moe.take_experts, which picks experts before
        their decompression) reads what take_experts reads of the built weight: its f16 constant, or the f32
        constant itself, the Convert after the gather then dropped."""
        p = next(q for q in self.placeholders if q.get_friendly_name() == name)
        weight_out = self.fallbacks.pop(name)()
        built = weight_out.get_node()
        stored = built.input_value(0) if built.get_type_name() == "Convert" else None
        for reader in list(p.output(0).get_target_inputs()):
            node = reader.get_node()
            if node.get_type_name() == "Convert":  # the placeholder's decompression
                rewire(node.output(0), weight_out)
            elif stored is not None:  # built f16 after all: the gather reads its f16 constant
                reader.replace_source_output(stored)
            else:  # built f32: the gather reads it, and its own f32 output needs no Convert
                reader.replace_source_output(weight_out)
                node.validate_and_infer_types()
                for convert in [i.get_node() for i in node.output(0).get_target_inputs()]:
                    if convert.get_type_name() == "Convert":
                        rewire(convert.output(0), node.output(0))
        model.remove_parameter(p)
        self.placeholders.remove(p)
        del self.blocks[name], self.shapes[name], self.types[name]


_STREAMS: dict[str, Stream] = {}  # a model's Stream by the token in its rt_info, until Stream.close


def stream_of(model: ov.Model) -> Stream | None:
    """The Stream of a model built with `stream` (None: every weight is in the model)."""
    if not model.has_rt_info(rtinfo.STREAMED):
        return None
    stream = _STREAMS.get(str(model.get_rt_info(rtinfo.STREAMED).astype(str)))
    if stream is None:  # a model's placeholders cannot be saved without the rows they stand for
        raise IRError(f"{model.get_friendly_name()}: its streamed weights are no longer open")
    return stream


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


def existing_draft(out_dir: Path, name: str) -> OutputError:
    return with_hint(OutputError(f"{out_dir}: already holds {name}; not replaced"), "--force",
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


def stage_ir(tx: DirectoryTransaction, xml_name: str, model: ov.Model, spend: bool = True) -> Path:
    """Save `model` as xml_name and its .bin into the transaction's staging folder, exactly as built (no implicit
    fp16 compression), its anonymous nodes named first; returns the staged .xml. Every draft is staged through
    here: the graph by openvino, the weights appended by irsurgeon.ir.streamed (a model built with `stream` gets
    its matrices written from the checkpoint), both files recorded as written for the journal. spend (a patch: its
    caller runs the staged copy next): the model is spent afterwards (save_appended); else it stays whole."""
    name_anonymous_nodes(model)
    tx.stage(ir_bin(xml_name))
    xml = tx.stage(xml_name)
    stream = stream_of(model)
    if stream is not None:
        del model.get_rt_info()[rtinfo.STREAMED]
    try:
        while True:
            try:
                write_staged(xml, lambda p: record(tx, xml_name, save_appended(model, p, stream, spend)))
                break
            except NotHalf as e:  # a streamed f16 matrix the f16 build keeps f32: built so, the save made again
                stream.demote(model, e.name)
    finally:
        if stream is not None:
            stream.close()
            # kept on the model (never saved): a save of it again finds its weights gone (stream_of's IRError)
            # instead of writing the placeholders as the IR's inputs
            model.set_rt_info(stream.token, rtinfo.STREAMED)
    return xml


def ir_bin(xml_name: str) -> str:
    """The .bin beside an IR's .xml (a name of the writable set)."""
    return xml_name.removesuffix(".xml") + ".bin"


def record(tx: DirectoryTransaction, xml_name: str, saved: Saved) -> None:
    """The staged .bin and .xml as written (DirectoryTransaction.written): the commit refuses either if it changes
    after its checks."""
    tx.written(ir_bin(xml_name), saved.tail, saved.bin_stat)
    tx.written(xml_name, Known(saved.xml_digest), saved.xml_stat)


@dataclass(frozen=True)
class Saved:
    """What save_appended wrote: the Tail hashing the .bin, the .bin's and the .xml's stat, the .xml's digest."""
    tail: streamed.Tail
    bin_stat: os.stat_result
    xml_digest: dict
    xml_stat: os.stat_result


DETACH_BYTES = 1 << 20  # constants this large are written by irsurgeon.ir.streamed, not by openvino's serializer
DETACHABLE = (ov.Type.f32, ov.Type.f16, ov.Type.i8, ov.Type.u8, ov.Type.u4, ov.Type.i4)  # raw bytes in .data


@dataclass(frozen=True)
class Detached:
    """A constant taken out of a model for the save: the placeholder Parameter standing in its consumers' inputs."""
    constant: ov.Node
    placeholder: ov.Node

    @property
    def name(self) -> str:
        return self.constant.get_friendly_name()


def detach_constants(model: ov.Model, min_bytes: int | None = None) -> list[Detached]:
    """Each constant of at least min_bytes replaced by a placeholder Parameter of its type and shape (added to the
    model's parameters), where the Const layer openvino would write is the placeholder's own made Const
    (irsurgeon.ir.streamed): a name no other node has, no tensor names, no rt_info, its data one contiguous buffer."""
    min_bytes = DETACH_BYTES if min_bytes is None else min_bytes
    counts: dict[str, int] = {}
    for op in model.get_ops():
        counts[op.get_friendly_name()] = counts.get(op.get_friendly_name(), 0) + 1
    out = []
    for op in model.get_ops():
        if op.get_type_name() != "Constant" or op.get_byte_size() < min_bytes or counts[op.get_friendly_name()] != 1:
            continue
        if op.get_element_type() not in DETACHABLE or len(op.get_rt_info()) or op.output(0).get_names():
            continue
        data = op.data  # a view of the constant's own buffer for these types
        if not data.flags.c_contiguous or data.nbytes != op.get_byte_size():
            continue
        p = ops.parameter(op.get_output_partial_shape(0), op.get_element_type())
        p.set_friendly_name(op.get_friendly_name())
        p.output(0).get_tensor().set_names(set())
        rewire(op.output(0), p.output(0))
        out.append(Detached(op, p))
    if out:
        model.add_parameters([d.placeholder for d in out])
    return out


def reattach(model: ov.Model, detached: list[Detached]) -> None:
    """The constants detach_constants took, back in their consumers' inputs; the placeholders removed."""
    for d in detached:
        rewire(d.placeholder.output(0), d.constant.output(0))
        model.remove_parameter(d.placeholder)


def save_appended(model: ov.Model, xml: Path, stream: Stream | None = None, spend: bool = False) -> Saved:
    """The graph and its small constants by openvino, every large weight appended to the .bin by irsurgeon (a
    stream's matrices read from the checkpoint block by block, a built model's large constants copied from their
    buffers) and the placeholders made the Const layers of them (irsurgeon.ir.streamed); read back, its inputs must
    be the model's own. Returns what it wrote (Saved: for DirectoryTransaction.written). `model`
    is as it was afterwards; with `spend`, each large constant is released as soon as it is written instead (the
    model keeps placeholders for them and must not be used again): the pages it frees are the ones the kernel
    gives the .bin's page cache next, where holding every constant until the end made the kernel find 849 MB of
    fresh pages for a 27B head (2.6 s against 0.3 s in a fresh process on a virtual machine, benchmarks/
    profile_patch.py's save phase). Peak memory: the model's own, one block of rows for a stream."""
    # A graph that does not validate is the build's fault, never a disk's: checked here, or write_staged would call
    # it "cannot write it", as it does every RuntimeError of the save (a full disk comes as one)
    try:
        model.validate_nodes_and_infer_types()
    except RuntimeError as e:
        raise IRError(f"{shown(xml)}: the graph built for it does not validate (a fault of irsurgeon's build, not "
                      f"of the input): {cause(e)}") from None
    detached, tail, places = detach_constants(model), None, {}
    try:
        try:
            ov.save_model(model, xml, compress_to_fp16=False)
            bin_path = xml.with_suffix(".bin")
            with open(bin_path, "r+b") as bin_file, named_failures(bin_path):
                tail = streamed.Tail(bin_file)
                append_weights(tail, places, stream, detached, spend)
                tail.settle()
                st = os.fstat(bin_file.fileno())
                if st.st_size != tail.size:
                    raise IRError(f"{shown(bin_path)}: {st.st_size} bytes, {tail.size} were written")
        except NotHalf:
            if spend:  # saved again (stage_ir): nothing was spent yet, as the stream's matrices are written first
                reattach(model, detached)
            raise
        finally:
            if not spend:
                reattach(model, detached)
        text = streamed.constants_from_parameters(xml.read_bytes(), places, shown(xml))
        xml.write_bytes(text)
        xml_stat = os.stat(xml)
        placeholders = set(places)
        want = [p.get_friendly_name() for p in model.get_parameters() if p.get_friendly_name() not in placeholders]
        try:
            got = [p.get_friendly_name() for p in ov.Core().read_model(xml).get_parameters()]  # mapped: nothing read
        except RuntimeError as e:
            raise IRError(f"{shown(xml)}: the IR written does not read back: {cause(e)}") from None
        if got != want:
            raise IRError(f"{shown(xml)}: the IR written has inputs {got}, expected {want}")
    except BaseException:
        if tail is not None:
            tail.stop()
        raise
    return Saved(tail, st, {"size": len(text), "sha256": hashlib.sha256(text).hexdigest()}, xml_stat)


def append_weights(tail: streamed.Tail, places: dict, stream: Stream | None, detached: list[Detached],
                   spend: bool) -> None:
    """A stream's matrices, then each detached constant (one buffer behind two constants written once), appended
    by `tail`; where each went into places. spend: each constant is dropped once written (its buffer freed when
    hashed)."""
    if stream is not None:
        for name, blocks in stream.blocks.items():
            etype = stream.types[name]
            try:
                places[name] = tail.append(name, stream.shapes[name], etype, blocks(), 2 if etype == "f16" else 4)
            except NotHalf:  # named by its stored tensor, which a layout may name otherwise (a fused down_proj)
                raise NotHalf(name) from None
    written: dict[tuple, streamed.Place] = {}
    for i, d in enumerate(detached):
        etype, shape, data = d.constant.get_element_type(), tuple(d.constant.get_shape()), d.constant.data
        key = (data.ctypes.data, data.nbytes, etype.get_type_name(), shape)
        if key not in written:
            written[key] = tail.append(d.name, shape, etype.get_type_name(), [data], etype.bitwidth / 8)
        places[d.name] = written[key]
        if spend:
            detached[i] = d = data = None


@contextmanager
def named_failures(path: Path) -> Iterator[None]:
    """A failing write of the .bin named as itself (write_staged names the .xml it was handed)."""
    try:
        yield
    except OSError as e:
        raise cannot_write(path, e) from None


def save_draft(model: ov.Model, out_dir: str | Path, name: str, *, writable: frozenset[str], wait: bool = False,
               echo=None, replace: bool = True) -> Path:
    """Write the draft as `name` (.xml, and its .bin) into out_dir (created if missing) under its directory lock;
    writable: the names an interrupted run there may have left (families.registry.writable: any family's).

    The files go through the same staged transaction as `patch` (irsurgeon.commit.transaction): written into a staging
    folder inside out_dir, then moved in under a rollback journal. Weights are written exactly as built (no implicit
    fp16 compression). On failure out_dir is as it was (a folder this call created is removed again). echo gets
    one line per thing done to what an interrupted run left there. replace=False refuses an out_dir that holds a
    draft `name` once what an interrupted run left there is undone.
    """
    out_dir = Path(out_dir)
    created = not os.path.lexists(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create output directory: {e.strerror}") from None
    try:
        with DirectoryTransaction(out_dir, writable=writable, wait=wait, echo=echo, recorded=True) as tx:
            if not replace and os.path.lexists(out_dir / name):
                raise existing_draft(out_dir, name)
            stage_ir(tx, name, model, spend=False)  # the caller's model stays whole
            tx.commit()
    except BaseException:
        if created and out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        raise
    return out_dir / name


def check_call(xml: Path, what: str, value: np.ndarray, shape: tuple[int, ...]) -> None:
    """The one-call check each family runs on its staged draft: `value` (its `what`) has `shape` and only finite
    numbers; otherwise one line naming the staged file by the path the user gave (commit.transaction.shown, not the
    /proc path it was reached through) and what is wrong, the shape or how many values are not finite."""
    where = shown(xml)
    if tuple(value.shape) != tuple(shape):
        raise IRError(f"{where}: one draft call gave {what} of shape {tuple(value.shape)}, expected {tuple(shape)}")
    bad = int(value.size - np.count_nonzero(np.isfinite(value)))
    if bad:
        raise IRError(f"{where}: one draft call gave {bad} NaN or Inf value(s) among its {value.size} {what}: the "
                      f"weights or a configuration value make the draft overflow")
