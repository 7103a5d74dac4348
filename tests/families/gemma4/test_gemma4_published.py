"""The published Gemma 4 MTP assistants (tests/data/gemma4_configs, SOURCES.json: release, revision and where each
was read), shrunk only in sizes: each is read as transformers reads it, built from a tiny checkpoint of its tensor
table, patched into a tiny target of the geometry it attends over (synth.Geometry: KV heads and head dims per layer
type, attention_k_eq_v, gemma4_text or the unified 12B's gemma4_unified_text) and verified; on a target of the other
kind it is refused in one line naming why."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from helpers.cli import refused
from irsurgeon.cli import main
from irsurgeon.families.gemma4_mtp import synth
from irsurgeon.families.gemma4_mtp.layout import UNIFIED_TYPE
from irsurgeon.families.gemma4_mtp.model import INTEGER_TENSORS, load_assistant_config, tensor_table
from irsurgeon.flows.verify import verify_directory
from irsurgeon.synth.registry import save, write_json
from irsurgeon.weights.safetensors_io import write_safetensors

CORPUS = Path(__file__).resolve().parents[2] / "data" / "gemma4_configs"
SOURCES = json.loads((CORPUS / "SOURCES.json").read_text())
ASSISTANTS = SOURCES["assistants"]
SIZE_KEYS = {"backbone_hidden_size", "num_centroids", "centroid_intermediate_top_k", "vocab_size",
             *(f"text_config.{k}" for k in ("hidden_size", "intermediate_size", "vocab_size", "head_dim",
                                             "global_head_dim", "num_attention_heads", "num_key_value_heads",
                                             "num_global_key_value_heads"))}


def test_every_folder_has_its_source_and_only_sizes_were_shrunk():
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == sorted(ASSISTANTS)
    for name, source in ASSISTANTS.items():
        assert source["release"].startswith("https://huggingface.co/google/") and source["read_from"], name
        assert set(source["shrunk"]) <= SIZE_KEYS, name
        assert source["expected"] in ("taken", "refused"), name
    assert ASSISTANTS["google__gemma-4-E2B-it-assistant"]["complete"] is True


def checkpoint(cfg_path: Path, out: Path, seed: int = 0) -> Path:
    """config.json + model.safetensors of the config's tensor table (random weights, a permutation as ordering)."""
    cfg = load_assistant_config(cfg_path)
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in tensor_table(cfg).items():
        if name in INTEGER_TENSORS:
            tensors[name] = rng.permutation(cfg.vocab_size).astype(np.int64)
        else:
            tensors[name] = (rng.standard_normal(shape) / (shape[-1] ** 0.5 if len(shape) == 2 else 1.0) + (
                0 if len(shape) == 2 else 1.0)).astype(np.float32)
    out.mkdir(parents=True)
    (out / "config.json").write_bytes(cfg_path.read_bytes())
    write_safetensors(out / "model.safetensors", tensors)
    return out


def geometry(cfg, unified: bool) -> synth.Geometry:
    layers = {kind: cfg.layer_of(kind) for kind in ("sliding_attention", "full_attention")}
    return synth.Geometry(kv_heads={k: x.kv_heads for k, x in layers.items()},
                          head_dim={k: x.head_dim for k, x in layers.items()}, heads=cfg.num_heads,
                          k_eq_v=cfg.k_eq_v, model_type="gemma4_unified_text" if unified else "gemma4_text")


def target(out: Path, g: synth.Geometry) -> Path:
    save(synth.target_model(synth.target_tensors(0, g=g), g=g), out / synth.MODEL_XML)
    write_json(out / "config.json", synth.target_config(g))
    write_json(out / "generation_config.json", {"do_sample": False, "eos_token_id": 2, "pad_token_id": 0})
    return out


@pytest.mark.parametrize("name", sorted(ASSISTANTS))
def test_a_published_assistant_builds_patches_and_verifies_or_is_refused(tmp_path, name):
    cfg_path = CORPUS / name / "config.json"
    if ASSISTANTS[name]["expected"] == "refused":
        ckpt = tmp_path / "ckpt"
        ckpt.mkdir()
        (ckpt / "config.json").write_bytes(cfg_path.read_bytes())  # weights present: the config is what refuses
        write_safetensors(ckpt / "model.safetensors", {"pre_projection.weight": np.zeros((32, 128), np.float32)})
        good = target(tmp_path / "target", synth.GEOMETRY)
        line = refused(("patch", good, "--checkpoint", ckpt), good)
        assert "text_config must have hidden_size_per_layer_input 0" in line, line
        return
    cfg = load_assistant_config(cfg_path)
    unified = cfg.model_type == UNIFIED_TYPE
    ckpt = checkpoint(cfg_path, tmp_path / "ckpt")
    good = target(tmp_path / "target", geometry(cfg, unified))
    result = CliRunner().invoke(main, ["patch", str(good), "--checkpoint", str(ckpt), "--weight-format", "f32"])
    assert result.exit_code == 0, result.output
    checks = verify_directory(good)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    other = target(tmp_path / "other", geometry(cfg, not unified))
    line = refused(("patch", other, "--checkpoint", ckpt), other)
    assert f"model_type {cfg.model_type} is made for" in line and "the target is" in line, line


def test_the_published_geometry_is_read_as_transformers_reads_it():
    """What each release's config resolves to (Gemma4TextConfig / Gemma4UnifiedTextConfig.__post_init__, 5.25.0):
    the 31B and 12B assistants attend over k = v full layers with one global KV head (shrunk), E2B / E4B over
    ordinary ones; the 12B keeps the unified text config's sliding_window."""
    got = {name: load_assistant_config(CORPUS / name / "config.json") for name in ASSISTANTS
           if ASSISTANTS[name]["expected"] == "taken"}
    assert {n: (c.k_eq_v, c.layer_of("full_attention").kv_heads, c.layer_of("sliding_attention").kv_heads)
            for n, c in got.items()} == {"google__gemma-4-E2B-it-assistant": (False, 1, 1),
                                         "google__gemma-4-31B-it-assistant": (True, 1, 4),
                                         "google__gemma-4-12B-it-assistant": (True, 1, 4)}
    assert [x.kind for x in got["google__gemma-4-12B-it-assistant"].layers] == ["sliding_attention"] * 3 + [
        "full_attention"]
    assert got["google__gemma-4-12B-it-assistant"].sliding_window == 1024
    assert got["google__gemma-4-E2B-it-assistant"].ordered and not got["google__gemma-4-12B-it-assistant"].ordered
