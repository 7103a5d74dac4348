"""AngelSlim text drafts (`Eagle3LlamaForCausalLM`, no modal_type VLM) as Tencent/AngelSlim's trainer
(compressor/speculative/train) has them: the RoPE base its draft trains with, and the key its online trainer reads
the taps from. The drafts are the bundled fixture's tensors under an AngelSlim config.

RoPE: models/draft/llama_eagle3.py LlamaAttention._init_rope builds the text draft's LlamaRotaryEmbedding without a
base (its default: 10000) whatever rope_theta says, where SpecForge's llama3_eagle.py and SafeAILab's eagle/model/
cnets.py pass the config's rope_theta. Tolerance as in test_eagle3_draft.py (f32 IR against float64: 1e-4 on logits
of O(1)); the bases 10000 and 1e6 differ in every frequency but the first, and over positions 0..5 move the logits by
far more than that (the negative control).

Taps: trainer/online_eagle3_trainer.py reads draft_model_config.aux_hidden_states_layer_ids, and
models/target/target_model_wrapper.py takes HF hidden_states[id + 1] (vLLM backend: each layer's forward output):
id k is the output of layer k, genai's counting, so the ids are written as they are.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from helpers.eagle3 import load_checkpoint, run_calls, target_embed, with_target_table
from helpers.eagle3 import variant as checkpoint_variant
from helpers.numpy_eagle3 import Eagle3Reference
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.errors import ConfigError
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import layout
from irsurgeon.families.eagle3 import model as eagle3

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]
THETA = 1_000_000.0  # what AngelSlim's Qwen3 draft configs say (train/configs/qwen3-1.7b-eagle3.json)
CALLS = [3, 1, 2]     # stateful calls: positions 0..5


def variant(where: Path, **change) -> Path:
    """The fixture checkpoint's tensors under its config with `change` (None removes a key)."""
    return checkpoint_variant(where, CKPT, **change)


def angelslim(where: Path, **change) -> Path:
    return variant(where, architectures=[layout.ANGELSLIM], eagle_config=None, **change)


def built(ckpt: Path, lines: list | None = None) -> ov.Model:
    cfg, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=(lines.append if lines is not None else print))
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE)
    finally:
        handle.close()


def reference_logits(ckpt: Path, feeds: list[dict], table: np.ndarray) -> list[np.ndarray]:
    tensors, config = load_checkpoint(ckpt)
    ref = Eagle3Reference(tensors, config, table)
    return [ref.step(f["input_ids"], f["hidden_states"].astype(np.float64), f["position_ids"])[0] for f in feeds]


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return target_embed(TARGET)


def test_an_angelslim_text_draft_runs_at_its_trainers_rope_base(tmp_path, table):
    """The IR of an AngelSlim draft whose config says rope_theta 1e6 equals the reference at base 10000 (what its
    trainer computes), and the config's theta is named in one line; the same tensors and config in the SafeAILab
    layout run at 1e6 (SpecForge / SafeAILab pass rope_theta), and the two differ far beyond the tolerance."""
    lines: list[str] = []
    ckpt = angelslim(tmp_path / "angelslim", rope_theta=THETA)
    outs, feeds = run_calls(with_target_table(built(ckpt, lines), table), CALLS)
    assert Eagle3Reference(*load_checkpoint(ckpt), table).theta == 10000.0
    for out, want in zip(outs, reference_logits(ckpt, feeds, table)):
        assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()
    said = [line for line in lines if "rope_theta" in line]
    assert len(said) == 1 and "rope_theta 1000000 overridden by 10000" in said[0], lines
    assert "llama_eagle3.py LlamaAttention._init_rope" in said[0]

    other = variant(tmp_path / "safeailab", rope_theta=THETA)
    theirs, _ = run_calls(with_target_table(built(other), table), CALLS)
    assert Eagle3Reference(*load_checkpoint(other), table).theta == THETA
    for out, want in zip(theirs, reference_logits(other, feeds, table)):
        assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()
    assert max(np.abs(a - b).max() for a, b in zip(outs, theirs)) > 1e-2


def test_no_line_when_the_config_says_the_trainers_base(tmp_path):
    cfg = eagle3.parse_config(json.loads((angelslim(tmp_path / "c", rope_theta=10000.0) / "config.json").read_text()))
    assert cfg.rope.theta == 10000.0 and not any("rope_theta" in w for w in cfg.warnings)
    v5 = eagle3.parse_config(json.loads((angelslim(tmp_path / "v5", rope_theta=None, rope_scaling=None,
                                                   rope_parameters={"rope_type": "default", "rope_theta": THETA})
                                         / "config.json").read_text()), "v5.json")
    assert v5.rope.theta == 10000.0 and any("rope_theta 1000000 overridden" in w for w in v5.warnings)


def test_a_rope_angelslims_trainer_does_not_build_as_this_family_does_is_refused():
    base = json.loads((CKPT / "config.json").read_text())
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}
    config = {**base, "architectures": [layout.ANGELSLIM], "rope_scaling": llama3}
    with pytest.raises(ConfigError, match=r"rope_scaling type 'llama3' in an AngelSlim text draft.*_init_rope"):
        eagle3.parse_config(config, "a.json")
    assert eagle3.parse_config({**base, "rope_scaling": llama3}).rope.kind == "llama3"  # SpecForge builds it


def test_angelslims_tap_key_is_read_as_layer_outputs_and_comes_first():
    base = {**json.loads((CKPT / "config.json").read_text()), "architectures": [layout.ANGELSLIM]}
    base.pop("eagle_config")
    cfg = eagle3.parse_config({**base, "aux_hidden_states_layer_ids": [0, 2, 3]}, "a.json")
    assert cfg.taps.ids == (0, 2, 3) and cfg.taps.said == "aux_hidden_states_layer_ids [0, 2, 3]"
    both = eagle3.parse_config({**base, "aux_hidden_states_layer_ids": [0, 2, 3],
                                "eagle_aux_hidden_state_layer_ids": [1, 2, 3]}, "a.json")
    assert both.taps.ids == (0, 2, 3)  # the eagle_* keys are not read by AngelSlim's trainer
    assert eagle3.parse_config(base, "a.json").taps.ids is None  # its default, resolved against the target
    assert eagle3.default_taps(layout.ANGELSLIM, 28) == (1, 13, 24)  # _get_default_aux_layer_ids, Qwen3-1.7B
    with pytest.raises(ConfigError, match="a.json: aux_hidden_states_layer_ids must be a list of integers"):
        eagle3.parse_config({**base, "aux_hidden_states_layer_ids": "1,2,3"}, "a.json")
    with pytest.raises(ConfigError, match="a.json: aux_hidden_states_layer_ids names 2 layers"):
        eagle3.parse_config({**base, "aux_hidden_states_layer_ids": [1, 2]}, "a.json")


def test_angelslims_tap_key_on_another_layout_is_named_and_not_read():
    base = json.loads((CKPT / "config.json").read_text())
    cfg = eagle3.parse_config({**base, "aux_hidden_states_layer_ids": [0, 2, 3]}, "s.json")
    assert cfg.taps.ids == (0, 1, 2)  # eagle_config's, as SpecForge reads it
    assert any("aux_hidden_states_layer_ids not read" in w and "LlamaForCausalLMEagle3" in w for w in cfg.warnings)


def test_patch_writes_angelslims_taps_and_says_the_rope_base(tmp_path):
    ckpt = angelslim(tmp_path / "ckpt", rope_theta=THETA, aux_hidden_states_layer_ids=[0, 2, 3])
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    assert "taps [0, 2, 3] from aux_hidden_states_layer_ids [0, 2, 3]" in result.output, result.output
    assert "rope_theta 1000000 overridden by 10000" in result.output, result.output
    draft = ov.Core().read_model(str(target / "eagle3_draft" / "openvino_model.xml"))
    assert draft.get_rt_info([eagle3.HIDDEN_LAYERS]).astype(str) == "0 2 3"
    assert invoke("verify", target).exit_code == 0
