"""z-lab's published DFlash draft configs (tests/data/dflash_configs, SOURCES.json: release and where each was read),
shrunk only in sizes: each is read as z-lab's DFlashDraftModel reads it and pairs with a target of its geometry."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from irsurgeon.families.dflash.model import parse_config
from irsurgeon.families.dflash.target import DFlashTarget, check_pair

CORPUS = Path(__file__).resolve().parents[2] / "data" / "dflash_configs"
SOURCES = json.loads((CORPUS / "SOURCES.json").read_text())["drafts"]


def test_every_folder_has_its_source_and_only_sizes_were_shrunk():
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == sorted(SOURCES)
    for name, source in SOURCES.items():
        assert source["release"].startswith("https://huggingface.co/z-lab/") and source["read_from"]
        assert set(source["shrunk"]) <= {"hidden_size", "intermediate_size", "num_attention_heads",
                                         "num_key_value_heads", "head_dim", "vocab_size"}, name


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_gemma4_release_is_read_as_zlab_reads_it_and_pairs_with_its_target(name):
    cfg = json.loads((CORPUS / name / "config.json").read_text())
    draft = parse_config(cfg, name)
    # dflash/model.py Qwen3DFlashAttention: a sliding_attention layer is causal when is_causal is unset
    assert [(x.kind, x.window, x.causal) for x in draft.layers] == [("sliding_attention", 2048, True)] * 4 + [
        ("full_attention", None, False)]
    assert draft.mask_token_id == 4 and draft.target_layer_ids == tuple(cfg["dflash_config"]["target_layer_ids"])
    target = DFlashTarget(Path("t"), "openvino_model.xml", "gemma4_text", cfg["num_target_layers"],
                          cfg["hidden_size"], cfg["vocab_size"])
    check_pair(target, draft)
