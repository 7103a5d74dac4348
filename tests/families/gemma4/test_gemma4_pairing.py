"""The Gemma 4 pair check on what the assistant attends over: attention_k_eq_v of assistant and target must agree.

With attention_k_eq_v a Gemma 4 target's full-attention layers have no v_proj and keep their keys as values
(transformers 5.24.0 modeling_gemma4.py, Gemma4TextAttention); an assistant trained on such a target reads values
that are keys. KV heads and head_dim can be equal either way, so only the flag tells the two targets apart.
"""
from __future__ import annotations

import json
import shutil

import pytest

from click.testing import CliRunner

from helpers.cli import refused
from helpers.gemma4 import PAIR, copy_pair
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.families.gemma4_mtp.model import load_assistant_config
from irsurgeon.cli import main
from irsurgeon.families.gemma4_mtp.pairing import check_pair, inspect_target
from irsurgeon.flows.verify import verify_directory


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


def unified(tmp_path):
    """The fixture assistant as a Gemma4UnifiedAssistantForCausalLM checkpoint (the same tensors: transformers 5.10.0
    modular_gemma4_unified_assistant.py subclasses Gemma4AssistantForCausalLM)."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(PAIR / "ckpt", ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(model_type="gemma4_unified_assistant", architectures=["Gemma4UnifiedAssistantForCausalLM"])
    cfg["text_config"]["model_type"] = "gemma4_unified_text"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def test_a_unified_assistant_is_refused_on_a_gemma4_target_in_one_line(tmp_path):
    target, _ = copy_pair(tmp_path)
    line = refused(("patch", target, "--checkpoint", unified(tmp_path)), target)
    assert ("model_type gemma4_unified_assistant is made for a gemma4_unified target, the target is gemma4_text"
            in line), line


def test_a_unified_assistant_patches_and_verifies_on_a_unified_text_target(tmp_path):
    """A text-only export of a gemma4_unified_text model (optimum-intel 2.2.0 registers one:
    Gemma4UnifiedTextOpenVINOConfig, gemma4's KV layout) is the fixture target relabelled: Gemma4UnifiedTextModel's
    decoder layer is Gemma4TextDecoderLayer without per-layer inputs, which the fixture has none of."""
    target, _ = copy_pair(tmp_path)
    cfg = json.loads((target / "config.json").read_text())
    cfg.update(model_type="gemma4_unified_text", architectures=["Gemma4UnifiedForCausalLM"])
    (target / "config.json").write_text(json.dumps(cfg))
    ckpt = unified(tmp_path)
    result = CliRunner().invoke(main, ["patch", str(target), "--checkpoint", str(ckpt)])
    assert result.exit_code == 0, result.output
    checks = verify_directory(target)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert json.loads((target / "mtp_assistant" / "config.json").read_text())["model_type"] == \
        "gemma4_unified_assistant"
    # and back: an ordinary assistant on the unified target
    line = refused(("patch", target, "--checkpoint", PAIR / "ckpt", "--force"), target)
    assert "model_type gemma4_assistant is made for a gemma4 (not unified) target, the target is " \
        "gemma4_unified_text" in line, line
