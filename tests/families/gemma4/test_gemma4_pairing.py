"""The Gemma 4 pair check on what the assistant attends over: attention_k_eq_v of assistant and target must agree.

With attention_k_eq_v a Gemma 4 target's full-attention layers have no v_proj and keep their keys as values
(transformers 5.24.0 modeling_gemma4.py, Gemma4TextAttention); an assistant trained on such a target reads values
that are keys. KV heads and head_dim can be equal either way, so only the flag tells the two targets apart.
"""
from __future__ import annotations

import json
import shutil

import pytest

from helpers.cli import refused
from helpers.gemma4 import PAIR, copy_pair
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.families.gemma4_mtp.model import load_assistant_config
from irsurgeon.families.gemma4_mtp.pairing import check_pair, inspect_target


def assistant_with(tmp_path, k_eq_v: bool):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(PAIR / "ckpt", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["text_config"]["attention_k_eq_v"] = k_eq_v
    (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


@pytest.mark.parametrize("assistant, target", [(True, False), (False, True)])
def test_k_eq_v_of_assistant_and_target_must_agree(tmp_path, assistant, target):
    target_dir, _ = copy_pair(tmp_path)
    cfg = json.loads((target_dir / "config.json").read_text())
    cfg["attention_k_eq_v"] = target  # a flat gemma4_text config; no num_global_key_value_heads: KV heads stay equal
    (target_dir / "config.json").write_text(json.dumps(cfg))
    ckpt = assistant_with(tmp_path, assistant)
    info, _ = inspect_target(target_dir)
    mine = load_assistant_config(ckpt / "config.json")
    assert info.store_layer("full_attention").kv_heads == mine.layer_of("full_attention").kv_heads
    with pytest.raises(IRSurgeonError, match=f"text_config.attention_k_eq_v is {str(assistant).lower()}, the "
                                             f"target has {str(target).lower()}"):
        check_pair(info, mine)


def test_patch_refuses_a_k_eq_v_assistant_on_a_target_without_it(tmp_path):
    target, _ = copy_pair(tmp_path)
    ckpt = assistant_with(tmp_path, True)
    line = refused(("patch", target, "--checkpoint", ckpt), target)
    assert line.endswith("text_config.attention_k_eq_v is true, the target has false"), line


def test_agreeing_k_eq_v_pairs(tmp_path):
    target, _ = copy_pair(tmp_path)
    info, _ = inspect_target(target)
    check_pair(info, load_assistant_config(assistant_with(tmp_path, False) / "config.json"))


def test_the_unified_assistant_is_refused_with_the_reason(tmp_path):
    """Gemma4UnifiedAssistantForCausalLM (model_type gemma4_unified_assistant): claimed by the Gemma 4 family and
    refused in one line naming where genai runs its target type and why no exporter writes it."""
    target, _ = copy_pair(tmp_path)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(PAIR / "ckpt", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(model_type="gemma4_unified_assistant", architectures=["Gemma4UnifiedAssistantForCausalLM"])
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = refused(("patch", target, "--checkpoint", ckpt), target)
    assert "model_type gemma4_unified_assistant (the Gemma 4 12B unified assistant) is not built" in line, line
    assert "VLMPipeline (src/cpp/src/visual_language/vlm_config.cpp)" in line and "transformers 5.10 only" in line
