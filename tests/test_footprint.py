"""show's footprint: weights per part, KV cache per token and at --context, constant states, the overhead estimate.

The demo fixture is checked against a hand computation from its config.json and the IRs' XML text (not through
OpenVINO): a Qwen3.5 target keeps a key and a value state per full-attention layer and a conv and an ssm state per
linear-attention layer; the MTP head keeps one key/value pair.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from lab.demo import patch_demo
from lab.families import FAMILIES, fixture_pair

from irsurgeon.cli import main
from irsurgeon.core.config import read_json, text_section
from irsurgeon.ir.footprint import kv_cache, row_bytes, shape_text
from irsurgeon.ir import xmlsafe
from irsurgeon.flows.show import show
from irsurgeon.families import registry
from helpers.cli import result_of

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "fixtures" / "qwen3_5"
TYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "u8": 1}
KV_KEY = ("runtime_options", "KV_CACHE_PRECISION")
FLOATS = ("f32", "f16", "bf16")
# the JSON fields scripts read, in order: spelled here, not imported, so a change to them fails this test
FOOTPRINT_FIELDS = ("context", "weights", "kv", "runtime_overhead", "total_at_context")
KV_FIELDS = ("file", "precision", "precision_source", "estimate", "layers", "growing_states", "bytes_per_token",
             "bytes_at_context", "constant_states", "constant_bytes", "problems")


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    return patch_demo(tmp_path_factory.mktemp("footprint") / "target")


def xml_constant_bytes(xml: Path) -> Counter:
    """Bytes of every Const layer per element type, read from the XML text."""
    totals = Counter()
    for layer in ET.parse(xml).getroot().iter("layer"):
        if layer.get("type") == "Const":
            data = layer.find("data")
            totals[data.get("element_type")] += int(data.get("size"))
    return totals


def kv_bytes(xml: Path) -> int:
    return TYPE_BYTES[xmlsafe.get_value(xml.read_bytes(), KV_KEY)]


def test_demo_footprint_matches_hand_computation(patched):
    context = 1000
    fp = show(patched, context=context)["footprint"]
    tc = text_section(read_json(patched / "config.json"))
    kinds = Counter(tc["layer_types"])
    nkv, hd = tc["num_key_value_heads"], tc["head_dim"]
    lm, head = patched / "openvino_language_model.xml", patched / "openvino_mtp_model.xml"
    target_token = kinds["full_attention"] * 2 * nkv * hd * kv_bytes(lm)
    mtp_token = 2 * nkv * hd * kv_bytes(head)
    conv_dim = 2 * tc["linear_num_key_heads"] * tc["linear_key_head_dim"] + \
        tc["linear_num_value_heads"] * tc["linear_value_head_dim"]
    ssm = tc["linear_num_value_heads"] * tc["linear_key_head_dim"] * tc["linear_value_head_dim"]
    constant = kinds["linear_attention"] * (conv_dim * tc["linear_conv_kernel_dim"] + ssm) * 4
    t, m = fp["kv"]["target"], fp["kv"]["draft"]
    assert (t["bytes_per_token"], t["layers"], t["constant_bytes"]) == (target_token, kinds["full_attention"], constant)
    assert t["constant_states"] == 2 * kinds["linear_attention"] and t["bytes_at_context"] == context * target_token
    assert (m["bytes_per_token"], m["layers"], m["constant_states"]) == (mtp_token, 1, 0)
    assert m["bytes_at_context"] == context * mtp_token and not t["estimate"] and not m["estimate"]
    # OpenVINO drops a few tiny shape constants on read: float weights must match exactly, totals within 0.1%
    for part, xmls in (("target", (lm, patched / "openvino_text_embeddings_model.xml")), ("draft", (head,))):
        by_xml = sum((xml_constant_bytes(x) for x in xmls), Counter())
        got = fp["weights"][part]
        assert {t: got["by_type"][t] for t in FLOATS if t in by_xml} == {t: by_xml[t] for t in FLOATS if t in by_xml}
        assert abs(got["bytes"] - sum(by_xml.values())) <= sum(by_xml.values()) / 1000
    weights = sum(p["bytes"] for p in fp["weights"].values())
    assert fp["total_at_context"] == weights + context * (target_token + mtp_token) + constant


def test_footprint_json_keys_and_text(patched):
    res = CliRunner().invoke(main, ["show", str(patched), "--json", "--context", "2048"])
    assert res.exit_code == 0, res.output
    fp = result_of(res.output)["footprint"]
    assert tuple(fp) == FOOTPRINT_FIELDS and fp["context"] == 2048
    assert all(tuple(kv) == KV_FIELDS for kv in fp["kv"].values())
    assert fp["runtime_overhead"]["bytes"] > 0 and fp["runtime_overhead"]["measured"] is False
    assert "estimate" in fp["runtime_overhead"]["basis"]
    text = CliRunner().invoke(main, ["show", str(patched), "--context", "2048"])
    assert text.exit_code == 0, text.output
    assert "at 2048 tokens" in text.output and "draft KV cache" in text.output and "runtime overhead" in text.output


def test_bad_context_is_refused(patched):
    res = CliRunner().invoke(main, ["show", str(patched), "--context", "0"])
    assert res.exit_code == 2 and "--context" in res.output


def test_target_without_head():
    fp = show(DEMO / "target", context=10)["footprint"]
    assert fp["kv"]["draft"] is None and not fp["weights"]["draft"]["files"]
    assert fp["kv"]["target"]["bytes_per_token"] > 0


def dims(text: str) -> list[int | None]:
    """'[?,2,?,64]' -> [None, 2, None, 64], as show_ir lists a shape."""
    body = text.strip("[]")
    return [int(d) if d.isdigit() else None for d in body.split(",")] if body else []


def states(etype: str, *shapes: str) -> dict:
    return {"states": [{"id": f"s{i}", "dtype": etype, "shape": dims(s)} for i, s in enumerate(shapes)]}


@pytest.mark.parametrize("precision,row", [("f32", 128 * 4), ("bf16", 128 * 2), ("u8", 128 + 8), ("u4", 64 + 8),
                                           ("i4", 64 + 4)])
def test_kv_row_layouts(precision, row):
    info = {**states("f32", "[?,8,?,128]", "[?,8,?,128]"), "runtime_options": {"KV_CACHE_PRECISION": precision}}
    kv = kv_cache("x.xml", info, 100, None)
    assert kv["bytes_per_token"] == 2 * 8 * row and kv["bytes_at_context"] == 100 * 2 * 8 * row
    assert kv["precision"] == precision and not kv["estimate"]


def test_kv_precision_falls_back_to_device_then_cpu_default():
    info = states("f32", "[?,4,?,64]", "[?,4,?,64]")
    guessed = kv_cache("x.xml", info, 1, None)
    assert guessed["precision"] == "u8" and guessed["estimate"] and "estimate" in guessed["precision_source"]
    assert guessed["bytes_per_token"] == 2 * row_bytes("u8", 4, 64) == 2 * 4 * 72
    told = kv_cache("x.xml", info, 1, "float16")
    assert told["precision"] == "f16" and not told["estimate"] and told["bytes_per_token"] == 2 * 4 * 64 * 2


def test_constant_and_odd_states():
    kv = kv_cache("x.xml", states("f32", "[?,128,4]", "[?,4,16,16]", "[?,?,?,64]"), 10, None)
    assert kv["constant_states"] == 2 and kv["constant_bytes"] == (128 * 4 + 4 * 16 * 16) * 4
    assert kv["growing_states"] == 0 and len(kv["problems"]) == 1 and "s2" in kv["problems"][0]
    assert "shape [?,?,?,64]" in kv["problems"][0] and shape_text(None) == "[...]" and shape_text([]) == "[]"


def test_reference_int4_uses_the_cpu_default_estimate(export):
    fp = show(export("dense-int4"), context=4096)["footprint"]
    t, m = fp["kv"]["target"], fp["kv"]["draft"]
    assert t["estimate"] and m["estimate"] and t["precision"] == m["precision"] == "u8"
    assert m["bytes_per_token"] * t["layers"] == t["bytes_per_token"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_runtime_overhead_is_the_directory_familys_own(family, tmp_path):
    """Each family's measured overhead (Family.runtime_overhead), not one family's number for all."""
    from irsurgeon.flows.patch import Options, patch
    target, ckpt = fixture_pair(family, tmp_path)
    patch(target, ckpt, options=Options(weight_format="f32"))
    oh = result_of(CliRunner().invoke(main, ["show", str(target), "--json"]).output)["footprint"]["runtime_overhead"]
    assert oh["bytes"] == family.runtime_overhead * 2**20 and family.title in oh["basis"], oh
    assert len({f.runtime_overhead for f in registry.FAMILIES}) > 1  # measured apart: Qwen's is not Gemma 4's
