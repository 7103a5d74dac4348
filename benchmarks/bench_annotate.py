"""Time and peak memory of `annotate` on a generated many-layer target (default: 64 layers, hidden 64).

    python benchmarks/bench_annotate.py [--layers 64] [--hidden 64] [--fmt int4|f16] [--keep DIR]

Generates a text-only target (`openvino_model.xml/.bin` + config.json) whose layers look like an optimum-intel
Qwen3 export (q/k/v/o with q_norm/k_norm, softmax attention, SwiGLU MLP, int4 or f16 weight chains), then runs the
annotation in fresh processes and prints wall time and peak RSS, next to a process that only imports the stack.
Peak RSS minus the import baseline, compared with the `.bin` size, shows whether the weights were read.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

# Peak RSS is the child's own VmHWM: it restarts at exec, unlike ru_maxrss, which a forked child inherits.
PEAK = ("import re; print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
RUN = ("import sys, time; from irsurgeon.commit.annotate import annotate_ir; t = time.perf_counter(); "
       "r = annotate_ir(sys.argv[1]); print(r.status, r.num_layers, f'{time.perf_counter() - t:.3f}'); " + PEAK)
BASELINE = "import openvino, irsurgeon.commit.annotate; " + PEAK


def weight(rng, out_dim: int, in_dim: int, fmt: str, name: str) -> ov.Output:
    if fmt == "f16":
        w = ops.constant((rng.standard_normal((out_dim, in_dim)) * 0.05).astype(np.float16), name=name)
        return ops.convert(w, ov.Type.f32).output(0)
    group = min(in_dim, 32)
    n = in_dim // group
    q = ov.op.Constant(ov.Type.u4, ov.Shape([out_dim, n, group]), rng.integers(0, 16, out_dim * in_dim).tolist())
    q.set_friendly_name(name)
    zp = ov.op.Constant(ov.Type.u4, ov.Shape([out_dim, n, 1]), [8] * (out_dim * n))
    deq = ops.multiply(ops.subtract(ops.convert(q, ov.Type.f16), ops.convert(zp, ov.Type.f16)),
                       ops.constant(np.full((out_dim, n, 1), 0.01, np.float16)))
    flat = ops.reshape(deq, ops.constant(np.array([out_dim, in_dim], np.int64)), False)
    return ops.convert(flat, ov.Type.f32).output(0)


def named(node, name: str) -> ov.Output:
    node.set_friendly_name(name)
    return node.output(0)


def linear(x, rng, out_dim: int, in_dim: int, fmt: str, scope: str) -> ov.Output:
    w = weight(rng, out_dim, in_dim, fmt, f"self.{scope[9:]}.weight")
    return named(ops.matmul(x, w, False, True), f"{scope}/ov_ext::linear/MatMul")


def rms(x, width: int, scope: str) -> ov.Output:
    sq = named(ops.power(x, ops.constant(np.float32(2))), f"{scope}/aten::pow/Power")
    mean = named(ops.reduce_mean(sq, ops.constant(np.array([-1], np.int64)), True), f"{scope}/aten::mean/ReduceMean")
    inv = named(ops.sqrt(named(ops.add(mean, ops.constant(np.float32(1e-6))), f"{scope}/aten::add/Add")),
                f"{scope}/aten::rsqrt/Sqrt")
    y = named(ops.divide(x, inv), f"{scope}/aten::mul/Multiply")
    return named(ops.multiply(y, ops.constant(np.ones(width, np.float32))), f"{scope}/aten::mul/Multiply_1")


def layer(x, i: int, rng, hidden: int, fmt: str) -> ov.Output:
    scope, heads = f"__module.model.layers.{i}", max(hidden // 32, 1)
    hd = hidden // heads
    h = rms(x, hidden, f"{scope}.input_layernorm")
    split = ops.constant(np.array([0, 0, heads, hd], np.int64))
    q = rms(ops.reshape(linear(h, rng, hidden, hidden, fmt, f"{scope}.self_attn.q_proj"), split, True), hd,
            f"{scope}.self_attn.q_norm")
    k = rms(ops.reshape(linear(h, rng, hidden, hidden, fmt, f"{scope}.self_attn.k_proj"), split, True), hd,
            f"{scope}.self_attn.k_norm")
    v = ops.reshape(linear(h, rng, hidden, hidden, fmt, f"{scope}.self_attn.v_proj"), split, True)
    perm = ops.constant(np.array([0, 2, 1, 3], np.int64))
    q, k, v = (ops.transpose(t, perm) for t in (q, k, v))
    att = ops.softmax(ops.matmul(q, k, False, True), -1)
    ctx = ops.reshape(ops.transpose(ops.matmul(att, v, False, False), perm),
                      ops.constant(np.array([0, 0, hidden], np.int64)), True)
    x = named(ops.add(x, linear(ctx, rng, hidden, hidden, fmt, f"{scope}.self_attn.o_proj")), f"{scope}/aten::add/Add")
    h = rms(x, hidden, f"{scope}.post_attention_layernorm")
    inter = 3 * hidden
    gated = ops.multiply(ops.swish(linear(h, rng, inter, hidden, fmt, f"{scope}.mlp.gate_proj")),
                         linear(h, rng, inter, hidden, fmt, f"{scope}.mlp.up_proj"))
    return named(ops.add(x, linear(gated, rng, hidden, inter, fmt, f"{scope}.mlp.down_proj")),
                 f"{scope}/aten::add/Add_1")


def make_target(directory: Path, layers: int, hidden: int, fmt: str, vocab: int = 1024) -> Path:
    rng = np.random.default_rng(0)
    embeds = ops.parameter(ov.PartialShape([-1, -1, hidden]), ov.Type.f32, name="inputs_embeds")
    embeds.output(0).set_names({"inputs_embeds"})
    x = embeds.output(0)
    for i in range(layers):
        x = layer(x, i, rng, hidden, fmt)
    logits = ops.result(linear(rms(x, hidden, "__module.model.norm"), rng, vocab, hidden, fmt, "__module.lm_head"))
    logits.output(0).set_names({"logits"})
    directory.mkdir(parents=True, exist_ok=True)
    xml = directory / "openvino_model.xml"
    ov.save_model(ov.Model([logits], [embeds], "bench"), xml, compress_to_fp16=False)
    config = {"model_type": "qwen3", "num_hidden_layers": layers, "hidden_size": hidden}
    (directory / "config.json").write_text(json.dumps(config))
    return xml


def run(code: str, *args: str) -> tuple[str, float, int]:
    """stdout (without its last line), wall seconds and peak RSS (kB, the last line) of a fresh python process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    if proc.returncode:
        sys.exit(f"benchmark process failed with exit code {proc.returncode}")
    *out, peak = proc.stdout.strip().splitlines()
    return " ".join(out), time.perf_counter() - start, int(peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--fmt", choices=("int4", "f16"), default="int4")
    parser.add_argument("--keep", type=Path, default=None, help="Generate the target here and keep it.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp) / "target"
        start = time.perf_counter()
        xml = make_target(directory, args.layers, args.hidden, args.fmt)
        made = time.perf_counter() - start
        ops_count = xml.read_bytes().count(b"<layer ")
        print(f"target: {args.layers} layers, hidden {args.hidden}, {args.fmt}: {ops_count} ops, "
              f"xml {xml.stat().st_size / 1e6:.1f} MB, bin {xml.with_suffix('.bin').stat().st_size / 1e6:.1f} MB "
              f"(generated in {made:.1f} s)")
        _, base_wall, base_rss = run(BASELINE)
        out, wall, rss = run(RUN, str(directory))
        status, layers, inner = out.split()
        print(f"import baseline: {base_wall:.2f} s, peak RSS {base_rss / 1024:.0f} MB")
        print(f"annotate: {status}, {layers} layers, {float(inner):.2f} s in annotate_ir, {wall:.2f} s process, "
              f"peak RSS {rss / 1024:.0f} MB (+{(rss - base_rss) / 1024:.0f} MB over the import baseline)")
        out, wall, rss = run(RUN, str(directory))
        print(f"annotate again: {out.split()[0]}, {float(out.split()[2]):.2f} s in annotate_ir")


if __name__ == "__main__":
    main()
