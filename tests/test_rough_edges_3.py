"""What a person typing the command expects, where it used to surprise (continued from test_rough_edges.py): each
case once typed, once answered badly; each answer now one line naming the file and key, nothing changed on disk."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import invoke, no_hang, one_error  # noqa: F401  (no_hang: an autouse fixture)
from lab.demo import DEMO_CKPT, DEMO_TARGET, patch_demo, sharded_demo_ckpt, writable_copy
from lab.dirsnap import snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS, fixture_pair
from helpers.gemma4 import copy_pair
from irsurgeon.core.errors import ConfigError
from irsurgeon.families import registry


def edit_json(path: Path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))


def refused(args, *unchanged: Path) -> str:
    """The one Error: line of a refused command, which changed nothing in `unchanged`."""
    before = [snapshot(d) for d in unchanged]
    line = one_error(invoke(*args))
    assert [snapshot(d) for d in unchanged] == before, line
    return line


@pytest.fixture(scope="module")
def patched_demo(tmp_path_factory) -> Path:
    return patch_demo(tmp_path_factory.mktemp("patched") / "demo")


@pytest.fixture(scope="module")
def patched_gemma4(tmp_path_factory) -> Path:
    target, assistant = copy_pair(tmp_path_factory.mktemp("patched-gemma4"))
    result = invoke("patch", target, "--checkpoint", assistant)
    assert result.exit_code == 0, result.output
    return target


# --- 1. a model_type that is not a string ---------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_a_target_model_type_that_is_not_a_string_is_refused_by_every_command(family, tmp_path):
    target, ckpt = fixture_pair(family, tmp_path)
    kind = json.loads((target / "config.json").read_text())["model_type"]
    edit_json(target / "config.json", model_type=[kind])
    expected = f"{target / 'config.json'}: model_type must be a string, found [\"{kind}\"]"
    for args in (("patch", target, "--checkpoint", ckpt), ("verify", target), ("show", target)):
        assert expected in refused(args, target), args


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_model_type_that_is_not_a_string_is_refused(family, tmp_path):
    target, source = fixture_pair(family, tmp_path)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(source, ckpt)
    edit_json(ckpt / "config.json", model_type=[json.loads((source / "config.json").read_text())["model_type"]])
    line = refused(("patch", target, "--checkpoint", ckpt), target)
    assert f"{ckpt / 'config.json'}: model_type must be a string, found [" in line


def test_a_text_config_model_type_that_is_not_a_string_is_refused(tmp_path):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    config = json.loads((target / "config.json").read_text())
    config["text_config"]["model_type"] = {"a": 1}
    (target / "config.json").write_text(json.dumps(config))
    line = refused(("verify", target), target)
    assert 'config.json: text_config.model_type must be a string, found {"a": 1}' in line


# --- 2. a checkpoint shard that is not a regular file ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_embedding_shard_that_is_not_a_regular_file_is_refused_by_name(tmp_path, kind):
    ckpt = sharded_demo_ckpt(tmp_path / "ckpt")
    shard = ckpt / "model-1.safetensors"  # the token embeddings; the mtp.* tensors are in model-2
    shard.unlink()
    os.mkfifo(shard) if kind == "fifo" else shard.mkdir()
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    expected = f"{shard}: is {what}; expected a regular file"
    assert expected in refused(("patch", target, "--checkpoint", ckpt), target)
    result = invoke("verify", target, "--checkpoint", ckpt)
    assert result.exit_code == 1 and f"FAIL checkpoint identity: {expected}" in result.output, result.output


# --- 3. openvino_config.json of a patched directory: the check patch makes ----------------------------------------

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


def test_a_sound_openvino_config_json_is_a_passing_check(patched_demo, tmp_path):
    patched = tmp_path / "patched"
    shutil.copytree(patched_demo, patched)
    (patched / "openvino_config.json").write_text(json.dumps({"quantization_config": {"quantization_configs": {
        "lm_model": {"bits": 4, "sym": False, "group_size": 32, "ratio": 1.0}}}}))
    result = invoke("verify", patched)
    assert "ok   openvino config: " in result.output and "lm_model int4" in result.output, result.output


# --- 4. generation_config.json of every folder genai reads, checked offline ----------------------------------------

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


def test_offline_verify_names_the_generation_configs_it_checked(patched_gemma4):
    result = invoke("verify", patched_gemma4)
    assert result.exit_code == 0, result.output
    assert "ok   generation config: generation_config.json, mtp_assistant/generation_config.json" in result.output


# --- 5. booleans of config.json ---------------------------------------------------------------------------------------

def checkpoint_config(family: str, path: str, value) -> dict:
    """The family's bundled checkpoint config.json with the value at dotted `path` replaced."""
    cfg = json.loads((FIXTURE_PAIRS[family][1] / "config.json").read_text())
    *parents, key = path.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[key] = value
    return cfg


@pytest.mark.parametrize("key, value", [
    ("use_ordered_embeddings", "false"), ("tie_word_embeddings", "true"), ("tie_word_embeddings", 1),
    ("text_config.attention_k_eq_v", "false"), ("text_config.enable_moe_block", "false"),
    ("text_config.use_double_wide_mlp", 0),
])
def test_gemma4_assistant_booleans_must_be_true_or_false(key, value):
    parse = registry.by_key("gemma4").recipe().parse_config
    with pytest.raises(ConfigError) as e:
        parse(checkpoint_config("gemma4", key, value), "config.json")
    assert str(e.value) == f"config.json: {key} must be true or false, found {json.dumps(value)}"


@pytest.mark.parametrize("family, key, value", [
    ("qwen3_5", "text_config.attention_bias", 1), ("qwen3_5", "text_config.mtp_use_dedicated_embeddings", "false"),
    ("dflash", "attention_bias", "false"), ("dflash", "use_sliding_window", "true"),
])
def test_every_family_refuses_a_boolean_that_is_not_one(family, key, value):
    with pytest.raises(ConfigError) as e:
        registry.by_key(family).recipe().parse_config(checkpoint_config(family, key, value), "config.json")
    assert str(e.value) == f"config.json: {key} must be true or false, found {json.dumps(value)}"


def test_a_gemma4_target_boolean_that_is_not_one_is_refused(tmp_path):
    target, assistant = copy_pair(tmp_path)
    edit_json(target / "config.json", attention_k_eq_v="false")
    line = refused(("patch", target, "--checkpoint", assistant), target)
    assert line.endswith(f"{target / 'config.json'}: attention_k_eq_v must be true or false, found \"false\"")


# --- 6. a target config file that is not a regular file -------------------------------------------------------------

def not_regular(path: Path, kind: str) -> None:
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_gemma4_target_generation_config_that_is_not_a_file_is_refused(tmp_path, kind):
    target, assistant = copy_pair(tmp_path)
    not_regular(target / "generation_config.json", kind)
    line = refused(("patch", target, "--checkpoint", assistant), target)
    assert f"{target / 'generation_config.json'}: is a" in line and "expected a regular file" in line


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_annotate_refuses_a_config_json_that_is_not_a_file(tmp_path, kind):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    not_regular(target / "config.json", kind)
    line = refused(("annotate", target), target)
    assert f"{target / 'config.json'}: is a" in line and "expected a regular file" in line


# --- 7. show --json: one form of a port, for an IR and for a directory ---------------------------------------------

def test_show_json_spells_ports_alike_for_an_ir_and_for_its_directory(patched_demo):
    def document(path):
        result = invoke("show", path, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    directory = {e["file"]: e for e in document(patched_demo)["irs"]}
    for name in ("openvino_language_model.xml", "openvino_mtp_model.xml"):
        ir = document(patched_demo / name)
        for key in ("inputs", "outputs", "states"):
            assert ir[key] == directory[name][key], (name, key)
        assert all(isinstance(p["dtype"], str) and isinstance(p["shape"], list) for p in ir["inputs"])
    assert [None, None, 64] in [p["shape"] for p in directory["openvino_mtp_model.xml"]["inputs"]]


def test_show_text_of_an_ir_keeps_the_bracket_shapes(patched_demo):
    result = invoke("show", patched_demo / "openvino_mtp_model.xml")
    assert result.exit_code == 0 and "inputs_embeds" in result.output and "[?,?,64]" in result.output


# --- 8. synth over an earlier synth output -------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_synth_force_replaces_an_earlier_synth_output(tmp_path, family):
    kind = next(iter(family.synth_kinds))
    first, again, fresh = tmp_path / "first", tmp_path / "again", tmp_path / "fresh"
    for out, seed in ((first, 0), (again, 0), (fresh, 1)):
        assert invoke("synth", out, "--kind", kind, "--seed", seed).exit_code == 0
    result = invoke("synth", again, "--kind", kind, "--seed", 1, "--force")
    assert result.exit_code == 0, result.output
    assert snapshot(again) == snapshot(fresh) != snapshot(first)


def test_synth_without_force_refuses_an_earlier_output_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert invoke("synth", out, "--kind", "gemma4").exit_code == 0
    before = snapshot(out)
    family = registry.synth_kinds()["gemma4"]
    monkeypatch.setattr(type(family), "synth", lambda *a, **k: pytest.fail("synth ran"))
    line = one_error(invoke("synth", out, "--kind", "gemma4", "--seed", 1))
    assert line == f"Error: {out / 'target'}: exists and is not empty (--force replaces {out / 'target'}/ and " \
                   f"{out / 'ckpt'}/)"
    assert snapshot(out) == before


# --- 9. Ctrl-C once the commit is done ---------------------------------------------------------------------------

def interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_during_the_check_after_the_commit_says_the_patch_is_complete(tmp_path, monkeypatch):
    import irsurgeon.flows.patch as flow

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    monkeypatch.setattr(flow, "confirm", interrupt)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 130 and lines == [
        f"Error: interrupted: {target}: the patch is complete (committed openvino_mtp_model.bin, "
        f"openvino_mtp_model.xml, openvino_language_model.xml); the check of it after the commit was interrupted: "
        f"irsurgeon verify {target} runs it"], result.output
    monkeypatch.undo()
    assert invoke("verify", target).exit_code == 0


def test_ctrl_c_held_through_the_commit_says_the_patch_is_complete(tmp_path, monkeypatch):
    from irsurgeon.commit.transaction import DirectoryTransaction

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    commit = DirectoryTransaction.commit

    def commit_then_ctrl_c(self):  # as _deferred_sigint re-delivers a Ctrl-C held while the commit ran
        commit(self)
        raise KeyboardInterrupt
    monkeypatch.setattr(DirectoryTransaction, "commit", commit_then_ctrl_c)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    assert result.exit_code == 130 and "the patch is complete (committed " in result.stderr, result.output


def test_ctrl_c_before_the_commit_is_a_plain_interruption(tmp_path, monkeypatch):
    from irsurgeon.commit.transaction import DirectoryTransaction

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    before = snapshot(target)
    monkeypatch.setattr(DirectoryTransaction, "commit", interrupt)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    assert result.exit_code == 130 and result.stderr.strip() == "Error: interrupted" and snapshot(target) == before


# --- 10. tokenizer IRs hold vocabulary tables, not weights ---------------------------------------------------------

@pytest.mark.parametrize("key", ["qwen3_5", "gemma4"])
def test_show_says_what_a_tokenizer_ir_is_instead_of_a_weight_format(key):
    target = FIXTURE_PAIRS[key][0]
    result = invoke("show", target, "--json")
    assert result.exit_code == 0, result.output
    entries = {e["file"]: e for e in json.loads(result.stdout)["irs"]}
    for name, what in (("openvino_tokenizer.xml", "tokenizer"), ("openvino_detokenizer.xml", "detokenizer")):
        entry = entries[name]
        assert entry["weights"]["precision"] is None and entry["weights"]["count"] == 0, entry["weights"]
        assert entry["summary"].endswith(f"; {what}: string ops over vocabulary tables, no weights"), entry["summary"]
        assert "int8" not in entry["summary"]
    text = invoke("show", target).output
    assert "int8_sym" not in text and "detokenizer: string ops over vocabulary tables, no weights" in text


# --- 11. the KV cache precision the speed runs asked for and ran with ---------------------------------------------

def test_the_speed_table_states_the_kv_precision_once():
    from irsurgeon.cli.verify import speed_table

    speed = {"device": "CPU", "device_defaults": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8"},
             "kv_precision": {"target": "f16", "draft": "f16"},
             "kv_precision_source": {"target": "rt_info runtime_options", "draft": "rt_info runtime_options"},
             "equivalence_properties": {"INFERENCE_PRECISION_HINT": "f32"}, "measurements": [],
             "memory_method": "m", "kv_method": "k", "verdict": "v"}
    lines = speed_table(speed)
    assert lines[:2] == [
        "speed on CPU at the device's default INFERENCE_PRECISION_HINT=f32; KV cache target=f16 draft=f16, as the "
        "IRs' rt_info runtime_options set it (the device's own default, KV_CACHE_PRECISION=u8, applies to an IR that "
        "sets none)",
        "equivalence above ran at INFERENCE_PRECISION_HINT=f32"]
    speed["kv_precision"] = {"target": "u8", "draft": "u8"}
    speed["kv_precision_source"] = {"target": "device default", "draft": "device default"}
    assert speed_table(speed)[0] == ("speed on CPU at the device's default INFERENCE_PRECISION_HINT=f32; KV cache "
                                     "target=u8 draft=u8, the device default")


# --- a --checkpoint or --json that cannot be what was meant, refused before any check or note ----------------------

@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.key)
def test_the_target_given_as_its_own_checkpoint_is_one_line_before_any_note(family, tmp_path):
    target = Path(shutil.copytree(FIXTURE_PAIRS[family.key][0], tmp_path / "t"))
    line = refused(["patch", target, "--checkpoint", target], target)
    assert "is the target directory itself" in line


def test_a_checkpoints_config_json_given_as_the_checkpoint_is_named_as_not_safetensors(tmp_path):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    line = refused(["patch", target, "--checkpoint", DEMO_CKPT / "config.json"], target)
    assert "config.json: not a .safetensors file" in line and "header" not in line


def test_a_folder_without_weights_is_one_line_before_any_note(tmp_path):
    target, ckpt = writable_copy(DEMO_TARGET, tmp_path / "t"), tmp_path / "c"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    assert "neither model.safetensors nor" in refused(["patch", target, "--checkpoint", ckpt], target)


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_verify_json_to_a_place_it_cannot_write_is_refused_before_the_checks(patched_demo, tmp_path, where):
    dest = tmp_path / "nowhere" / "x.json" if where == "missing folder" else tmp_path
    result = invoke("verify", patched_demo, "--json", dest)
    line = one_error(result)
    assert str(dest) in line and "ok " not in result.output  # no check ran before the refusal
