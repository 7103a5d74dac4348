"""The EAGLE-3 draft: numbers against an independent float64 numpy reference, the forms genai's load-time surgery
takes, the layouts and config variants, the taps each trainer used, and the pair check.

Tolerances: the IR runs in f32 (INFERENCE_PRECISION_HINT f32) from f32 weights; the reference is float64. Over one
layer of width 64 the f32 rounding of matmuls and norms stays near 1e-6 relative; 1e-4 absolute on logits of O(1)
leaves room for accumulation order, and a wrong op (a norm, a residual, a swapped half of the concat) moves them by
O(0.1) (the negative controls below).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from helpers.eagle3 import (load_checkpoint, reference, run_calls, speculators_variant, target_embed,
                            with_target_table)
from helpers.numpy_eagle3 import (DIVIDED, KEPT, MIXED, Eagle3Reference, default_inv_freq, layer_config, llama3_bands,
                                  llama3_scaling)
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import CheckpointError, ConfigError, IRSurgeonError
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3 import surgery
from irsurgeon.families.eagle3.target import check_pair, genai_taps, inspect_target

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]


def built(ckpt: Path = CKPT) -> tuple[ov.Model, eagle3.Eagle3Config]:
    cfg, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=lambda _: None)
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE), cfg
    finally:
        handle.close()


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return target_embed(TARGET)


def test_logits_match_the_numpy_reference_over_stateful_calls(table):
    model, _ = built()
    outs, feeds = run_calls(with_target_table(model, table), [3, 1, 2])
    ref = reference(CKPT, table)
    for out, feed in zip(outs, feeds):
        want, _ = ref.step(feed["input_ids"], feed["hidden_states"].astype(np.float64), feed["position_ids"])
        assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()


def test_the_reference_is_sensitive_to_what_the_graph_computes(table):
    """Negative control: a draft whose hidden_norm gain is doubled is far outside the tolerance."""
    model, _ = built()
    outs, feeds = run_calls(with_target_table(model, table), [3])
    tensors, config = load_checkpoint(CKPT)
    tensors["midlayer.hidden_norm.weight"] = tensors["midlayer.hidden_norm.weight"] * 2
    want, _ = Eagle3Reference(tensors, config, table).step(feeds[0]["input_ids"],
                                                           feeds[0]["hidden_states"].astype(np.float64),
                                                           feeds[0]["position_ids"])
    assert np.abs(outs[0] - want).max() > 1e-2


# Llama 3.1's llama3 values (factor 8, low_freq_factor 1, high_freq_factor 4) with original_max_position_embeddings
# 32 for 8192: at the fixture's head_dim 16 and theta 10000 the wavelengths 2 pi 10000^(2j/16) = 6.3, 19.9, 62.8, ..
# (j = 0..7) meet the bounds 32 / 4 = 8 and 32 / 1 = 32 so that frequency 0 is kept, 1 mixed (s = 0.20) and 2..7
# divided by 8; the positions 0..5 of LLAMA3_CALLS turn the rescaled ones far from their default angles.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
LLAMA3_CALLS = [3, 1, 2]


def with_config(where: Path, config: dict) -> Path:
    """The fixture checkpoint's tensors under `config`."""
    where.mkdir(parents=True)
    shutil.copy(CKPT / "model.safetensors", where / "model.safetensors")
    (where / "config.json").write_text(json.dumps(config, indent=2))
    return where


def llama3_draft(where: Path, table: np.ndarray) -> tuple[Path, list, list]:
    """The fixture draft under the LLAMA3 rope_scaling, built at f32 and run over LLAMA3_CALLS: (its checkpoint,
    the logits of each call, the feeds)."""
    ckpt = with_config(where, config_of(rope_scaling=LLAMA3))
    model, cfg = built(ckpt)
    assert cfg.rope.kind == "llama3"
    outs, feeds = run_calls(with_target_table(model, table), LLAMA3_CALLS)
    return ckpt, outs, feeds


def reference_logits(ref: Eagle3Reference, feeds: list) -> list[np.ndarray]:
    return [ref.step(f["input_ids"], f["hidden_states"].astype(np.float64), f["position_ids"])[0] for f in feeds]


def llama3_bands_of(ckpt: Path, ref: Eagle3Reference) -> np.ndarray:
    return llama3_bands(ref.head_dim, ref.theta, llama3_scaling(layer_config(load_checkpoint(ckpt)[1])))


def test_llama3_rope_logits_match_the_numpy_reference_in_all_three_bands(tmp_path, table):
    """A draft whose rope_scaling is llama3 equals the reference's llama3 (transformers' _compute_llama3_parameters)
    over stateful calls, at the default-rope test's tolerance, with frequencies in each band of the rescaling."""
    ckpt, outs, feeds = llama3_draft(tmp_path / "llama3", table)
    ref = reference(ckpt, table)
    bands = llama3_bands_of(ckpt, ref)
    assert sorted(set(bands)) == sorted({KEPT, MIXED, DIVIDED}), bands
    default = default_inv_freq(ref.head_dim, ref.theta)
    mixed = bands == MIXED
    assert np.array_equal(ref.inv[bands == KEPT], default[bands == KEPT])
    assert np.allclose(ref.inv[bands == DIVIDED], default[bands == DIVIDED] / LLAMA3["factor"], rtol=1e-15)
    assert np.all(ref.inv[mixed] < default[mixed]) and np.all(ref.inv[mixed] > default[mixed] / LLAMA3["factor"])
    for out, want in zip(outs, reference_logits(ref, feeds)):
        assert np.abs(out - want).max() < 1e-4, np.abs(out - want).max()


def test_the_llama3_comparison_fails_at_the_default_rope_or_with_a_scaled_band_left_default(tmp_path, table):
    """Negative controls of the test above: the same calls against the reference at the default rope (the same
    tensors, no rope_scaling), or at llama3 with the divided or the mixed band left at its default frequencies,
    are far outside the tolerance."""
    ckpt, outs, feeds = llama3_draft(tmp_path / "llama3", table)
    plain = reference(CKPT, table)
    assert np.array_equal(plain.inv, default_inv_freq(plain.head_dim, plain.theta))
    for out, want in zip(outs, reference_logits(plain, feeds)):
        assert np.abs(out - want).max() > 1e-2, np.abs(out - want).max()
    for band in (DIVIDED, MIXED):
        ref = reference(ckpt, table)
        ref.inv = np.where(llama3_bands_of(ckpt, ref) == band, default_inv_freq(ref.head_dim, ref.theta), ref.inv)
        worst = max(np.abs(out - want).max() for out, want in zip(outs, reference_logits(ref, feeds)))
        assert worst > 1e-2, (band, worst)


def test_the_built_draft_is_in_every_form_genai_surgery_takes():
    model, cfg = built()
    model.set_rt_info([0, 1, 2], [eagle3.HIDDEN_LAYERS])
    assert surgery.problems(model, cfg.hidden_size, cfg.target_hidden_size) == []
    assert surgery.fc_matmul(model).get_friendly_name() == "fc"
    assert "midlayer" in surgery.fed_back_add(model).get_friendly_name()
    d2t = surgery.d2t_constant(model).get_data()
    stored = load_checkpoint(CKPT)[0]["d2t"]
    assert d2t.dtype == np.int64 and np.array_equal(d2t, stored)


def test_no_vocabulary_table_in_the_draft():
    """The draft's embedding data is a one-row placeholder genai replaces: the .bin holds the draft's own bytes."""
    model, cfg = built()
    table = surgery.embedding_gather(model).input_value(0).get_partial_shape()
    assert [d.get_length() for d in table] == [1, cfg.hidden_size]
    own = sum(np.prod(s) for n, s in eagle3.tensors(cfg).shapes().items() if n != eagle3.D2T) * 4
    constants = sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")
    assert constants <= 1.1 * own + 4096, (constants, own)


def test_a_moved_fc_or_a_renamed_residual_is_seen():
    """Negative controls of the surgery check: what genai would not find is named."""
    model, cfg = built()
    model.set_rt_info([0, 1, 2], [eagle3.HIDDEN_LAYERS])
    surgery.fed_back_add(model).set_friendly_name("layer/mlp_residual")
    assert any("midlayer" in p for p in surgery.problems(model, cfg.hidden_size, cfg.target_hidden_size))
    assert any("fc reads" in p for p in surgery.problems(model, cfg.hidden_size, 2 * cfg.target_hidden_size))


def test_the_speculators_layout_builds_the_same_draft(tmp_path, table):
    spec = speculators_variant(CKPT, tmp_path / "spec", table)
    a, _ = run_calls(with_target_table(built()[0], table), [2, 1])
    b, _ = run_calls(with_target_table(built(spec)[0], table), [2, 1])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def config_of(**change) -> dict:
    config = read_json(CKPT / "config.json")
    for key, value in change.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


@pytest.mark.parametrize("key", ["norm_before_fc", "fc_norm", "norm_output"])
def test_a_variant_genai_cannot_run_is_refused_naming_the_key(key):
    with pytest.raises(ConfigError, match=f"{key} is set"):
        eagle3.parse_config(config_of(**{key: True}))


def test_other_than_three_taps_and_another_width_are_refused():
    with pytest.raises(ConfigError, match="names 2 layers.*exactly 3"):
        eagle3.parse_config(config_of(eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1]}))
    with pytest.raises(ConfigError, match="target_hidden_size 32 differs"):
        eagle3.parse_config(config_of(target_hidden_size=32))
    with pytest.raises(ConfigError, match="rope_type 'su'"):
        eagle3.parse_config(config_of(rope_scaling={"rope_type": "su", "factor": 2.0}))


def test_taps_follow_the_runtime_each_trainer_captured_with():
    nested = eagle3.parse_config(config_of(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}))
    assert nested.taps.ids == (1, 2, 3)  # SGLang: outputs
    top = eagle3.parse_config(config_of(eagle_config=None, eagle_aux_hidden_state_layer_ids=[1, 2, 3]))
    assert top.taps.ids == (0, 1, 2)  # vLLM: inputs, one layer earlier
    with pytest.raises(ConfigError, match="embedding output"):
        eagle3.parse_config(config_of(eagle_config=None, eagle_aux_hidden_state_layer_ids=[0, 1, 2]))
    default = eagle3.parse_config(config_of(eagle_config=None))
    assert default.taps.ids is None and eagle3.default_taps(default.architecture, 32) == (1, 15, 28)


def test_the_pair_check_names_what_does_not_fit():
    target = inspect_target(TARGET)
    assert target.tappable == frozenset(genai_taps(ov.Core().read_model(str(TARGET / "openvino_model.xml"))))
    cfg = eagle3.parse_config(read_json(CKPT / "config.json"), "config.json")
    assert "from eagle_config" in check_pair(target, cfg) and target.taps == (0, 1, 2)
    with pytest.raises(IRSurgeonError, match="names layer 9, the target has 4"):
        check_pair(target, cfg, override=(0, 1, 9))
    target.tappable = frozenset({0, 2})
    with pytest.raises(IRSurgeonError, match="layer 1 has no residual Add genai 2026.4.1 can tap.*4390"):
        check_pair(target, cfg)


def test_a_d2t_outside_the_vocabulary_is_refused(tmp_path):
    from helpers.checkpoints import read_tensors, write_variant

    tensors = read_tensors(CKPT)
    d2t, dtype = tensors["d2t"]
    d2t = d2t.copy()
    d2t[-1] = 10_000
    write_variant(CKPT, tmp_path / "bad", {**tensors, "d2t": (d2t, dtype)})
    with pytest.raises(CheckpointError, match="d2t maps draft token .* outside the vocabulary"):
        built(tmp_path / "bad")


def test_patch_writes_the_draft_and_its_taps_and_never_the_target(tmp_path):
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    before = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    result = invoke("patch", target, "--checkpoint", CKPT)
    assert result.exit_code == 0, result.output
    assert "taps [0, 1, 2] from eagle_config.eagle_aux_hidden_state_layer_ids" in result.output
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()} == before
    draft = ov.Core().read_model(str(target / "eagle3_draft" / "openvino_model.xml"))
    assert draft.get_rt_info([eagle3.HIDDEN_LAYERS]).astype(str) == "0 1 2"
    assert draft.get_rt_info([eagle3.EAGLE3_MODE]).astype(str) == "True"
    assert json.loads((target / "eagle3_draft" / "generation_config.json").read_text()) == \
        json.loads((TARGET / "generation_config.json").read_text())


def test_hidden_layers_overrides_the_taps_and_is_refused_for_other_families(tmp_path):
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "1,2,3")
    assert result.exit_code == 0 and "taps [1, 2, 3] (as asked)" in result.output, result.output
    draft = ov.Core().read_model(str(target / "eagle3_draft" / "openvino_model.xml"))
    assert draft.get_rt_info([eagle3.HIDDEN_LAYERS]).astype(str) == "1 2 3"
    assert invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "1,2").exit_code == 2
    qwen_target, qwen_ckpt = FIXTURE_PAIRS["qwen3_5"]
    other = Path(shutil.copytree(qwen_target, tmp_path / "q"))
    refused = invoke("patch", other, "--checkpoint", qwen_ckpt, "--hidden-layers", "1,2,3")
    assert refused.exit_code == 1 and "the hidden layers option applies to EAGLE-3 draft checkpoints" in refused.output
    assert not (other / "openvino_mtp_model.xml").exists()


@pytest.mark.parametrize("fmt", ["f16", "int4"])
def test_the_one_step_check_keeps_the_first_vocabulary_rows_exactly(fmt, tmp_path, table):
    """The staged check runs the draft with its lm_head cut to its first rows (ir.narrow.narrow_rows): the logits of
    those rows are exactly the whole draft's, float or nncf-compressed (each row is its own output)."""
    from irsurgeon.ir.narrow import narrow_rows

    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    assert invoke("patch", target, "--checkpoint", CKPT, "--weight-format", fmt).exit_code == 0
    xml = str(target / "eagle3_draft" / "openvino_model.xml")
    whole, feeds = run_calls(with_target_table(ov.Core().read_model(xml), table), [2])
    cut = with_target_table(ov.Core().read_model(xml), table)
    assert narrow_rows(cut, "lm_head.weight") == 8
    rows, _ = run_calls(cut, [2])
    assert rows[0].shape[-1] == 8 and np.array_equal(rows[0], whole[0][..., :8])


def test_other_hidden_layers_rebuild_a_ready_draft_and_the_same_ones_leave_it(tmp_path):
    """--hidden-layers is the draft's input, as a weight format is its storage: other taps than the present draft's
    rebuild it (no --force needed); the same taps, or none given, leave it."""
    from irsurgeon.families.eagle3.patch import recorded_taps
    target = shutil.copytree(TARGET, tmp_path / "t")
    draft = target / "eagle3_draft" / "openvino_model.xml"
    assert invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "1,2,3").exit_code == 0
    assert recorded_taps(draft) == (1, 2, 3)
    again = invoke("patch", target, "--checkpoint", CKPT, "--hidden-layers", "0,1,2")
    assert again.exit_code == 0 and "hidden layers [0, 1, 2] asked: rebuilding it" in again.output, again.output
    assert recorded_taps(draft) == (0, 1, 2)
    for same in (("--hidden-layers", "0,1,2"), ()):
        kept = invoke("patch", target, "--checkpoint", CKPT, *same)
        assert kept.exit_code == 0 and "nothing to do" in kept.output and recorded_taps(draft) == (0, 1, 2)


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_bf16_and_f16_checkpoints_match_the_reference_of_their_own_values(tmp_path, table, dtype):
    """Published drafts are bf16 (SafeAILab, SpecForge) or f16: each is read as stored and computed in f32 (the
    reference decodes the same stored values), and a stored value is not the f32 original (the test can fail)."""
    import json as _json
    from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors
    tensors, config = load_checkpoint(CKPT)
    stored, kinds = {}, {}
    for name, value in tensors.items():
        if value.dtype == np.float32:
            stored[name] = f32_to_bf16(value) if dtype == "BF16" else value.astype(np.float16)
            kinds[name] = dtype
        else:
            stored[name] = value
    ckpt = tmp_path / dtype
    ckpt.mkdir()
    write_safetensors(ckpt / "model.safetensors", stored, {n: k for n, k in kinds.items() if k == "BF16"} |
                      {n: "BOOL" for n, v in tensors.items() if v.dtype == bool})
    (ckpt / "config.json").write_text(_json.dumps({**config, "torch_dtype": {"BF16": "bfloat16", "F16": "float16"}[dtype]}))
    model, _ = built(ckpt)
    outs, feeds = run_calls(with_target_table(model, table), [3, 1])
    ref, f32_ref = reference(ckpt, table), reference(CKPT, table)
    worst = max(np.abs(out - ref.step(f["input_ids"], f["hidden_states"].astype(np.float64), f["position_ids"])[0]).max()
                for out, f in zip(outs, feeds))
    assert worst < 1e-4, worst
    first, _ = f32_ref.step(feeds[0]["input_ids"], feeds[0]["hidden_states"].astype(np.float64), feeds[0]["position_ids"])
    assert np.abs(outs[0] - first).max() > 1e-4  # rounded weights: another draft than the f32 one
