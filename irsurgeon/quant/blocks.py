"""nncf's weight compression in bounded memory: each weight quantized in blocks of rows, and each float source
constant released as soon as its compressed form is in the graph.

nncf 3.4.0 compresses the weights of a model one at a time (quantization/algorithms/weight_compression/
openvino_backend.py, OVWeightCompressionAlgoBackend.transform_model): `compress_weight(weight, reduction_axes,
config)` runs a compiled OpenVINO model over the whole weight (openvino/optimized_functions/models.py,
_build_integer_quantization_model: reduce_min/max over the group axis, f32 scale and zero point, divide, round,
clamp), whose f32 intermediates take ~8.5 bytes per value of the weight (2.3 GB for a 268 M-value expert stack); and
the backend's `name_to_node_mapping` (every op of the model, by friendly name) keeps each replaced f16 constant alive
until the last weight is done, so the f16 head and its compressed copy coexist in full.

`bounded()` changes only those two things, for the duration of one compress_weights call, and only on the nncf
release read for this (NNCF_READ; setup.cfg pins it; another release runs unchanged, in nncf's own memory):
  - compress_weight gets the weight in blocks of whole rows (flat_shape: the axes before the first reduced one
    merged, so an expert stack [E, O, I] is split within experts too; block_values(): a share of the head; an even
    number of rows, so that every packed 4-bit block ends on a byte; never under nncf's own minimum for its compiled
    model), and each block's results are copied into the whole weight's as they come. Rows are never reduced over
    (MatMul weights [O, I] and expert stacks reduce over I; nncf reshapes the grouped case to [..., I/g, g] behind
    them), so every scale, zero point and quantized value comes from the same values through the same kind of
    compiled model as without blocks. The saved IR is byte-identical (tests/test_compress_blocks.py saves both) but
    for the unused half of the last byte of a 4-bit constant with an odd count of values, which openvino never reads:
    nncf leaves there what its plugin wrote, _clear_padding zeroes it.
  - the backend's _replace_node, after rewiring a constant's consumers to the compressed subgraph, also drops that
    constant from name_to_node_mapping, its last reference: its f16 bytes are freed as the next weight starts.
nncf's planning (which weight gets which mode, group-size fallback, the last layer at the backup precision, ratio)
and the subgraph it builds (names, Convert/Subtract/Multiply/Reshape, rt_info) are untouched. Weights of another
kind (float codebooks, precomputed scales, bf16 constants) go to nncf whole, as before.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import openvino as ov

NNCF_READ = "3.4.0"  # the release whose internals (file names above) this module was written against
# A block's inference peaks well above what it leaves behind (CPU plugin, dense hidden-2048 head: 1 M-value blocks
# +69 MB, 256 K +18 MB, 64 K +6 MB); 1/2048 of the head keeps that to a few % of the head's f16 bytes. Each block is
# one more inference call (~0.3 ms): 64 K values is the floor.
HEAD_SHARE = 2048
MIN_BLOCK_VALUES = 1 << 16


def block_values(head_values: int) -> int:
    """The largest block for a head of this many weight values (see HEAD_SHARE, MIN_BLOCK_VALUES)."""
    return max(MIN_BLOCK_VALUES, head_values // HEAD_SHARE)


def leading_blocks(shape: tuple[int, ...], reduction_axes, block_values: int, min_values: int = 0
                   ) -> list[tuple[int, int]]:
    """[start, stop) row ranges of axis 0 of about block_values values each, never fewer than min_values, in an even
    number of rows but the last (which joins the one before when it is under min_values); one range when the weight
    is small, the leading axis is reduced over, or the weight is not at least 2-D."""
    axes = (reduction_axes,) if isinstance(reduction_axes, int) else tuple(reduction_axes or ())
    rows = shape[0] if shape else 0
    row_values = max(int(np.prod(shape[1:])), 1) if len(shape) > 1 else 0
    if len(shape) < 2 or 0 in axes or rows * row_values <= max(block_values, 2 * min_values):
        return [(0, rows)]
    step = max(block_values // row_values, -(-min_values // row_values), 2)
    step += step % 2
    blocks = [(start, min(start + step, rows)) for start in range(0, rows, step)]
    if len(blocks) > 1 and (blocks[-1][1] - blocks[-1][0]) * row_values < min_values:
        blocks[-2:] = [(blocks[-2][0], rows)]
    return blocks


def flat_shape(shape: tuple[int, ...], reduction_axes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The weight seen as rows: the axes before the first reduced one merged into one (an expert stack [E, O, I]
    reduced over I is [E*O, I]), and the reduction axes in that view; the shape as it is when axis 0 is reduced."""
    axes = (reduction_axes,) if isinstance(reduction_axes, int) else tuple(reduction_axes or ())
    k = min(axes, default=0)
    if k < 1:
        return tuple(shape), axes
    return (int(np.prod(shape[:k])), *shape[k:]), tuple(a - k + 1 for a in axes)


def _rows(weight, shape: tuple[int, ...], start: int, stop: int):
    """Rows [start, stop) of an nncf Tensor (numpy or openvino backend) seen in `shape`, as a Tensor of the same
    backend, no copy."""
    from nncf.tensor import Tensor, TensorBackend

    if weight.backend == TensorBackend.ov:
        return Tensor(ov.Tensor(weight.data.data.reshape(shape)[start:stop], shared_memory=True))
    return Tensor(weight.data.reshape(shape)[start:stop])


def _sliceable(weight) -> bool:
    """numpy sees an openvino tensor's f16/f32 data as it is (bf16 would come back as another element type)."""
    from nncf.tensor import TensorBackend

    return weight.backend != TensorBackend.ov or weight.data.get_element_type() in (ov.Type.f16, ov.Type.f32)


FIELDS = ("tensor", "scale", "zero_point", "codebook", "global_scale")  # nncf's CompressedWeight, in order


def _allocate(part, lead: tuple[int, ...], own: bool = False):
    """An empty nncf Tensor like `part` (a block's result field) whose rows are the whole weight's, in its leading
    axes `lead`; None stays None.

    own: an openvino tensor (openvino's own memory) even for a numpy part. nncf 3.4.0 makes the constant of an
    openvino tensor in place but copies a numpy array (openvino/graph/node_utils.py, create_ov_const_from_tensor:
    `assert x.data.get_element_type() == dtype`, then shared_memory=True); 8-bit quantized values then skip that copy.
    """
    from nncf.tensor import Tensor, TensorBackend

    if part is None:
        return None
    if part.backend == TensorBackend.ov or (own and part.data.dtype in (np.uint8, np.int8)):
        etype = part.data.get_element_type() if part.backend == TensorBackend.ov else ov.Type(part.data.dtype)
        return Tensor(ov.Tensor(etype, [*lead, *list(part.shape)[1:]]))
    return Tensor(np.empty((*lead, *part.data.shape[1:]), part.data.dtype))


def _put(whole, part, start: int) -> None:
    """Copy a block's result field into rows [start, ...) of the whole weight's."""
    from nncf.tensor import TensorBackend

    if part is None:
        return
    if whole.backend != TensorBackend.ov:
        whole.data.reshape(-1, *part.data.shape[1:])[start:start + part.data.shape[0]] = part.data
        return
    src = (part.data.data if part.backend == TensorBackend.ov else part.data).reshape(-1).view(np.uint8)
    etype = whole.data.get_element_type()  # 4-bit types: two values a byte
    row_bits = int(np.prod(list(part.shape)[1:])) * etype.bitwidth
    offset = start * row_bits // 8  # start is a multiple of an even block height: a whole byte
    whole.data.data.reshape(-1).view(np.uint8)[offset:offset + src.size] = src


def _assemble(compress_weight, weight, view: tuple[tuple[int, ...], tuple[int, ...]], blocks: list[tuple[int, int]],
              config):
    """compress_weight on each block of rows of the weight seen as `view` (flat_shape: shape, reduction axes),
    copied into the whole weight's result as it comes (one block's result and its temporaries alive at a time)."""
    from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight

    shape, axes = view
    lead = tuple(weight.shape)[:len(weight.shape) - len(shape) + 1]  # the weight's axes merged into the rows
    whole = None
    with _one_compiled_model():
        for start, stop in blocks:
            part = compress_weight(_rows(weight, shape, start, stop), axes, config)
            fields = [getattr(part, f) for f in FIELDS]
            if whole is None:  # the quantized values (8-bit ones come as numpy) in openvino's memory
                whole = [_allocate(f, lead, own=name == "tensor") for name, f in zip(FIELDS, fields)]
            for dst, src in zip(whole, fields):
                _put(dst, src, start)  # now: the next block's inference reuses the memory of these results
            del part, fields
    for field in whole:
        _clear_padding(field)
    return CompressedWeight(*whole)


def _clear_padding(values) -> None:
    """Zero the unused high bits of the last byte of packed sub-byte data (an odd count of 4-bit values): the last
    block's copy brought whatever its padding held; a whole-weight result has zeros there, and the bits are saved."""
    from nncf.tensor import TensorBackend

    if values is None or values.backend != TensorBackend.ov:
        return
    bits = values.data.get_size() * values.data.get_element_type().bitwidth
    if bits % 8:
        data = values.data.data.reshape(-1).view(np.uint8)
        data[-1] &= (1 << bits % 8) - 1


@contextmanager
def _one_compiled_model() -> Iterator[None]:
    """nncf's cache of compiled compression models on for the blocks of one weight, emptied after.

    nncf 3.4.0 builds its compression models with dynamic shapes (openvino/optimized_functions/models.py,
    OVModelParameters.dynamic_shapes), so one compiled model serves every block of a weight instead of one compilation
    per block (~25 ms each). nncf turns the cache off around each weight (openvino_backend.py,
    _create_compression_subgraph: disable_results_caching) so that no model outlives its weight; it is emptied here
    for the same reason. A cached model keeps its infer request, whose output memory the results share
    (_infer_ov_model: share_outputs): each block's results are copied out before the next block runs.
    """
    from nncf.openvino.optimized_functions.models import OV_MODEL_CACHE

    was_enabled = OV_MODEL_CACHE.enabled()
    OV_MODEL_CACHE.enable()
    try:
        yield
    finally:
        OV_MODEL_CACHE.clear()
        if not was_enabled:
            OV_MODEL_CACHE.disable()


def blockwise(compress_weight, block_values: int):
    """nncf's compress_weight applied block by block (see the module docstring); same signature and result."""
    # nncf 3.4.0 quantizes a weight of fewer values with its numpy reference code instead of the compiled model
    # (weight_lowering.py, _can_run_optimized): no block may fall under it, or it would take the other path
    from nncf.quantization.algorithms.weight_compression.constants import MIN_INPUT_SIZE_FOR_OPTIMIZED_COMPRESSION

    def compress(weight, reduction_axes, config, precomputed_compressed_weight=None):
        view = flat_shape(tuple(weight.shape), reduction_axes)
        blocks = leading_blocks(*view, block_values, MIN_INPUT_SIZE_FOR_OPTIMIZED_COMPRESSION)
        can_split = precomputed_compressed_weight is None and config.is_integer and _sliceable(weight)
        if len(blocks) == 1 or not can_split:
            return compress_weight(weight, reduction_axes, config, precomputed_compressed_weight)
        return _assemble(compress_weight, weight, view, blocks, config)
    return compress


def releasing(replace_node):
    """The backend's _replace_node, then the replaced constant dropped from its name -> node mapping."""
    def replace(self, src_node, new_node):
        replace_node(self, src_node, new_node)
        if src_node.get_type_name() == "Constant" and self.name_to_node_mapping:
            self.name_to_node_mapping.pop(src_node.get_friendly_name(), None)
    return replace


@contextmanager
def bounded(head_values: int) -> Iterator[None]:
    """Within the block, nncf.compress_weights on an OpenVINO model of head_values weight values runs in bounded
    memory (see the module docstring)."""
    import nncf
    from nncf.quantization.algorithms.weight_compression import openvino_backend as backend

    if nncf.__version__ != NNCF_READ:
        yield
        return
    cls = backend.OVWeightCompressionAlgoBackend
    saved = backend.compress_weight, cls._replace_node
    backend.compress_weight, cls._replace_node = blockwise(saved[0], block_values(head_values)), releasing(saved[1])
    try:
        yield
    finally:
        backend.compress_weight, cls._replace_node = saved
