"""show: the IR description (ports, states, rt_info, hidden-state table, weights) and the directory verdict."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers.cli import invoke
from helpers.decoders import Spec, write_target
from lab.families import FIXTURE_PAIRS

from irsurgeon.flows.annotate import annotate_ir
from irsurgeon.cli import main
from irsurgeon.core.config import read_json, text_section
from irsurgeon.core.errors import IRError
from irsurgeon.ir import xmlsafe
from irsurgeon.ir.export import CONFIG, LANGUAGE_MODEL
from irsurgeon.ir.hidden_states import annotation_json, parse_annotation
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS
from irsurgeon.flows.show import DIR_KEYS, show
from irsurgeon.ir.describe import IR_KEYS
from helpers.cli import result_of


def snapshot(directory: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in directory.rglob("*")}


def copy_export(src: Path, dst: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*drop))
    for p in [dst, *dst.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_reference_directory_is_ready(export):
    directory = export("dense-int4")
    before = snapshot(directory)
    info = show(directory)
    assert tuple(info) == DIR_KEYS and info["layout"] == "vlm"
    tc = text_section(read_json(directory / CONFIG))
    assert tuple(info["config"]) == (
        "model_type", "text_model_type", "num_hidden_layers", "hidden_size", "mtp_num_hidden_layers", "error")
    assert info["config"]["num_hidden_layers"] == tc["num_hidden_layers"]
    assert info["config"]["mtp_num_hidden_layers"] == tc["mtp_num_hidden_layers"]
    assert {r["file"] for r in info["irs"]} == {p.name for p in directory.glob("*.xml")}
    assert all(r["ok"] for r in info["irs"]), info["irs"]
    assert info["draft"]["ready"] and not info["draft"]["reasons"]
    assert snapshot(directory) == before


def test_reference_ir(export):
    xml = export("dense-int4") / LANGUAGE_MODEL
    info = show(xml)
    assert tuple(info) == IR_KEYS
    data = xml.read_bytes()
    annotated = parse_annotation(xmlsafe.get_value(data, (HIDDEN_STATES_LAYERS,)))
    assert [(r["layer"], (r["producer"], r["output_index"])) for r in info["hidden_states"]] == sorted(annotated.items())
    width = text_section(read_json(xml.parent / CONFIG))["hidden_size"]
    assert all(r["problem"] is None and r["shape"][-1] == width for r in info["hidden_states"])
    assert info["runtime_options"] == info["rt_info"]["runtime_options"]
    group = xmlsafe.get_value(data, ("nncf", "weight_compression", "group_size"))
    assert info["weights"]["compressed"] and info["weights"]["bits"] == 4
    assert group in info["weights"]["group_sizes"]
    assert info["op_histogram"]["Parameter-opset1"] == len(info["inputs"])
    assert info["op_histogram"]["ReadValue-opset6"] == len(info["states"])
    assert {p["name"] for p in info["outputs"]} == {"logits"}
    assert info["constants"]["u4"]["bytes"] >= info["weights"]["by_type"]["u4"]["bytes"] > 0


@pytest.mark.parametrize("drop, reason", [
    (("openvino_mtp_model.*",), "openvino_mtp_model"),
    (("openvino_text_embeddings_model.*",), "decomposed VLM layout"),
])
def test_directory_not_ready_says_why(export, tmp_path, drop, reason):
    directory = copy_export(export("dense-fp16"), tmp_path / "t", drop)
    info = show(directory)
    assert not info["draft"]["ready"]
    assert any(reason in r for r in info["draft"]["reasons"]), info["draft"]


def test_missing_annotation_is_a_reason(export, tmp_path):
    directory = copy_export(export("dense-fp16"), tmp_path / "t")
    xml = directory / LANGUAGE_MODEL
    xml.write_bytes(xmlsafe.remove_value(xml.read_bytes(), (HIDDEN_STATES_LAYERS,)))
    info = show(directory)
    assert not info["draft"]["ready"] and any("annotation" in r for r in info["draft"]["reasons"])
    annotate_ir(directory)
    assert show(directory)["draft"]["ready"]


def test_text_only_target(tmp_path):
    spec = Spec(fmt="int4", layers=(0, 1, 2, 3))
    xml, expected = write_target(tmp_path, spec)
    info = show(tmp_path)
    # a Llama text export is an EAGLE-3 target (the family whose target it is says what it lacks)
    assert info["layout"] == "text-only" and not info["draft"]["ready"] and info["family"] == "eagle3"
    assert any("missing eagle3_draft/openvino_model.xml" in r for r in info["draft"]["reasons"])
    ir = show(xml)
    assert ir["hidden_states"] is None
    assert ir["weights"]["compressed"] and ir["weights"]["bits"] == 4
    # every int4 weight has a u4 zero point beside it; the lm_head stays f32
    assert ir["weights"]["group_sizes"] == {str(spec.group): ir["constants"]["u4"]["count"] // 2}
    annotate_ir(xml)
    rows = show(xml)["hidden_states"]
    assert {r["layer"]: (r["producer"], r["output_index"]) for r in rows} == expected
    assert [r["op"] for r in rows] == ["Add"] * (len(spec.layers) - 1) + ["Multiply"]


def test_broken_annotation_rows(tmp_path):
    xml, expected = write_target(tmp_path)
    bogus = {**expected, 1: ("no/such/op", 0), 2: (expected[2][0], 5)}
    xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), (HIDDEN_STATES_LAYERS,), annotation_json(bogus)))
    rows = show(xml)["hidden_states"]
    assert [r["problem"] is None for r in rows] == [True, False, False]
    assert rows[1]["problem"] == "no such op" and "output" in rows[2]["problem"]


def test_bad_ir_in_directory_is_reported_not_fatal(tmp_path):
    write_target(tmp_path)
    (tmp_path / "junk.xml").write_text("<graph/>")
    info = show(tmp_path)
    junk = next(r for r in info["irs"] if r["file"] == "junk.xml")
    assert not junk["ok"] and "not an OpenVINO IR" in junk["summary"]


def test_cli_json_round_trip(tmp_path):
    xml, _ = write_target(tmp_path)
    runner = CliRunner()
    for path, keys in ((tmp_path, DIR_KEYS), (xml, IR_KEYS)):
        res = runner.invoke(main, ["show", str(path), "--json"])
        assert res.exit_code == 0, res.output
        doc = result_of(res.output)
        assert tuple(doc) == keys and doc == json.loads(json.dumps(show(path)))
    text = runner.invoke(main, ["show", str(xml)])
    assert text.exit_code == 0 and "-- inputs" in text.output and "inputs_embeds" in text.output


def test_cli_bad_paths(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "bad.xml").write_text('<?xml version="1.0"?><!DOCTYPE net [<!ENTITY e "e">]><net version="11"/>')
    runner = CliRunner()
    for path in (tmp_path / "nope", tmp_path / "notes.txt", tmp_path / "bad.xml"):
        res = runner.invoke(main, ["show", str(path)])
        assert res.exit_code == 1 and res.output.strip().splitlines()[-1].startswith("Error: "), res.output
    with pytest.raises(IRError, match="DOCTYPE"):
        show(tmp_path / "bad.xml")


@pytest.mark.usefixtures("no_hang")
def test_show_text_of_an_ir_keeps_the_bracket_shapes(patched_demo):
    result = invoke("show", patched_demo / "openvino_mtp_model.xml")
    assert result.exit_code == 0 and "inputs_embeds" in result.output and "[?,?,64]" in result.output


# --- tokenizer IRs hold vocabulary tables, not weights; a string port does not make a model a tokenizer -----------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("key", ["qwen3_5", "gemma4"])
def test_show_says_what_a_tokenizer_ir_is_instead_of_a_weight_format(key):
    target = FIXTURE_PAIRS[key][0]
    result = invoke("show", target, "--json")
    assert result.exit_code == 0, result.output
    entries = {e["file"]: e for e in result_of(result.stdout)["irs"]}
    for name, what in (("openvino_tokenizer.xml", "tokenizer"), ("openvino_detokenizer.xml", "detokenizer")):
        entry = entries[name]
        assert entry["weights"]["precision"] is None and entry["weights"]["count"] == 0, entry["weights"]
        assert entry["summary"].endswith(f"; {what}: string ops over vocabulary tables, no weights"), entry["summary"]
        assert "int8" not in entry["summary"]
    text = invoke("show", target).output
    assert "int8_sym" not in text and "detokenizer: string ops over vocabulary tables, no weights" in text


def test_an_ir_with_a_string_input_and_matmul_weights_is_not_shown_as_a_tokenizer(tmp_path):
    """show said 'weights: none (a tokenizer: string ops over vocabulary tables)' of a 4 MiB f32 MatMul weight,
    because the IR also took a string input."""
    import openvino as ov
    import openvino.opset13 as ops

    from irsurgeon.ir.describe import show_ir

    text = ops.parameter([-1], ov.Type.string, name="text")
    x = ops.parameter([1, 256], np.float32, name="x")
    w = ops.constant(np.ones((256, 4096), np.float32))
    model = ov.Model([ops.matmul(x, w, False, False).output(0)], [text, x], "lm_with_a_string_input")
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    info = show_ir(tmp_path / "m.xml")
    assert info["role"] is None and info["weights"]["count"] == 1, info["weights"]


def test_a_folder_that_is_no_export_is_said_so_with_where_one_is(tmp_path):
    """A bundled pair's folder (target/ and ckpt/ inside) or an empty one: not an export directory, rc 1, and the
    export one level down named (it used to print the default family's missing files and a footprint of 0 B)."""
    from helpers.cli import invoke
    from lab.families import FIXTURE_PAIRS

    pair = FIXTURE_PAIRS["gemma4"][0].parent
    result = invoke("show", pair)
    assert result.exit_code == 1 and "not an export directory" in result.output, result.output
    assert f"irsurgeon show {pair / 'target'}" in result.output
    empty = tmp_path / "empty"
    empty.mkdir()
    result = invoke("show", empty, "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["ok"] is False and "not an export" in result.output


@pytest.mark.parametrize("key", ["qwen3_5", "gemma4", "dflash", "eagle3"])
def test_a_checkpoint_is_called_a_checkpoint_of_its_family_never_a_target(key):
    """`show CKPT` used to take every checkpoint folder for a Qwen3.5 target and print a FAIL about the VLM layout,
    exit 0. Now it says whose draft the checkpoint is, by its config and what it holds, as patch decides."""
    from helpers.cli import invoke
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.flows.show import show

    _, ckpt = FIXTURE_PAIRS[key]
    info = show(ckpt)
    assert info["kind"] == "checkpoint" and info["family"] == key and info["error"] is None and info["tensors"] > 0
    result = invoke("show", ckpt)
    assert result.exit_code == 0 and f"checkpoint {ckpt}" in result.output and "target layout" not in result.output
    assert f"irsurgeon patch TARGET --checkpoint {ckpt}" in result.output


def test_a_checkpoint_no_family_takes_says_why(tmp_path):
    import json

    import numpy as np

    from helpers.cli import invoke
    from irsurgeon.weights.safetensors_io import write_safetensors

    write_safetensors(tmp_path / "model.safetensors", {"model.layers.0.mlp.up_proj.weight": np.zeros((4, 4), "f4")})
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    result = invoke("show", tmp_path)
    assert result.exit_code == 0 and "no draft family takes it" in result.output, result.output
    assert "has no supported draft family" in result.output, result.output
