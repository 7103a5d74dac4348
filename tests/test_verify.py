"""verify's offline checks of the files openvino-genai reads beside the IRs, and patch's check of the same files:
openvino_config.json judged alike by both (one line naming the file and what is wrong, nothing changed), and every
generation_config.json of a directory (the target's and an assistant's) refused by key where openvino-genai would
refuse it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers.cli import invoke, refused
from helpers.gemma4 import copy_pair
from lab.demo import DEMO_CKPT, DEMO_TARGET, writable_copy
from irsurgeon.core.errors import ConfigError


@pytest.fixture(scope="module")
def patched_gemma4(tmp_path_factory) -> Path:
    target, assistant = copy_pair(tmp_path_factory.mktemp("patched-gemma4"))
    result = invoke("patch", target, "--checkpoint", assistant)
    assert result.exit_code == 0, result.output
    return target


# --- openvino_config.json of a patched directory: the check patch makes -------------------------------------------

OPENVINO_CONFIGS = {
    "not-utf8": (b'{"a": "\xff\xfe"}', "not UTF-8 text"),
    "deep": (b'{"a":' * 70 + b"1" + b"}" * 70, "nested deeper than 64 levels"),
    "bits-string": (json.dumps({"quantization_config": {"quantization_configs": {"lm_model": {"bits": "4"}}}})
                    .encode(), "quantization_configs.lm_model: bits must be 4 or 8, found a string"),
    "group-size-0": (json.dumps({"quantization_config": {"quantization_configs": {"lm_model": {
        "bits": 4, "group_size": 0}}}}).encode(), "group size 0 is impossible"),
    "ratio-0": (json.dumps({"quantization_config": {"quantization_configs": {"lm_model": {
        "bits": 4, "ratio": 0}}}}).encode(), "ratio 0.0 is out of range"),
}


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("form", OPENVINO_CONFIGS)
def test_verify_and_patch_judge_openvino_config_json_alike(patched_demo, tmp_path, form):
    data, words = OPENVINO_CONFIGS[form]
    patched, unpatched = tmp_path / "patched", writable_copy(DEMO_TARGET, tmp_path / "unpatched")
    shutil.copytree(patched_demo, patched)
    for d in (patched, unpatched):
        (d / "openvino_config.json").write_bytes(data)
    fresh = refused(("patch", unpatched, "--checkpoint", DEMO_CKPT), unpatched)
    again = refused(("patch", patched, "--checkpoint", DEMO_CKPT), patched)
    assert words in fresh and again == fresh.replace(str(unpatched), str(patched))
    result = invoke("verify", patched)
    assert result.exit_code == 1 and f"FAIL openvino config: {patched / 'openvino_config.json'}: " in result.output
    assert words in result.output


@pytest.mark.usefixtures("no_hang")
def test_a_sound_openvino_config_json_is_a_passing_check(patched_demo, tmp_path):
    patched = tmp_path / "patched"
    shutil.copytree(patched_demo, patched)
    (patched / "openvino_config.json").write_text(json.dumps({"quantization_config": {"quantization_configs": {
        "lm_model": {"bits": 4, "sym": False, "group_size": 32, "ratio": 1.0}}}}))
    result = invoke("verify", patched)
    assert "ok   openvino config: " in result.output and "lm_model int4" in result.output, result.output


# --- generation_config.json of every folder genai reads, checked offline -------------------------------------------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("name", ["generation_config.json", "mtp_assistant/generation_config.json"])
@pytest.mark.parametrize("data, words", [(b'{"eos_token_id": -1}', "eos_token_id must be a non-negative token id"),
                                         (b'{"a": "\xff"}', "not UTF-8 text")])
def test_offline_verify_checks_every_generation_config(patched_gemma4, tmp_path, name, data, words):
    target = tmp_path / "t"
    shutil.copytree(patched_gemma4, target)
    (target / name).write_bytes(data)
    result = invoke("verify", target)
    assert result.exit_code == 1 and f"FAIL generation config: {target / name}: {words}" in result.output, \
        result.output


@pytest.mark.usefixtures("no_hang")
def test_offline_verify_names_the_generation_configs_it_checked(patched_gemma4):
    result = invoke("verify", patched_gemma4)
    assert result.exit_code == 0, result.output
    assert "ok   generation config: generation_config.json, mtp_assistant/generation_config.json" in result.output


# --- generation_config.json: what openvino-genai refuses, verify refuses, by key ----------------------------------

GENERATION_VALUES = {  # text in generation_config.json -> the key refused (None: openvino-genai reads it)
    '{"temperature": "hot"}': "temperature", '{"do_sample": "false"}': "do_sample", '{"max_length": "x"}':
    "max_length", '{"top_k": true}': "top_k", '{"echo": 1}': "echo", '{"top_p": {}}': "top_p",
    '{"num_assistant_tokens": 1.5}': "num_assistant_tokens", '{"stop_strings": [1]}': "stop_strings",
    '{"temperature": 1e400}': "a number", '{"top_p": NaN}': "a number", '{"x": [-Infinity]}': "a number",
    '{"temperature": true}': None, '{"max_new_tokens": 1.5}': None, '{"num_beams": [3]}': None,
    '{"stop_strings": ["</s>"]}': None, '{"repetition_penalty": null}': None, '{"early_stopping": "never"}': None,
}


@pytest.mark.parametrize("text", list(GENERATION_VALUES))
def test_a_generation_config_openvino_genai_refuses_is_refused_naming_the_key(tmp_path, text):
    """verify said 'readable JSON, token ids in range' of these, and verify --genai then stopped on openvino-genai's
    '[json.exception.type_error.302] type must be number, but is string', naming neither file nor key. Each
    verdict is also openvino-genai's own (its GenerationConfig reads the file as the pipelines do)."""
    import openvino_genai

    from irsurgeon.core.config import check_generation_config

    path = tmp_path / "generation_config.json"
    path.write_text(text)
    key = GENERATION_VALUES[text]
    try:
        openvino_genai.GenerationConfig(str(path))
        genai_refuses = False
    except RuntimeError:
        genai_refuses = True
    assert genai_refuses == (key is not None)
    if key is None:
        check_generation_config(path)
        return
    with pytest.raises(ConfigError) as e:
        check_generation_config(path)
    assert str(path) in str(e.value) and key in str(e.value) and "\n" not in str(e.value), e.value


@pytest.mark.parametrize("family", ["qwen3_5", "eagle3"])
def test_an_eos_token_outside_the_vocabulary_is_not_called_in_range(tmp_path, family):
    """verify said 'token ids in range' of an eos_token_id the model can never generate; now it names the id and the
    vocabulary it lies outside (config.json vocab_size), and a good file says which vocabulary it was checked
    against."""
    import json
    import shutil

    from helpers.cli import invoke
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.core.config import vocabulary_of

    target, ckpt = FIXTURE_PAIRS[family]
    target = Path(shutil.copytree(target, tmp_path / "t"))
    assert invoke("patch", target, "--checkpoint", ckpt).exit_code == 0
    vocab = vocabulary_of(target / "config.json")
    ok = invoke("verify", target)
    assert ok.exit_code == 0 and f"token ids within the vocabulary of {vocab}" in ok.output, ok.output
    generation = json.loads((target / "generation_config.json").read_text())
    eos = generation.get("eos_token_id")
    generation["eos_token_id"] = [*(eos if isinstance(eos, list) else [eos] if eos is not None else []), vocab + 5]
    (target / "generation_config.json").write_text(json.dumps(generation))
    bad = invoke("verify", target)
    assert bad.exit_code == 1 and f"eos_token_id {vocab + 5} is outside the vocabulary of {vocab} tokens" \
        in bad.output, bad.output
