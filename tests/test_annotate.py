"""annotate: hidden-state discovery on optimum's exports (after removing their key) and on synthetic decoders.

Synthetic decoders: tests/helpers/decoders.py.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import openvino as ov
import pytest
from click.testing import CliRunner
from helpers.cli import refused
from helpers.decoders import Spec, make_decoder, write_target
from helpers.edits import not_regular
from lab.demo import DEMO_TARGET, writable_copy

from irsurgeon.flows.annotate import annotate_ir
from irsurgeon.cli import main
from irsurgeon.core.errors import IRError, OutputError
from irsurgeon.ir import files, xmlsafe
from irsurgeon.ir.export import LANGUAGE_MODEL, language_model_xml
from irsurgeon.ir.hidden_states import annotation_json, decoder_stack, discover_hidden_states, parse_annotation
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS

KEY = (HIDDEN_STATES_LAYERS,)
EXPORTS = ["dense-fp16", "dense-bf16", "dense-f32ckpt-fp32", "dense-int4", "dense-bigram-fp16", "dense-bigram-int4",
           "moe-fp16", "moe-int4", "moe-bigram-fp16"]
VLM_PREFIX = "__module.model.model.language_model"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_lm(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in ("openvino_language_model.xml", "openvino_language_model.bin", "config.json"):
        shutil.copyfile(src / name, dst / name)
    return dst / "openvino_language_model.xml"


# ---- optimum-intel's own annotations --------------------------------------------------------------------------

@pytest.mark.parametrize("name", EXPORTS)
def test_same_annotation_as_optimum_byte_for_byte(export, tmp_path, name):
    xml = copy_lm(export(name), tmp_path / name)
    original = xml.read_bytes()
    assert xmlsafe.get_value(original, KEY) is not None
    xml.write_bytes(xmlsafe.remove_value(original, KEY))
    bin_hash = sha(xml.with_suffix(".bin"))

    result = annotate_ir(xml.parent)
    assert result.status == "written" and result.layer_source == "config.json"
    assert xml.read_bytes() == original
    assert sha(xml.with_suffix(".bin")) == bin_hash
    again = annotate_ir(xml)
    assert again.status == "unchanged" and not again.changed and xml.read_bytes() == original


def test_discovery_without_config_matches_optimum(export):
    xml = export("moe-int4") / LANGUAGE_MODEL
    model = ov.Core().read_model(xml)
    found = discover_hidden_states(model, None)
    assert annotation_json(found) == model.get_rt_info(list(KEY)).value


# ---- synthetic decoders ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["f32", "f16", "int8", "int4"])
@pytest.mark.parametrize("prefix", ["__module.model", VLM_PREFIX])
def test_synthetic_decoders(tmp_path, fmt, prefix):
    xml, expected = write_target(tmp_path, Spec(prefix=prefix, fmt=fmt, layers=(0, 1, 2, 3)))
    bin_hash = sha(xml.with_suffix(".bin"))
    result = annotate_ir(tmp_path)
    assert result.status == "written" and result.layers == expected
    assert sha(xml.with_suffix(".bin")) == bin_hash
    model = ov.Core().read_model(xml)
    assert parse_annotation(model.get_rt_info(list(KEY)).value) == expected
    names = {op.get_friendly_name(): op for op in model.get_ops()}
    for producer, index in expected.values():
        assert names[producer].get_output_partial_shape(index)[2].get_length() == 32


@pytest.mark.parametrize("kind, fmt", [("llama", "f32"), ("qwen35-moe", "int4")])
def test_project_synthetic_targets(tmp_path, kind, fmt):
    from irsurgeon.synth import default_spec, synthesize
    from irsurgeon.synth.target import LLAMA, QWEN35

    spec = default_spec(kind).with_(layers=3, **({} if kind == "llama" else {"full_attention_interval": 3}))
    out = synthesize(tmp_path, kind, spec, with_mtp=kind != "llama", weight_format=fmt)
    xml = language_model_xml(out.target)
    xml.write_bytes(xmlsafe.remove_value(xml.read_bytes(), KEY))
    module = (LLAMA if kind == "llama" else QWEN35).module
    expected = {i: (f"{module}.layers.{i}/aten::add/Add_1", 0) for i in range(spec.layers - 1)}
    expected[spec.layers - 1] = (f"{module}.norm/aten::mul/Multiply_1", 0)
    result = annotate_ir(out.target)
    assert result.status == "written" and result.layers == expected


def test_layer_count_and_width_inferred_without_config(tmp_path):
    xml, expected = write_target(tmp_path, Spec(layers=tuple(range(5)), hidden=24, group=8, fmt="int4"), config=False)
    result = annotate_ir(xml)
    assert (result.layer_source, result.num_layers, result.hidden_size) == ("graph", 5, 24)
    assert result.layers == expected


def test_single_layer(tmp_path):
    xml, expected = write_target(tmp_path, Spec(layers=(0,)))
    assert annotate_ir(xml).layers == expected


@pytest.mark.parametrize("spec, config, message", [
    (Spec(layers=(0, 1, 3)), False, "missing"),
    (Spec(layers=(0, 1, 3)), True, "missing"),
    (Spec(duplicate=True), True, "duplicate"),
    (Spec(extra_crossing=True), True, "2 candidate"),
    (Spec(logits_op="Tanh"), True, "expected the lm_head MatMul"),
    (Spec(logits_name="scores"), True, "expected one output named 'logits'"),
    (Spec(), {"num_hidden_layers": 5}, "num_hidden_layers is 5"),
    (Spec(), {"text_config": {"hidden_size": 40}}, "[?,?,40]"),
])
def test_refuses_ambiguous_graphs(tmp_path, spec, config, message):
    xml, _ = write_target(tmp_path, spec, config)
    before = xml.read_bytes()
    with pytest.raises(IRError, match=message.replace("[", r"\[").replace("?", r"\?")):
        annotate_ir(tmp_path)
    assert xml.read_bytes() == before


class _Op:
    def __init__(self, name: str):
        self.name = name

    def get_friendly_name(self) -> str:
        return self.name


def _ops(*stacks: tuple[str, int]) -> list[_Op]:
    return [_Op(f"{path}.{i}/aten::add/Add") for path, n in stacks for i in range(n)]


def test_decoder_stack_choice():
    text, vision = "__module.model.layers", "__module.model.visual.blocks"
    assert decoder_stack(_ops((text, 6), (vision, 2)), None) == (text, 6)
    with pytest.raises(IRError, match="two candidate decoder stacks"):
        decoder_stack(_ops((text, 3), (vision, 3)), None)
    uneven = _ops((text, 3), (vision, 2)) + [_Op(f"{vision}.1/aten::mul/Multiply")]
    assert decoder_stack(uneven, 3) == (text, 3)
    with pytest.raises(IRError, match="two candidate decoder stacks"):
        decoder_stack(uneven, None)
    with pytest.raises(IRError, match="no decoder layers"):
        decoder_stack([_Op("Constant_1"), _Op("self.model.layers.0.weight")], None)


def test_dry_run_force_and_kept(tmp_path):
    xml, expected = write_target(tmp_path)
    pristine = xml.read_bytes()
    assert annotate_ir(xml, dry_run=True).status == "dry-run" and xml.read_bytes() == pristine
    annotate_ir(xml)
    wrong = {**expected, 0: (expected[1][0], 0)}
    xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), KEY, annotation_json(wrong)))
    tampered = xml.read_bytes()
    assert annotate_ir(xml).status == "kept" and xml.read_bytes() == tampered
    assert annotate_ir(xml, force=True, dry_run=True).status == "dry-run" and xml.read_bytes() == tampered
    result = annotate_ir(xml, force=True)
    assert result.status == "rewritten" and result.previous == annotation_json(wrong)
    assert parse_annotation(xmlsafe.get_value(xml.read_bytes(), KEY)) == expected


def test_failed_check_keeps_original_and_leaves_no_temporary(tmp_path, monkeypatch):
    xml, _ = write_target(tmp_path)
    before = sorted(os.listdir(tmp_path)), xml.read_bytes()

    def broken(data, path, value, source="IR"):
        return data.replace(b"</rt_info>", b"</rt_info><garbage>", 1) if b"</rt_info>" in data else data + b"<"

    monkeypatch.setattr(xmlsafe, "set_value", broken)
    with pytest.raises(IRError):
        annotate_ir(xml)
    assert (sorted(os.listdir(tmp_path)), xml.read_bytes()) == before


def test_read_back_model_is_handed_to_the_next_read_of_the_same_files_once(tmp_path, monkeypatch):
    """The edited copy OpenVINO read back is what the next read_model of the renamed file gets (not parsed again),
    exactly once; a changed file, or a read of another IR first, is parsed from disk."""
    xml, expected = write_target(tmp_path / "a")
    other, _ = write_target(tmp_path / "b")
    parsed = []
    real = files._read
    monkeypatch.setattr(files, "_read", lambda ov_, x, b: parsed.append(x) or real(ov_, x, b))

    def reannotate() -> int:
        wrong = {**expected, 0: (expected[1][0], 0)}
        xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), KEY, annotation_json(wrong)))
        annotate_ir(xml, force=True)
        return len(parsed)

    annotate_ir(xml)
    assert len(parsed) == 2  # the plan's read and the read-back of the edited copy (a temporary beside xml)
    first, second = files.read_model(xml), files.read_model(xml)
    assert len(parsed) == 3 and first is not second  # the kept model, then a real read
    assert parse_annotation(first.get_rt_info(list(KEY)).value) == expected
    before = reannotate()
    os.utime(xml, ns=(0, 0))  # the same bytes, another mtime: not the file read back
    files.read_model(xml)
    assert len(parsed) == before + 1
    before = reannotate()
    files.read_model(other)  # another IR first: the kept model is dropped
    files.read_model(xml)
    assert len(parsed) == before + 2


def test_unwritable_directory_is_one_error(tmp_path, monkeypatch):
    xml, _ = write_target(tmp_path)
    before = xml.read_bytes()

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", denied)
    with pytest.raises(OutputError, match="Permission denied"):
        annotate_ir(xml)
    assert xml.read_bytes() == before


# ---- the XML editor -------------------------------------------------------------------------------------------

def test_rt_info_created_nested_and_removed(tmp_path):
    model, _ = make_decoder()
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    data = xml.read_bytes()
    block = xmlsafe.net_rt_info(data)
    bare = data[:data.rfind(b"<rt_info", 0, block.end)] + data[data.rfind(b"</rt_info>") + len(b"</rt_info>\n"):]
    assert b"<rt_info" not in bare[bare.rfind(b"</edges>"):]
    edited = xmlsafe.set_value(bare, ("runtime_options", "KV_CACHE_PRECISION"), "f16")
    edited = xmlsafe.set_value(edited, ("a key with spaces",), 'x<"&>y')
    edited = xmlsafe.set_value(edited, ("runtime_options", "ACTIVATIONS_SCALE_FACTOR"), "8.0")
    xml.write_bytes(edited)
    back = ov.Core().read_model(xml)
    assert back.get_rt_info(["runtime_options", "KV_CACHE_PRECISION"]).value == "f16"
    assert back.get_rt_info(["runtime_options", "ACTIVATIONS_SCALE_FACTOR"]).value == "8.0"
    assert back.get_rt_info(["a key with spaces"]).value == 'x<"&>y'
    assert xmlsafe.get_value(edited, ("a key with spaces",)) == 'x<"&>y'
    removed = xmlsafe.remove_value(edited, ("runtime_options", "KV_CACHE_PRECISION"))
    assert xmlsafe.get_value(removed, ("runtime_options", "KV_CACHE_PRECISION")) is None
    assert xmlsafe.get_value(removed, ("runtime_options", "ACTIVATIONS_SCALE_FACTOR")) == "8.0"
    assert edited[:edited.rfind(b"</edges>")] == data[:data.rfind(b"</edges>")]


def test_self_closing_rt_info_is_expanded(tmp_path):
    model, _ = make_decoder()
    xml = tmp_path / "m.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    data = xml.read_bytes()
    start = data.rfind(b"\t<rt_info>")
    empty = data[:start] + b"\t<rt_info />\n</net>\n"
    assert xmlsafe.get_value(empty, ("Runtime_version",)) is None
    xml.write_bytes(xmlsafe.set_value(empty, KEY, "{}"))
    assert ov.Core().read_model(xml).get_rt_info(list(KEY)).value == "{}"


@pytest.mark.parametrize("text", [
    b'<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY a "aaaa">]>\n<net name="x" version="11"></net>',
    b'<?xml version="1.0"?>\n<net name="x" version="11"><!ENTITY b SYSTEM "file:///etc/passwd"></net>',
])
def test_dtd_refused(tmp_path, text):
    xml = tmp_path / "evil.xml"
    xml.write_bytes(text)
    with pytest.raises(IRError, match="refusing"):
        annotate_ir(xml)


# ---- command line ---------------------------------------------------------------------------------------------

def test_cli_twice_and_dry_run(tmp_path):
    xml, expected = write_target(tmp_path)
    runner = CliRunner()
    dry = runner.invoke(main, ["annotate", str(tmp_path), "--dry-run"])
    assert dry.exit_code == 0 and "would write" in dry.output and HIDDEN_STATES_LAYERS not in xml.read_text()
    first = runner.invoke(main, ["annotate", str(tmp_path)])
    assert first.exit_code == 0 and "wrote" in first.output
    assert all(p in first.output for p, _ in expected.values())
    after = xml.read_bytes()
    second = runner.invoke(main, ["annotate", str(xml)])
    assert second.exit_code == 0 and "nothing changed" in second.output and xml.read_bytes() == after


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    xml, _ = write_target(tmp_path / "good")
    cases = {"missing": tmp_path / "nope", "empty dir": tmp_path / "empty"}
    cases["empty dir"].mkdir()
    (tmp_path / "not_ir.xml").write_text("<graph><node/></graph>")
    cases["not an IR"] = tmp_path / "not_ir.xml"
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    shutil.copyfile(xml, trunc / xml.name)
    (trunc / "openvino_model.bin").write_bytes(xml.with_suffix(".bin").read_bytes()[:100])
    cases["truncated bin"] = trunc
    no_logits, _ = write_target(tmp_path / "nologits", Spec(logits_name="scores"))
    cases["no logits"] = no_logits.parent
    return cases


def test_cli_bad_inputs_one_line_and_nothing_written(tmp_path):
    cases = _bad_inputs(tmp_path)
    runner = CliRunner()
    for what, path in cases.items():
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        res = runner.invoke(main, ["annotate", str(path)])
        assert res.exit_code == 1, (what, res.output)
        lines = res.output.strip().splitlines()
        assert lines[-1].startswith("Error: ") and "Traceback" not in res.output, (what, res.output)
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before, what


def test_cli_kept_exits_nonzero(tmp_path):
    xml, expected = write_target(tmp_path)
    xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), KEY, annotation_json({0: expected[2]})))
    res = CliRunner().invoke(main, ["annotate", str(xml)])
    assert res.exit_code == 1 and "--force" in res.output
    assert CliRunner().invoke(main, ["annotate", str(xml), "--force"]).exit_code == 0


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_annotate_refuses_a_config_json_that_is_not_a_file(tmp_path, kind):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    not_regular(target / "config.json", kind)
    line = refused(("annotate", target), target)
    assert f"{target / 'config.json'}: is a" in line and "expected a regular file" in line
