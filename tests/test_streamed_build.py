"""An f32 patch writes its draft's matrices into the staged .bin block by block (irsurgeon.draft.stream.Stream,
irsurgeon.ir.streamed): the same model as saving a built one, the same refusals, the checkpoint closed after."""
from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke, one_error
from helpers.drafts import graph, layers, weight_data
from helpers.tiers import default_tier
from irsurgeon.flows.standalone import save_draft
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft import build as draft_build, load as draft_load, save as draft_save, stream as draft_stream
from irsurgeon.quant.compress import compress_model
from irsurgeon.families.registry import FAMILIES
from irsurgeon.quant.precision import choose_format
from irsurgeon.core.errors import IRError
from irsurgeon.families.dflash import synth
from irsurgeon.families.dflash.model import RECIPE
from irsurgeon.ir import streamed
from irsurgeon.commit.journal_format import digest
from irsurgeon.weights.safetensors_io import write_safetensors

TARGET, CKPT = FIXTURE_PAIRS["dflash"]
DRAFT_XML = "dflash_draft/openvino_model.xml"


def run(model: ov.Model) -> np.ndarray:
    rng = np.random.default_rng(5)
    feed = {"inputs_embeds": rng.standard_normal((1, 4, 32), dtype=np.float32),
            "hidden_states": rng.standard_normal((1, 3, 64), dtype=np.float32),
            "position_ids": np.arange(7)[None], "attention_mask": np.ones((1, 7), np.int64),
            "beam_idx": np.zeros(1, np.int32)}
    request = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    return request.infer(feed)[0]


def test_an_f32_patch_streams_the_matrices_into_the_same_model_a_save_makes(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    assert invoke("patch", target, "--checkpoint", CKPT, "--weight-format", "f32").exit_code == 0
    text = (target / DRAFT_XML).read_text()
    assert text.count('type="Parameter"') == 5 and 'name="fc.weight" type="Const"' in text
    extents = re.findall(r'name="([^"]+)" type="Const" version="opset1">\s*<data element_type="\w+" shape="([^"]*)" '
                         r'offset="(\d+)" size="(\d+)"', text)
    matrices = [int(o) for n, shape, o, _ in extents if "," in shape and n.endswith(".weight")]
    others = [int(o) + int(z) for n, shape, o, z in extents if not ("," in shape and n.endswith(".weight"))]
    assert len(matrices) == 15 and all(o % 64 == 0 for o in matrices) and min(matrices) >= max(others)  # appended
    cfg, weights, ckpt = draft_load.load_with(RECIPE, CKPT)
    saved = draft_build.build_model(cfg, weights, "f32", recipe=RECIPE)
    ckpt.close()
    ov.save_model(saved, tmp_path / "saved.xml", compress_to_fp16=False)
    ours, theirs = (ov.Core().read_model(p) for p in (target / DRAFT_XML, tmp_path / "saved.xml"))
    assert layers(ours) == layers(theirs)
    named = {op.get_friendly_name(): op.get_data() for op in theirs.get_ops() if op.get_type_name() == "Constant"
             and op.get_friendly_name().endswith(".weight")}
    got = {op.get_friendly_name(): op.get_data() for op in ours.get_ops() if op.get_friendly_name() in named}
    assert len(named) == 25 and all(np.array_equal(got[n], named[n]) for n in named)
    assert np.array_equal(run(ours), run(theirs))
    assert draft_stream._STREAMS == {}  # the checkpoint was closed once written


def saved_build(key: str, ckpt, fmt: str, path) -> ov.Model:
    """The family's draft of ckpt built holding every weight (no stream), saved by openvino and read back."""
    family = next(f for f in FAMILIES if f.key == key).recipe()
    cfg, weights, opened = draft_load.load_with(family, ckpt, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, fmt, recipe=family)
    opened.close()
    draft_save.name_anonymous_nodes(model)
    ov.save_model(model, path, compress_to_fp16=False)
    return ov.Core().read_model(path)


@pytest.mark.parametrize("key", default_tier(list(FIXTURE_PAIRS), keep={"gemma4"}))
def test_an_f16_patch_streams_the_matrices_into_the_model_a_build_holding_them_saves(tmp_path, key):
    """Each f16 matrix decoded block by block into the staged .bin (draft.stream.Stream's f16 placeholders): the draft
    written is the one the f16 build holding every matrix makes, constant by constant, and none is held meanwhile."""
    source, ckpt = FIXTURE_PAIRS[key]
    target = tmp_path / "t"
    shutil.copytree(source, target)
    family = next(f for f in FAMILIES if f.key == key)
    result = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    draft = target / family.layout.draft_xml
    extents = re.findall(r'type="Const" version="opset1">\s*<data element_type="(\w+)" shape="([^"]*)" '
                         r'offset="(\d+)" size="(\d+)"', draft.read_text())
    matrices = [int(o) for t, shape, o, _ in extents if t == "f16" and "," in shape]
    others = [int(o) + int(z) for t, shape, o, z in extents if not (t == "f16" and "," in shape)]
    assert len(matrices) >= 8 and all(o % 64 == 0 for o in matrices) and min(matrices) >= max(others)  # appended
    ours, theirs = ov.Core().read_model(draft), saved_build(key, ckpt, "f16", tmp_path / "saved.xml")
    assert layers(ours) == layers(theirs)
    assert weight_data(ours) == weight_data(theirs) and len(weight_data(ours)) >= 10
    assert draft_stream._STREAMS == {}


def f16_checkpoint(tmp_path, change) -> Path:
    tensors = synth.draft_tensors(3)
    change(tensors["layers.1.mlp.down_proj.weight"])
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_safetensors(ckpt / "model.safetensors", tensors)
    shutil.copy(CKPT / "config.json", ckpt / "config.json")
    return ckpt


def beyond(w):  # one value f16 cannot hold, in the last block: found after the matrix was written
    w.reshape(-1)[-1] = 1e6


def mostly_tiny(w):  # below f16's normal range: openvino's pass keeps it f32 (weights/half.py)
    w[...] = np.float32(3e-7) * np.sign(w + 0.5)


@pytest.mark.parametrize("change", [beyond, mostly_tiny])
def test_a_streamed_f16_matrix_that_does_not_fit_f16_is_kept_f32_as_the_build_keeps_it(tmp_path, monkeypatch,
                                                                                        change):
    demoted = []
    demote = draft_stream.Stream.demote
    monkeypatch.setattr(draft_stream.Stream, "demote", lambda self, model, name: demoted.append(name) or
                        demote(self, model, name))
    ckpt = f16_checkpoint(tmp_path, change)
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    result = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert "warning: tensor layers.1.mlp.down_proj.weight: values in" in result.output, result.output
    ours, theirs = ov.Core().read_model(target / DRAFT_XML), saved_build("dflash", ckpt, "f16", tmp_path / "s.xml")
    kept = weight_data(ours)["layers.1.mlp.down_proj.weight"]
    assert kept[0] == "<Type: 'float32'>" and weight_data(ours)["layers.0.mlp.down_proj.weight"][0] != kept[0]
    assert layers(ours) == layers(theirs) and weight_data(ours) == weight_data(theirs)
    assert np.array_equal(run(ours), run(theirs))
    assert demoted == ["layers.1.mlp.down_proj.weight"] and draft_stream._STREAMS == {}  # found once written, saved again


@pytest.mark.parametrize("fmt", ["f32", "f16"])
def test_a_nan_in_a_streamed_matrix_is_refused_naming_it_and_nothing_changes(tmp_path, fmt):
    ckpt = f16_checkpoint(tmp_path, lambda w: w.reshape(-1).__setitem__(slice(-5, None), np.nan))  # the last block:
    target = tmp_path / "t"                                                       # judged after it is written
    shutil.copytree(TARGET, target)
    before = snapshot(target)
    error = one_error(invoke("patch", target, "--checkpoint", ckpt, "--weight-format", fmt))
    assert "tensor layers.1.mlp.down_proj.weight: holds 5 NaN or Inf values" in error, error
    assert snapshot(target) == before and draft_stream._STREAMS == {}


def test_appended_weights_are_aligned_and_their_size_is_checked():
    out = io.BytesIO(b"x" * 10)
    tail = streamed.Tail(out)
    place = tail.append("w", (2, 3), "f32", [np.ones((1, 3), np.float32), np.full((1, 3), 2, np.float32)], 4)
    assert place == streamed.Place((2, 3), 64, 24, "f32")
    with pytest.raises(IRError, match=r"weight w: 12 bytes were written for a f32 weight of shape \[2, 3\] "
                                      r"\(24 expected\)"):
        tail.append("w", (2, 3), "f32", [np.ones((1, 3), np.float32)], 4)
    tail.digest()  # the writer thread has caught up: the bytes are read only once they are all written
    assert np.array_equal(np.frombuffer(out.getvalue()[64:88], np.float32), [1, 1, 1, 2, 2, 2])


def test_the_digest_is_the_journals_of_the_file_written_in_pieces_the_hashing_thread_lags(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 7)  # many pieces, more than AHEAD in flight
    rng = np.random.default_rng(3)
    path = tmp_path / "x.bin"
    path.write_bytes(rng.bytes(50))  # the serializer's part, hashed first
    with open(path, "r+b") as f:
        tail = streamed.Tail(f)
        tail.append("a", (33,), "u8", [rng.integers(0, 255, 33, dtype=np.uint8)], 1)
        tail.append("b", (5, 9), "u4", [rng.integers(0, 255, 23, dtype=np.uint8)], 0.5)  # 45 nibbles: 23 bytes
        tail.append("c", (4, 4), "f16", [rng.standard_normal((2, 4)).astype(np.float16)] * 2, 2)
        tail.settle()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert tail.digest() == digest(fd) and tail.size == path.stat().st_size > 50 + 33 + 23 + 32
    finally:
        os.close(fd)


def test_a_stopped_hash_gives_no_digest():
    tail = streamed.Tail(io.BytesIO(b"x" * 10))
    tail.append("a", (3,), "u8", [np.zeros(3, np.uint8)], 1)
    tail.stop()
    assert tail.digest() is None


PLACEHOLDER = (b'<layer id="7" name="fc.weight" type="Parameter" version="opset1">\n'
               b'\t\t\t<data shape="2,3" element_type="f32" />\n\t\t\t<output>')


def test_a_placeholder_becomes_the_const_layer_of_its_place_and_nothing_else_changes():
    xml = b"<net>" + PLACEHOLDER + b"</net>"
    out = streamed.constants_from_parameters(xml, {"fc.weight": streamed.Place((2, 3), 128, 24)}, "x.xml")
    assert out == (b'<net><layer id="7" name="fc.weight" type="Const" version="opset1">\n\t\t\t'
                   b'<data element_type="f32" shape="2, 3" offset="128" size="24" />\n\t\t\t<output></net>')


@pytest.mark.parametrize("xml, words", [(b"<net></net>", "found 0"), (PLACEHOLDER * 2, "found 2"),
                                        (PLACEHOLDER.replace(b"2,3", b"3,2"), "is 'f32' of shape '3,2'"),
                                        (PLACEHOLDER.replace(b'"f32"', b'"f16"'), "is 'f16' of shape '2,3'")])
def test_a_placeholder_that_is_missing_doubled_or_reshaped_is_an_error(xml, words):
    with pytest.raises(IRError, match=words):
        streamed.constants_from_parameters(xml, {"fc.weight": streamed.Place((2, 3), 128, 24)}, "x.xml")


@pytest.mark.parametrize("case", default_tier(
    [(k, f) for k in FIXTURE_PAIRS for f in ("f16", "f32", "int4")],
    keep={("qwen3_5", "int4"), ("gemma4", "f16"), ("dflash", "f32")}))
@pytest.mark.parametrize("detach", [1, draft_save.DETACH_BYTES], ids=["every constant", "default"])
def test_a_draft_saved_with_its_weights_appended_reads_back_as_openvinos_save_of_it(tmp_path, monkeypatch, case,
                                                                                    detach):
    key, fmt = case
    monkeypatch.setattr(draft_save, "DETACH_BYTES", detach)
    family = next(f for f in FAMILIES if f.key == key).recipe()
    cfg, weights, ckpt = draft_load.load_with(family, FIXTURE_PAIRS[key][1])
    model = draft_build.build_model(cfg, weights, "f32" if fmt == "int4" else fmt, recipe=family)
    ckpt.close()
    if fmt == "int4":
        model, _ = compress_model(model, choose_format("int4").params)
    draft_save.name_anonymous_nodes(model)
    before = graph(model)
    ov.save_model(model, tmp_path / "saved.xml", compress_to_fp16=False)
    saved = draft_save.save_appended(model, tmp_path / "ours.xml")
    theirs, ours = (ov.Core().read_model(tmp_path / n) for n in ("saved.xml", "ours.xml"))
    assert graph(ours) == graph(theirs) and graph(model) == before  # the model itself is as it was
    same = [(tmp_path / f"ours.{x}").read_bytes() == (tmp_path / f"saved.{x}").read_bytes() for x in ("xml", "bin")]
    assert same == ([False, False] if detach == 1 else [True, True])  # the fixtures' constants are all below 1 MiB
    fd = os.open(tmp_path / "ours.bin", os.O_RDONLY)
    try:
        assert saved.tail.digest() == digest(fd) and saved.bin_stat.st_ino == os.fstat(fd).st_ino
    finally:
        os.close(fd)
    xml = (tmp_path / "ours.xml").read_bytes()
    assert saved.xml_digest == {"size": len(xml), "sha256": hashlib.sha256(xml).hexdigest()}


def test_constants_the_placeholders_cannot_stand_for_are_left_to_openvinos_serializer(tmp_path, monkeypatch):
    """Two constants of one name, one with a tensor name of its own, one with rt_info: each would make a Const
    layer a placeholder cannot be turned back into, so openvino writes them; the others are appended."""
    monkeypatch.setattr(draft_save, "DETACH_BYTES", 1)
    x = ov.opset13.parameter([1, 4], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    rng = np.random.default_rng(0)
    consts = [ov.opset13.constant(rng.standard_normal((4, 4)).astype(np.float32)) for _ in range(5)]
    for c, name in zip(consts, ["twin", "twin", "named", "marked", "plain"]):
        c.set_friendly_name(name)
    consts[2].output(0).get_tensor().set_names({"named_out"})
    consts[3].get_rt_info()["keep"] = "yes"
    out = x.output(0)
    for c in consts:
        out = ov.opset13.matmul(out, c, False, False).output(0)
    model = ov.Model([ov.opset13.result(out)], [x], "m")
    ov.save_model(model, tmp_path / "saved.xml", compress_to_fp16=False)
    draft_save.save_appended(model, tmp_path / "ours.xml").tail.stop()  # no transaction ends its threads here
    theirs, ours = (ov.Core().read_model(tmp_path / n) for n in ("saved.xml", "ours.xml"))
    assert graph(ours) == graph(theirs)
    text = (tmp_path / "ours.xml").read_text()
    assert [n for n in ("twin", "named", "marked", "plain") if f'name="{n}" type="Const"' in text] == \
        ["twin", "named", "marked", "plain"] and text.count('type="Parameter"') == 1
    where = {n: (int(o), int(z)) for n, o, z in re.findall(
        r'name="(\w+)" type="Const" version="opset1">\s*<data element_type="f32" shape="4, 4" offset="(\d+)" '
        r'size="(\d+)"', text)}
    serialized = max(o + z for n, (o, z) in where.items() if n != "plain")
    assert where["plain"][0] >= serialized and where["plain"][0] % streamed.ALIGN == 0  # appended, the others not


def test_two_constants_over_one_buffer_are_written_once_as_openvino_writes_them(tmp_path, monkeypatch):
    monkeypatch.setattr(draft_save, "DETACH_BYTES", 1)
    x = ov.opset13.parameter([1, 64], ov.Type.f32, name="x")
    w = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    a, b = (ov.op.Constant(w, shared_memory=True) for _ in range(2))
    a.set_friendly_name("embed")
    b.set_friendly_name("lm_head")
    out = ov.opset13.matmul(ov.opset13.matmul(x, a, False, False), b, False, True)
    model = ov.Model([ov.opset13.result(out)], [x], "m")
    ov.save_model(model, tmp_path / "saved.xml", compress_to_fp16=False)
    draft_save.save_appended(model, tmp_path / "ours.xml").tail.stop()  # no transaction ends its threads here
    theirs, ours = (ov.Core().read_model(tmp_path / n) for n in ("saved.xml", "ours.xml"))
    assert graph(ours) == graph(theirs)
    assert (tmp_path / "ours.bin").stat().st_size == (tmp_path / "saved.bin").stat().st_size == w.nbytes


def test_a_built_graph_that_does_not_validate_is_said_so_not_called_a_failed_write(tmp_path):
    """Rule: a graph error met when the draft is saved (openvino validates the graph as it serializes it) is the
    build's, one line saying so; write_staged's "cannot write it (N MB free there)" is for the disk's errors."""
    x = ov.opset13.parameter([2, 3], ov.Type.f32, name="x")
    product = ov.opset13.matmul(x, ov.opset13.constant(np.ones((3, 4), np.float32)), False, False)
    model = ov.Model([product], [x], "broken")
    product.input(1).replace_source_output(ov.opset13.constant(np.ones((5, 4), np.float32)).output(0))
    out = tmp_path / "out"
    with pytest.raises(IRError) as caught:
        save_draft(model, out)
    line = str(caught.value)
    assert "does not validate" in line and "MatMul" in line and "cannot write" not in line, line
    assert "\n" not in line and not out.exists()
