"""The matrices an uncompressed build leaves as placeholders (Stream), written block by block from the still open
checkpoint into the staged .bin by draft.save.stage_ir, so the build's peak is one block, not every weight (as
float32, twice a bf16 checkpoint: 6.9 GB for a Qwen3.5-27B-sized DFlash draft; as float16, memory the process has never
touched, which on a virtual machine costs about as much as writing it: benchmarks/profile_patch.py)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core import rtinfo
from irsurgeon.core.errors import IRError
from irsurgeon.ops.half import decompressed


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
