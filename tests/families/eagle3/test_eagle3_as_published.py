"""EAGLE-3 drafts as their publishers upload them: a checkpoint is an EAGLE-3 draft by what it holds, whatever its
config's labels say (irsurgeon/families/eagle3/layout.py held_draft, reading).

SafeAILab's own uploads (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B and the others) say `architectures:
["LlamaForCausalLM"]`, and the Vicuna-13B draft's config copies its base model's `num_hidden_layers: 40` over a
checkpoint of one layer (tests/data/eagle3_configs holds the published configs with their sources). vLLM and SGLang take
them by their tensors. Here the bundled draft's tensors go under such configs: the draft built is the one its labelled
config builds, byte for byte, and a plain Llama checkpoint is never taken for one.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import invoke
from helpers.eagle3 import variant
from lab.families import FIXTURE_PAIRS
from irsurgeon.families import registry
from irsurgeon.families.eagle3 import layout
from irsurgeon.weights.held import Held
from irsurgeon.weights.safetensors_io import write_safetensors

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]
DRAFT = Path(layout.DRAFT_DIR)


def relabelled(where: Path, **change) -> Path:
    return variant(where, CKPT, **change)


def patched(tmp_path: Path, ckpt: Path, name: str) -> tuple[Path, str]:
    target = Path(shutil.copytree(TARGET, tmp_path / name))
    result = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f32")
    assert result.exit_code == 0, result.output
    return target, result.output


def test_safeailabs_upload_as_published_builds_the_draft_its_labelled_config_builds(tmp_path):
    published = relabelled(tmp_path / "published", architectures=["LlamaForCausalLM"], num_hidden_layers=40)
    target, said = patched(tmp_path, published, "t")
    reference, _ = patched(tmp_path, CKPT, "ref")
    assert ('architectures ["LlamaForCausalLM"] and num_hidden_layers 40 set aside: read as an EAGLE-3 draft '
            "(LlamaForCausalLMEagle3's layout) by what the checkpoint holds (model.safetensors): fc.weight [64, 192], "
            "one layer "
            "midlayer.* with hidden_norm, d2t and lm_head.weight") in said, said
    assert (target / DRAFT / "openvino_model.bin").read_bytes() == (reference / DRAFT / "openvino_model.bin").read_bytes()
    kept = json.loads((target / DRAFT / "config.json").read_text())
    assert kept["architectures"] == [layout.SAFEAILAB] and kept["num_hidden_layers"] == 1
    assert invoke("verify", target).exit_code == 0
    again = invoke("patch", target, "--checkpoint", published, "--weight-format", "f32")
    assert again.exit_code == 0 and "nothing to do" in again.output, again.output


def test_a_labelled_draft_whose_config_copies_the_base_layer_count_is_read_as_the_one_layer_it_holds(tmp_path):
    copied = relabelled(tmp_path / "c", num_hidden_layers=40)
    _, said = patched(tmp_path, copied, "t")
    assert "num_hidden_layers 40 set aside: read as an EAGLE-3 draft (one layer)" in said, said


def test_a_labelled_draft_as_its_config_says_is_read_without_a_word(tmp_path):
    _, said = patched(tmp_path, CKPT, "t")
    assert "set aside" not in said


def plain_llama(where: Path, extra: dict | None = None) -> Path:
    """A one-layer plain LlamaForCausalLM checkpoint (transformers' names), of the draft's widths."""
    rng = np.random.default_rng(0)
    H, V, I = 64, 256, 64
    names = {"model.embed_tokens.weight": (V, H), "lm_head.weight": (V, H), "model.norm.weight": (H,),
             **{f"model.layers.0.{n}": s for n, s in (
                 ("self_attn.q_proj.weight", (H, H)), ("self_attn.k_proj.weight", (32, H)),
                 ("self_attn.v_proj.weight", (32, H)), ("self_attn.o_proj.weight", (H, H)),
                 ("mlp.gate_proj.weight", (I, H)), ("mlp.up_proj.weight", (I, H)), ("mlp.down_proj.weight", (H, I)),
                 ("input_layernorm.weight", (H,)), ("post_attention_layernorm.weight", (H,)))}}
    tensors = {n: rng.standard_normal(s).astype(np.float32) for n, s in names.items()}
    for name, shape in (extra or {}).items():
        tensors[name] = rng.standard_normal(shape).astype(np.float32)
    where.mkdir(parents=True)
    write_safetensors(where / "model.safetensors", tensors)
    config = json.loads((CKPT / "config.json").read_text())
    config.update(architectures=["LlamaForCausalLM"], draft_vocab_size=None, eagle_config=None)
    (where / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return where


@pytest.mark.parametrize("extra", [None, {"fc.weight": (64, 192)}], ids=["plain", "with-an-fc"])
def test_a_plain_llama_checkpoint_is_never_taken_for_a_draft(tmp_path, extra):
    ckpt = plain_llama(tmp_path / "llama", extra)
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 1, result.output
    assert "has no supported draft family" in result.output and "fc.weight [H, 3H]" in result.output
    assert not (target / DRAFT).exists()


@pytest.mark.parametrize("names, shapes, claimed", [
    ({"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t"}, {}, True),
    ({"fc.weight", "layers.0.hidden_norm.weight", "layers.0.self_attn.q_proj.weight", "lm_head.weight"}, {}, True),
    # EAGLE-1/2 heads: no hidden_norm, fc over two states
    ({"fc.weight", "layers.0.self_attn.q_proj.weight", "lm_head.weight"}, {}, False),
    # two draft layers; no draft head; a base model's layers beside
    ({"fc.weight", "layers.0.hidden_norm.weight", "layers.0.self_attn.q_proj.weight", "layers.1.mlp.up_proj.weight",
      "lm_head.weight"}, {}, False),
    ({"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight"}, {}, False),
    ({"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t",
      "model.layers.0.mlp.up_proj.weight"}, {}, False),
    # fc's shape, where a header was read: [H, 3 * H_t] over a layer of width H
    ({"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t"},
     {"fc.weight": (64, 128), "midlayer.hidden_norm.weight": (64,)}, False),
    ({"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t"},
     {"fc.weight": (64, 192), "midlayer.hidden_norm.weight": (64,)}, True),
])
def test_what_a_checkpoint_holds_decides_whether_it_is_an_eagle3_draft(names, shapes, claimed):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    held = Held(names=names, shapes=shapes)
    if claimed:
        assert registry.for_config(config, "config.json", held).key == "eagle3"
    else:
        with pytest.raises(Exception, match="has no supported draft family"):
            registry.for_config(config, "config.json", held)


def test_a_hub_snapshot_before_its_weights_is_judged_by_its_index(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    names = ["fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t"]
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}))
    held = Held(tmp_path)
    assert held.known and held.names == frozenset(names) and held.shape("fc.weight") is None
    assert registry.for_checkpoint(tmp_path).key == "eagle3"


def test_a_relabelled_angelslim_draft_is_read_as_angelslims_by_the_keys_only_its_trainer_writes():
    """modal_type, aux_hidden_states_layer_ids and rope_scaling.mrope_interleaved are AngelSlim's: a config naming no
    layout but carrying one is read as AngelSlim's (interleaved mrope, base 10000 for a text draft), never as
    SafeAILab's."""
    vlm = json.loads((Path(__file__).resolve().parents[2] / "data" / "eagle3_vlm" / "ckpt" / "config.json").read_text())
    vlm["architectures"] = ["LlamaForCausalLM"]
    held = Held(names={"fc.weight", "midlayer.hidden_norm.weight", "midlayer.self_attn.q_proj.weight", "d2t"})
    read, said = layout.reading(vlm, held, "config.json")
    assert read["architectures"] == [layout.ANGELSLIM] and "Eagle3LlamaForCausalLM's layout" in said[0]
    from irsurgeon.families.eagle3 import model as eagle3
    assert eagle3.parse_config(read).rope.interleaved
    text = {**json.loads((CKPT / "config.json").read_text()), "architectures": ["LlamaForCausalLM"],
            "aux_hidden_states_layer_ids": [0, 1, 2], "rope_theta": 1e6, "eagle_config": None}
    read, _ = layout.reading({k: v for k, v in text.items() if v is not None}, held, "config.json")
    cfg = eagle3.parse_config(read)
    assert cfg.architecture == layout.ANGELSLIM and cfg.rope.theta == 10000.0 and cfg.taps.ids == (0, 1, 2)


@pytest.mark.parametrize("change, said", [({"eagle_config": "junk"}, 'eagle_config must be a JSON object, found "junk"'),
                                          ({"eagle_config": [1, 5, 8]}, "eagle_config must be a JSON object"),
                                          ({"num_hidden_layers": True}, "num_hidden_layers is true"),
                                          ({"num_hidden_layers": 1.0}, "num_hidden_layers is 1.0")])
def test_a_labelled_config_of_the_wrong_type_is_refused_naming_the_key(change, said):
    from irsurgeon.core.errors import ConfigError
    from irsurgeon.families.eagle3 import model as eagle3

    config = {**json.loads((CKPT / "config.json").read_text()), **change}
    with pytest.raises(ConfigError, match="^c.json: ") as refused:
        eagle3.parse_config(config, "c.json")
    assert said in str(refused.value)


def test_a_dry_run_says_what_the_config_leaves_aside_as_the_run_does(tmp_path):
    ckpt = relabelled(tmp_path / "phi", model_type="phi3")
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    for args in (("--dry-run",), ()):
        result = invoke("patch", target, "--checkpoint", ckpt, *args)
        assert result.exit_code == 0 and result.output.count("model_type 'phi3' not read") == 1, result.output


def test_a_ready_target_still_refuses_a_checkpoint_config_it_cannot_read(tmp_path):
    target, _ = patched(tmp_path, CKPT, "t")
    broken = relabelled(tmp_path / "broken", hidden_size="x")
    result = invoke("patch", target, "--checkpoint", broken)
    assert result.exit_code == 1 and "hidden_size must be an integer" in result.output, result.output


def safeailab_upload(where: Path, source: Path = CKPT) -> Path:
    """A draft as SafeAILab uploads it: config.json labelled LlamaForCausalLM with the base model's layer count, and
    the tensors in pytorch_model.bin (its traineagle3 saves with torch), no safetensors."""
    from lab import torch_zip

    where.mkdir(parents=True)
    torch_zip.from_safetensors(source / "model.safetensors", where / "pytorch_model.bin")
    config = json.loads((source / "config.json").read_text())
    config.update(architectures=["LlamaForCausalLM"], num_hidden_layers=40)
    (where / "config.json").write_text(json.dumps(config, indent=2))
    return where


def test_safeailabs_upload_from_pytorch_model_bin_builds_the_same_draft_bit_for_bit(tmp_path):
    upload = safeailab_upload(tmp_path / "upload")
    target, said = patched(tmp_path, upload, "t")
    reference, _ = patched(tmp_path, CKPT, "ref")
    assert "set aside: read as an EAGLE-3 draft (LlamaForCausalLMEagle3's layout) by what the checkpoint holds " \
           "(pytorch_model.bin)" in said, said
    assert (target / DRAFT / "openvino_model.bin").read_bytes() == (reference / DRAFT / "openvino_model.bin").read_bytes()
    assert invoke("verify", target).exit_code == 0


@pytest.mark.parametrize("stored", ["bin", "safetensors"])
def test_safeailabs_upload_as_a_repo_id_is_fetched_and_judged_by_what_it_holds(tmp_path, stored):
    """No index in the repo, so no tensor name before its weights: a config naming no family has its one weight file
    fetched (a .bin whole, a safetensors file by range), then what it holds decides; the draft is the local one."""
    from lab.hub import run_cli
    from lab.hub_server import HubServer, Revision

    upload = safeailab_upload(tmp_path / "upload")
    if stored == "safetensors":
        (upload / "pytorch_model.bin").unlink()
        shutil.copy(CKPT / "model.safetensors", upload / "model.safetensors")
    files = {p.name: p for p in upload.iterdir()}
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    with HubServer({"yuhuili/EAGLE3-tiny": {"main": Revision(files)}}) as hub:
        proc, _ = run_cli("patch", target, "--checkpoint", "yuhuili/EAGLE3-tiny", "--weight-format", "f32",
                          endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "config.json names no draft family: fetching its weights to see what they hold" in proc.stdout
    reference, _ = patched(tmp_path, CKPT, "ref")
    assert (target / DRAFT / "openvino_model.bin").read_bytes() == (reference / DRAFT / "openvino_model.bin").read_bytes()


def test_a_repo_whose_labels_name_no_family_and_holding_a_plain_llama_is_refused_once_seen(tmp_path):
    from lab.hub import run_cli
    from lab.hub_server import HubServer, Revision

    ckpt = plain_llama(tmp_path / "llama")
    files = {p.name: p for p in ckpt.iterdir()}
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    with HubServer({"acme/llama": {"main": Revision(files)}}) as hub:
        proc, _ = run_cli("patch", target, "--checkpoint", "acme/llama", endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 1 and "has no supported draft family" in proc.stderr, proc.stderr
    assert not (target / DRAFT).exists()


def test_weights_larger_than_the_bound_are_refused_before_any_download(tmp_path, monkeypatch):
    """A base model given by mistake is not downloaded to be refused: the announced size decides first."""
    from irsurgeon.core import limits
    from irsurgeon.core.errors import CheckpointError
    from irsurgeon.weights.hub import partial

    snapshot = tmp_path / "models--acme--big" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    fetched = []
    monkeypatch.setattr(partial, "probe", lambda *_: True)
    monkeypatch.setattr(partial.hub_fetch, "file_size", lambda repo, name, hub: limits.JUDGE_FETCH_BYTES + 1
                        if name == "model.safetensors" else None)
    monkeypatch.setattr(partial, "fetch_weights", lambda *a, **k: fetched.append(a))
    with pytest.raises(CheckpointError, match=r"names no draft family, and its weights \(8.0 GiB\) are too large"):
        partial.fetch_to_judge("acme/big", snapshot, None, echo=lambda _: None)
    assert fetched == []
    monkeypatch.setattr(partial.hub_fetch, "file_size", lambda repo, name, hub: 1 << 20)
    partial.fetch_to_judge("acme/big", snapshot, None, echo=lambda _: None)
    assert len(fetched) == 1
