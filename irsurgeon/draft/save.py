"""A built draft written: staged into a commit.transaction (stage_ir: the graph by openvino's serializer, the large
weights appended by irsurgeon.ir.streamed, every file recorded as written for the journal; never openvino's implicit
fp16 compression), or saved alone into an output directory (save_draft, `build-mtp`)."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core import rtinfo
from irsurgeon.core.errors import IRError, OutputError, cause, with_hint
from irsurgeon.ir import streamed
from irsurgeon.commit.transaction import DirectoryTransaction, Known, cannot_write, shown, write_staged
from irsurgeon.weights.half import NotHalf
from irsurgeon.draft.stream import Stream, rewire, stream_of

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
