"""Sparse MoE MLP with a gated shared expert (Qwen3.5-MoE), on N = B*S token rows.

    t = reshape(x, [N, H])                                                              x [B, S, H]
    p = softmax(t @ Wr^T)                         router, f32                           [N, E]
    v, idx = top_k(p, k);  v = v / sum(v)         renormalised when norm_topk_prob       [N, k]
    routed[n] = sum_j v[n, j] * Wd[idx] @ (silu(Wg[idx] @ t[n]) * (Wu[idx] @ t[n])),  idx = idx[n, j]
    out = routed + sigmoid(t @ Wsg^T) * Ws_down @ (silu(Ws_gate @ t) * (Ws_up @ t))      [B, S, H]

Expert weights are stacked per projection: Wg, Wu [E, I, H], Wd [E, H, I]. Two graph forms of `routed`:
  tiled   every expert on every row as batched MatMuls over t tiled to [E, N, H], weighted by the dense routing
          matrix ScatterElementsUpdate(zeros [N, E], idx, v), summed over E. openvino's CPU plugin recognises
          exactly this form (ConvertTiledMoeBlockTo3GatherMatmuls) and runs it as GatherMatmul ops that touch
          only the chosen experts' weights; nncf compresses the 3-D weights in place.
  gather  the k chosen experts' weights gathered per row, [N, k, I, H], and multiplied with t [N, 1, 1, H]:
          reads k experts per row, but copies k weight matrices per row of a prefill.
`tiled` is the default. benchmarks/bench_moe.py, openvino 2026.4.1, 2-core CPU, f16 weights, Qwen3.6-35B-A3B MoE
sizes: one-token draft step 10.4 ms tiled vs 43.8 ms gather (median of 5 interleaved rounds of 200 steps), 128-token
prefill 0.77 s vs 6.0 s; on the tiny reference head both are within noise of each other and of optimum's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.errors import ConfigError
from irsurgeon.ops.core import const, linear, named
from irsurgeon.ops.mlp import silu, swiglu

I64 = np.int64
Weights = Callable[[str], ov.Output]
DEFAULT_FORM = "tiled"


@dataclass(frozen=True)
class MoEShape:
    """What the graph needs of a MoE block: widths, expert count, top-k and whether top-k weights are renormalised."""
    hidden_size: int
    num_experts: int
    top_k: int
    norm_topk_prob: bool = True


def sparse_moe(x: ov.Output, w: Weights, m: MoEShape, name: str, form: str = DEFAULT_FORM) -> ov.Output:
    """x [B, S, H] -> routed experts + gated shared expert [B, S, H]; `name` is the mlp path (`mtp.layers.0.mlp`),
    form one of FORMS."""
    if form not in FORMS:
        raise ConfigError(f"MoE graph form {form!r}: expected one of {', '.join(FORMS)}")
    t = named(ops.reshape(x, const([-1, m.hidden_size], I64), special_zero=False), f"{name}/tokens")  # [N, H]
    idx, v = route(t, w, m, name)
    routed = FORMS[form](t, x, idx, v, w, m, name)
    shared = swiglu(x, w(f"{name}.shared_expert.gate_proj.weight"), w(f"{name}.shared_expert.up_proj.weight"),
                    w(f"{name}.shared_expert.down_proj.weight"), f"{name}.shared_expert")
    gate = named(ops.sigmoid(linear(x, w(f"{name}.shared_expert_gate.weight"), f"{name}.shared_expert_gate")),
                 f"{name}.shared_expert_gate/sigmoid")  # [B, S, 1]
    return named(ops.add(routed, named(ops.multiply(gate, shared), f"{name}/shared_scaled")), f"{name}/output")


def route(t: ov.Output, w: Weights, m: MoEShape, name: str) -> tuple[ov.Output, ov.Output]:
    """Chosen experts idx [N, k] (i32) and their weights v [N, k], from an f32 softmax over the router logits."""
    probs = named(ops.softmax(linear(t, w(f"{name}.gate.weight"), f"{name}.gate"), -1), f"{name}.gate/softmax")
    top = ops.topk(probs, const(m.top_k, I64), axis=-1, mode="max", sort="value",
                   index_element_type=ov.Type.i32)
    top.set_friendly_name(f"{name}.gate/topk")
    v, idx = top.output(0), top.output(1)
    if m.norm_topk_prob:
        total = ops.reduce_sum(v, const([-1], I64), keep_dims=True)
        v = named(ops.divide(v, total), f"{name}.gate/renormalize")
    return idx, v


def _dims(x: ov.Output, first: int, stop: int) -> ov.Output:
    """x.shape[first:stop] as an i64 vector."""
    return ops.slice(ops.shape_of(x, ov.Type.i64), const([first], I64), const([stop], I64), const([1], I64)).output(0)


def tiled_experts(t: ov.Output, x: ov.Output, idx: ov.Output, v: ov.Output, w: Weights, m: MoEShape,
                  name: str) -> ov.Output:
    """All experts as batched MatMuls on t tiled E times, weighted by the scattered routing matrix -> [B, S, H]."""
    E, H, ex = m.num_experts, m.hidden_size, f"{name}.experts"
    tiled = named(ops.reshape(ops.tile(t, const([E, 1], I64)), const([E, -1, H], I64), special_zero=False),
                  f"{ex}/tiled")  # [E, N, H]
    act = silu(linear(tiled, w(f"{ex}.gate_proj.weight"), f"{ex}.gate_proj"), f"{ex}.act_fn")
    up = linear(tiled, w(f"{ex}.up_proj.weight"), f"{ex}.up_proj")
    down = linear(named(ops.multiply(act, up), f"{ex}/mul"), w(f"{ex}.down_proj.weight"), f"{ex}.down_proj")
    per_expert = ops.reshape(down, ops.concat([const([E], I64), _dims(x, 0, 2), const([H], I64)], 0),
                             special_zero=False)  # [E, B, S, H]
    zeros = ops.broadcast(const(0.0), ops.concat([_dims(t, 0, 1), const([E], I64)], 0))  # [N, E]
    dense = named(ops.scatter_elements_update(zeros, idx, v, const(1, I64)), f"{name}.gate/routing")  # [N, E]
    routing = ops.reshape(ops.transpose(dense, const([1, 0], I64)),
                          ops.concat([const([E], I64), _dims(x, 0, 2)], 0), special_zero=False)  # [E, B, S]
    weighted = ops.multiply(per_expert, ops.unsqueeze(routing, const(-1, I64)))
    return named(ops.reduce_sum(weighted, const([0], I64), keep_dims=False), f"{ex}/sum")  # [B, S, H]


def take_experts(weight: ov.Output, idx: ov.Output) -> ov.Output:
    """weight [E, O, I] rows idx [N, k] -> [N, k, O, I] f32, gathered before any f16 -> f32 decompression."""
    node = weight.get_node()
    if node.get_type_name() == "Convert":
        stored = ops.gather(node.input_value(0), idx, const(0, I64))
        return ops.convert(stored, ov.Type.f32).output(0)
    return ops.gather(weight, idx, const(0, I64)).output(0)


def gathered_experts(t: ov.Output, x: ov.Output, idx: ov.Output, v: ov.Output, w: Weights, m: MoEShape,
                     name: str) -> ov.Output:
    """Only the chosen experts: their weights gathered per row, [N, k, O, I], multiplied with t -> [B, S, H]."""
    ex = f"{name}.experts"
    rows = ops.unsqueeze(t, const([1, 2], I64))  # [N, 1, 1, H]
    gate = linear(rows, take_experts(w(f"{ex}.gate_proj.weight"), idx), f"{ex}.gate_proj")  # [N, k, 1, I]
    up = linear(rows, take_experts(w(f"{ex}.up_proj.weight"), idx), f"{ex}.up_proj")
    hidden = named(ops.multiply(silu(gate, f"{ex}.act_fn"), up), f"{ex}/mul")
    down = linear(hidden, take_experts(w(f"{ex}.down_proj.weight"), idx), f"{ex}.down_proj")  # [N, k, 1, H]
    weighted = ops.multiply(down, ops.unsqueeze(v, const([2, 3], I64)))
    summed = ops.reduce_sum(weighted, const([1], I64), keep_dims=False)  # [N, 1, H]
    return named(ops.reshape(summed, ops.shape_of(x, ov.Type.i64), special_zero=False), f"{ex}/sum")


FORMS = {"tiled": tiled_experts, "gather": gathered_experts}
