"""The three target layers an EAGLE-3 draft is fed from: distinct, inside the target, in the order its trainer fed
them, whatever names them (a config key, a trainer's default, --hidden-layers, the Python API); and the config values
that decide the draft's graph, each type-checked.

openvino-genai 2026.4.1 concatenates one tapped state per id of hidden_layers_list, in the list's order: a layer named
twice leaves fewer states than ids and the pipeline fails to load, and an order other than the trainer's feeds the
draft's fc the states in the wrong slots. SGLang and vLLM (the runtimes SpecForge / SafeAILab and speculators drafts
are trained against) capture in their loop over the layers, so those drafts were fed in layer order; AngelSlim's
trainer concatenates in its list's order (irsurgeon/families/eagle3/model.py in_trained_order).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import invoke
from helpers.eagle3 import variant
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import ConfigError, IRSurgeonError
from irsurgeon.families.eagle3 import layout
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3.patch import recorded_taps
from irsurgeon.families.eagle3.target import check_pair, inspect_target

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]  # a 4-layer Llama target; the draft names taps [0, 1, 2] (SGLang's key)
MOE = Path(__file__).resolve().parents[2] / "data" / "eagle3_moe" / "target"  # 4 MoE layers (test_eagle3_moe.py)
SGLANG = "eagle_config.eagle_aux_hidden_state_layer_ids"
DRAFT_XML = Path(layout.DRAFT_DIR) / layout.MODEL_XML


def config(**change) -> dict:
    cfg = read_json(CKPT / "config.json")
    for key, value in change.items():
        cfg.pop(key, None) if value is None else cfg.__setitem__(key, value)
    return cfg


def checkpoint(where: Path, **change) -> Path:
    return variant(where, CKPT, **change)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def target(tmp_path) -> Path:
    return Path(shutil.copytree(TARGET, tmp_path / "t"))


@pytest.mark.parametrize("change, named", [
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 1, 2]}}, SGLANG),
    ({"eagle_config": None, "eagle_aux_hidden_state_layer_ids": [2, 3, 2]}, "eagle_aux_hidden_state_layer_ids"),
    ({"eagle_config": None, "architectures": [layout.ANGELSLIM], "aux_hidden_states_layer_ids": [0, 2, 0]},
     "aux_hidden_states_layer_ids"),
])
def test_a_layer_named_twice_in_the_config_is_refused_before_anything_is_written(tmp_path, target, change, named):
    ckpt = checkpoint(tmp_path / "ckpt", **change)
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 1, result.output
    assert f"{named} [" in result.output and "twice" in result.output and "three distinct layers" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert snapshot(target) == before


def test_a_trainer_default_that_repeats_on_a_small_target_is_refused_naming_it_and_the_way_out(tmp_path, target):
    """SafeAILab's default [1, N//2 - 1, N - 4] is [1, 1, 0] on this 4-layer target."""
    ckpt = checkpoint(tmp_path / "ckpt", eagle_config=None)
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 1, result.output
    assert "the default of LlamaForCausalLMEagle3's trainer for a 4-layer target, [1, 1, 0], names layer 1 twice" \
        in result.output
    assert "--hidden-layers" in result.output
    assert snapshot(target) == before
    chosen = invoke("patch", target, "--checkpoint", ckpt, "--hidden-layers", "0,1,3")
    assert chosen.exit_code == 0, chosen.output
    assert recorded_taps(target / DRAFT_XML) == (0, 1, 3)


@pytest.mark.parametrize("value, said", [("1,1,1", "names a layer twice"), ("9,9,9", "names a layer twice"),
                                         ("-1,0,1", "three non-negative integers"),
                                         ("1,2", "three non-negative integers"),
                                         ("a,b,c", "three non-negative integers")])
def test_hidden_layers_that_are_not_three_distinct_indices_are_usage_errors_naming_the_option(target, value, said):
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", value)
    assert result.exit_code == 2, result.output
    assert "--hidden-layers" in result.output and said in result.output
    assert snapshot(target) == before


def test_the_python_api_refuses_repeated_hidden_layers(target):
    from irsurgeon import Options, patch_directory

    before = snapshot(target)
    with pytest.raises(ConfigError, match=r"hidden layers \[2, 1, 2\] name layer 2 twice"):
        patch_directory(target, CKPT, options=Options(hidden_layers=(2, 1, 2)))
    assert snapshot(target) == before


def test_hidden_layers_are_recorded_in_layer_order_and_said_so(target):
    result = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "3,0,1")
    assert result.exit_code == 0, result.output
    assert "taps [0, 1, 3] (as asked, in layer order)" in result.output
    assert recorded_taps(target / DRAFT_XML) == (0, 1, 3)
    same = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "1,3,0")
    assert same.exit_code == 0 and "nothing to do" in same.output, same.output


def test_config_ids_follow_the_order_their_trainer_fed_them_in():
    sglang = eagle3.parse_config(config(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 0, 1]}))
    assert sglang.taps.ids == (0, 1, 2) and "in layer order" in sglang.taps.said
    vllm = eagle3.parse_config(config(eagle_config=None, eagle_aux_hidden_state_layer_ids=[3, 1, 2]))
    assert vllm.taps.ids == (0, 1, 2)  # inputs of layers 3, 1, 2: outputs of 2, 0, 1, captured in layer order
    angelslim = eagle3.parse_config(config(eagle_config=None, architectures=[layout.ANGELSLIM],
                                           aux_hidden_states_layer_ids=[2, 0, 1]))
    assert angelslim.taps.ids == (2, 0, 1) and "layer order" not in angelslim.taps.said


def test_verify_refuses_a_draft_whose_recorded_taps_repeat_a_layer(target):
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    xml = target / DRAFT_XML
    text = xml.read_text()
    assert text.count('<hidden_layers_list value="0 1 2" />') == 1
    xml.write_text(text.replace('<hidden_layers_list value="0 1 2" />', '<hidden_layers_list value="0 1 1" />'))
    result = invoke("verify", target)
    assert result.exit_code == 1 and "hidden_layers_list [0, 1, 1] names layer 1 twice" in result.output, \
        result.output


def test_hidden_layers_on_a_moe_target_edit_and_verify_the_recorded_taps(tmp_path):
    """The config names [0, 1, 2]; asked for [1, 2, 3], patch edits layers 1..3 and its own verify (and a later one)
    checks those, not the config's (layer 0 stays a MoE layer genai cannot tap)."""
    target = Path(shutil.copytree(MOE, tmp_path / "moe"))
    result = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "1,2,3")
    assert result.exit_code == 0, result.output
    assert recorded_taps(target / DRAFT_XML) == (1, 2, 3)
    found = inspect_target(target)
    assert {1, 2, 3} <= found.tappable and 0 not in found.tappable
    assert invoke("verify", target).exit_code == 0


@pytest.mark.parametrize("change, said", [
    ({"norm_before_residual": "false"}, 'norm_before_residual must be true or false, found "false"'),
    ({"norm_before_fc": "no"}, 'norm_before_fc must be true or false, found "no"'),
    ({"head_dim": 15}, "head_dim is 15: RoPE rotates pairs"),
    ({"head_dim": 0}, "head_dim = 0 is out of range"),
    ({"head_dim": None, "hidden_size": 66, "num_attention_heads": 4}, "hidden_size 66 is not a multiple of "
                                                                      "num_attention_heads 4"),
    ({"head_dim": None, "hidden_size": 66, "num_attention_heads": 2}, "head_dim is 33"),
])
def test_config_values_of_the_wrong_type_or_shape_are_refused_naming_the_key(change, said):
    with pytest.raises(ConfigError, match="^config.json: ") as caught:
        eagle3.parse_config(config(**change))
    assert said in str(caught.value)


def test_norm_before_residual_false_builds_as_false_and_true_as_true():
    assert eagle3.parse_config(config(norm_before_residual=False)).norm_before_residual is False
    assert eagle3.parse_config(config(norm_before_residual=True)).norm_before_residual is True


def test_the_pair_check_refuses_repeated_taps_from_any_source():
    target = inspect_target(TARGET)
    cfg = eagle3.parse_config(config())
    with pytest.raises(IRSurgeonError, match="name layer 0 twice"):
        check_pair(target, cfg, override=(0, 0, 1))
    default = eagle3.parse_config(config(eagle_config=None))
    with pytest.raises(IRSurgeonError, match=r"\[1, 1, 0\], names layer 1 twice"):
        check_pair(target, default)


def test_two_tap_keys_that_disagree_are_said_and_the_trainers_own_key_is_read():
    both = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}, "eagle_aux_hidden_state_layer_ids": [2, 3, 4]}
    sglang = eagle3.parse_config(config(**both))  # LlamaForCausalLMEagle3: SpecForge reads eagle_config's
    assert sglang.taps.ids == (0, 1, 2)
    assert any("eagle_aux_hidden_state_layer_ids [2, 3, 4] not read: eagle_config.eagle_aux_hidden_state_layer_ids "
               "[0, 1, 2] is the key LlamaForCausalLMEagle3's trainer reads" in w for w in sglang.warnings), \
        sglang.warnings
    agree = eagle3.parse_config(config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
                                       eagle_aux_hidden_state_layer_ids=[1, 2, 3]))
    assert not [w for w in agree.warnings if "not read" in w]


@pytest.mark.parametrize("model_type", ["gemma4_text", "gpt2", None])
def test_a_target_show_does_not_call_an_eagle3_target_is_refused_by_patch_and_verify_alike(tmp_path, model_type):
    """One rule (layout.target_type_problem) for show, patch and verify: an export of another model type is refused
    before anything is written, and its openvino_model.xml is never edited."""
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    config = json.loads((target / "config.json").read_text())
    config.pop("model_type") if model_type is None else config.__setitem__("model_type", model_type)
    (target / "config.json").write_text(json.dumps(config))
    before = snapshot(target)
    assert not layout.is_text_target(target)
    result = invoke("patch", target, "--checkpoint", CKPT)
    assert result.exit_code == 1 and f"model_type {model_type!r} is not an EAGLE-3 target" in result.output, \
        result.output
    assert snapshot(target) == before


def test_hidden_layers_of_an_angelslim_draft_keep_the_order_given(tmp_path, target):
    """AngelSlim's trainer concatenates the states in its list's order, so the order given is the draft's input."""
    ckpt = checkpoint(tmp_path / "a", eagle_config=None, architectures=[layout.ANGELSLIM],
                      aux_hidden_states_layer_ids=[2, 0, 1])
    assert invoke("patch", target, "--checkpoint", ckpt).exit_code == 0
    assert recorded_taps(target / DRAFT_XML) == (2, 0, 1)
    same = invoke("patch", target, "--checkpoint", ckpt, "--hidden-layers", "2,0,1")
    assert same.exit_code == 0 and "nothing to do" in same.output, same.output
    other = invoke("patch", target, "--checkpoint", ckpt, "--hidden-layers", "0,1,2")
    assert other.exit_code == 0 and recorded_taps(target / DRAFT_XML) == (0, 1, 2), other.output


@pytest.mark.parametrize("value, ok", [((np.int64(0), np.int32(1), 3), True), ([3, 1, 0], True), (158, False),
                                       ((True, 1, 2), False), ((0, 1, 2.0), False), ("0,1,2", False)])
def test_the_python_api_takes_any_three_integers_and_refuses_the_rest_in_one_line(target, value, ok):
    from irsurgeon import Options, patch_directory

    if ok:
        result = patch_directory(target, CKPT, options=Options(hidden_layers=value))
        assert recorded_taps(target / DRAFT_XML) == tuple(sorted(int(i) for i in value)), result
        return
    before = snapshot(target)
    with pytest.raises(ConfigError, match="hidden layers .*expected three non-negative layer indices"):
        patch_directory(target, CKPT, options=Options(hidden_layers=value))
    assert snapshot(target) == before


def test_verify_refuses_recorded_taps_out_of_the_order_the_trainer_fed_them(target):
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    xml = target / DRAFT_XML
    xml.write_text(xml.read_text().replace('<hidden_layers_list value="0 1 2" />', '<hidden_layers_list value="1 0 2" />'))
    result = invoke("verify", target)
    assert result.exit_code == 1 and "hidden_layers_list [1, 0, 2] is out of layer order" in result.output, \
        result.output
