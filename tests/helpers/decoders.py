"""Synthetic decoder (names as optimum-intel's text-only exports; `make_decoder` builds it):

    x = Parameter inputs_embeds [?, ?, H]
    for i in layers:                                         scope P.layers.<i>
        a = o_proj(softmax(h h^T) v_proj(h)),  h = input_layernorm(x)
        x = x + a                                            P.layers.<i>/aten::add/Add
        x = x + down(silu(gate(h2)) * up(h2)), h2 = post_attention_layernorm(x)
                                                             P.layers.<i>/aten::add/Add_1   <- hidden state i
    logits = lm_head(norm(x))                                P.norm/aten::mul/Multiply_1    <- hidden state N-1
Weights are f32, f16 (+ Convert), int8 (u8 [O, I] -> Convert -> Subtract zp -> Multiply scale [O, 1]) or int4
(u4 [O, I/g, g] -> Convert -> Subtract zp -> Multiply scale -> Reshape).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.ir.export import CONFIG, TEXT_ONLY_MODEL


@dataclass(frozen=True)
class Spec:
    layers: tuple[int, ...] = (0, 1, 2)
    hidden: int = 32
    vocab: int = 48
    prefix: str = "__module.model"
    fmt: str = "f32"              # f32 | f16 | int8 | int4
    group: int = 16
    duplicate: bool = False       # layer 1's first residual Add takes the name of its Add_1
    extra_crossing: bool = False  # layer 0 sends a second [?, ?, H] value into layer 1
    logits_op: str = "MatMul"     # "Tanh": a softcap between the lm_head and `logits`
    logits_name: str = "logits"


def _named(node, name: str):
    node.set_friendly_name(name)
    return node.output(0)


def _weight(rng, out_dim: int, in_dim: int, spec: Spec, name: str) -> ov.Output:
    w = rng.standard_normal((out_dim, in_dim)).astype(np.float32) * 0.1
    if spec.fmt == "f32":
        return ops.constant(w, name=name).output(0)
    if spec.fmt == "f16":
        return ops.convert(ops.constant(w.astype(np.float16), name=name), ov.Type.f32).output(0)
    if spec.fmt == "int8":
        q = ops.constant(rng.integers(0, 256, w.shape).astype(np.uint8), name=name)
        zp = ops.constant(np.full((out_dim, 1), 128, np.uint8))
        deq = ops.multiply(ops.subtract(ops.convert(q, ov.Type.f16), ops.convert(zp, ov.Type.f16)),
                           ops.constant(np.full((out_dim, 1), 0.01, np.float16)))
        return ops.convert(deq, ov.Type.f32).output(0)
    groups = in_dim // spec.group
    q = ov.op.Constant(ov.Type.u4, ov.Shape([out_dim, groups, spec.group]), rng.integers(0, 16, w.size).tolist())
    zp = ov.op.Constant(ov.Type.u4, ov.Shape([out_dim, groups, 1]), [8] * (out_dim * groups))
    q.set_friendly_name(name)
    scale = ops.constant(np.full((out_dim, groups, 1), 0.01, np.float16))
    deq = ops.multiply(ops.subtract(ops.convert(q, ov.Type.f16), ops.convert(zp, ov.Type.f16)), scale)
    flat = ops.reshape(deq, ops.constant(np.array([out_dim, in_dim], np.int64)), False)
    return ops.convert(flat, ov.Type.f32).output(0)


def _linear(x, rng, out_dim: int, in_dim: int, spec: Spec, scope: str) -> ov.Output:
    w = _weight(rng, out_dim, in_dim, spec, f"self.{scope[len('__module.'):]}.weight")
    return _named(ops.matmul(x, w, False, True), f"{scope}/aten::linear/MatMul")


def _rms(x, rng, spec: Spec, scope: str) -> ov.Output:
    mean = _named(ops.reduce_mean(_named(ops.power(x, ops.constant(np.float32(2))), f"{scope}/aten::pow/Power"),
                                  ops.constant(np.array([-1], np.int64)), True), f"{scope}/aten::mean/ReduceMean")
    inv = ops.divide(ops.constant(np.float32(1)), ops.sqrt(ops.add(mean, ops.constant(np.float32(1e-6)))))
    y = _named(ops.multiply(x, inv), f"{scope}/aten::mul/Multiply")
    gain = ops.constant(rng.uniform(0.5, 1.5, (spec.hidden,)).astype(np.float32))
    return _named(ops.multiply(y, gain), f"{scope}/aten::mul/Multiply_1")


def _layer(x, extra_in, i: int, rng, spec: Spec):
    scope, hid = f"{spec.prefix}.layers.{i}", spec.hidden
    h = _rms(x, rng, spec, f"{scope}.input_layernorm")
    scores = _named(ops.softmax(ops.matmul(h, h, False, True), -1), f"{scope}.self_attn/aten::softmax/Softmax")
    ctx = ops.matmul(scores, _linear(h, rng, hid, hid, spec, f"{scope}.self_attn.v_proj"), False, False)
    attn = _linear(ctx, rng, hid, hid, spec, f"{scope}.self_attn.o_proj")
    if extra_in is not None:
        attn = _named(ops.add(attn, extra_in), f"{scope}.self_attn/aten::add/Add")
    x1 = ops.add(x, attn)
    h2 = _rms(x1.output(0), rng, spec, f"{scope}.post_attention_layernorm")
    gate = ops.swish(_linear(h2, rng, 2 * hid, hid, spec, f"{scope}.mlp.gate_proj"))
    up = _linear(h2, rng, 2 * hid, hid, spec, f"{scope}.mlp.up_proj")
    out = _named(ops.add(x1, _linear(ops.multiply(gate, up), rng, hid, 2 * hid, spec, f"{scope}.mlp.down_proj")),
                 f"{scope}/aten::add/Add_1")
    x1.set_friendly_name(f"{scope}/aten::add/Add_1" if spec.duplicate and i == 1 else f"{scope}/aten::add/Add")
    extra = None
    if spec.extra_crossing and i == spec.layers[0]:
        extra = _named(ops.multiply(out, ops.constant(np.float32(0.5))), f"{scope}/aten::mul/Multiply_2")
    return out, extra


def make_decoder(spec: Spec = Spec(), seed: int = 0) -> tuple[ov.Model, dict[int, tuple[str, int]]]:
    """The decoder above, and the locators its construction says the annotation must hold."""
    rng = np.random.default_rng(seed)
    embeds = ops.parameter(ov.PartialShape([-1, -1, spec.hidden]), ov.Type.f32, name="inputs_embeds")
    embeds.output(0).set_names({"inputs_embeds"})
    x, extra, expected = embeds.output(0), None, {}
    for k, i in enumerate(spec.layers):
        x, extra = _layer(x, extra, i, rng, spec)
        expected[k] = (x.get_node().get_friendly_name(), 0)
    normed = _rms(x, rng, spec, f"{spec.prefix}.norm")
    expected[len(spec.layers) - 1] = (normed.get_node().get_friendly_name(), 0)
    lm_head = _linear(normed, rng, spec.vocab, spec.hidden, replace(spec, fmt="f32"), "__module.lm_head")
    last = lm_head if spec.logits_op == "MatMul" else ops.tanh(lm_head).output(0)
    result = ops.result(last)
    result.output(0).set_names({spec.logits_name})
    return ov.Model([result], [embeds], "decoder"), expected


def write_target(directory: Path, spec: Spec = Spec(), config: dict | None | bool = True,
                 name: str = TEXT_ONLY_MODEL) -> tuple[Path, dict[int, tuple[str, int]]]:
    """Save make_decoder(spec) as an IR in directory (+ config.json unless config is False)."""
    model, expected = make_decoder(spec)
    directory.mkdir(parents=True, exist_ok=True)
    xml = directory / name
    ov.save_model(model, xml, compress_to_fp16=False)
    if config is True:
        config = {"model_type": "llama", "num_hidden_layers": len(spec.layers), "hidden_size": spec.hidden}
    if config:
        (directory / CONFIG).write_text(json.dumps(config))
    return xml, expected
