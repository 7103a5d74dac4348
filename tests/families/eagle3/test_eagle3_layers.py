"""Draft layers beyond the Llama one, against the float64 numpy reference (tests/helpers/numpy_eagle3.py, written from
the trainers' code): the speculators' Qwen3 layer (q_norm / k_norm per head before RoPE: speculators
model_definitions.py Qwen3DecoderEagle3FirstLayer over transformers' Qwen3Attention) and SpecForge's VLM draft, whose
mrope is chunked (llama3_eagle.py LlamaMutiRotaryEmbedding + apply_multimodal_rotary_pos_emb) where AngelSlim's
interleaves. Tolerance 1e-4 on logits of O(1) at f32 (as test_eagle3_draft.py); each test also shows that leaving
out what is new moves the logits by far more.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from helpers.eagle3 import load_checkpoint, reference, run_calls, speculators_variant, target_embed, with_target_table
from helpers.numpy_eagle3 import Eagle3Reference
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]
VLM_CKPT = Path(__file__).resolve().parents[2] / "data" / "eagle3_vlm" / "ckpt"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def built(ckpt: Path) -> tuple[ov.Model, eagle3.Eagle3Config]:
    cfg, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=lambda _: None)
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE), cfg
    finally:
        handle.close()


def rewrite(ckpt: Path, edit_config=None, add: dict | None = None) -> None:
    f = SafetensorsFile(ckpt / "model.safetensors")
    try:
        tensors = {n: f.get(n) for n in f.tensors}
    finally:
        f.close()
    tensors.update(add or {})
    write_safetensors(ckpt / "model.safetensors", tensors)
    if edit_config:
        config = json.loads((ckpt / "config.json").read_text())
        edit_config(config)
        (ckpt / "config.json").write_text(json.dumps(config, indent=2))


def qwen3_draft(where: Path, model_type: str | None = "qwen3") -> Path:
    """The fixture draft in the speculators' layout with a Qwen3 layer: q_norm / k_norm gains [head_dim] added."""
    ckpt = speculators_variant(CKPT, where)
    rng = np.random.default_rng(7)
    norms = {f"layers.0.self_attn.{n}.weight": (1 + 0.5 * rng.standard_normal(16)).astype(np.float32)
             for n in ("q_norm", "k_norm")}

    def edit(config):
        if model_type is None:
            config["transformer_layer_config"].pop("model_type")
        else:
            config["transformer_layer_config"]["model_type"] = model_type
    rewrite(ckpt, edit, norms)
    return ckpt


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return target_embed(TARGET)


def test_the_speculators_qwen3_layer_matches_the_reference_and_its_norms_count(tmp_path, table):
    ckpt = qwen3_draft(tmp_path / "q")
    model, cfg = built(ckpt)
    assert cfg.qk_norm
    outs, feeds = run_calls(with_target_table(model, table), [3, 1, 2])
    ref, plain = reference(ckpt, table), reference(ckpt, table)
    del plain.w["self_attn.q_norm.weight"], plain.w["self_attn.k_norm.weight"]  # a Llama layer of the same weights
    moved = 0.0
    for out, feed in zip(outs, feeds):
        want, _ = ref.step(feed["input_ids"], feed["hidden_states"].astype(np.float64), feed["position_ids"])
        without, _ = plain.step(feed["input_ids"], feed["hidden_states"].astype(np.float64), feed["position_ids"])
        assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()
        moved = max(moved, np.abs(out - without).max())
    assert moved > 1e-2, moved


def test_a_qwen3_layer_is_patched_and_verified_and_a_layer_config_without_model_type_is_read_by_its_tensors(
        tmp_path):
    ckpt = qwen3_draft(tmp_path / "q", model_type=None)
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    assert "a transformer_layer_config without model_type (read as qwen3: with q_norm / k_norm)" in result.output
    kept = json.loads((target / "eagle3_draft" / "config.json").read_text())
    assert kept["transformer_layer_config"]["model_type"] == "qwen3"
    assert invoke("verify", target).exit_code == 0


def test_a_llama_layer_config_refuses_a_checkpoint_with_q_norm_as_an_unread_tensor(tmp_path):
    ckpt = qwen3_draft(tmp_path / "q", model_type="llama")
    from irsurgeon.core.errors import CheckpointError

    with pytest.raises(CheckpointError, match=r"unexpected tensor layers\.0\.self_attn\.k_norm\.weight .*and 1 more"):
        built(ckpt)


def specforge_vlm(where: Path, target_model_type: str = "qwen2_5_vl") -> Path:
    """The bundled VLM draft's tensors under SpecForge's VLM config form: LlamaForCausalLMEagle3, rope_scaling type
    mrope with mrope_section, target_model_type, no modal_type (configs/qwen2-5-vl-7b-eagle3.json)."""
    shutil.copytree(VLM_CKPT, where)

    def edit(config):
        config.update(architectures=["LlamaForCausalLMEagle3"], target_model_type=target_model_type,
                      rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2]})
        config.pop("modal_type")
    rewrite(where, edit)
    return where


def vlm_steps(seed: int = 3) -> list[dict]:
    rng, steps, start = np.random.default_rng(seed), [], 0
    for seq in (3, 1):
        base = np.arange(start, start + seq, dtype=np.int64)
        pos = np.stack([base + rng.integers(0, 5, (1, seq)) * r for r in range(3)])  # T, H, W differ
        steps.append({"inputs_embeds": rng.standard_normal((1, seq, 64)).astype(np.float32),
                      "hidden_states": rng.standard_normal((1, seq, 192)).astype(np.float32),
                      "position_ids": pos, "attention_mask": np.ones((1, start + seq), np.int64),
                      "beam_idx": np.zeros(1, np.int32)})
        start += seq
    return steps


def test_specforges_vlm_draft_matches_its_chunked_mrope_and_not_the_interleaved_one(tmp_path):
    ckpt = specforge_vlm(tmp_path / "sf")
    model, cfg = built(ckpt)
    assert cfg.vlm and cfg.target_model_type == "qwen2_5_vl" and not cfg.rope.interleaved
    request = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    steps = vlm_steps()
    got = [request.infer(feed)["logits"].copy() for feed in steps]
    tensors, config = load_checkpoint(ckpt)
    chunked = Eagle3Reference(tensors, config, np.zeros((1024, 64)))
    interleaved = Eagle3Reference(tensors, config, np.zeros((1024, 64)))
    interleaved.mrope_chunked = False  # AngelSlim's form of the same rows
    moved = 0.0
    for g, f in zip(got, steps):
        want = chunked.step(f["inputs_embeds"], f["hidden_states"], f["position_ids"])[0]
        other = interleaved.step(f["inputs_embeds"], f["hidden_states"], f["position_ids"])[0]
        np.testing.assert_allclose(g, want, atol=1e-4)
        moved = max(moved, np.abs(g - other).max())
    assert moved > 1e-2, moved


SCALED = {  # a short original length, so that the genai runs' positions cross it
    "yarn": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
             "mscale": 1.0, "mscale_all_dim": 0.7},  # SpecForge's deepseek-v2-lite config's form
    "linear": {"type": "linear", "factor": 2.0},
    "dynamic": {"type": "dynamic", "factor": 2.0},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 16,
                 "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7],
                 "long_factor": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]},
}


def scaled_draft(where: Path, kind: str) -> Path:
    """The fixture draft under a scaled RoPE: SpecForge's layout, or (longrope, which SpecForge does not build) the
    speculators' (transformers' LlamaRotaryEmbedding)."""
    if kind == "longrope":
        ckpt = speculators_variant(CKPT, where)
        rewrite(ckpt, lambda c: c["transformer_layer_config"].update(rope_scaling=SCALED[kind],
                                                                      max_position_embeddings=64))
        return ckpt
    shutil.copytree(CKPT, where)
    rewrite(where, lambda c: c.update(rope_scaling=SCALED[kind], max_position_embeddings=16 if kind == "dynamic"
                                      else c["max_position_embeddings"]))
    return where


def vlm_target(where: Path) -> Path:
    return Path(shutil.copytree(VLM_CKPT.parent / "target", where))


SAMPLED_SCALINGS = ("yarn", "longrope")  # the extended tier's: SpecForge's layout and the speculators'; the slow
# tier adds linear and dynamic, SpecForge's layout again with other tables (their values: test_eagle3_rope.py)


def form_tier(form: str):
    """The default tier runs the speculators' Qwen3 layer; CI's extended tier the VLM layout and two scalings."""
    if form == "qwen3-layer":
        return ()
    return pytest.mark.slow if form in SCALED and form not in SAMPLED_SCALINGS else pytest.mark.extended


@pytest.mark.genai
@pytest.mark.parametrize("form", [pytest.param(f, marks=form_tier(f)) for f in ["qwen3-layer", *SCALED,
                                                                                 "specforge-vlm"]])
def test_each_new_form_is_token_identical_to_greedy_in_genai(tmp_path, form):
    """genai 2026.4.1 runs each new draft form (the random drafts are accepted about never: exactness and plumbing)."""
    if form == "specforge-vlm":
        target, ckpt = vlm_target(tmp_path / "t"), specforge_vlm(tmp_path / "c", target_model_type="qwen3_vl")
    else:
        target = Path(shutil.copytree(TARGET, tmp_path / "t"))
        ckpt = qwen3_draft(tmp_path / "c") if form == "qwen3-layer" else scaled_draft(tmp_path / "c", form)
    assert invoke("patch", target, "--checkpoint", ckpt, "--hidden-layers", "0,1,2").exit_code == 0
    # in a process of its own: a test worker that has loaded dozens of genai pipelines once aborted inside genai
    proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", "verify", str(target), "--genai", "--prompts", "2",
                           "--sweep", "1,3", "--min-acceptance", "0", "--rounds", "1"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4/4 speculative runs token-identical to plain greedy" in proc.stdout + proc.stderr, proc.stdout
