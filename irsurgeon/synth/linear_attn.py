"""One Gated DeltaNet (linear-attention) layer as optimum-intel 2.2.0 exports it, with its two constant-size states.

The math is transformers 5.23.0 models/qwen3_5/modeling_qwen3_5.py (Qwen3_5GatedDeltaNet.forward,
causal_conv1d_update, torch_recurrent_gated_delta_rule, l2norm, Qwen3_5RMSNormGated). Shapes: B batch, S new
tokens, C = 2 Kh Kd + Vh Vd conv channels, Kh/Vh key/value heads, Kd/Vd their sizes, K the conv kernel.

    qkv   = in_proj_qkv(x)^T                                                  [B, C, S]
    win   = concat(conv_state, qkv)            conv_state' = win[..., -K:]    [B, C, K + S]   state [B, C, K]
    qkv   = silu(depthwise_conv(win, conv1d.weight)[..., -S:])               [B, C, S]
    q, k, v = split(qkv^T) per head; q, k repeated to Vh heads, l2-normalised, q / sqrt(Kd)
    beta  = sigmoid(in_proj_b(x));  g = -exp(A_log) * softplus(in_proj_a(x) + dt_bias)
    for t: h = h * exp(g_t); h += k_t (x) ((v_t - k_t h) beta_t); o_t = q_t h                  state h [B, Vh, Kd, Vd]
    out   = out_proj(rmsnorm(o) * norm.weight * silu(in_proj_z(x)))         norm per value head, plain gain

The op pattern is what optimum-intel 2.2.0 emits and what openvino 2026.4's paged conversion fuses into
PagedCausalConv1D and PagedGatedDeltaNet (read from the reference exports: Concat(Gather(ReadValue), Transpose) ->
GroupConvolution -> Slice(-S) -> Swish; a Loop slicing q/k/v/g/beta on axis 2 with ScatterUpdate accumulation,
its two outputs flattened into one Concat and sliced back). openvino's own passes define what matches
(src/common/transformations, fuse_gated_delta_net.cpp and the paged fusions, read for this): RemoveConcatSliceAfterLoop
wants that Concat/Slice/Reshape wrapping, FuseGDNLoop a Loop whose inputs are Divide(q, Power(Convert(Gather(
ShapeOf(q), 3)), 0.5)), k, v, g, beta and the state, and PagedCausalConv1DFusion Concat(state, Transpose) ->
GroupConvolution(Constant [C, 1, 1, K]) -> Slice on axis 2 -> Swish. Compiling for CPU fuses the Loop into openvino's
GatedDeltaNet op; the body's own arithmetic runs only where no fusion applies (tests run it alone). State ids are
optimum's:
`cache_params.past.conv.<j>cache_params.present.conv.<j>` f32 [?, C, K] and `...ssm.<j>...` f32 [?, Vh, Kd, Vd],
j counting linear-attention layers only.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import openvino.opset5 as ops5
import openvino.opset6 as ops6
from openvino.op.util import Variable, VariableInfo

from irsurgeon.ops.core import const, linear, named
from irsurgeon.synth.checkpoint import SynthSpec, conv_dim

I32, I64 = np.int32, np.int64
INT_MAX = np.iinfo(np.int64).max
L2_EPS = 1e-6  # transformers' l2norm(x, eps=1e-6)
CONV_STATE = "cache_params.past.conv.{j}cache_params.present.conv.{j}"
SSM_STATE = "cache_params.past.ssm.{j}cache_params.present.ssm.{j}"


def state(variable_id: str, static: list[int], beam_idx: ov.Output, batch: ov.Output,
          name: str) -> tuple[ov.Output, Variable]:
    """A zero-initialised constant-size state [B, *static], reordered by beam_idx; returns (past, variable)."""
    info = VariableInfo()
    info.variable_id, info.data_type, info.data_shape = variable_id, ov.Type.f32, ov.PartialShape([-1, *static])
    var = Variable(info)
    init = named(ops.broadcast(const(0.0), ops.concat([batch, const(static, I64)], axis=0)), f"{name}/init")
    past = ops6.read_value(init, var)
    past.set_friendly_name(f"{name}/read")
    return named(ops.gather(past, beam_idx, const(0, I64)), f"{name}/beam_gather"), var


def assign(value: ov.Output, var: Variable, name: str) -> ov.Node:
    sink = ops6.assign(value.get_node(), var)  # the Python binding takes the producing node
    sink.set_friendly_name(name)
    return sink


def dim(x: ov.Output, axis: int) -> ov.Output:
    """x.shape[axis] as an i64 [1]."""
    return ops.gather(ops.shape_of(x, ov.Type.i64), const([axis], I64), const(0, I64)).output(0)


def causal_conv(qkv: ov.Output, past: ov.Output, weight: ov.Output, K: int, m: str) -> tuple[ov.Output, ov.Output]:
    """(silu(conv) [B, C, S], the next conv state [B, C, K]) from qkv [B, C, S] and the state window."""
    window = named(ops.concat([past, qkv], axis=-1), f"{m}/aten::cat/Concat")
    conv = named(ops.group_convolution(window, weight, [1], [0], [0], [1]), f"{m}/aten::_convolution/GroupConvolution")
    minus_s = named(ops.multiply(dim(qkv, 2), const([-1], I64)), f"{m}/aten::neg/Multiply")
    conv = named(ops.slice(conv, minus_s, const([INT_MAX], I64), const([1], I64), const([2], I64)),
                 f"{m}/aten::slice/Slice_2")
    nxt = named(ops.slice(window, const([-K], I64), const([INT_MAX], I64), const([1], I64), const([2], I64)),
                f"{m}/aten::slice/Slice_7")
    return named(ops.swish(conv), f"{m}/aten::silu/Swish"), nxt


def l2norm(x: ov.Output, name: str) -> ov.Output:
    """x * rsqrt(sum(x^2, -1) + eps), in optimum's Multiply / ReduceSum / Sqrt / Divide form."""
    s = named(ops.reduce_sum(ops.multiply(x, x), const([-1], I64), keep_dims=True), f"{name}/aten::sum/ReduceSum")
    eps = const(np.full((1, 1, 1, 1), L2_EPS, np.float32))
    inv = ops.divide(const(np.ones((1, 1, 1, 1), np.float32)), ops.sqrt(ops.add(s, eps)))  # FuseL2NormIntoGDN's form
    return named(ops.multiply(x, inv), f"{name}/aten::mul/Multiply")


def split_heads(x: ov.Output, heads: int, size: int, repeat: int = 1) -> ov.Output:
    """[B, S, heads*size] -> [B, S, heads*repeat, size], each head repeated `repeat` times in a row, as
    transformers' repeat_interleave (every key head serves `repeat` consecutive value heads)."""
    x = ops.reshape(x, const([0, 0, heads, size], I64), special_zero=True)
    if repeat > 1:
        x = ops.gather(x, const(np.repeat(np.arange(heads), repeat), I32), const(2, I32))
    return x.output(0)


def to_bhs(x: ov.Output) -> ov.Output:
    """[B, S, H, D] <-> [B, H, S, D]."""
    return ops.transpose(x, const([0, 2, 1, 3], I32)).output(0)


def name_body(body: ov.Model, prefix: str) -> None:
    """Name every body node after its position: default names embed a process-wide counter, and the outer
    model's naming pass does not reach into a Loop body, so two identical builds would serialize differently."""
    counts: dict[str, int] = {}
    for node in body.get_ordered_ops():
        kind = node.get_type_name()
        counts[kind] = counts.get(kind, 0) + 1
        node.set_friendly_name(f"{prefix}/{kind}_{counts[kind]}")
        for out in node.outputs():
            out.get_tensor().set_names(set())


def recurrence_body(Vh: int, Kd: int, Vd: int) -> ov.Model:
    """One token of the gated delta rule; body of the Loop, ports in optimum's order."""
    it = ops.parameter([], ov.Type.i32)
    q, k = (ops.parameter([-1, Vh, 1, Kd], ov.Type.f32) for _ in range(2))
    v = ops.parameter([-1, Vh, 1, Vd], ov.Type.f32)
    g, beta = (ops.parameter([-1, Vh, 1], ov.Type.f32) for _ in range(2))
    h0 = ops.parameter([-1, Vh, Kd, Vd], ov.Type.f32)
    buf = ops.parameter([-1, Vh, -1, Vd], ov.Type.f32)
    axis, last, red = const(2, I32), const(-1, I32), const(-2, I32)
    h = ops.multiply(h0, ops.unsqueeze(ops.exp(g), last))
    kt = ops.unsqueeze(ops.squeeze(k, axis), last)  # [B, Vh, Kd, 1]
    kv_mem = ops.reduce_sum(ops.multiply(h, kt), red, keep_dims=False)  # [B, Vh, Vd]
    delta = ops.multiply(ops.subtract(ops.squeeze(v, axis), kv_mem), beta)
    h = ops.add(h, ops.multiply(kt, ops.unsqueeze(delta, red)))
    out = ops.reduce_sum(ops.multiply(h, ops.unsqueeze(ops.squeeze(q, axis), last)), red, keep_dims=True)
    buf_next = ops.scatter_update(buf, ops.unsqueeze(it, const(0, I32)), out, axis)
    results = [ops.result(const([True], np.bool_)), ops.result(h), ops.result(buf_next)]
    return ov.Model(results, [it, q, k, v, g, beta, h0, buf], "gated_delta_rule")


def gated_delta_rule(q, k, v, g, beta, h0, s: SynthSpec, m: str) -> tuple[ov.Output, ov.Output]:
    """(core [B, Vh, S, Vd], final state) through optimum's Loop and its flattened Concat interface."""
    Vh, Kd, Vd = s.linear_value_heads, s.linear_key_head_dim, s.linear_value_head_dim
    seq = ops.gather(ops.shape_of(v, ov.Type.i64), const(2, I64), const(0, I64))
    trips = ops.convert(seq, ov.Type.i32).output(0)
    loop = ops5.loop(trips, const(True, np.bool_))
    body = recurrence_body(Vh, Kd, Vd)
    name_body(body, f"{m}/gated_delta_rule")
    loop.set_function(body)
    loop.set_special_body_ports([0, 0])  # current iteration: parameter 0; condition: result 0
    p = body.get_parameters()
    for param, value in zip(p[1:6], (q, k, v, g, beta)):
        loop.set_sliced_input(param, value, 0, 1, 1, -1, 2)
    v_shape = ops.shape_of(v, ov.Type.i64)
    loop.set_merged_input(p[6], h0, body.get_results()[1].output(0))
    loop.set_merged_input(p[7], ops.broadcast(const(0.0), v_shape).output(0), body.get_results()[2].output(0))
    core = loop.get_iter_value(body.get_results()[2].output(0), -1)
    final = loop.get_iter_value(body.get_results()[1].output(0), -1)
    loop.set_friendly_name(f"{m}/gated_delta_rule/Loop")
    flat = ops.concat([ops.reshape(core, const([-1], I64), False), ops.reshape(final, const([-1], I64), False)], 0)
    n = named(ops.reduce_prod(v_shape, const([0], I64), keep_dims=True), f"{m}/aten::slice/Reshape_1")
    core = ops.reshape(ops.slice(flat, const([0], I64), n, const([1], I64), const([0], I64)), v_shape, False)
    final = ops.reshape(ops.slice(flat, n, const([INT_MAX], I64), const([1], I64), const([0], I64)),
                        ops.shape_of(h0, ov.Type.i64), False)
    return named(core, f"{m}/aten::reshape/Reshape_3"), named(final, f"{m}/aten::reshape/Reshape_8")


def gated_norm(o: ov.Output, z: ov.Output, gain: ov.Output, eps: float, m: str) -> ov.Output:
    """rmsnorm(o) * gain * silu(z) over each value head; o, z [N, Vd]."""
    mean = ops.reduce_mean(ops.power(o, const(np.full((1, 1), 2.0, np.float32))), const([-1], I64), keep_dims=True)
    eps_c = const(np.full((1, 1), eps, np.float32))
    inv = ops.divide(const(np.ones((1, 1), np.float32)), ops.sqrt(ops.add(mean, eps_c)))
    normed = named(ops.multiply(gain, ops.multiply(o, inv)), f"{m}.norm/aten::mul/Multiply_1")
    return named(ops.multiply(normed, ops.swish(z)), f"{m}.norm/aten::mul/Multiply_2")


def gated_delta_net(a: ov.Output, i: int, j: int, ctx, w, s: SynthSpec, arch) -> tuple[ov.Output, list[ov.Node]]:
    """Linear attention of layer i (the j-th linear layer) on a [B, S, H]; returns out_proj's output and the sinks."""
    m, c = f"{arch.module}.layers.{i}.linear_attn", f"{arch.ckpt}layers.{i}.linear_attn."
    Kh, Vh, Kd, Vd = s.linear_key_heads, s.linear_value_heads, s.linear_key_head_dim, s.linear_value_head_dim
    C, K, op = conv_dim(s), s.linear_conv_kernel, arch.linear_op

    def proj(x: ov.Output, p: str) -> ov.Output:
        return linear(x, w.mat(f"{c}{p}.weight"), f"{m}.{p}/{op}/MatMul")

    qkv = ops.transpose(proj(a, "in_proj_qkv"), const([0, 2, 1], I32)).output(0)
    conv_past, conv_var = state(CONV_STATE.format(j=j), [C, K], ctx.beam_idx, ctx.batch, f"{m}/conv_state")
    conv_w = w.mat(f"{c}conv1d.weight", lambda t: t.reshape(C, 1, 1, K))
    mixed, conv_next = causal_conv(qkv, conv_past, conv_w, K, m)
    mixed = ops.transpose(mixed, const([0, 2, 1], I32))
    q, k, v = ops.variadic_split(mixed, const(-1, I64), const([Kh * Kd, Kh * Kd, Vh * Vd], I64)).outputs()
    q = to_bhs(l2norm(split_heads(q, Kh, Kd, Vh // Kh), f"{m}/q_l2norm"))  # [B, Vh, S, Kd]
    # sqrt(Kd) as Power(Convert(Gather(ShapeOf(q), 3)), 0.5): the form openvino's FuseGDNLoop matches to fold the
    # q scale into its GatedDeltaNet op (openvino fuse_gated_delta_net.cpp: "GDN spec assumes it's sqrt(qk_head_size)")
    head = ops.gather(ops.shape_of(q, ov.Type.i64), const(3, I64), const(0, I64))
    scale = ops.power(ops.convert(head, ov.Type.f32), const(0.5))
    q = named(ops.divide(q, scale), f"{m}/aten::mul/Multiply_3")
    k = to_bhs(l2norm(split_heads(k, Kh, Kd, Vh // Kh), f"{m}/k_l2norm"))
    v = to_bhs(split_heads(v, Vh, Vd))  # [B, Vh, S, Vd]
    neg_a = const(-np.exp(w.tensors[c + "A_log"].astype(np.float64)).astype(np.float32), name=f"{m}/neg_A")
    g = ops.multiply(neg_a, ops.softplus(ops.add(proj(a, "in_proj_a"), const(w.tensors[c + "dt_bias"]))))
    beta = ops.sigmoid(proj(a, "in_proj_b"))
    g, beta = (ops.transpose(x, const([0, 2, 1], I32)).output(0) for x in (g, beta))
    h0, ssm_var = state(SSM_STATE.format(j=j), [Vh, Kd, Vd], ctx.beam_idx, ctx.batch, f"{m}/ssm_state")
    core, h = gated_delta_rule(q, k, v, g, beta, h0, s, m)
    flat = ops.reshape(to_bhs(core), const([-1, Vd], I64), False)
    z = ops.reshape(proj(a, "in_proj_z"), const([-1, Vd], I64), False)
    normed = gated_norm(flat, z, const(w.tensors[c + "norm.weight"].reshape(1, Vd)), s.rms_norm_eps, m)
    bs = ops.concat([ops.gather(ops.shape_of(a, ov.Type.i64), const([0, 1], I64), const(0, I64)), const([-1], I64)], 0)
    out = ops.reshape(normed, bs, False)
    sinks = [assign(conv_next, conv_var, f"{m}/conv_state/assign"), assign(h, ssm_var, f"{m}/ssm_state/assign")]
    return proj(out, "out_proj"), sinks
