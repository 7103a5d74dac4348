"""The Gemma 4 assistant built by irsurgeon against transformers 5.24.0's eager float32 outputs (goldens).

Tolerance: 1e-4 absolute on logits and last_hidden_state (values of order 1-10). The f32 build differs from torch by
at most ~2e-5 (summation order, float32 rope tables); each negative control below (a builder that hard-codes the
window, ignores the ordered embeddings, uses another theta or shifts the norms by one) moves some output by far more
than the tolerance, so the tolerance cannot hide those bugs.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from helpers.edits import checkpoint_config
from helpers.gemma4 import DATA, CASES, calls, worst_errors
from irsurgeon.core.errors import CheckpointError, ConfigError
from irsurgeon.families.gemma4_mtp.build import build_assistant
from irsurgeon.families import registry
from irsurgeon.families.gemma4_mtp.model import load_assistant_config
from helpers.tiers import every_nth

TOL = 1e-4


def worst(errors) -> float:
    return max(max(e.values()) for e in errors)


@pytest.mark.parametrize("case", CASES)
def test_matches_transformers_every_call(case):
    model, _ = build_assistant(DATA / case, "f32")
    errors = worst_errors(model, case)
    for c, e in enumerate(errors):
        print(case, c, e)
    assert len(errors) >= 5 and worst(errors) < TOL


def test_calls_cover_kv_shorter_and_longer_than_the_window():
    for case in CASES:
        window = load_assistant_config(DATA / case / "config.json").sliding_window
        lengths = {feed["sliding_attention_key"].shape[2] for feed, _ in calls(case)}
        assert min(lengths) < window and max(lengths) > window + 1


def replaced(case, **changes):
    cfg = load_assistant_config(DATA / case / "config.json")
    return dataclasses.replace(cfg, **changes)


def rope_with(case, kind, theta_factor):
    cfg = load_assistant_config(DATA / case / "config.json")
    rope = {k: dict(v) for k, v in cfg.rope.items()}
    rope[kind]["rope_theta"] *= theta_factor
    return dataclasses.replace(cfg, rope=rope)


CONTROLS = {
    "window - 1": lambda case: dict(config=replaced(case, sliding_window=replaced(case).sliding_window - 1)),
    "window + 1": lambda case: dict(config=replaced(case, sliding_window=replaced(case).sliding_window + 1)),
    "sliding theta x2": lambda case: dict(config=rope_with(case, "sliding_attention", 2.0)),
    "full theta x2": lambda case: dict(config=rope_with(case, "full_attention", 2.0)),
    "norms 1 + w": lambda case: dict(adjust=lambda n, w: w + 1 if n.endswith("norm.weight") else w),
}


@pytest.mark.parametrize("control, case", every_nth([(c, k) for c in sorted(CONTROLS) for k in CASES], 3,
                                                   ids=lambda p: f"{p[0]}-{p[1]}"))
def test_negative_controls_break_the_tolerance(case, control):
    model, _ = build_assistant(DATA / case, "f32", **CONTROLS[control](case))
    error = worst(worst_errors(model, case))
    print(case, control, error)
    assert error > 10 * TOL


def test_ignoring_ordered_embeddings_breaks_the_tolerance():
    cfg = replaced("ordered", ordered=False)
    model, _ = build_assistant(DATA / "ordered", "f32", config=cfg)
    errors = worst_errors(model, "ordered")
    print("ordered embeddings ignored", errors)
    assert max(e["logits"] for e in errors) > 10 * TOL


def test_bad_assistant_checkpoints_are_one_line_errors(tmp_path):
    import json
    import shutil

    bad = tmp_path / "a"
    shutil.copytree(DATA / "ordered", bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] = 41
    (bad / "config.json").write_text(json.dumps(cfg))
    shape_error = r"tensor model\.layers\.0\.mlp\.\w+_proj\.weight: expected shape \[\d+, \d+\] from the config, found"
    with pytest.raises(CheckpointError, match=shape_error):
        build_assistant(bad, "f32")
    cfg["text_config"]["intermediate_size"], cfg["num_centroids"] = 40, 7
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="num_centroids 7 must divide vocab_size 64"):
        build_assistant(bad, "f32")
    cfg["model_type"] = "gemma4_text"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"model_type is 'gemma4_text', expected one of \('gemma4_assistant', "
                                         r"'gemma4_unified_assistant'\)"):
        build_assistant(bad, "f32")


def test_norm_gains_reach_the_graph_as_stored():
    """Gemma 4 stores plain RMSNorm gains: the Qwen3.5 `1 + w` fold (a row of that family's table) must not apply."""
    from safetensors.numpy import load_file

    stored = load_file(DATA / "plain" / "model.safetensors")
    model, _ = build_assistant(DATA / "plain", "f32")
    consts = {op.get_friendly_name(): op.get_data() for op in model.get_ops() if op.get_type_name() == "Constant"}
    norms = [n for n in stored if n.endswith("norm.weight")]
    assert len(norms) == 3 * 5 + 1
    for name in norms:
        assert np.array_equal(consts[name], stored[name]), name


def test_older_config_spelling_reads_the_same():
    """Files written before per_layer_config existed carry global_head_dim / num_global_key_value_heads, which
    Gemma4TextConfig.__post_init__ turns into per-layer overrides (the KV heads only with attention_k_eq_v)."""
    import json

    from irsurgeon.families.gemma4_mtp.model import parse_assistant_config

    raw = json.loads((DATA / "ordered" / "config.json").read_text())
    new = parse_assistant_config(raw, "new")
    text = dict(raw["text_config"])
    text.pop("per_layer_config")
    text.update(global_head_dim=16, num_global_key_value_heads=1)
    assert parse_assistant_config({**raw, "text_config": text}, "old").layers == new.layers
    text["attention_k_eq_v"] = False
    layers = parse_assistant_config({**raw, "text_config": text}, "old").layers
    assert [(x.head_dim, x.kv_heads) for x in layers] == [(8, 2), (16, 2)]


# ---- the lm_head as transformers ties it: tie_word_embeddings (top level of the assistant's config.json) ----

UNTIED = ("untied", "untied_ordered")


def stored(case: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(DATA / case / "model.safetensors")


@pytest.mark.parametrize("case", UNTIED)
def test_an_untied_head_scored_with_the_embedding_table_breaks_the_tolerance(case):
    """The untied goldens discriminate: the same assistant scoring with model.embed_tokens.weight (what a build that
    ignores the stored lm_head computes) is off by far more than the tolerance, while last_hidden_state is not."""
    embed = stored(case)["model.embed_tokens.weight"]
    model, cfg = build_assistant(DATA / case, "f32", adjust=lambda n, w: embed if n == "lm_head.weight" else w)
    assert not cfg.tied and cfg.head == "lm_head.weight"
    errors = worst_errors(model, case)
    print(case, "scored with the embedding table", errors)
    assert min(e["logits"] for e in errors) > 100 * TOL and worst([{"h": e["last_hidden_state"]} for e in errors]) < TOL


def variant(tmp_path, case: str, edit_config=None, edit_tensors=None):
    from helpers.checkpoints import read_tensors, write_variant

    tensors = read_tensors(DATA / case)  # name -> (stored bytes as an array, dtype)
    if edit_tensors:
        edit_tensors(tensors)
    return write_variant(DATA / case, tmp_path / "v", tensors, edit_config)


def test_an_untied_checkpoint_without_its_lm_head_is_one_line(tmp_path):
    d = variant(tmp_path, "untied", edit_tensors=lambda t: t.pop("lm_head.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor lm_head\.weight \(expected shape \[80, 28\]"):
        build_assistant(d, "f32")


def test_a_tied_config_with_a_different_lm_head_is_refused(tmp_path):
    """tie_word_embeddings true but lm_head.weight stored with other values: transformers 5.24.0 would then warn and
    not tie them; which matrix was meant is unknowable, so the build refuses in one line naming both."""
    d = variant(tmp_path, "untied", edit_config=lambda c: c.pop("tie_word_embeddings"))
    with pytest.raises(CheckpointError, match=r"tensor lm_head\.weight differs from model\.embed_tokens\.weight, which "
                                              r"tie_word_embeddings \(true in .*the default when absent\) makes it "
                                              r"equal to"):
        build_assistant(d, "f32")


def test_a_tied_copy_with_equal_bytes_is_accepted_and_the_same_build(tmp_path):
    def copy_head(t):
        t["lm_head.weight"] = t["model.embed_tokens.weight"]
    d = variant(tmp_path, "plain", edit_tensors=copy_head)
    a, _ = build_assistant(d, "f32")
    b, _ = build_assistant(DATA / "plain", "f32")
    assert worst(worst_errors(a, "plain")) < TOL and worst(worst_errors(b, "plain")) < TOL


def test_an_untied_checkpoint_notes_the_embedding_table_it_never_reads():
    notes = []
    build_assistant(DATA / "untied", "f32", warn=notes.append)
    assert any("tie_word_embeddings is false" in n and "model.embed_tokens.weight" in n for n in notes), notes


def test_tie_word_embeddings_must_be_a_boolean(tmp_path):
    d = variant(tmp_path, "untied", edit_config=lambda c: c.update(tie_word_embeddings="no"))
    with pytest.raises(ConfigError, match='tie_word_embeddings must be true or false, found "no"'):
        build_assistant(d, "f32")


def test_only_the_top_level_tie_word_embeddings_counts():
    """text_config carries its own tie_word_embeddings (true, the Gemma4TextConfig default) in the untied goldens;
    the assistant's top-level false is what transformers reads."""
    import json

    raw = json.loads((DATA / "untied" / "config.json").read_text())
    assert raw["tie_word_embeddings"] is False and raw["text_config"].get("tie_word_embeddings", True) is True
    assert load_assistant_config(DATA / "untied" / "config.json").tied is False


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("key, value", [
    ("use_ordered_embeddings", "false"), ("tie_word_embeddings", "true"), ("tie_word_embeddings", 1),
    ("text_config.attention_k_eq_v", "false"), ("text_config.enable_moe_block", "false"),
    ("text_config.use_double_wide_mlp", 0),
])
def test_gemma4_assistant_booleans_must_be_true_or_false(key, value):
    parse = registry.by_key("gemma4").recipe().parse_config
    with pytest.raises(ConfigError) as e:
        parse(checkpoint_config("gemma4", key, value), "config.json")
    assert str(e.value) == f"config.json: {key} must be true or false, found {json.dumps(value)}"
