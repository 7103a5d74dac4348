"""The DFlash family on the house's protocol: what it claims and recognises, the pair check's one-line refusals
(before any weight is read), the annotation it stages (optimum-intel's own, byte for byte in value), what verify
rejects. openvino-genai's DFlash path on the patched pairs: test_dflash_genai.py."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from helpers.cli import invoke, one_error, refused
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import ConfigError
from irsurgeon.families import registry
from irsurgeon.draft.protocol import Match
from irsurgeon.families.dflash import FAMILY
from irsurgeon.flows.verify import verify_directory

TARGET, CKPT = FIXTURE_PAIRS["dflash"]
OPTIMUM = TARGET.parents[2] / "tests" / "data" / "dflash" / "base" / "optimum"
ANNOTATION = re.compile(r'hidden_states_decoder_layers value="([^"]*)"')


def test_claims_dflash_configs_and_never_a_plain_qwen3_one():
    assert FAMILY.claims(read_json(CKPT / "config.json"))
    assert FAMILY.claims({"model_type": "qwen3", "dflash_config": {}})
    target_config = read_json(TARGET / "config.json")
    assert not FAMILY.claims(target_config) and not any(f.claims(target_config) for f in registry.FAMILIES)
    with pytest.raises(ConfigError, match="no supported draft family"):
        registry.for_config(target_config, "config.json")


def test_recognition(tmp_path):
    assert FAMILY.recognise(TARGET) is Match.TARGET
    assert FAMILY.recognise(TARGET.parents[1] / "qwen3_5" / "target") is Match.NONE  # Qwen3.5 VLM: the MTP family's
    assert FAMILY.recognise(TARGET.parents[1] / "gemma4" / "target") is Match.NONE
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    (target / "dflash_draft").mkdir()
    assert FAMILY.recognise(target) is Match.DRAFT and registry.for_directory(target) is FAMILY


def test_a_llama_text_export_is_a_dflash_target_on_purpose(tmp_path):
    """layout.TARGET_TYPES: z-lab publishes a LLaMA-3.1-8B-Instruct draft and genai's DFlash path reads no model type,
    so a Llama text export is patched (annotated, its last layer the post-final-norm tensor) and verified. Bare, the
    export stays EAGLE-3's in `show` (DFlash recognises a bare qwen3 export only); patched, it is DFlash's."""
    parts = FAMILY.synth("dflash-llama", tmp_path / "pair", 0, False)
    target, ckpt = parts["target"], parts["ckpt"]
    assert read_json(target / "config.json")["model_type"] == "llama"
    assert registry.for_directory(target).key == "eagle3"
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    assert "annotated 2 decoder layers" in result.output
    assert registry.for_directory(target) is FAMILY
    checks = {c.name: c for c in verify_directory(target, ckpt)}
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert "post-final-norm" in checks["hidden-state annotation"].detail


@pytest.mark.parametrize("model_type, words", [
    ("gemma4", "model_type 'gemma4' is not a DFlash target irsurgeon patches (it takes qwen3, qwen3_moe, llama, "
               "qwen3_5, qwen3_5_moe, gemma4_text, gpt_oss"),
    ("mistral", "model_type 'mistral' is not a DFlash target"),
    ("qwen3_5", "model_type qwen3_5 is a DFlash target as openvino_language_model.xml, this directory's IR is "
                "openvino_model.xml"),
])
def test_a_target_of_another_model_type_is_refused_in_one_line_naming_it(tmp_path, model_type, words):
    target = shutil.copytree(TARGET, tmp_path / "t")
    config = read_json(target / "config.json")
    config["model_type"] = model_type
    (target / "config.json").write_text(json.dumps(config))
    error = refused(("patch", target, "--checkpoint", CKPT), target)
    assert f"{target / 'config.json'}: {words}" in error, error


def variant(tmp_path, **changes):
    """The fixture checkpoint with config.json keys changed (dflash_config.* for the nested ones)."""
    out = tmp_path / "ckpt"
    shutil.copytree(CKPT, out)
    cfg = read_json(out / "config.json")
    for key, value in changes.items():
        if key in ("mask_token_id", "target_layer_ids"):
            cfg["dflash_config"][key] = value
        else:
            cfg[key] = value
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.parametrize("changes, words", [
    ({"mask_token_id": 64}, "mask_token_id 64 is not a row of the target's vocabulary of 64"),
    ({"num_target_layers": 6, "target_layer_ids": [1, 5]}, "name layer 5, the target has 4 decoder layers"),
    ({"num_target_layers": 6}, "num_target_layers is 6, the target has 4"),
    ({"hidden_size": 48}, "hidden_size is 48, the target has 32"),
])
def test_a_draft_for_another_target_is_refused_in_one_line_naming_the_key(tmp_path, changes, words):
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    before = snapshot(target)
    error = one_error(invoke("patch", target, "--checkpoint", variant(tmp_path, **changes)))
    assert "does not belong to target" in error and words in error, error
    assert snapshot(target) == before


def test_patch_stages_optimums_own_annotation_and_the_draft_it_reads(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    result = invoke("patch", target, "--checkpoint", CKPT)
    assert result.exit_code == 0, result.output
    assert "only its geometry" in result.output
    ours = ANNOTATION.search((target / "openvino_model.xml").read_text()).group(1)
    assert ours == ANNOTATION.search((OPTIMUM / "target" / "openvino_model.xml").read_text()).group(1)
    assert (target / "openvino_model.bin").read_bytes() == (TARGET / "openvino_model.bin").read_bytes()
    import openvino as ov
    draft = ov.Core().read_model(str(target / "dflash_draft" / "openvino_model.xml"))
    assert draft.get_rt_info(["runtime_options", "KV_CACHE_PRECISION"]).value == "f16"
    assert draft.get_rt_info(["runtime_options", "ACTIVATIONS_SCALE_FACTOR"]).value == "8.0"
    assert draft.get_rt_info(["dflash", "target_layer_ids"]).value == "1,3"
    assert all(c.ok for c in verify_directory(target, CKPT))


def test_verify_rejects_a_target_whose_last_layer_is_the_pre_norm_tensor(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(TARGET, target)
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    xml = target / "openvino_model.xml"
    text = xml.read_text()
    value = ANNOTATION.search(text).group(1)  # layer 3 made the pre-norm residual: a name pattern's pick
    xml.write_text(text.replace(value, value.replace("__module.model.norm/aten::mul/Multiply_1",
                                                     "__module.model.layers.3/aten::add/Add_1")))
    failed = {c.name: c.detail for c in verify_directory(target) if not c.ok}
    assert "post-final-norm" in failed.get("hidden-state annotation", ""), failed
    xml.write_text(ANNOTATION.sub('hidden_states_decoder_layers value="x"', xml.read_text()).replace(
        '<hidden_states_decoder_layers value="x" />', ""))
    failed = {c.name: c.detail for c in verify_directory(target) if not c.ok}
    assert failed.get("hidden-state annotation", "").startswith("absent"), failed


@pytest.mark.parametrize("key, value", [("mask_token_id", 3), ("block_size", 8)])
def test_verify_checkpoint_names_another_checkpoint_of_the_same_geometry(tmp_path, key, value):
    """A checkpoint that fits the target but is not the one the draft was built from (another mask token, another
    block size: another draft) is not this directory's: --checkpoint says so, naming the value."""
    source, ckpt = FIXTURE_PAIRS["dflash"]
    target = shutil.copytree(source, tmp_path / "t")
    assert invoke("patch", target, "--checkpoint", ckpt).exit_code == 0
    same = {c.name: c for c in verify_directory(target, checkpoint=ckpt)}
    assert same["checkpoint pair"].ok, same["checkpoint pair"]
    other = shutil.copytree(ckpt, tmp_path / "other")
    config = read_json(other / "config.json")
    where = config.get("dflash_config") if key == "mask_token_id" and "dflash_config" in config else config
    assert where.get(key) != value
    where[key] = value
    (other / "config.json").write_text(json.dumps(config))
    checks = {c.name: c for c in verify_directory(target, checkpoint=other)}
    assert not checks["checkpoint pair"].ok and key in checks["checkpoint pair"].detail, checks["checkpoint pair"]
