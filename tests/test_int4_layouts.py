"""Int4 packed weights (compressed-tensors pack-quantized, AutoAWQ GEMM, GPTQ) unpack to their library's own
dequantized values, bit for bit; the variants irsurgeon does not decode are refused in one line naming the key and
value of quantization_config, or the tensor.

tests/data/int4 (SOURCES.md) holds a tiny Qwen3.5 head packed by each library's own packer and, as goldens, the
sha256 of what each library's own dequantization returns (its bf16 or fp16 bit patterns). Exact is the right test:
every library computes (q - z) * s in the scale's dtype, one rounding of an exact product, and irsurgeon rounds the
same exact product once to the same dtype (irsurgeon/weights/int4.py).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from irsurgeon.cli import main
from irsurgeon.weights import int4
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.safetensors_io import f32_to_bf16, SafetensorsFile, write_safetensors
from irsurgeon.weights.spec import inspect_stored, read_tensor

DATA = Path(__file__).parent / "data" / "int4"
FORMATS = ("compressed-tensors", "awq", "gptq")


def digest(w: np.ndarray, dtype: str) -> tuple[str, list[int]]:
    """sha256 of float32 values as the 16-bit patterns of `dtype` (exact: they hold values of that dtype)."""
    bits = f32_to_bf16(w) if dtype == "bfloat16" else w.astype(np.float16).view(np.uint16)
    back = (bits.astype(np.uint32) << 16).view(np.float32) if dtype == "bfloat16" else bits.view(np.float16)
    assert np.array_equal(back.astype(np.float32), w, equal_nan=True), "values are not of the golden's dtype"
    return hashlib.sha256(bits.astype("<u2").tobytes()).hexdigest(), [int(b) for b in bits[0, :16]]


def unpacked(d: Path) -> dict[str, np.ndarray]:
    ckpt = Checkpoint.open(d)
    try:
        stored = inspect_stored(ckpt, "mtp.")
        return {"mtp." + n.removesuffix(".weight"): read_tensor(ckpt, n, stored) for n in sorted(stored.packed)}
    finally:
        ckpt.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_unpacked_weights_are_the_librarys_own_dequantization(fmt):
    golden = json.loads((DATA / fmt / "golden.json").read_text())
    got = unpacked(DATA / fmt)
    assert sorted(got) == sorted(golden) and len(got) == 7
    for module, want in golden.items():
        assert list(got[module].shape) == want["shape"], module
        sha, row0 = digest(got[module], want["dtype"])
        assert row0 == want["row0"], module
        assert sha == want["sha256"], module


def test_the_awq_column_order_matters(monkeypatch):
    """The goldens tell AutoAWQ's interleaved order from a plain one: read in order 0..7, no module matches."""
    golden = json.loads((DATA / "awq" / "golden.json").read_text())
    monkeypatch.setattr(int4, "AWQ_ORDER", tuple(range(8)))
    got = unpacked(DATA / "awq")
    assert all(digest(got[m], g["dtype"])[0] != g["sha256"] for m, g in golden.items())


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def variant(tmp_path: Path, fmt: str, edit=None, tensors=None) -> Path:
    d = tmp_path / fmt
    shutil.copytree(DATA / fmt, d)
    config = json.loads((d / "config.json").read_text())
    if edit:
        edit(config["quantization_config"])
    (d / "config.json").write_text(json.dumps(config))
    if tensors:
        f = SafetensorsFile(d / "model.safetensors")
        held = {n: (np.array(f.raw(n)), f.tensors[n].dtype) for n in f.tensors}
        f.close()
        held.update(tensors(held))
        write_safetensors(d / "model.safetensors", {n: a for n, (a, _) in held.items()},
                          {n: t for n, (_, t) in held.items()})
    return d


def ct_group(key: str, field: str, value):
    def edit(qc):
        qc["config_groups"][key]["weights"][field] = value
    return edit


def zero_nibble(held):
    name = "mtp.layers.0.mlp.up_proj.qzeros"
    words = held[name][0].copy()
    words[0, 0] |= 0xF  # the first output's zero point stored as 0xF
    return {name: (words, "I32")}


def wrong_shape(held):
    return {"mtp.layers.0.self_attn.k_proj.weight_shape": (np.array([128, 32], np.int64), "I64")}


REFUSED = {  # case -> (format, config edit, tensor edit, words the one-line error must hold)
    "awq-gemv": ("awq", lambda qc: qc.update(version="gemv"), None, ["quantization_config.version is 'gemv'"]),
    "awq-3bit": ("awq", lambda qc: qc.update(bits=3), None, ["quantization_config.bits is 3"]),
    "awq-no-zero-point": ("awq", lambda qc: qc.update(zero_point=False), None,
                          ["quantization_config.zero_point is False"]),
    "awq-not-convert": ("awq", lambda qc: qc.update(modules_to_not_convert=["mtp.layers.0.mlp"]), None,
                        ["mtp.layers.0.mlp.down_proj.qweight", "modules_to_not_convert lists 'mtp.layers.0.mlp'"]),
    "gptq-asym": ("gptq", lambda qc: qc.update(sym=False), None, ["quantization_config.sym is False"]),
    "gptq-v2": ("gptq", lambda qc: qc.update(checkpoint_format="gptq_v2"), None,
                ["quantization_config.checkpoint_format is 'gptq_v2'"]),
    "gptq-8bit": ("gptq", lambda qc: qc.update(bits=8), None, ["quantization_config.bits is 8"]),
    "gptq-dynamic": ("gptq", lambda qc: qc.update(dynamic={"-:.*mlp.*": {}}), None,
                     ["quantization_config.dynamic"]),
    "gptq-zero-0xF": ("gptq", None, zero_nibble, ["tensor mtp.layers.0.mlp.up_proj.qzeros", "0xF"]),
    "ct-8bit": ("compressed-tensors", ct_group("group_mtp", "num_bits", 8), None,
                ["config_groups.group_mtp.weights.num_bits is 8"]),
    "ct-actorder-group": ("compressed-tensors", ct_group("group_0", "actorder", "group"), None,
                          ["config_groups.group_0.weights.actorder is 'group'"]),
    "ct-strategy-tensor": ("compressed-tensors", ct_group("group_0", "strategy", "tensor"), None,
                           ["config_groups.group_0.weights.strategy is 'tensor'"]),
    "ct-format": ("compressed-tensors", lambda qc: qc["config_groups"]["group_mtp"].update(format="int-quantized"),
                  None, ["config_groups.group_mtp.format is 'int-quantized'"]),
    "ct-ignored": ("compressed-tensors", lambda qc: qc["ignore"].append("re:.*down_proj$"), None,
                   ["mtp.layers.0.mlp.down_proj.weight_packed", "ignore lists 're:.*down_proj$'"]),
    "ct-pattern-back-reference": ("compressed-tensors", lambda qc: qc["ignore"].append(r"re:(mtp)\1.*z$"), None,
                                  [r"quantization_config.ignore: the pattern re:(mtp)\1.*z$ uses a back-reference",
                                   "matched without backtracking"]),
    "ct-pattern-not-a-regex": ("compressed-tensors", lambda qc: qc["config_groups"]["group_0"]["targets"].append(
        "re:mtp.(q|k"), None, ["config_groups.group_0.targets: the pattern re:mtp.(q|k is not a regular expression",
                               "missing ), unterminated subpattern"]),
    "ct-ignored-by-a-look-ahead": ("compressed-tensors",
                                   lambda qc: qc["ignore"].append("re:(?!.*self_attn).*down_proj$"), None,
                                   ["mtp.layers.0.mlp.down_proj.weight_packed",
                                    "ignore lists 're:(?!.*self_attn).*down_proj$'"]),
    "ct-weight-shape": ("compressed-tensors", None, wrong_shape,
                        ["tensor mtp.layers.0.self_attn.k_proj.weight_shape: holds [128, 32]"]),
    "ct-group-not-an-object": ("compressed-tensors", lambda qc: qc["config_groups"].update(group_mtp=5), None,
                               ["quantization_config.config_groups.group_mtp is 5"]),
    "ct-ignore-not-names": ("compressed-tensors", lambda qc: qc.update(ignore=["lm_head", 1]), None,
                            ["quantization_config.ignore is ['lm_head', 1]", "a list of module names"]),
    "ct-ignore-a-string": ("compressed-tensors", lambda qc: qc.update(ignore="mtp.layers.0.mlp.down_proj"), None,
                           ["quantization_config.ignore is 'mtp.layers.0.mlp.down_proj'", "a list of module names"]),
    "ct-targets-a-string": ("compressed-tensors", lambda qc: qc["config_groups"]["group_0"].update(targets="Linear"),
                            None, ["quantization_config.config_groups.group_0.targets is 'Linear'"]),
    "gptq-g-idx-negative": ("gptq", None, lambda held: {"mtp.layers.0.mlp.up_proj.g_idx": (
        np.where(np.arange(64) == 5, -1, held["mtp.layers.0.mlp.up_proj.g_idx"][0]).astype(np.int32), "I32")},
        ["tensor mtp.layers.0.mlp.up_proj.g_idx: holds group -1, outside 0..1"]),
    "awq-scale-inf": ("awq", None, lambda held: {"mtp.layers.0.mlp.up_proj.scales": (
        np.full((2, 128), np.inf, np.float16), "F16")}, ["tensor mtp.layers.0.mlp.up_proj.weight", "NaN or Inf"]),
}


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy's inf * 0 warning is a second line on a terminal
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_variants_not_decoded_are_refused_in_one_line(tmp_path, case):
    fmt, edit, tensors, needles = REFUSED[case]
    d = variant(tmp_path, fmt, edit, tensors)
    code, out = run("build-mtp", d, "-o", tmp_path / "out")
    last = out.splitlines()[-1]
    assert code == 1 and last.startswith("Error: "), out
    for needle in needles:
        assert needle in last, last
    assert not (tmp_path / "out").exists()


def test_a_pattern_that_backtracks_for_hours_is_matched_at_once(tmp_path):
    """`re:(.|.)*z$` in ignore: Python's re tries 2^27 ways of reading a 27-character module name before it says no
    (hours); the build matches it without backtracking and, as compressed-tensors would, ignores nothing."""
    d = variant(tmp_path, "compressed-tensors", lambda qc: qc["ignore"].extend(["re:(.|.)*z$", "re:(m|mt|t|.)*zz"]),
                None)
    code, out = run("build-mtp", d, "-o", tmp_path / "out")
    assert code == 0, out


def test_look_ahead_patterns_as_compressed_tensors_tools_write_them_are_read(tmp_path):
    """An MTP release keeps its MTP experts out of a backbone pattern with a negative look-ahead, and llm-compressor's
    recipes target "everything but the experts" the same way: the head builds, those patterns ignoring nothing of it
    (each its answer as Python's re.match gives it, tests/test_linear_re.py)."""
    backbone = r"re:(?!.*(?:mtp|stages)\.\d+\.).*(?:mlp|ffn)\.experts\.\d+\.(?:gate_proj|up_proj|down_proj|w[123])$"

    def edit(qc):
        qc["ignore"] += [backbone, "re:(?!(?:lm_head)$)(?:.*embed_tokens$)"]
        qc["config_groups"]["group_0"]["targets"].append("re:(?!.*experts).*Linear")
    d = variant(tmp_path, "compressed-tensors", edit, None)
    code, out = run("build-mtp", d, "-o", tmp_path / "out")
    assert code == 0, out


def test_compressed_tensors_targets_resolve_as_the_library_does():
    """An exact name or a regex outranks the "Linear" class target (compressed-tensors utils/match.py): the tiny
    head's self_attn is asymmetric group 32 by regex, its MLP symmetric per channel by class."""
    layout = int4.Int4Layout("compressed-tensors",
                             json.loads((DATA / "compressed-tensors" / "config.json").read_text())
                             ["quantization_config"], "config.json: quantization_config")
    assert layout.args("mtp.layers.0.self_attn.q_proj") == int4.Args(32, False)
    assert layout.args("mtp.layers.0.mlp.up_proj") == int4.Args(None, True)
