"""Make the int4-packed MTP heads of tests/data/int4 with each format's own packer, and the goldens: each library's
own dequantization of what it packed.

Run in a reference environment, never the project's (torch CPU and the format libraries; tests/data/int4/SOURCES.md
lists the versions used):

    python scripts/make_int4_checkpoints.py tests/data/reference/ckpt/qwen35-dense tests/data/int4 \
        --wheels /tmp/wheels    # holds autoawq-0.2.9/ and the auto_gptq 0.7.1 wheel, unpacked (agptq/)

The head is the reference checkpoint's `mtp.*` (bf16, hidden 64). Its seven projections are quantized to int4 with
group size 32 (values rounded to their group's grid first, then packed by the library); `mtp.fc` and the norms stay
bf16, as releases keep them. Each folder holds config.json (the reference config with the format's
quantization_config), model.safetensors (the `mtp.*` tensors only) and golden.json (module -> the library's
dequantized weight [O, I]: its dtype, shape, the sha256 of its 16-bit patterns and its first row's first 16).

    compressed-tensors  PackedQuantizationCompressor.compress / .decompress (compressed-tensors 0.20.1); two
                        config groups: self_attn asymmetric group 32 by regex, the MLP symmetric per channel by
                        the "Linear" class target; `mtp.fc` in `ignore`
    awq                 WQLinear_GEMM.from_linear (AutoAWQ 0.2.9 awq/modules/linear/gemm.py), golden from
                        awq/utils/packing_utils.py dequantize_gemm
    gptq                auto-gptq 0.7.1 QuantLinear.pack (nn_modules/qlinear/qlinear_cuda.py), desc_act: a seeded
                        g_idx permutation; golden from its own forward's dequantization (x = identity)
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
GROUP = 32
SEED = 1234


def golden_entry(w: torch.Tensor) -> dict:
    """A dequantized weight as its golden: dtype, shape, sha256 of its little-endian 16-bit patterns, and its first
    row's first 16 patterns (what a failing comparison shows)."""
    bits = w.contiguous().view(torch.int16).numpy().view(np.uint16).astype("<u2")
    return {"dtype": str(w.dtype).removeprefix("torch."), "shape": list(w.shape),
            "sha256": hashlib.sha256(bits.tobytes()).hexdigest(), "row0": [int(b) for b in bits[0, :16]]}


def load_by_path(name: str, path: Path):
    """One module of a library from its file (its package __init__ pulls in what a CPU venv lacks)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def stub_package(name: str, path: Path) -> None:
    package = types.ModuleType(name)
    package.__path__ = [str(path)]
    sys.modules[name] = package


def compressed_tensors(head: dict, config: dict) -> tuple[dict, dict, dict]:
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    attn = QuantizationScheme(targets=["re:.*mtp\\..*self_attn\\..*proj$"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=False, strategy="group", group_size=GROUP), format="pack-quantized")
    mlp = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=True, strategy="channel"), format="pack-quantized")
    tensors, golden = {}, {}
    for proj in PROJ:
        m = f"mtp.layers.0.{proj}"
        w = head.pop(m + ".weight")  # bf16
        scheme = attn if proj.startswith("self_attn") else mlp
        args = scheme.weights
        grouped = w.float().unflatten(-1, (-1, GROUP)) if args.strategy == "group" else w.float()[:, None, :]
        lo, hi = grouped.amin(-1), grouped.amax(-1)
        scale, zp = calculate_qparams(lo.to(w.dtype), hi.to(w.dtype), args)
        state = {"weight": w, "weight_scale": scale.to(w.dtype)}
        if not args.symmetric:
            state["weight_zero_point"] = zp
        packed = PackedQuantizationCompressor.compress(state, scheme)
        stored = {f"{m}.{k}": v.contiguous() for k, v in packed.items()}
        tensors.update(stored)
        back = PackedQuantizationCompressor.decompress({k.rpartition(".")[2]: v for k, v in stored.items()}, scheme)
        golden[m] = golden_entry(back["weight"])
    qc = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
          "config_groups": {"group_0": json.loads(mlp.model_dump_json()),
                            "group_mtp": json.loads(attn.model_dump_json())},
          "ignore": ["lm_head", "mtp.fc"], "kv_cache_scheme": None, "sparsity_config": {},
          "version": "0.20.1"}
    return tensors, golden, qc


def awq_group_params(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """AutoAWQ 0.2.9 awq/quantize/quantizer.py pseudo_quantize_tensor (zero point, 4 bits): the grid of each group,
    and W rounded to it (what apply_quant hands from_linear). Returns (w_q [O, I] f16, scales [O, G], zeros [O, G])."""
    O, I = w.shape
    g = w.float().reshape(-1, GROUP)
    hi, lo = g.amax(1, keepdim=True), g.amin(1, keepdim=True)
    scales = ((hi - lo).clamp(min=1e-5) / 15).half().float()
    zeros = (-torch.round(lo / scales)).clamp(0, 15)
    q = torch.clamp(torch.round(g / scales) + zeros, 0, 15)
    w_q = ((q - zeros) * scales).reshape(O, I)
    return w_q.half(), scales.reshape(O, -1), zeros.reshape(O, -1)


def awq(head: dict, wheels: Path) -> tuple[dict, dict, dict]:
    root = wheels / "autoawq-0.2.9" / "awq"
    stub_package("awq", root)
    stub_package("awq.utils", root / "utils")
    stub_package("awq.modules", root / "modules")
    stub_package("awq.modules.linear", root / "modules" / "linear")
    packing = load_by_path("awq.utils.packing_utils", root / "utils" / "packing_utils.py")
    gemm = load_by_path("awq.modules.linear.gemm", root / "modules" / "linear" / "gemm.py")
    tensors, golden = {}, {}
    for proj in PROJ:
        m = f"mtp.layers.0.{proj}"
        w = head.pop(m + ".weight")
        w_q, scales, zeros = awq_group_params(w)
        linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=torch.float16)
        linear.weight.data = w_q
        q = gemm.WQLinear_GEMM.from_linear(linear, 4, GROUP, scales=scales.t().contiguous(),
                                           zeros=zeros.t().contiguous())
        stored = {"qweight": q.qweight.contiguous(), "qzeros": q.qzeros.contiguous(), "scales": q.scales.contiguous()}
        tensors.update({f"{m}.{k}": v for k, v in stored.items()})
        back = packing.dequantize_gemm(stored["qweight"], stored["qzeros"], stored["scales"], 4, GROUP).t()
        golden[m] = golden_entry(back)
    qc = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm",
          "modules_to_not_convert": ["visual", "mtp.fc"]}
    return tensors, golden, qc


def gptq(head: dict, wheels: Path) -> tuple[dict, dict, dict]:
    qlinear = load_by_path("auto_gptq_qlinear_cuda",
                           wheels / "agptq" / "auto_gptq" / "nn_modules" / "qlinear" / "qlinear_cuda.py")
    gen = torch.Generator().manual_seed(SEED)
    tensors, golden = {}, {}
    for proj in PROJ:
        m = f"mtp.layers.0.{proj}"
        w = head.pop(m + ".weight").half()
        O, I = w.shape
        G = I // GROUP
        perm = torch.randperm(I, generator=gen)  # desc_act: inputs quantized in this order, groups along it
        g_idx = torch.empty(I, dtype=torch.int32)
        g_idx[perm] = torch.arange(I, dtype=torch.int32) // GROUP
        scales = torch.empty(O, G)
        for g in range(G):  # symmetric: zero point 8, scale from the group's largest magnitude
            cols = (g_idx == g).nonzero().flatten()
            scales[:, g] = (w[:, cols].float().abs().amax(1).clamp(min=1e-5) / 7.5)
        scales = scales.half().float()
        zeros = torch.full((O, G), 8.0)
        s, z = scales[:, g_idx.long()], zeros[:, g_idx.long()]
        w_q = ((torch.clamp(torch.round(w.float() / s) + z, 0, 15) - z) * s).half()
        linear = torch.nn.Linear(I, O, bias=False, dtype=torch.float16)
        linear.weight.data = w_q
        q = qlinear.QuantLinear(4, GROUP, I, O, False)
        q.pack(linear, scales, zeros, g_idx)
        stored = {"qweight": q.qweight.contiguous(), "qzeros": q.qzeros.contiguous(),
                  "scales": q.scales.contiguous(), "g_idx": q.g_idx.to(torch.int32).contiguous()}
        tensors.update({f"{m}.{k}": v for k, v in stored.items()})
        back = q(torch.eye(I, dtype=torch.float16)).t()  # its forward dequantizes, then x @ W: x = I gives W
        golden[m] = golden_entry(back)
    qc = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": True, "sym": True,
          "checkpoint_format": "gptq", "true_sequential": True, "damp_percent": 0.01,
          "static_groups": False, "lm_head": False}
    return tensors, golden, qc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ckpt", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--wheels", type=Path, required=True)
    args = ap.parse_args()
    torch.manual_seed(SEED)
    base = load_file(args.ckpt / "model.safetensors")
    config = json.loads((args.ckpt / "config.json").read_text())
    for name, make in (("compressed-tensors", lambda h: compressed_tensors(h, config)),
                       ("awq", lambda h: awq(h, args.wheels)), ("gptq", lambda h: gptq(h, args.wheels))):
        head = {k: v for k, v in base.items() if k.startswith("mtp.")}
        packed, golden, qc = make(head)
        out = args.out / name
        out.mkdir(parents=True, exist_ok=True)
        save_file({**head, **packed}, out / "model.safetensors", metadata={"format": "pt"})
        (out / "config.json").write_text(json.dumps({**config, "quantization_config": qc}, indent=2) + "\n")
        (out / "golden.json").write_text(json.dumps(golden, indent=1) + "\n")
        print(name, len(head) + len(packed), "tensors")


if __name__ == "__main__":
    main()
