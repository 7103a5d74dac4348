"""An f32 patch writes its draft's matrices into the staged .bin block by block (irsurgeon.build.Stream,
irsurgeon.ir.streamed): the same model as saving a built one, the same refusals, the checkpoint closed after."""
from __future__ import annotations

import io
import re
import shutil

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke, one_error
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon import build
from irsurgeon.errors import IRError
from irsurgeon.families.dflash import synth
from irsurgeon.families.dflash.model import BUILDER
from irsurgeon.ir import streamed
from irsurgeon.weights.safetensors_io import write_safetensors

TARGET, CKPT = FIXTURE_PAIRS["dflash"]
DRAFT_XML = "dflash_draft/openvino_model.xml"


def layers(model: ov.Model) -> tuple[dict, list]:
    """Every op as (type, output shapes): by name where the build named it, as a sorted list where the save did (by
    position: the placeholders shift it)."""
    ops = [(op.get_friendly_name(), op.get_type_name(), [str(o.get_partial_shape()) for o in op.outputs()])
           for op in model.get_ops()]
    named = {name: rest for name, *rest in ops if not re.fullmatch(r"[A-Za-z]+_\d+", name)}
    return named, sorted(rest for _, *rest in ops)


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
    cfg, weights, ckpt = build.load_with(BUILDER, CKPT)
    saved = build.build_model(cfg, weights, "f32", family=BUILDER)
    ckpt.close()
    ov.save_model(saved, tmp_path / "saved.xml", compress_to_fp16=False)
    ours, theirs = (ov.Core().read_model(p) for p in (target / DRAFT_XML, tmp_path / "saved.xml"))
    assert layers(ours) == layers(theirs)
    named = {op.get_friendly_name(): op.get_data() for op in theirs.get_ops() if op.get_type_name() == "Constant"
             and op.get_friendly_name().endswith(".weight")}
    got = {op.get_friendly_name(): op.get_data() for op in ours.get_ops() if op.get_friendly_name() in named}
    assert len(named) == 25 and all(np.array_equal(got[n], named[n]) for n in named)
    assert np.array_equal(run(ours), run(theirs))
    assert build._STREAMS == {}  # the checkpoint was closed once written


def test_a_nan_in_a_streamed_matrix_is_refused_naming_it_and_nothing_changes(tmp_path):
    tensors = synth.draft_tensors(3)
    tensors["layers.1.mlp.down_proj.weight"].reshape(-1)[-5:] = np.nan  # the last block: judged after it is written
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_safetensors(ckpt / "model.safetensors", tensors)
    shutil.copy(CKPT / "config.json", ckpt / "config.json")
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    before = snapshot(target)
    error = one_error(invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f32"))
    assert "tensor layers.1.mlp.down_proj.weight: holds 5 NaN or Inf values" in error, error
    assert snapshot(target) == before and build._STREAMS == {}


def test_appended_weights_are_aligned_and_their_size_is_checked():
    out = io.BytesIO(b"x" * 10)
    out.seek(0, 2)
    place = build.append_blocks(out, "w", (2, 3), [np.ones((1, 3), np.float32), np.full((1, 3), 2, np.float32)])
    assert place == streamed.Place((2, 3), 64, 24)
    assert np.array_equal(np.frombuffer(out.getvalue()[64:], np.float32), [1, 1, 1, 2, 2, 2])
    with pytest.raises(IRError, match="12 bytes were written for a float32 weight of shape \\[2, 3\\]"):
        build.append_blocks(out, "w", (2, 3), [np.ones((1, 3), np.float32)])


PLACEHOLDER = (b'<layer id="7" name="fc.weight" type="Parameter" version="opset1">\n'
               b'\t\t\t<data shape="2,3" element_type="f32" />\n\t\t\t<output>')


def test_a_placeholder_becomes_the_const_layer_of_its_place_and_nothing_else_changes():
    xml = b"<net>" + PLACEHOLDER + b"</net>"
    out = streamed.constants_from_parameters(xml, {"fc.weight": streamed.Place((2, 3), 128, 24)}, "x.xml")
    assert out == (b'<net><layer id="7" name="fc.weight" type="Const" version="opset1">\n\t\t\t'
                   b'<data element_type="f32" shape="2, 3" offset="128" size="24" />\n\t\t\t<output></net>')


@pytest.mark.parametrize("xml, words", [(b"<net></net>", "found 0"), (PLACEHOLDER * 2, "found 2"),
                                        (PLACEHOLDER.replace(b"2,3", b"3,2"), "has shape '3,2'")])
def test_a_placeholder_that_is_missing_doubled_or_reshaped_is_an_error(xml, words):
    with pytest.raises(IRError, match=words):
        streamed.constants_from_parameters(xml, {"fc.weight": streamed.Place((2, 3), 128, 24)}, "x.xml")
