"""One stateful KV-cache variable, wired exactly as MakeStateful leaves it and as SDPAToPagedAttention expects.

    Broadcast(0, [B, nKV, 0, D]) -> ReadValue(var) -> Gather(beam_idx, axis 0) -> Concat(axis 2, [past, new]) -> Assign(var)

Nothing sits between Gather and Concat. One `Variable` object is shared by the ReadValue and the Assign. The state's
type and shape (STATE_TYPE, state_shape) are what the Qwen3.5 MTP contract names (families.qwen35_mtp.contract);
the synthetic targets' KV states have the same form.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import openvino.opset6 as ops6
from openvino.op.util import Variable, VariableInfo

from irsurgeon.ops.core import const, named

I64 = np.int64
# The draft's activations are f32 (ops.core.WeightFormat), so are the K and V it keeps; the cache precision the
# runtime uses (KV_CACHE_PRECISION) is its own, set after genai converts the graph to PagedAttention.
STATE_TYPE = ov.Type.f32


def state_shape(num_kv_heads: int, head_dim: int) -> ov.PartialShape:
    """A KV state's shape: [batch, nKV, tokens, D], batch and tokens dynamic."""
    return ov.PartialShape([-1, num_kv_heads, -1, head_dim])


def kv_cache(new: ov.Output, beam_idx: ov.Output, batch: ov.Output, variable_id: str, num_kv_heads: int,
             head_dim: int, name: str) -> tuple[ov.Output, ov.Node]:
    """Append new [B, nKV, S, D] to the cached state; returns (present [B, nKV, T, D], the Assign sink)."""
    info = VariableInfo()
    info.variable_id = variable_id
    info.data_type = STATE_TYPE
    info.data_shape = state_shape(num_kv_heads, head_dim)
    var = Variable(info)
    init_shape = ops.concat([batch, const([num_kv_heads, 0, head_dim], I64)], axis=0)
    init = named(ops.broadcast(const(0.0, STATE_TYPE.to_dtype()), init_shape), f"{name}/init")
    past = ops6.read_value(init, var)
    past.set_friendly_name(f"{name}/read")
    reordered = named(ops.gather(past, beam_idx, const(0, I64)), f"{name}/beam_gather")
    present = named(ops.concat([reordered, new], axis=2), f"{name}/present")
    sink = ops6.assign(present.get_node(), var)
    sink.set_friendly_name(f"{name}/assign")
    return present, sink
