"""Every published EAGLE-3 draft config in tests/data/eagle3_configs (read from its trainer's repository at a pinned
commit, shrunk only in sizes: SOURCES.json gives repository, commit, path and the original values) is taken or
refused as SOURCES.json's `expected` says, judged by what openvino-genai 2026.4.1 can run as trained; each one taken
builds a draft whose one call gives finite logits of the draft vocabulary (the check patch runs where it stages it).

A config whose labels name no EAGLE-3 layout (SafeAILab's own uploads say LlamaForCausalLM) is read by what its
checkpoint holds: the tensor names SOURCES.json records for that publisher (irsurgeon/families/eagle3/layout.py
reading).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import layout
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3.patch import smoke_test
from irsurgeon.weights.held import Held
from irsurgeon.weights.safetensors_io import write_safetensors
from helpers.tiers import every_nth

CORPUS = Path(__file__).resolve().parents[2] / "data" / "eagle3_configs"
SOURCES = json.loads((CORPUS / "SOURCES.json").read_text())
DRAFTS = sorted(p.name for p in CORPUS.iterdir() if (p / "config.json").is_file())


def test_the_corpus_covers_every_publisher_and_says_where_each_config_comes_from():
    assert {d.split("__")[0] for d in DRAFTS} >= {"SafeAILab", "SpecForge", "AngelSlim", "speculators"}
    for name in DRAFTS:
        source = SOURCES[name]
        assert source["repository"] and source["path"] and source["expected"]["verdict"] in ("accept", "refuse")


def held_names(name: str) -> frozenset[str]:
    """The tensor names the publisher's checkpoint holds, as SOURCES.json records them ('fc.weight [H, 3*H_t]')."""
    return frozenset(entry.split()[0] for entry in SOURCES[name]["tensor_layout"]["tensors"])


def read(name: str) -> eagle3.Eagle3Config:
    config = json.loads((CORPUS / name / "config.json").read_text())
    config, _ = layout.reading(config, Held(names=held_names(name)), "config.json")
    return eagle3.parse_config(config, f"{name}/config.json")


@pytest.mark.parametrize("name", [n for n in DRAFTS if SOURCES[n]["expected"]["verdict"] == "refuse"])
def test_a_published_draft_genai_cannot_run_as_trained_is_refused_in_one_line(name):
    with pytest.raises(IRSurgeonError) as refused:
        read(name)
    assert str(refused.value).startswith(f"{name}/config.json: ") and "\n" not in str(refused.value)


def random_checkpoint(where: Path, cfg: eagle3.Eagle3Config, prefix: str) -> Path:
    """Seeded tensors of the shapes cfg's table asks for, stored under the publisher's layer prefix."""
    rng = np.random.default_rng(0)
    stored = eagle3.tensors(cfg).stored(next(k for k, p in eagle3.LAYOUTS.items() if p == prefix))
    tensors = {n: (np.zeros(s, np.int64) if n == eagle3.D2T else (rng.standard_normal(s) * 0.1).astype(np.float32))
               for n, s in stored.items()}
    where.mkdir(parents=True, exist_ok=True)
    write_safetensors(where / "model.safetensors", tensors)
    return where


@pytest.mark.parametrize("name", every_nth([n for n in DRAFTS if SOURCES[n]["expected"]["verdict"] == "accept"], 2,
                                          ids=str))
def test_a_published_draft_genai_runs_is_taken_and_its_draft_runs(name, tmp_path):
    cfg = read(name)
    prefix = SOURCES[name]["tensor_layout"]["layer_prefix"]
    ckpt = random_checkpoint(tmp_path / "ckpt", cfg, prefix)
    (ckpt / "config.json").write_text("{}")  # the build reads cfg as given (load_with cfg=)
    cfg_, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=lambda _: None, cfg=cfg)
    try:
        model = build_model(cfg_, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE)
    finally:
        handle.close()
    model.set_rt_info([1, 2, 3], [eagle3.HIDDEN_LAYERS])  # what stage records (the taps are the target's question)
    xml = tmp_path / "draft.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    smoke_test(xml, cfg)  # genai's surgery conditions, then one call: finite logits [1, 2, rows]
