"""build-mtp on every kind of checkpoint source, and on bad ones: one-line errors, nothing left behind."""
from __future__ import annotations

import json
import os
import re
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.flows.standalone import build_mtp_model, load_mtp
from irsurgeon.cli import main
from irsurgeon.core.errors import CheckpointError
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import finite
from irsurgeon.weights.safetensors_io import (FP8_E4M3FN, FP8_E5M2, SafetensorsFile, bf16_to_f32, f32_to_bf16,
                                              write_safetensors)


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def assert_one_line_error(code, output, *needles):
    assert code != 0
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_bf16_decoding_known_bit_patterns():
    bits = np.array([0x3F80, 0xC000, 0x3E80, 0x0000, 0x8000, 0x7F80, 0x4049], np.uint16)
    np.testing.assert_array_equal(bf16_to_f32(bits)[:6], [1.0, -2.0, 0.25, 0.0, -0.0, np.inf])
    assert bf16_to_f32(bits)[6] == pytest.approx(3.140625)
    x = np.array([1.0, 1.00390625, 1.01171875, -3.5], np.float32)  # exact, tie-to-even down, tie-to-even up, exact
    np.testing.assert_array_equal(bf16_to_f32(f32_to_bf16(x)), [1.0, 1.0, 1.015625, -3.5])


def test_fp8_decoding_known_bit_patterns():
    # e4m3fn: bias 7, no inf, 0x7E = 448 (max), 0x01 = 2^-9 (min subnormal), 0x7F NaN
    assert FP8_E4M3FN[0x38] == 1.0 and FP8_E4M3FN[0xB8] == -1.0 and FP8_E4M3FN[0x7E] == 448.0
    assert FP8_E4M3FN[0x01] == 2.0 ** -9 and FP8_E4M3FN[0x08] == 2.0 ** -6 and np.isnan(FP8_E4M3FN[0x7F])
    assert FP8_E4M3FN[0x3C] == 1.5 and FP8_E4M3FN[0x40] == 2.0
    # e5m2: bias 15, IEEE-style inf at 0x7C
    assert FP8_E5M2[0x3C] == 1.0 and FP8_E5M2[0x7B] == 57344.0 and np.isinf(FP8_E5M2[0x7C])


def test_single_file_with_config(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=1)
    (tmp_path / "ckpt" / "model.safetensors").rename(tmp_path / "head.safetensors")
    code, out = run("build-mtp", tmp_path / "head.safetensors", "--config", tmp_path / "ckpt" / "config.json",
                    "-o", tmp_path / "out")
    assert code == 0, out
    assert (tmp_path / "out" / "openvino_mtp_model.xml").is_file()
    assert (tmp_path / "out" / "openvino_mtp_model.bin").is_file()
    assert [p.name for p in (tmp_path / "out").iterdir()] != []  # and no staging folder left behind:
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def write_sharded(root, spec=SynthSpec(), seed=2):
    """An index with mtp.* in one shard and the rest of a 'model' in two others (one of them corrupt)."""
    stored = write_checkpoint(root, spec, seed=seed)
    st = SafetensorsFile(root / "model.safetensors")
    mtp = {n: st.raw(n) for n in st.tensors}
    write_safetensors(root / "model-00002-of-00003.safetensors", mtp, {n: "BF16" for n in mtp})
    st.close()
    (root / "model.safetensors").unlink()
    body = {"model.embed_tokens.weight": np.ones((spec.vocab, spec.hidden), np.float32)}
    write_safetensors(root / "model-00001-of-00003.safetensors", body)
    (root / "model-00003-of-00003.safetensors").write_bytes(b"not read: opening this shard would fail")
    weight_map = {n: "model-00002-of-00003.safetensors" for n in mtp}
    weight_map["model.embed_tokens.weight"] = "model-00001-of-00003.safetensors"
    weight_map["lm_head.weight"] = "model-00003-of-00003.safetensors"
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return stored


def test_sharded_checkpoint_opens_only_the_mtp_shard(tmp_path):
    write_sharded(tmp_path)
    cfg, weights, ckpt = load_mtp(tmp_path)
    assert [p.name for p in ckpt.opened] == ["model-00002-of-00003.safetensors"]
    assert len(weights) == 15
    model = build_mtp_model(tmp_path)  # the third shard is garbage: the build too must not open it
    assert contract.check_model(model, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim) == []


def test_sharded_and_single_file_build_the_same_weights(tmp_path):
    stored = write_sharded(tmp_path / "sharded", seed=5)
    write_checkpoint(tmp_path / "single", SynthSpec(), seed=5)
    _, a, _ = load_mtp(tmp_path / "sharded")
    _, b, _ = load_mtp(tmp_path / "single")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    np.testing.assert_array_equal(a["fc.weight"], stored["mtp.fc.weight"])
    np.testing.assert_array_equal(a["norm.weight"], 1.0 + stored["mtp.norm.weight"])  # gain folded once


def rewrite(path, drop=(), reshape=None, add=None):
    st = SafetensorsFile(path)
    raw = {n: st.raw(n) for n in st.tensors if n not in drop}
    dt = {n: st.tensors[n].dtype for n in raw}
    st.close()
    if reshape:
        name, shape = reshape
        raw[name] = np.zeros(shape, np.uint16)
    for n, v in (add or {}).items():
        raw[n], dt[n] = v, "BF16"
    write_safetensors(path, raw, dt)


def edit_config(path, **changes):
    cfg = json.loads(path.read_text())
    tc = cfg.get("text_config", cfg)
    for k, v in changes.items():
        if v is None:
            tc.pop(k, None)
        else:
            tc[k] = v
    path.write_text(json.dumps(cfg))


def truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)


CASES = {
    "no-mtp": (lambda d: rewrite(d / "model.safetensors", drop=[n for n in SafetensorsFile(d / "model.safetensors").tensors]),
               ["no 'mtp.*' tensors"]),
    "missing": (lambda d: rewrite(d / "model.safetensors", drop=["mtp.layers.0.self_attn.k_proj.weight"]),
                ["mtp.layers.0.self_attn.k_proj.weight", "missing", "[64, 64]"]),
    "extra": (lambda d: rewrite(d / "model.safetensors", add={"mtp.layers.1.input_layernorm.weight": np.zeros(64, np.uint16)}),
              ["mtp.layers.1.input_layernorm.weight"]),
    "mis-shaped": (lambda d: rewrite(d / "model.safetensors", reshape=("mtp.fc.weight", (64, 64))),
                   ["mtp.fc.weight", "[64, 128]", "[64, 64]"]),
    "truncated": (lambda d: truncate(d / "model.safetensors"), ["model.safetensors", "truncated"]),
    "not-safetensors": (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 10) + b"{garbage!}"),
                        ["model.safetensors", "JSON"]),
    "no-hidden-size": (lambda d: edit_config(d / "config.json", hidden_size=None), ["hidden_size"]),
    "hidden-size-string": (lambda d: edit_config(d / "config.json", hidden_size="64"), ["hidden_size", "integer"]),
    "absurd-hidden-size": (lambda d: edit_config(d / "config.json", hidden_size=10 ** 9), ["hidden_size", "range"]),
    "no-mtp-layers": (lambda d: edit_config(d / "config.json", mtp_num_hidden_layers=0), ["mtp_num_hidden_layers"]),
    "two-mtp-layers": (lambda d: edit_config(d / "config.json", mtp_num_hidden_layers=2), ["mtp_num_hidden_layers", "2"]),
    "other-model": (lambda d: edit_config(d / "config.json", model_type="llama"), ["llama"]),
    "config-not-json": (lambda d: (d / "config.json").write_text("{"), ["config.json", "JSON"]),
    "no-config": (lambda d: (d / "config.json").unlink(), ["config.json"]),
    "nan-weight": (lambda d: rewrite(d / "model.safetensors", add={"mtp.norm.weight": np.full(64, 0x7FC0, np.uint16)}),
                   ["mtp.norm.weight", "NaN", "--allow-nonfinite"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_checkpoint_is_one_line_error_and_writes_nothing(tmp_path, case):
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, SynthSpec(head_dim=32, hidden=64), seed=1)
    spoil, needles = CASES[case]
    spoil(ckpt)
    code, out = run("build-mtp", ckpt, "-o", tmp_path / "out")
    assert_one_line_error(code, out, *needles)
    assert not (tmp_path / "out").exists()


def test_the_advised_allow_nonfinite_builds_and_warns(tmp_path):
    ckpt = tmp_path / "ckpt"
    write_checkpoint(ckpt, SynthSpec(head_dim=32, hidden=64), seed=1)
    rewrite(ckpt / "model.safetensors", add={"mtp.norm.weight": np.full(64, 0x7FC0, np.uint16)})
    code, out = run("build-mtp", ckpt, "-o", tmp_path / "out", "--allow-nonfinite")
    assert code == 0 and "mtp.norm.weight" in out and (tmp_path / "out" / "openvino_mtp_model.xml").is_file(), out


def test_index_shard_escaping_the_directory_is_refused(tmp_path):
    write_sharded(tmp_path / "ckpt")
    index = tmp_path / "ckpt" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["mtp.fc.weight"] = "../elsewhere.safetensors"
    index.write_text(json.dumps(data))
    code, out = run("build-mtp", tmp_path / "ckpt", "-o", tmp_path / "out")
    assert_one_line_error(code, out, "../elsewhere.safetensors")


def test_write_failure_is_one_line_error_and_leaves_nothing(tmp_path, monkeypatch):
    """A permission error at the final rename (as on a read-only target): no files, no staging folder."""
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=1)
    out = tmp_path / "out"
    out.mkdir()

    def deny(src, dst, **dir_fds):
        raise PermissionError(13, "Permission denied", str(dst))
    monkeypatch.setattr("irsurgeon.draft.save.os.replace", deny)
    code, text = run("build-mtp", tmp_path / "ckpt", "-o", out)
    assert_one_line_error(code, text, "Permission denied", str(out))
    assert list(out.iterdir()) == []


def test_output_path_that_is_a_file_is_one_line_error(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=1)
    (tmp_path / "file").write_text("x")
    code, out = run("build-mtp", tmp_path / "ckpt", "-o", tmp_path / "file")
    assert_one_line_error(code, out, "file")
    assert (tmp_path / "file").read_text() == "x"


def test_existing_output_directory_keeps_its_other_files(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=1)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, text = run("build-mtp", tmp_path / "ckpt", "-o", out)
    assert code == 0, text
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "openvino_mtp_model.bin", "openvino_mtp_model.xml"]


def test_checkpoint_close_releases_files(tmp_path):
    write_checkpoint(tmp_path, SynthSpec(), seed=1)
    ckpt = Checkpoint.open(tmp_path)
    ckpt.get("mtp.fc.weight")
    ckpt.close()
    assert ckpt.opened == []


@pytest.mark.parametrize("bad, needle", [(np.nan, "1 NaN or Inf"), (np.inf, "1 NaN or Inf"), (-np.inf, "1 NaN or Inf"),
                                         (3e19, "holds 3e+19, beyond"), (-3e19, "holds 3e+19, beyond")])
def test_finite_check_finds_each_kind_of_bad_value_wherever_it_sits(bad, needle):
    for at in (0, 517, 999):  # first, middle, last: the check reads the extremes, not a sample
        w = np.linspace(-2, 2, 1000, dtype=np.float32).reshape(8, 125)
        w.flat[at] = bad
        with pytest.raises(CheckpointError, match=re.escape(needle)):
            finite("mtp.x.weight", w, False, print)
    ok = np.full((3, 4), -1.8e19, np.float32)  # just within what f32 can square
    assert finite("mtp.x.weight", ok, False, print) is ok
    assert finite("mtp.x.weight", np.zeros((0, 4), np.float32), False, print).size == 0


def test_nonfinite_weights_can_be_allowed_with_a_warning(tmp_path):
    write_checkpoint(tmp_path, SynthSpec(), seed=1)
    rewrite(tmp_path / "model.safetensors", add={"mtp.norm.weight": np.full(64, 0x7F80, np.uint16)})  # +inf
    warnings = []
    _, weights, _ = load_mtp(tmp_path, allow_nonfinite=True, warn=warnings.append)
    assert warnings == []  # tensors are decoded when the graph reads them
    assert np.isinf(weights["norm.weight"]).all()
    assert len(warnings) == 1 and "mtp.norm.weight" in warnings[0] and "64 NaN or Inf" in warnings[0]
