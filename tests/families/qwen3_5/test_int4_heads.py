"""A Qwen3.5 MTP head packed as int4 (compressed-tensors, AutoAWQ, GPTQ: tests/data/int4) is built as every head is:
its f32 build matches the numpy layer on the unpacked values (which tests/test_int4_layouts.py proves are the
libraries' own), and `patch` puts it into an int4 target compressed as the target is, recording the source format
in its provenance."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers.checkpoints import dequantized, read_tensors, write_variant
from helpers.heads import max_diff, run_head, run_reference, scale, three_calls
from irsurgeon.cli import main
from irsurgeon.core import rtinfo
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.families.qwen35_mtp.strip import strip_mtp
from irsurgeon.flows.patch import recorded
from irsurgeon.flows.standalone import build_mtp_model, load_mtp
from irsurgeon.ir import files
from irsurgeon.ir.storage import weight_summary

DATA = Path(__file__).parents[2] / "data" / "int4"
SOURCE = {"compressed-tensors": "int4 (compressed-tensors pack-quantized, quant_method compressed-tensors)",
          "awq": "int4 (AutoAWQ GEMM, quant_method awq)", "gptq": "int4 (GPTQ, quant_method gptq)"}


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.mark.parametrize("fmt", sorted(SOURCE))
def test_an_int4_head_matches_numpy_on_its_unpacked_values(fmt):
    """f32 build vs the float64 numpy layer: f32 rounding only, 1e-4 of the output's scale (as for float heads)."""
    d = DATA / fmt
    cfg, weights, ckpt = load_mtp(d)
    stored = read_tensors(d)
    floats = dequantized({n: v for n, v in stored.items() if n.endswith(".weight")})  # fc and norms, raw (bf16)
    packed = sorted(n[len("mtp."):-len(".qweight")] + ".weight" for n in stored if n.endswith(".qweight")) or \
        sorted(n[len("mtp."):-len("_packed")] for n in stored if n.endswith(".weight_packed"))
    try:
        unpacked = {role: weights[role] for role in packed}  # the seven projections, unpacked when read
    finally:
        ckpt.close()
    assert len(unpacked) == 7 and not set(unpacked) & set(floats)
    calls = three_calls(cfg.hidden_size)
    want = run_reference({**floats, **unpacked}, cfg, calls)
    assert max_diff(run_head(build_mtp_model(d, weight_format="f32"), calls), want) <= 1e-4 * scale(want)


def packed_checkpoint(ckpt, tmp_path: Path, fmt: str) -> Path:
    """The reference checkpoint (the target's own) with its `mtp.*` replaced by the packed head and its config's
    quantization_config: a release quantized after the fact."""
    tensors = {n: v for n, v in read_tensors(ckpt("qwen35-dense")).items() if not n.startswith("mtp.")}
    tensors.update(read_tensors(DATA / fmt))
    qc = json.loads((DATA / fmt / "config.json").read_text())["quantization_config"]
    return write_variant(ckpt("qwen35-dense"), tmp_path / "ckpt", tensors,
                         lambda c: c.__setitem__("quantization_config", qc))


@pytest.mark.parametrize("fmt", ["compressed-tensors",
                                 pytest.param("awq", marks=pytest.mark.slow),
                                 pytest.param("gptq", marks=pytest.mark.slow)])
def test_patch_builds_an_int4_head_into_an_int4_target(export, ckpt, tmp_path, fmt):
    d = packed_checkpoint(ckpt, tmp_path, fmt)
    code, out = run("show", d)
    assert code == 0 and f"stored as {SOURCE[fmt]}" in out, out
    target = strip_mtp(export("dense-int4"), tmp_path / "target")
    code, out = run("patch", target, "--checkpoint", d)
    assert code == 0, out
    assert f"7 mtp.* matrices unpacked from {SOURCE[fmt]}" in out
    xml = target / contract.MTP_XML
    assert recorded(xml, rtinfo.PROVENANCE, rtinfo.SOURCE_FORMAT) == SOURCE[fmt]
    assert recorded(xml, rtinfo.PROVENANCE, "weight_format") == "int4"  # auto mirrors the int4 target
    summary = weight_summary(files.read_model(xml))
    assert summary.compressed and summary.bits == 4
    code, out = run("verify", target)
    assert code == 0, out
