"""AngelSlim VLM EAGLE-3 drafts (modal_type "VLM") on a Qwen3-VL target (tests/data/eagle3_vlm, made by
scripts/make_eagle3_vlm_target.py): the draft's mrope against a float64 numpy reference written as AngelSlim's
apply_interleaved_mrope, the refusals of what genai 2026.4.1 cannot run, and the pair through genai's VLMPipeline.

Tolerance: the IR runs in f32 from f32 weights against float64, as test_eagle3_draft.py (1e-4 on logits of O(1)); the
negative control (the three position rows collapsed to the first) moves them by far more.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke, result_of
from helpers.eagle3 import load_checkpoint
from helpers.numpy_eagle3 import Eagle3Reference
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.errors import ConfigError, IRSurgeonError
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3 import surgery
from irsurgeon.families.eagle3.target import check_pair, inspect_target

DATA = Path(__file__).resolve().parents[2] / "data" / "eagle3_vlm"
TARGET, CKPT = DATA / "target", DATA / "ckpt"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def vlm_config(**changes) -> dict:
    cfg = json.loads((CKPT / "config.json").read_text())
    cfg.update(changes)
    return cfg


def positions(rng, rows: int, batch: int, seq: int, start: int) -> np.ndarray:
    """Three distinct rows, as a Qwen3-VL image span gives them (T, H, W differ)."""
    base = np.arange(start, start + seq, dtype=np.int64)
    return np.stack([base + rng.integers(0, 5, (batch, seq)) * r for r in range(rows)])


def run_draft(model: ov.Model, steps: list[dict]) -> list[np.ndarray]:
    request = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    return [request.infer(feed)["logits"].copy() for feed in steps]


def test_the_vlm_draft_matches_angelslims_interleaved_mrope():
    cfg, weights, handle = load_with(eagle3.RECIPE, CKPT, warn=lambda _: None)
    try:
        model = build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE)
    finally:
        handle.close()
    assert cfg.vlm and cfg.rope.kind == "mrope" and cfg.rope.mrope_section == (4, 2, 2)
    assert {n for p in model.inputs for n in p.get_names()} == set(eagle3.VLM_INPUTS)
    assert surgery.problems(model, cfg.hidden_size, cfg.target_hidden_size, taps=None, vlm=True) == []
    tensors, config = load_checkpoint(CKPT)
    rng = np.random.default_rng(3)
    steps, start = [], 0
    for seq in (3, 1):
        steps.append({"inputs_embeds": rng.standard_normal((1, seq, 64)).astype(np.float32),
                      "hidden_states": rng.standard_normal((1, seq, 192)).astype(np.float32),
                      "position_ids": positions(rng, 3, 1, seq, start), "attention_mask": np.ones((1, start + seq), np.int64),
                      "beam_idx": np.zeros(1, np.int32)})
        start += seq
    got = run_draft(model, steps)
    ref = Eagle3Reference(tensors, config, np.zeros((1024, 64)))
    want = [ref.step(f["inputs_embeds"], f["hidden_states"], f["position_ids"])[0] for f in steps]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-4)
    flat = Eagle3Reference(tensors, config, np.zeros((1024, 64)))
    collapsed = [flat.step(f["inputs_embeds"], f["hidden_states"], np.stack([f["position_ids"][0]] * 3))[0]
                 for f in steps]
    assert max(np.abs(g - c).max() for g, c in zip(got, collapsed)) > 1e-2  # the H and W rows are read


@pytest.mark.parametrize("changes, words", [
    ({"modal_type": "Audio"}, "modal_type 'Audio'"),
    ({"target_model_type": "hunyuan_vl"}, "target_model_type 'hunyuan_vl'"),
    ({"rope_scaling": None}, "rope_scaling names no mrope"),
    ({"rope_scaling": {"type": "default", "mrope_interleaved": True, "mrope_section": [4, 2, 1]}}, "mrope_section"),
    ({"rope_scaling": {"rope_type": "yarn", "mrope_interleaved": True, "mrope_section": [4, 2, 2]}},
     "rope_scaling.rope_type 'yarn'"),
    ({"modal_type": None}, "rope_scaling names mrope but modal_type is None"),
])
def test_what_genai_cannot_run_as_trained_is_refused_in_one_line(changes, words):
    with pytest.raises(ConfigError) as e:
        eagle3.parse_config(vlm_config(**changes), "ckpt/config.json")
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_qwen2_5_vl_drafts_read_type_mrope_and_its_default_section():
    cfg = eagle3.parse_config(vlm_config(target_model_type="qwen2_5_vl", rope_scaling={"type": "mrope"},
                                         head_dim=128, hidden_size=64, num_attention_heads=2), "c.json")
    assert cfg.rope.mrope_section == (24, 20, 20) and cfg.target_model_type == "qwen2_5_vl"


def test_the_pair_check_keeps_text_and_vlm_apart():
    target = inspect_target(TARGET)
    assert target.vlm and target.model_type == "qwen3_vl" and target.tappable == frozenset(range(4))
    text = eagle3.parse_config({k: v for k, v in vlm_config().items() if k not in ("modal_type", "rope_scaling")},
                               "text.json")
    with pytest.raises(IRSurgeonError, match="feeds a VLM target's draft inputs_embeds"):
        check_pair(target, text, (0, 1, 2))
    other = eagle3.parse_config(vlm_config(target_model_type="qwen2_5_vl"), "c.json")
    with pytest.raises(IRSurgeonError, match="target_model_type is qwen2_5_vl, the target is qwen3_vl"):
        check_pair(target, other, (0, 1, 2))
    text_target = inspect_target(FIXTURE_PAIRS["eagle3"][0])
    vlm = eagle3.parse_config(vlm_config(vocab_size=text_target.vocab_size, draft_vocab_size=None,
                                         hidden_size=text_target.hidden_size),
                              "c.json")
    with pytest.raises(IRSurgeonError, match=r"it is a VLM draft \(target_model_type qwen3_vl\), this is a llama text export"):
        check_pair(text_target, vlm, (0, 1, 2))


@pytest.mark.extended  # more of what the default tier runs once: CI's `make test-extended`
@pytest.mark.genai
def test_the_vlm_pair_is_token_identical_to_greedy_in_genai(tmp_path):
    """genai 2026.4.1's VLMPipeline runs the patched pair (EAGLE-3 on embeddings and mrope positions) and gives
    exactly plain greedy's tokens at f32 for K = 1..4; the random draft is accepted about never (plumbing only)."""
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "0,1,2")
    assert result.exit_code == 0, result.output
    assert "VLMPipeline" in result.output, result.output
    report = tmp_path / "report.json"
    result = invoke("verify", target, "--genai", "--prompts", "2", "--sweep", "1,2,3,4", "--min-acceptance", "0",
                    "--rounds", "1", "--json", report)
    assert result.exit_code == 0, result.output
    assert "8/8 speculative runs token-identical to plain greedy" in result.output, result.output
    doc = result_of(report.read_text())  # the JSON envelope {ok, command, result} (docs/cli.md)
    assert doc["ready"] is True, doc
