"""The house: families registered by model_type, the build dispatching on them and checking that the graph uses
exactly the tensors the family's table loads; a model_type that is not a string, or a boolean of config.json that is
not true or false, refused in one line by every family."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers.checkpoints import read_tensors, write_variant
from helpers.cli import refused
from helpers.edits import checkpoint_config, edit_json
from helpers.gemma4 import DATA
from lab.demo import DEMO_TARGET, writable_copy
from lab.families import FAMILIES as FAMILY_PARAMS  # pytest params, one per registered family
from lab.families import fixture_pair
from irsurgeon.draft.build import build_model
from irsurgeon.flows.standalone import build_mtp_model, load_mtp
from irsurgeon.core.errors import CheckpointError, ConfigError
from irsurgeon.families.gemma4_mtp import model as gemma4_assistant
from irsurgeon.families.qwen35_mtp import model as qwen35_mtp
from irsurgeon.families import registry
from irsurgeon.families.registry import FAMILIES
from irsurgeon.weights.spec import LazyWeights
from irsurgeon.weights.table import Tensor

ROOT = Path(__file__).resolve().parents[1]
DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_5" / "ckpt"


def test_every_checkpoint_has_one_family():
    assert {t for f in FAMILIES for t in f.model_types} >= {"qwen3_5", "gemma4_assistant", "qwen3"}  # claims decide
    names = [f.recipe().name for f in FAMILIES]
    assert len(set(names)) == len(names) and {"qwen3_5_mtp", "gemma4_assistant", "dflash_draft"} <= set(names)
    for family in FAMILIES:  # each fixture checkpoint's config.json is claimed by its family alone
        config = json.loads((ROOT / "fixtures" / family.key / "ckpt" / "config.json").read_text())
        assert [f for f in FAMILIES if f.claims(config)] == [family]
    with pytest.raises(ConfigError, match=r"model_type 'llama' has no supported draft family .*qwen3_5.*gemma4_assistant"):
        registry.for_config({"model_type": "llama"}, "config.json")


def test_a_family_that_does_not_state_its_claims_is_refused_where_it_is_defined():
    from irsurgeon.draft.protocol import Family

    with pytest.raises(TypeError, match="does not state .*model_types.*synth_kinds"):
        type("Nameless", (Family,), {"key": "x", "title": "X", "describe": "x", "layout": object()})


def test_only_the_qwen_norm_rows_carry_the_one_plus_fold():
    cfg, _, ckpt = load_mtp(DEMO)
    ckpt.close()
    folded = sorted(t.role for t in qwen35_mtp.tensors(cfg).tensors if t.transform is not None)
    assert folded and all("norm" in role for role in folded)
    assert len(folded) == 7  # 3 head norms, 2 layer norms, q/k norms
    gemma = gemma4_assistant.tensors(gemma4_assistant.load_assistant_config(DATA / "plain" / "config.json"))
    assert not any(t.transform for t in gemma.tensors)


def random_weights(cfg) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {role: rng.standard_normal(shape).astype(np.float32) * 0.1
            for role, shape in qwen35_mtp.tensors(cfg).shapes().items()}


def test_a_loaded_tensor_the_graph_never_uses_is_refused():
    cfg, _, ckpt = load_mtp(DEMO)
    ckpt.close()
    weights = random_weights(cfg)
    build_model(cfg, weights, "f32")  # the family's own table: every row used
    extra = Tensor("spare.weight", (cfg.hidden_size,))
    family = dataclasses.replace(qwen35_mtp.RECIPE, tensors=lambda c: dataclasses.replace(
        qwen35_mtp.tensors(c), tensors=qwen35_mtp.tensors(c).tensors + (extra,)))
    weights["spare.weight"] = np.ones(cfg.hidden_size, np.float32)
    with pytest.raises(CheckpointError, match=r"tensor mtp\.spare\.weight was loaded but the qwen3_5_mtp graph "
                                              r"never used it"):
        build_model(cfg, weights, "f32", recipe=family)


def test_a_tensor_the_table_does_not_load_is_refused():
    cfg, _, ckpt = load_mtp(DEMO)
    ckpt.close()
    weights = random_weights(cfg)
    del weights["fc.weight"]
    with pytest.raises(CheckpointError, match=r"asks for tensor mtp\.fc\.weight, which its table does not load"):
        build_model(cfg, weights, "f32")


def test_membership_does_not_decode_a_tensor():
    reads = []
    lazy = LazyWeights({"a": lambda: reads.append("a") or np.zeros(2, np.float32)})
    assert "a" in lazy and "b" not in lazy and not reads
    lazy["a"]
    assert reads == ["a"]


def test_build_dispatches_a_gemma4_assistant_checkpoint_by_its_model_type():
    model = build_mtp_model(DATA / "plain", weight_format="f32")
    assert model.get_friendly_name() == "gemma4_assistant"
    assert sorted(o.get_any_name() for o in model.outputs) == ["last_hidden_state", "logits"]
    assert model.get_rt_info(["irsurgeon", "model_type"]).astype(str) == "gemma4_assistant"


def test_table_layouts_read_parts_and_stacks_of_their_stored_tensors(tmp_path):
    """A Part along either axis and a Stack give the same float32 (and f16) arrays as slicing / stacking numpy."""
    from irsurgeon.weights.checkpoint import Checkpoint
    from irsurgeon.weights.safetensors_io import write_safetensors
    from irsurgeon.weights.spec import load_weights
    from irsurgeon.weights.table import Part, Stack, Table

    rng = np.random.default_rng(1)
    fused = rng.standard_normal((6, 4)).astype(np.float32)
    items = [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(3)]
    stored = {"h.fused": fused, **{f"h.item.{i}.w": a for i, a in enumerate(items)}}
    write_safetensors(tmp_path / "model.safetensors", stored, {n: "F32" for n in stored})
    (tmp_path / "config.json").write_text("{}")
    table = Table("h.", (
        Tensor("top", (2, 4), {"one": Part("fused", (6, 4), 0, 0, 2)}),
        Tensor("right", (6, 3), {"one": Part("fused", (6, 4), 1, 1, 4)}),
        Tensor("stack", (3, 3, 2), {"one": Stack("item.{i}.w", 3, "item")}),
    ), layouts=("one",))
    ckpt = Checkpoint.open(tmp_path)
    try:
        weights = load_weights(ckpt, table)
        want = {"top": fused[:2], "right": fused[:, 1:4], "stack": np.stack(items)}
        for role, expected in want.items():
            np.testing.assert_array_equal(weights[role], expected)
            np.testing.assert_array_equal(weights.half(role), expected.astype(np.float16))
    finally:
        ckpt.close()


def test_build_mtp_and_a_qwen_patch_refuse_a_checkpoint_of_another_family(tmp_path):
    """build-mtp writes the Qwen3.5 head and a Qwen target takes only that: a Gemma 4 assistant is named, not built."""
    from click.testing import CliRunner

    from irsurgeon.cli import main as cli

    result = CliRunner().invoke(cli, ["build-mtp", str(DATA / "plain"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "model_type 'gemma4_assistant' is a Gemma 4 MTP assistant" in result.output
    assert "expected a Qwen3.5 / Qwen3.6 MTP head" in result.output
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match="expected a Qwen3.5"):
        load_mtp(DATA / "plain", family=registry.by_key("qwen3_5"))


GEMMA_ASSISTANT = Path(__file__).resolve().parents[1] / "fixtures" / "gemma4" / "ckpt"


def ordered_off(config: dict) -> None:
    config["use_ordered_embeddings"] = False


@pytest.mark.parametrize("edit, extra, note", [
    (None, "lm_head.weight", None),  # the tied lm_head: tolerated silently
    (ordered_off, None, "masked_embedding.centroids.weight, masked_embedding.token_ordering not read "
                        "(use_ordered_embeddings is off)"),
])
def test_gemma4_assistant_tolerates_the_tensors_it_never_reads(tmp_path, edit, extra, note):
    tensors = read_tensors(GEMMA_ASSISTANT)
    if extra:
        tensors[extra] = tensors["model.embed_tokens.weight"]
    d = write_variant(GEMMA_ASSISTANT, tmp_path / "ckpt", tensors, edit)
    notes = []
    cfg, weights, ckpt = load_mtp(d, warn=notes.append)
    ckpt.close()
    assert sorted(weights) == sorted(gemma4_assistant.tensor_table(cfg))
    assert [n.split(": ", 2)[-1] for n in notes] == ([note] if note else [])


def test_gemma4_assistant_refuses_a_masked_embedding_tensor_transformers_does_not_have(tmp_path):
    """transformers 5.24.0 modeling_gemma4_assistant.py Gemma4AssistantMaskedEmbedder holds `centroids` (a Linear
    without bias) and the `token_ordering` buffer only: any other masked_embedding.* tensor is foreign."""
    tensors = read_tensors(GEMMA_ASSISTANT)
    tensors["masked_embedding.other"] = tensors["model.norm.weight"]
    d = write_variant(GEMMA_ASSISTANT, tmp_path / "ckpt", tensors, ordered_off)
    with pytest.raises(CheckpointError, match=r"unexpected tensor masked_embedding\.other"):
        load_mtp(d, warn=lambda _: None)


# --- a model_type that is not a string, in a target or a checkpoint of every family ------------------------------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_a_target_model_type_that_is_not_a_string_is_refused_by_every_command(family, tmp_path):
    target, ckpt = fixture_pair(family, tmp_path)
    kind = json.loads((target / "config.json").read_text())["model_type"]
    edit_json(target / "config.json", model_type=[kind])
    expected = f"{target / 'config.json'}: model_type must be a string, found [\"{kind}\"]"
    for args in (("patch", target, "--checkpoint", ckpt), ("verify", target), ("show", target)):
        assert expected in refused(args, target), args


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_a_checkpoint_model_type_that_is_not_a_string_is_refused(family, tmp_path):
    target, source = fixture_pair(family, tmp_path)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(source, ckpt)
    edit_json(ckpt / "config.json", model_type=[json.loads((source / "config.json").read_text())["model_type"]])
    line = refused(("patch", target, "--checkpoint", ckpt), target)
    assert f"{ckpt / 'config.json'}: model_type must be a string, found [" in line


@pytest.mark.usefixtures("no_hang")
def test_a_text_config_model_type_that_is_not_a_string_is_refused(tmp_path):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    config = json.loads((target / "config.json").read_text())
    config["text_config"]["model_type"] = {"a": 1}
    (target / "config.json").write_text(json.dumps(config))
    line = refused(("verify", target), target)
    assert 'config.json: text_config.model_type must be a string, found {"a": 1}' in line


# --- booleans of config.json: true or false, nothing else ---------------------------------------------------------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("family, key, value", [
    ("qwen3_5", "text_config.attention_bias", 1), ("qwen3_5", "text_config.mtp_use_dedicated_embeddings", "false"),
    ("dflash", "attention_bias", "false"), ("dflash", "use_sliding_window", "true"),
])
def test_every_family_refuses_a_boolean_that_is_not_one(family, key, value):
    with pytest.raises(ConfigError) as e:
        registry.by_key(family).recipe().parse_config(checkpoint_config(family, key, value), "config.json")
    assert str(e.value) == f"config.json: {key} must be true or false, found {json.dumps(value)}"
