"""An EAGLE-3 draft on a MoE target: openvino-genai 2026.4.1 taps no MoE layer as exported (openvino.genai issue
4390), `irsurgeon patch` adds the tap genai's rule finds (irsurgeon/families/eagle3/moe_taps.py: openvino_model.xml
only), and the pair then runs token-identical to plain greedy.

tests/data/eagle3_moe/target is optimum-intel 2.2.0's fp32 export of a tiny seeded Qwen3-MoE
(scripts/make_eagle3_moe_target.py: hidden 64, vocabulary 256, 4 layers of 4 experts, the tokenizer of
fixtures/eagle3/target); fixtures/eagle3/ckpt is a random EAGLE-3 draft of that geometry (taps [0, 1, 2]), so its
drafts are accepted about never: the genai test proves the plumbing and exactness, not a speed-up.

Exactness: the edit adds +0 to each tapped layer's output, which is the identity on every f32 but -0; the same
graph otherwise, compiled by the same plugin, so logits and tapped states are compared bit for bit.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from lab.families import FIXTURE_PAIRS
from irsurgeon.families.eagle3 import moe_taps
from irsurgeon.families.eagle3.target import genai_taps, inspect_target

MOE = Path(__file__).resolve().parents[2] / "data" / "eagle3_moe" / "target"
_, CKPT = FIXTURE_PAIRS["eagle3"]
TAPS = (0, 1, 2)  # fixtures/eagle3/ckpt's eagle_aux_hidden_state_layer_ids
F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    target = Path(shutil.copytree(MOE, tmp_path_factory.mktemp("moe") / "t"))
    result = invoke("patch", target, "--checkpoint", CKPT)
    assert result.exit_code == 0, result.output
    assert "openvino_model.xml" in result.output.split("wrote", 1)[1], result.output
    return target


def read(xml: Path) -> ov.Model:
    return ov.Core().read_model(str(xml))


def test_the_export_has_no_layer_genai_can_tap():
    info = inspect_target(MOE)
    assert info.model_type == "qwen3_moe" and info.tappable == frozenset()
    assert info.untapped == {i: f"__module.model.layers.{i}/aten::add/Add_1" for i in range(4)}


def test_without_the_edit_the_pair_is_refused_naming_the_layer(patched, tmp_path):
    target = Path(shutil.copytree(patched, tmp_path / "t"))
    shutil.copyfile(MOE / "openvino_model.xml", target / "openvino_model.xml")
    result = invoke("verify", target)
    assert result.exit_code == 1, result.output
    line = next(ln for ln in result.output.splitlines() if "draft pair" in ln)
    assert "target layer 0's output '__module.model.layers.0/aten::add/Add_1'" in line, line
    assert "openvino.genai issue 4390" in line and "irsurgeon patch" in line, line


def test_the_edit_is_four_nodes_per_tap_in_the_xml_only(patched):
    assert sha(patched / "openvino_model.bin") == sha(MOE / "openvino_model.bin")
    before, after = read(MOE / "openvino_model.xml"), read(patched / "openvino_model.xml")
    old = {op.get_friendly_name(): op.get_type_name() for op in before.get_ordered_ops()}
    new = {op.get_friendly_name(): op.get_type_name() for op in after.get_ordered_ops()}
    added = {n: t for n, t in new.items() if n not in old}
    assert old.items() <= new.items()
    assert added == {f"__module.model.layers.{i}/{moe_taps.TAP}/{t}": t if t != "Zero" else "Constant"
                     for i in TAPS for t in ("Zero", "Multiply", "MatMul", "Add")}
    assert genai_taps(after) == {i: f"__module.model.layers.{i}/{moe_taps.TAP}/Add" for i in TAPS}
    for i in TAPS:  # each tap reads its layer's output and feeds what that output fed
        tap = next(op for op in after.get_ordered_ops() if op.get_friendly_name() == genai_taps(after)[i])
        assert tap.input_value(0).get_node().get_friendly_name() == f"__module.model.layers.{i}/aten::add/Add_1"
    assert inspect_target(patched).tappable == frozenset(TAPS)


def run(model: ov.Model, extra: list[str]) -> list[np.ndarray]:
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    for name in extra:
        model.add_outputs(ops[name].output(0))
    compiled = ov.Core().compile_model(model, "CPU", F32)
    request = compiled.create_infer_request()
    ids = np.array([[5, 17, 99, 3, 200, 42, 7]], np.int64)
    request.infer({"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.size)[None],
                   "beam_idx": np.zeros(1, np.int32)})
    return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]


def test_the_edited_target_computes_what_the_export_does_bit_for_bit(patched):
    before = run(read(MOE / "openvino_model.xml"), [f"__module.model.layers.{i}/aten::add/Add_1" for i in TAPS])
    after_model = read(patched / "openvino_model.xml")
    after = run(after_model, [genai_taps(after_model)[i] for i in TAPS])
    assert len(before) == len(after) == 1 + len(TAPS)
    assert before[0].shape == (1, 7, 256) and np.abs(before[0]).max() > 0
    for a, b in zip(before, after):  # logits, then each tap against the layer output it stands for
        assert a.tobytes() == b.tobytes()


def test_a_second_patch_leaves_the_edited_target_as_it_is(patched, tmp_path):
    target = Path(shutil.copytree(patched, tmp_path / "t"))
    xml = sha(target / "openvino_model.xml")
    result = invoke("patch", target, "--checkpoint", CKPT, "--force")
    assert result.exit_code == 0, result.output
    assert sha(target / "openvino_model.xml") == xml and "make the outputs of MoE" not in result.output


@pytest.mark.extended  # more of what the default tier runs once: CI's `make test-extended`
@pytest.mark.genai
def test_genai_runs_the_patched_moe_pair_token_identical_to_greedy(patched):
    result = invoke("verify", patched, "--genai", "--prompts", "2", "--sweep", "1,2,3", "--min-acceptance", "0",
                    "--rounds", "1")
    assert result.exit_code == 0, result.output
    assert "6/6 speculative runs token-identical to plain greedy" in result.output, result.output


@pytest.mark.genai
def test_genai_fails_on_the_unedited_moe_target(patched, tmp_path):
    """The control: the same draft on the export as it is fails in genai itself (irsurgeon's refusal bypassed)."""
    import openvino_genai as g

    target = Path(shutil.copytree(patched, tmp_path / "t"))
    shutil.copyfile(MOE / "openvino_model.xml", target / "openvino_model.xml")
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching, sc.max_num_seqs, sc.cache_size = False, 1, 1
    pipe = g.LLMPipeline(str(target), "CPU", scheduler_config=sc,
                         draft_model=g.draft_model(str(target / "eagle3_draft"), "CPU", **F32), **F32)
    config = g.GenerationConfig()
    config.max_new_tokens, config.num_assistant_tokens = 4, 2
    with pytest.raises(RuntimeError, match="last_hidden_state"):
        pipe.generate(["hello"], config)
