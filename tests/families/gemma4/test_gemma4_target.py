"""Gemma 4 target surgery and `irsurgeon patch` on the fixture pair (optimum-intel 2.2.0's export of a tiny
gemma4_text; scripts/make_gemma4_pair.py): the five outputs appear, the .bin is byte-identical, the XML only grows,
the outputs carry the values genai needs, and bad pairs are refused with one line, nothing written."""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from lab.dirsnap import full_disk_on_nth_replace, snapshot
from helpers.cli import refused as refused_unchanged  # (args, *unchanged dirs): this file's refused() is another
from helpers.edits import edit_json, not_regular
from helpers.gemma4 import PAIR, copy_pair
from irsurgeon.cli import main as cli
from irsurgeon.families.gemma4_mtp import target as surgery

XML, BIN = "openvino_model.xml", "openvino_model.bin"


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_patch(target, source, *extra):
    return CliRunner().invoke(cli, ["patch", str(target), "--checkpoint", str(source), *extra])


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    target, source = copy_pair(tmp_path_factory.mktemp("g4"))
    before = {"bin": sha(target / BIN), "xml": (target / XML).read_bytes()}
    result = run_patch(target, source)
    assert result.exit_code == 0, result.output
    return target, before, result.output


def test_patch_writes_assistant_and_keeps_the_bin(patched):
    target, before, output = patched
    assert sha(target / BIN) == before["bin"]
    assert sorted(p.name for p in (target / "mtp_assistant").iterdir()) == [
        "config.json", "generation_config.json", BIN, XML]
    assert "LLMPipeline" in output and not (target / ".irsurgeon-staging").exists()


def test_xml_edit_only_adds_lines(patched):
    target, before, _ = patched
    old, new = before["xml"].splitlines(), (target / XML).read_bytes().splitlines()
    added = len(new) - len(old)
    kept, i = 0, 0
    for line in new:  # every original line, in order
        if i < len(old) and line == old[i]:
            i, kept = i + 1, kept + 1
    assert kept == len(old) and added == 9 + 4 * 10 + 5  # Results: 6 lines + one per dim (rank 3, 4 x rank 4); edges


def test_outputs_carry_the_final_norm_and_the_store_layers_cache(patched):
    target, _, _ = patched
    model = ov.Core().read_model(target / XML)
    assert surgery.present_outputs(model) == set(surgery.OUTPUTS)
    request = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
                                      ).create_infer_request()
    ids = np.array([[9, 40, 77, 120, 33, 61, 8, 200, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]], np.int64)
    out = request.infer({"input_ids": ids, "attention_mask": np.ones_like(ids),
                         "position_ids": np.arange(ids.shape[1])[None], "beam_idx": np.zeros(1, np.int32)})
    consumers = surgery.lm_head_input(model, "t").get_target_inputs()  # the lm_head MatMul and the new Result
    lm_head = next(c.get_node() for c in consumers if c.get_node().get_type_name() == "MatMul")
    w = lm_head.input_value(1).get_node()
    while w.get_type_name() != "Constant":
        w = w.input_value(0).get_node()
    logits = out["mtp_last_hidden_state"] @ w.get_data().astype(np.float32).T
    assert np.abs(logits - out["logits"]).max() < 1e-4
    states = {s.name: s.state.data.copy() for s in request.query_state()}
    for name, layer in (("mtp_sliding_attention_key", 0), ("mtp_full_attention_value", 1)):
        kv = name.rsplit("_", 1)[1]
        state = next(v for k, v in states.items() if k.endswith(f".{layer}.{kv}"))
        assert out[name].shape[2] == ids.shape[1] and np.array_equal(out[name], state)


def test_second_run_does_nothing(patched):
    target, _, _ = patched
    before = snapshot(target)
    result = run_patch(target, PAIR / "ckpt")
    assert result.exit_code == 0 and "nothing to do" in result.output and snapshot(target) == before


def refused(target, source, match):
    before = snapshot(target)
    result = run_patch(target, source)
    assert result.exit_code != 0 and result.output.count("\n") == 1 and result.output.startswith("Error: ")
    assert match in result.output, result.output
    assert snapshot(target) == before


def test_assistant_of_another_target_is_refused(tmp_path):
    target, source = copy_pair(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(source, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["backbone_hidden_size"] = 48
    (other / "config.json").write_text(json.dumps(cfg))
    refused(target, other, "backbone_hidden_size is 48, the target has 64")
    cfg["backbone_hidden_size"], cfg["text_config"]["per_layer_config"]["1"]["head_dim"] = 64, 16
    (other / "config.json").write_text(json.dumps(cfg))
    refused(target, other, "full_attention head_dim is 16, the target has 32")


def test_non_gemma_target_is_refused(tmp_path):
    from irsurgeon.synth import synthesize

    synthesize(tmp_path / "qwen", "qwen35", seed=1)
    refused(tmp_path / "qwen", PAIR / "ckpt", "is not a target for")


def test_vlm_layout_is_refused(tmp_path):
    target, source = copy_pair(tmp_path)
    (target / XML).rename(target / "openvino_language_model.xml")
    refused(target, source, "VLM-layout export")


def test_target_without_embedding_node_is_refused(tmp_path):
    target, source = copy_pair(tmp_path)
    data = (target / XML).read_bytes()
    for name in (b"embed_tokens/aten::mul/Multiply", b"embed_tokens/aten::embedding/Gather"):  # genai's two names
        assert data.count(name) == 1
        data = data.replace(name, name.replace(b"aten::", b"renamed::"))
    (target / XML).write_bytes(data)
    refused(target, source, "embed_tokens/aten::mul/Multiply")


@pytest.mark.parametrize("nth", [2, 3])  # after the journal: the first two files moved in (the full sweep over every
# mutating call, for every family: test_house_commit.py)
def test_full_disk_during_commit_leaves_the_target_as_it_was(tmp_path, monkeypatch, nth):
    target, source = copy_pair(tmp_path)
    before = snapshot(target)
    full_disk_on_nth_replace(monkeypatch, nth)
    result = run_patch(target, source)
    assert result.exit_code != 0 and "rolled back" in result.output
    assert snapshot(target) == before


def test_outputs_match_transformers(patched):
    """The five outputs against transformers 5.5.4's eager f32 run of the model the fixture was exported from
    (fixtures/gemma4/target_golden.npz): final-norm output and the store layers' K/V; f32 KV cache, as genai's
    comparisons need (the export's rt_info asks for f16)."""
    target, _, _ = patched
    golden = np.load(PAIR / "target_golden.npz")
    compiled = ov.Core().compile_model(ov.Core().read_model(target / XML), "CPU",
                                       {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    compared = 0
    for case in ("short", "long"):
        ids = golden[f"{case}_input_ids"]
        out = compiled.create_infer_request().infer({
            "input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None],
            "beam_idx": np.zeros(1, np.int32)})
        for name in surgery.OUTPUTS:
            if f"{case}_{name}" in golden.files:
                error = np.abs(out[name] - golden[f"{case}_{name}"]).max()
                print(case, name, out[name].shape, f"{error:.2e}")
                assert out[name].shape == golden[f"{case}_{name}"].shape and error < 1e-4
                compared += 1
    assert compared == 5 + 3


def test_dry_run_writes_nothing(tmp_path):
    target, source = copy_pair(tmp_path)
    before = snapshot(target)
    result = run_patch(target, source, "--dry-run")
    assert result.exit_code == 0 and "would build mtp_assistant/" in result.output
    assert "would add mtp_last_hidden_state" in result.output and snapshot(target) == before


def test_a_source_neither_directory_nor_repo_id_is_refused(tmp_path):
    target, _ = copy_pair(tmp_path)
    before = snapshot(target)
    result = run_patch(target, str(tmp_path / "no" / "such"))
    assert result.exit_code != 0 and "no such checkpoint file or directory (nor a Hugging Face repo id)" in result.output
    assert snapshot(target) == before


# --- a boolean of config.json that is not one, a generation_config.json that is not a file --------------------------

@pytest.mark.usefixtures("no_hang")
def test_a_gemma4_target_boolean_that_is_not_one_is_refused(tmp_path):
    target, assistant = copy_pair(tmp_path)
    edit_json(target / "config.json", attention_k_eq_v="false")
    line = refused_unchanged(("patch", target, "--checkpoint", assistant), target)
    assert line.endswith(f"{target / 'config.json'}: attention_k_eq_v must be true or false, found \"false\"")


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_gemma4_target_generation_config_that_is_not_a_file_is_refused(tmp_path, kind):
    target, assistant = copy_pair(tmp_path)
    not_regular(target / "generation_config.json", kind)
    line = refused_unchanged(("patch", target, "--checkpoint", assistant), target)
    assert f"{target / 'generation_config.json'}: is a" in line and "expected a regular file" in line
