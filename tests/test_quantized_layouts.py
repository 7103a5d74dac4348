"""Quantized layouts other than FP8 block-scaled and int4 packed (compressed-tensors, AWQ, GPTQ) are refused in one
line naming the scheme and what is supported; the official FP8 releases' layouts and the int4 ones, at their real
sizes, pass every check. Checkpoints here are real configs with
header-only safetensors files (the data is a sparse hole): every refusal and check comes from names, dtypes, shapes
and config before any data is read."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab.dirsnap import snapshot
from helpers.checkpoints import read_tensors, write_header_only, write_variant
from irsurgeon.flows.standalone import load_mtp
from irsurgeon.cli import main
from irsurgeon.families.qwen35_mtp.model import parse_config
from irsurgeon.families.qwen35_mtp.model import tensors as table_of
from irsurgeon.families.qwen35_mtp.strip import strip_mtp


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


REAL = "real-configs"


def real_config(reference: Path, name: str, quantization_config=None) -> dict:
    config = json.loads((reference / REAL / name / "config.json").read_text())
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    return config


def layout(config: dict, scheme: str) -> dict[str, tuple[str, list[int]]]:
    """The head's tensors at the config's real sizes as `scheme` stores them (name -> (dtype, shape))."""
    out = {}
    for rel, shape in table_of(parse_config(config)).shapes().items():
        name, (O, I) = "mtp." + rel, (shape if len(shape) == 2 else (0, 0))
        m = name[: -len(".weight")]
        if len(shape) == 1 or (name == "mtp.fc.weight" and scheme in ("compressed-tensors", "fp8")):
            out[name] = ("BF16", list(shape))  # norms; fc is in the AWQ build's ignore list, BF16 in FP8 releases
        elif scheme == "compressed-tensors":  # pack-quantized int4, group 32 (the build's group_mtp)
            out.update({m + ".weight_packed": ("I32", [O, I // 8]), m + ".weight_scale": ("BF16", [O, I // 32]),
                        m + ".weight_zero_point": ("I32", [O // 8, I // 32]), m + ".weight_shape": ("I64", [2])})
        elif scheme in ("gptq", "awq"):
            packed = [I // 8, O] if scheme == "gptq" else [I, O // 8]
            out.update({m + ".qweight": ("I32", packed), m + ".qzeros": ("I32", [I // 128, O // 8]),
                        m + ".scales": ("F16", [I // 128, O])})
            if scheme == "gptq":
                out[m + ".g_idx"] = ("I32", [I])
        elif scheme == "mlx-mxfp4":
            out.update({name: ("U32", [O, I * 4 // 32]), m + ".scales": ("U8", [O, I // 32])})
        elif scheme == "mlx-affine":
            out.update({name: ("U32", [O, I // 8]), m + ".scales": ("BF16", [O, I // 64]),
                        m + ".biases": ("BF16", [O, I // 64])})
        elif scheme == "bnb-nf4":
            out.update({name: ("U8", [O * I // 2, 1]), name + ".absmax": ("F32", [O * I // 64]),
                        name + ".quant_map": ("F32", [16]), name + ".quant_state.bitsandbytes__nf4": ("U8", [96])})
        elif scheme == "bnb-int8":
            out.update({name: ("I8", [O, I]), m + ".SCB": ("F32", [O])})
        elif scheme == "hqq":
            out.update({m + ".W_q": ("U8", [O * I // 2]), m + ".meta": ("U8", [64])})
        elif scheme == "fp8":
            out.update({name: ("F8_E4M3", [O, I]), name + "_scale_inv": ("BF16", [-(-O // 128), -(-I // 128)])})
    return out


def header_only_checkpoint(d: Path, config: dict, tensors: dict) -> Path:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    write_header_only(d / "model.safetensors", tensors)
    return d


SMALL = "qwen3.5-0.8B"
FOREIGN = {  # case -> (real config, quantization_config to set (None: its own), layout, words the error must hold)
    "gptq-packed-as-awq": (SMALL, {"quant_method": "mixed", "bits": 4, "group_size": 128}, "gptq",
                           ["quantized as mixed (bits 4, group_size 128)", ".g_idx"]),
    "packed-without-config": (SMALL, {}, "awq", ["quantized as GPTQ/AWQ", ".qweight"]),
    "mlx-mxfp4": ("qwen3.5-2B-mlx-mxfp4", None, "mlx-mxfp4",
                  ["quantized as MLX (bits 4, group_size 32, mode mxfp4)", ".scales"]),
    "mlx-affine": (SMALL, {"group_size": 64, "bits": 4}, "mlx-affine",
                   ["quantized as MLX (bits 4, group_size 64)", ".biases"]),
    "bnb-nf4": (SMALL, {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
                "bnb-nf4", ["quantized as bitsandbytes", "weight.absmax"]),
    "bnb-int8-no-config": (SMALL, {}, "bnb-int8", ["quantized as bitsandbytes", ".SCB"]),
    "unknown-method": (SMALL, {"quant_method": "hqq", "nbits": 4}, "hqq", ["quantized as hqq", ".W_q"]),
}


@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_other_quantized_layouts_are_refused_naming_the_scheme(reference, tmp_path, case):
    """Real configs with `mtp.*` tensors of that scheme at the config's sizes (header-only files: the refusal
    comes from names, dtypes and config, before any data is read)."""
    config_name, qc, scheme, needles = FOREIGN[case]
    config = real_config(reference, config_name, qc)
    d = header_only_checkpoint(tmp_path / "ckpt", config, layout(config, scheme))
    code, out = run("build-mtp", d, "-o", tmp_path / "out")
    assert code == 1 and out.startswith("Error: ") and out.count("\n") == 1, out
    for needle in needles + ["supported: bf16, f16, f32, f64, FP8 e4m3 with block scales", "int4 packed as"]:
        assert needle in out
    assert not (tmp_path / "out").exists()


def test_patch_refuses_a_foreign_layout_and_leaves_the_target_as_it_was(reference, export, ckpt, tmp_path):
    """The target's own checkpoint geometry (patch checks that first), its head stored as MLX affine int4."""
    config = json.loads((ckpt("qwen35-dense") / "config.json").read_text())
    config["quantization_config"] = {"group_size": 64, "bits": 4}
    d = header_only_checkpoint(tmp_path / "ckpt", config, layout(config, "mlx-affine"))
    target = strip_mtp(export("dense-fp16"), tmp_path / "target")
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", d)
    last = out.splitlines()[-1]  # after the line saying which format `auto` chose
    assert code == 1 and last.startswith("Error: ") and "quantized as MLX" in last
    assert snapshot(target) == before


def test_a_foreign_quantization_config_with_a_float_head_builds(reference, ckpt, tmp_path):
    """Quantizers often leave the MTP head unquantized: the tensors, not the config, decide."""
    qc = real_config(reference, "qwen3.6-27B-awq-community")["quantization_config"]
    d = write_variant(ckpt("qwen35-dense"), tmp_path / "ckpt", read_tensors(ckpt("qwen35-dense")),
                      lambda c: c.__setitem__("quantization_config", qc))
    code, out = run("build-mtp", d, "-o", tmp_path / "out")
    assert code == 0, out


@pytest.mark.parametrize("config_name, qc", [
    ("qwen3.6-35B-A3B-FP8", None),  # per-expert FP8 experts with BF16 scales, 1560 mtp.* tensors
    ("qwen3.6-27B-awq-community", {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]}),  # a 27B-class dense FP8 head: 22 tensors
])
def test_real_fp8_release_layouts_pass_every_check(reference, tmp_path, config_name, qc):
    """At the releases' sizes (header-only files): tensor set, shapes, dtypes, scale shapes all accepted."""
    config = real_config(reference, config_name, qc)
    tensors = layout(config, "fp8")
    if "moe" in config["model_type"]:
        tensors = per_expert_fp8(tensors, config)
        assert len(tensors) == 1560
    else:
        assert len(tensors) == 22
    d = header_only_checkpoint(tmp_path / "ckpt", config, tensors)
    cfg, weights, ck = load_mtp(d)
    ck.close()
    assert sorted(weights) == sorted(k for k in table_of(cfg).shapes())


INT4 = {  # case -> (real config, quantization_config to set (None: its own), layout)
    # the community 27B release: self_attn/MLP of mtp.* asymmetric group 32 (its group_mtp), mtp.fc in `ignore`
    "compressed-tensors-27B": ("qwen3.6-27B-awq-community", None, "compressed-tensors"),
    "gptq-0.8B": (SMALL, {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}, "gptq"),
    "awq-0.8B": (SMALL, {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm",
                         "zero_point": True}, "awq"),
}


@pytest.mark.parametrize("case", sorted(INT4))
def test_real_int4_layouts_pass_every_check(reference, tmp_path, case):
    """At the releases' sizes (header-only files): the packed modules' tensor set, dtypes and shapes are checked
    against the config from the shapes alone, and every weight of the table is there (unpacked when read)."""
    config_name, qc, scheme = INT4[case]
    config = real_config(reference, config_name, qc)
    d = header_only_checkpoint(tmp_path / "ckpt", config, layout(config, scheme))
    cfg, weights, ck = load_mtp(d)
    ck.close()
    assert sorted(weights) == sorted(k for k in table_of(cfg).shapes())
    assert weights.source_format.startswith("int4 (") and scheme in weights.source_format.lower()


def per_expert_fp8(tensors: dict, config: dict) -> dict:
    """Canonical stacked experts -> the release's per-expert FP8 tensors; router and shared-expert gate BF16."""
    tc = config["text_config"]
    E, I, H = tc["num_experts"], tc["moe_intermediate_size"], tc["hidden_size"]
    out = {n: v for n, v in tensors.items() if ".experts." not in n}
    for gate in ("mtp.layers.0.mlp.gate.weight", "mtp.layers.0.mlp.shared_expert_gate.weight"):
        out.pop(gate + "_scale_inv")
        out[gate] = ("BF16", tensors[gate][1])
    for e in range(E):
        for p, (o, i) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            name = f"mtp.layers.0.mlp.experts.{e}.{p}.weight"
            out[name], out[name + "_scale_inv"] = ("F8_E4M3", [o, i]), ("BF16", [-(-o // 128), -(-i // 128)])
    return out
