"""`irsurgeon verify` and `show` on a Gemma 4 directory (the fixture pair, scripts/make_gemma4_pair.py): a patched
directory passes every check, an unpatched one fails the outputs and assistant checks (not with Qwen's VLM-layout
advice), a mismatched assistant fails the pair check, a hidden state that is not the lm_head's input is named, and
a staging folder left in mtp_assistant/ is reported."""
from __future__ import annotations

import json
import shutil

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from click.testing import CliRunner

from helpers.gemma4 import PAIR, copy_pair, genai_report
from irsurgeon.cli import main as cli
from irsurgeon.families.gemma4_mtp.verify import target_outputs
from irsurgeon.flows.verify import verify_directory
from helpers.cli import result_of


def verdicts(target) -> dict[str, bool]:
    return {c.name: c.ok for c in verify_directory(target)}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(patched target, unpatched target)."""
    tmp = tmp_path_factory.mktemp("g4v")
    target, source = copy_pair(tmp)
    shutil.copytree(target, tmp / "unpatched")
    result = CliRunner().invoke(cli, ["patch", str(target), "--checkpoint", str(source)])
    assert result.exit_code == 0, result.output
    return target, tmp / "unpatched"


def test_patched_directory_passes(pair):
    result = CliRunner().invoke(cli, ["verify", str(pair[0]), "--checkpoint", str(PAIR / "ckpt")])
    assert result.exit_code == 0, result.output
    names = [ln.split(":")[0] for ln in result.output.splitlines() if ln.startswith("ok")]
    assert names == ["ok   target layout", "ok   target outputs", "ok   embedding path", "ok   assistant files",
                     "ok   assistant pair", "ok   checkpoint pair", "ok   assistant I/O", "ok   generation config"]
    assert "FAIL" not in result.output


def test_unpatched_directory_fails_with_gemma_advice(pair):
    result = CliRunner().invoke(cli, ["verify", str(pair[1])])
    assert result.exit_code == 1
    assert verdicts(pair[1]) == {"target layout": True, "target outputs": False, "embedding path": True,
                                 "assistant files": False, "generation config": True}
    assert "image-text-to-text" not in result.output and "--checkpoint ASSISTANT_DIR" in result.output


def test_assistant_for_another_width_fails_pair_and_io(pair, tmp_path):
    target = tmp_path / "t"
    shutil.copytree(pair[0], target)
    cfg_path = target / "mtp_assistant" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["backbone_hidden_size"] = 2 * cfg["backbone_hidden_size"]
    cfg_path.write_text(json.dumps(cfg))
    checks = {c.name: c for c in verify_directory(target)}
    assert not checks["assistant pair"].ok and "backbone_hidden_size" in checks["assistant pair"].detail
    assert not checks["assistant I/O"].ok and "inputs_embeds last dimension" in checks["assistant I/O"].detail
    assert checks["target outputs"].ok


def test_staging_left_in_the_target_is_reported(pair, tmp_path):
    """One transaction stages the assistant's files and the target's XML together, in the target's staging
    folder: what an interrupted run left there is what verify reports (after the layout line)."""
    target = tmp_path / "t"
    shutil.copytree(pair[0], target)
    (target / ".irsurgeon-staging").mkdir()
    checks = verify_directory(target)
    assert checks[1].name == "interrupted run" and ".irsurgeon-staging" in checks[1].detail
    assert checks[1].ok  # empty leftovers: the next patch clears them


def toy_target(hidden_from_norm: bool) -> ov.Model:
    """logits = MatMul(x * 2, W); mtp_last_hidden_state from the MatMul's input or from x itself."""
    x = ops.parameter([1, -1, 4], ov.Type.f32, name="x")
    kv = ops.parameter([1, 2, -1, 8], ov.Type.f32, name="kv")
    norm = ops.multiply(x, ops.constant(np.float32(2)))
    logits = ops.matmul(norm, ops.constant(np.ones((16, 4), np.float32)), False, True)
    outs = [(logits, "logits"), (norm if hidden_from_norm else x, "mtp_last_hidden_state")]
    outs += [(kv, f"mtp_{t}_attention_{k}") for t in ("full", "sliding") for k in ("key", "value")]
    results = []
    for node, name in outs:
        r = ops.result(node)
        r.output(0).get_tensor().set_names({name})
        results.append(r)
    return ov.Model(results, [x, kv], "toy")


def test_hidden_state_must_be_the_lm_head_input():
    assert target_outputs(toy_target(True), "toy")[0]
    ok, detail = target_outputs(toy_target(False), "toy")
    assert not ok and "not the lm_head MatMul's input" in detail


@pytest.mark.genai
@pytest.mark.extended  # more of what the default tier runs once: CI's `make test-extended`
def test_genai_runs_the_pair_token_identical_with_drafts_accepted(pair):
    report = genai_report(pair[0])
    runs = report["genai"]["runs"]
    assert len(runs) == 3 * 4 and all(r["identical"] and r["tokens"] == 40 for r in runs)
    assert report["genai"]["properties"] == {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    drafted = sum(r["draft_tokens"] for r in runs)
    assert drafted > 0 and sum(r["accepted"] for r in runs) > 0.8 * drafted
    speed = report["speed"]["measurements"]
    assert [m["label"] for m in speed] == ["plain", "draft K=1", "draft K=2", "draft K=3", "draft K=4"]
    assert all(m["generated_tokens"] == 3 * 40 and m["tokens_per_second"] > 0 for m in speed)
    assert all(m["draft_evaluations"] > 0 and m["target_evaluations"] < 3 * 40 for m in speed[1:])


def show_json(path) -> dict:
    result = CliRunner().invoke(cli, ["show", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return result_of(result.stdout)


def test_show_patched_directory_has_the_assistant_and_is_ready(pair):
    info = show_json(pair[0])
    assert info["family"] == "gemma4" and info["draft"]["ready"] and not info["draft"]["reasons"]
    entry = {r["file"]: r for r in info["irs"]}["mtp_assistant/openvino_model.xml"]
    assert entry["ok"] and [p["name"] for p in entry["outputs"]] == ["logits", "last_hidden_state"]
    assert {p["name"]: p["shape"] for p in entry["inputs"]}["inputs_embeds"] == [None, None, 128]
    assert info["footprint"]["weights"]["draft"]["files"] == ["mtp_assistant/openvino_model.xml"]
    text = CliRunner().invoke(cli, ["show", str(pair[0])]).output
    assert "draft family: Gemma 4 MTP assistant" in text and "): READY" in text


def test_show_unpatched_directory_says_what_is_missing(pair):
    info = show_json(pair[1])
    assert info["family"] == "gemma4" and not info["draft"]["ready"]
    assert [r.split(":")[0] for r in info["draft"]["reasons"]] == ["target outputs", "assistant files"]
    assert not any(r["file"].startswith("mtp_assistant/") for r in info["irs"])


def test_show_names_the_qwen_family_elsewhere():
    assert show_json(PAIR.parent / "qwen3_5" / "target")["family"] == "qwen3_5"


@pytest.mark.genai
def test_genai_flags_an_assistant_made_for_another_target(tmp_path):
    """An assistant of the same geometry but another model (synth seed 1 against a seed-0 target) passes the
    offline pair check (nothing else can be proven offline: `patch` says so) and stays token-identical in genai,
    but its drafts are almost never accepted: `verify --genai` says so in one warning line and fails."""
    from click.testing import CliRunner

    from irsurgeon.cli import main
    from irsurgeon.families.gemma4_mtp.synth import synthesize_gemma4

    target, _ = synthesize_gemma4(tmp_path / "mine", seed=0)
    _, foreign = synthesize_gemma4(tmp_path / "other", seed=1)
    patched = CliRunner().invoke(main, ["patch", str(target), "--checkpoint", str(foreign)])
    assert patched.exit_code == 0, patched.output
    assert "shares no tensor with its target: only its geometry" in patched.output
    result = CliRunner().invoke(main, ["verify", str(target), "--genai", "--prompts", "2", "--rounds", "1",
                                       "--num-assistant-tokens", "2"])
    warning = [line for line in result.output.splitlines() if line.startswith("warning: the target accepted")]
    print(warning)
    assert result.exit_code == 1 and len(warning) == 1 and "below --min-acceptance 5%" in warning[0], result.output
    assert "failed draft acceptance" in result.output and "ready for MTP" not in result.output.replace("not ready", "")
