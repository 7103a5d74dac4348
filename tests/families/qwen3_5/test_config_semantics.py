"""config.json is read as transformers 5.23 reads it: real published configs, every key with two homes, defaults.

Expected values are literals: read by hand from the published configs, from real-configs/README.md, and from
transformers 5.23.0's config classes (checked with `scripts/check_config_semantics.py`), never recomputed by the
code under test.
"""
from __future__ import annotations

import copy
import json
import math
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from helpers.golden import compile_f32, golden_outputs, run_sequence, three_calls
from irsurgeon.flows.standalone import build_mtp_model
from irsurgeon.cli import main
from irsurgeon.families.qwen35_mtp.model import MoEConfig, load_config, parse_config, tensors
from irsurgeon.core.errors import ConfigError
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from irsurgeon.families.qwen35_mtp.strip import strip_mtp

# folder -> (hidden, heads, kv heads, head_dim, dense intermediate, vocab, layers, MoE or None, dtype, quantized)
REAL = {
    # README: dense, vocab 248320, hidden 1024, head_dim 256; the rest from its config.json
    "qwen3.5-0.8B": (1024, 8, 2, 256, 3584, 248320, 24, None, "bfloat16", False),
    # README: top-level quantization_config (MLX's); sizes from its text_config
    "qwen3.5-2B-mlx-mxfp4": (2048, 8, 2, 256, 6144, 248320, 24, None, "bfloat16", True),
    # README: MoE, 256 experts top-8, expert width 512, shared 512; the rest from its config.json
    "qwen3.6-35B-A3B": (2048, 16, 2, 256, None, 248320, 40, MoEConfig(256, 8, 512, 512, True), "bfloat16", False),
    # README: the FP8 release (quant_method fp8) of the same model
    "qwen3.6-35B-A3B-FP8": (2048, 16, 2, 256, None, 248320, 40, MoEConfig(256, 8, 512, 512, True), "bfloat16", True),
    # README: dense hidden 5120, 64 layers, re-saved by transformers 5.10 (a top-level partial_rotary_factor copy)
    "qwen3.6-27B-awq-community": (5120, 24, 4, 256, 17408, 248320, 64, None, "bfloat16", True),
}
# README: "Qwen3.5-27B head: 424,699,392 parameters", "Qwen3.6-35B-A3B head: 844,640,768 parameters"
HEAD_PARAMETERS = {"qwen3.6-27B-awq-community": 424_699_392, "qwen3.6-35B-A3B": 844_640_768,
                   "qwen3.6-35B-A3B-FP8": 844_640_768}


@pytest.fixture(scope="module")
def real_config(reference):
    return lambda name: reference / "real-configs" / name / "config.json"


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_config_parses_to_its_published_values(real_config, name):
    hidden, heads, kv, head_dim, inter, vocab, layers, moe, dtype, quantized = REAL[name]
    cfg = load_config(real_config(name))
    assert (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == (hidden, heads, kv, head_dim)
    assert (cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers) == (inter, vocab, layers)
    assert cfg.moe == moe
    assert cfg.model_type == ("qwen3_5_moe_text" if moe else "qwen3_5_text")
    # every published Qwen3.5/3.6 config: rope_parameters {rope_theta 1e7, partial_rotary_factor 0.25}, eps 1e-6
    assert (cfg.rope_theta, cfg.partial_rotary_factor, cfg.rotary_dim, cfg.rms_norm_eps) == (1e7, 0.25, 64, 1e-6)
    assert (cfg.dtype, cfg.quantized) == (dtype, quantized)
    assert cfg.warnings == ()


@pytest.mark.parametrize("name", sorted(HEAD_PARAMETERS))
def test_real_config_gives_the_published_head_size(real_config, name):
    """The tensor shapes the config implies add up to the head's parameter count listed from real headers."""
    shapes = tensors(load_config(real_config(name))).shapes()
    assert sum(math.prod(s) for s in shapes.values()) == HEAD_PARAMETERS[name]


# ---- crafted configs: the published 0.8B text_config, edited one key at a time ----

BASE_TEXT = {
    "model_type": "qwen3_5_text", "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
    "head_dim": 256, "intermediate_size": 3584, "num_hidden_layers": 24, "vocab_size": 248320, "rms_norm_eps": 1e-6,
    "mtp_num_hidden_layers": 1, "dtype": "bfloat16",
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                        "rope_theta": 10000000, "partial_rotary_factor": 0.25},
}
MOE_TEXT = {k: v for k, v in BASE_TEXT.items() if k != "intermediate_size"} | {
    "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_attention_heads": 16, "num_experts": 256,
    "num_experts_per_tok": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512}


def vlm(text=None, **top) -> dict:
    tc = copy.deepcopy(BASE_TEXT if text is None else text)
    kind = "qwen3_5_moe" if tc["model_type"] == "qwen3_5_moe_text" else "qwen3_5"
    return {"model_type": kind, "text_config": tc, **top}


def edited(tc: dict, drop=(), rope_drop=(), **changes) -> dict:
    tc = copy.deepcopy(tc)
    for k in drop:
        tc.pop(k)
    for k in rope_drop:
        tc["rope_parameters"].pop(k)
    tc.update(changes)
    return tc


def parse(cfg: dict):
    return parse_config(cfg, source="config.json")


def test_stale_top_level_partial_rotary_factor_loses_to_rope_parameters():
    cfg = parse(vlm(edited(BASE_TEXT, partial_rotary_factor=0.5)))
    assert (cfg.partial_rotary_factor, cfg.rotary_dim) == (0.25, 64)
    assert cfg.warnings == ("warning: config.json: text_config.partial_rotary_factor 0.5 disagrees with text_config."
                            "rope_parameters.partial_rotary_factor 0.25; using 0.25 (as transformers does)",)


def test_stale_top_level_rope_theta_loses_to_rope_parameters():
    cfg = parse(vlm(edited(BASE_TEXT, rope_theta=1000000.0)))
    assert cfg.rope_theta == 1e7
    assert cfg.warnings == ("warning: config.json: text_config.rope_theta 1000000.0 disagrees with "
                            "text_config.rope_parameters.rope_theta 10000000; using 10000000 (as transformers does)",)


def test_agreeing_copies_give_no_warning():
    """transformers 5.x re-saves repeat partial_rotary_factor at the top; an equal int/float is no disagreement."""
    cfg = parse(vlm(edited(BASE_TEXT, partial_rotary_factor=0.25, rope_theta=1e7)))
    assert cfg.warnings == () and (cfg.rope_theta, cfg.partial_rotary_factor) == (1e7, 0.25)


def test_legacy_top_level_rope_keys_are_used_when_rope_parameters_lacks_them():
    cfg = parse(vlm(edited(BASE_TEXT, rope_drop=("rope_theta", "partial_rotary_factor"), rope_theta=1e6,
                           partial_rotary_factor=0.5)))
    assert (cfg.rope_theta, cfg.partial_rotary_factor, cfg.warnings) == (1e6, 0.5, ())
    cfg = parse(vlm(edited(BASE_TEXT, drop=("rope_parameters",), rope_theta=5e5, partial_rotary_factor=1.0)))
    assert (cfg.rope_theta, cfg.partial_rotary_factor) == (5e5, 1.0)


def test_rope_defaults_without_any_rope_key():
    """RotaryEmbeddingConfigMixin.default_theta 10000.0; Qwen3_5TextConfig.__post_init__ partial_rotary_factor 0.25."""
    for tc in (edited(BASE_TEXT, drop=("rope_parameters",)), edited(BASE_TEXT, rope_parameters=None)):
        cfg = parse(vlm(tc))
        assert (cfg.rope_theta, cfg.partial_rotary_factor, cfg.warnings) == (10000.0, 0.25, ())


def test_rope_scaling_replaces_rope_parameters():
    """convert_rope_params_to_dict: `rope_parameters = rope_scaling or rope_parameters` (the whole dict)."""
    scaling = {"rope_type": "default", "rope_theta": 500000.0}
    cfg = parse(vlm(edited(BASE_TEXT, rope_scaling=scaling)))
    assert (cfg.rope_theta, cfg.partial_rotary_factor) == (5e5, 0.25)  # 0.25: the __post_init__ default
    assert len(cfg.warnings) == 1
    assert cfg.warnings[0].startswith("warning: config.json: text_config.rope_parameters {")
    assert cfg.warnings[0].endswith("disagrees with text_config.rope_scaling {\"rope_type\": \"default\", "
                                    "\"rope_theta\": 500000.0}; using text_config.rope_scaling (as transformers does)")


def test_rope_type_and_legacy_type():
    cfg = parse(vlm(edited(BASE_TEXT, rope_parameters=BASE_TEXT["rope_parameters"] | {"type": "yarn"})))
    assert cfg.warnings == ("warning: config.json: text_config.rope_parameters.type yarn disagrees with "
                            "text_config.rope_parameters.rope_type default; using default (as transformers does)",)
    legacy = {"type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25}
    assert parse(vlm(edited(BASE_TEXT, rope_parameters=legacy))).rope_theta == 1e7


@pytest.mark.parametrize("rope, key, value", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, "rope_type", "yarn"),
    ({"type": "linear", "factor": 2.0}, "type", "linear"),
    ({"rope_type": "dynamic", "factor": 2.0}, "rope_type", "dynamic"),
])
def test_unsupported_rope_type_is_refused_naming_key_and_value(rope, key, value):
    with pytest.raises(ConfigError) as e:
        parse(vlm(edited(BASE_TEXT, rope_parameters=rope | {"rope_theta": 1e7})))
    assert f"text_config.rope_parameters.{key} {value} is not supported" in str(e.value)
    assert "\n" not in str(e.value)


def test_dtype_precedence():
    """dtype over torch_dtype (PreTrainedConfig.__post_init__); the top-level over text_config's (_get_dtype)."""
    cfg = parse(vlm(edited(BASE_TEXT, drop=("dtype",)), dtype="float16", torch_dtype="float32"))
    assert cfg.dtype == "float16"
    assert cfg.warnings == ("warning: config.json: torch_dtype float32 disagrees with dtype float16; "
                            "using float16 (as transformers does)",)
    cfg = parse(vlm(dtype="float16"))
    assert cfg.dtype == "float16"
    assert cfg.warnings == ("warning: config.json: text_config.dtype bfloat16 disagrees with dtype float16; "
                            "using float16 (as transformers does)",)
    assert parse(vlm(edited(BASE_TEXT, drop=("dtype",)), torch_dtype="float32", dtype=None)).dtype == "float32"
    assert parse(vlm(edited(BASE_TEXT, drop=("dtype",)))).dtype is None


def test_text_only_layout_reads_the_top_level():
    top = edited(BASE_TEXT, partial_rotary_factor=0.5, torch_dtype="float32")
    cfg = parse(top)
    assert (cfg.model_type, cfg.hidden_size, cfg.partial_rotary_factor, cfg.dtype) == ("qwen3_5_text", 1024, 0.25,
                                                                                      "bfloat16")
    assert cfg.warnings == (
        "warning: config.json: partial_rotary_factor 0.5 disagrees with rope_parameters.partial_rotary_factor 0.25; "
        "using 0.25 (as transformers does)",
        "warning: config.json: torch_dtype float32 disagrees with dtype bfloat16; "
        "using bfloat16 (as transformers does)")
    # a text-only model_type is its own text config: a stray text_config is not where its keys are read
    assert parse(top | {"text_config": {"hidden_size": 8}}).hidden_size == 1024


def test_transformers_defaults_for_absent_keys():
    """Qwen3_5TextConfig: head_dim 256 (not hidden/heads), num_key_value_heads 4, rms_norm_eps 1e-6, vocab 248320,
    intermediate_size 12288, num_hidden_layers 32, num_attention_heads 16."""
    tc = edited(BASE_TEXT, drop=("head_dim", "num_key_value_heads", "rms_norm_eps", "vocab_size", "intermediate_size",
                                 "num_hidden_layers", "num_attention_heads"))
    cfg = parse(vlm(tc))
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.rms_norm_eps, cfg.vocab_size) == (256, 4, 1e-6, 248320)
    assert (cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_heads) == (12288, 32, 16)


def test_moe_defaults_and_norm_topk_prob():
    """Qwen3_5MoeTextConfig: 256 experts, top-8, widths 512/512, 2 KV heads, 40 layers; its router always
    renormalises the top-k weights (there is no norm_topk_prob field)."""
    tc = edited(MOE_TEXT, drop=("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "shared_expert_intermediate_size", "num_key_value_heads", "num_hidden_layers"))
    cfg = parse(vlm(tc))
    assert cfg.moe == MoEConfig(256, 8, 512, 512, True)
    assert (cfg.num_kv_heads, cfg.num_hidden_layers, cfg.intermediate_size) == (2, 40, None)
    cfg = parse(vlm(edited(MOE_TEXT, norm_topk_prob=False)))
    assert cfg.moe.norm_topk_prob is True
    assert cfg.warnings == ("warning: config.json: text_config.norm_topk_prob false is not read by transformers "
                            "for this model; using true (as transformers does)",)
    assert parse(vlm(edited(MOE_TEXT, norm_topk_prob=True))).warnings == ()


@pytest.mark.parametrize("cfg, needles", [
    ({"model_type": "qwen3_5", "hidden_size": 1024, "mtp_num_hidden_layers": 1}, ["text_config", "absent"]),
    ({"model_type": "qwen3_5", "text_config": edited(MOE_TEXT)}, ["text_config.model_type", "qwen3_5_moe_text"]),
    ({"text_config": BASE_TEXT}, ["model_type None"]),
    (vlm(edited(BASE_TEXT, head_dim=None)), ["text_config.head_dim", "integer", "null"]),
    (vlm(edited(BASE_TEXT, hidden_size=1024.0)), ["text_config.hidden_size", "integer"]),
    (vlm(edited(BASE_TEXT, drop=("hidden_size",))), ["text_config.hidden_size", "missing"]),
    (vlm(edited(BASE_TEXT, rope_parameters={"full_attention": {"rope_theta": 1e6}})), ["per layer type"]),
    (vlm(edited(BASE_TEXT, rope_parameters=BASE_TEXT["rope_parameters"] | {"rope_theta": None})),
     ["text_config.rope_parameters.rope_theta", "null"]),
    (vlm(edited(BASE_TEXT, rope_theta=10 ** 400, drop=("rope_parameters",))), ["text_config.rope_theta", "range"]),
    (vlm(edited(BASE_TEXT, attention_bias=True)), ["text_config.attention_bias", "true"]),
    (vlm(edited(BASE_TEXT, hidden_act="gelu")), ["text_config.hidden_act", "gelu"]),
    (vlm(edited(BASE_TEXT, mtp_use_dedicated_embeddings=True)), ["mtp_use_dedicated_embeddings"]),
    (vlm(edited(BASE_TEXT, rms_norm_eps=0)), ["text_config.rms_norm_eps", "range"]),
])
def test_configs_transformers_would_not_build_the_same_head_from_are_refused(cfg, needles):
    with pytest.raises(ConfigError) as e:
        parse(cfg)
    message = str(e.value)
    assert "\n" not in message and message.startswith("config.json: ")
    for n in needles:
        assert n in message, (n, message)


# ---- the printed warning, and the numbers: a conflicting config builds the clean config's head ----

def write_config(path, edit) -> None:
    cfg = json.loads(path.read_text())
    edit(cfg["text_config"])
    path.write_text(json.dumps(cfg))


def stale_prf(tc):
    tc["partial_rotary_factor"] = 0.5


def stale_theta(tc):
    tc["rope_theta"] = 1000000.0


def test_build_mtp_prints_the_warning_once(tmp_path):
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=1)
    write_config(tmp_path / "ckpt" / "config.json", stale_prf)
    result = CliRunner().invoke(main, ["build-mtp", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    line = (f"warning: {tmp_path / 'ckpt' / 'config.json'}: text_config.partial_rotary_factor 0.5 disagrees with "
            f"text_config.rope_parameters.partial_rotary_factor 0.25; using 0.25 (as transformers does)")
    assert result.output.splitlines().count(line) == 1
    assert sum("warning:" in ln for ln in result.output.splitlines()) == 1


@pytest.fixture(scope="module")
def dense_variants(ckpt, tmp_path_factory):
    """variant name -> config.json beside a copy of the reference dense checkpoint's weights."""
    root = tmp_path_factory.mktemp("variants")
    edits = {"clean": lambda tc: None, "stale-prf": stale_prf, "stale-theta": stale_theta,
             "prf-0.5": lambda tc: tc["rope_parameters"].update(partial_rotary_factor=0.5),
             "theta-1e6": lambda tc: tc["rope_parameters"].update(rope_theta=1000000.0)}
    out = {}
    for name, edit in edits.items():
        (root / name).mkdir()
        shutil.copy(ckpt("qwen35-dense") / "config.json", root / name / "config.json")
        write_config(root / name / "config.json", edit)
        out[name] = root / name / "config.json"
    return lambda name: (ckpt("qwen35-dense") / "model.safetensors", out[name])


def head(variants, name, fmt="f16"):
    weights, config = variants(name)
    return build_mtp_model(weights, config=config, weight_format=fmt, warn=lambda line: None)


@pytest.mark.parametrize("stale", ["stale-prf", "stale-theta"])
def test_conflicting_config_builds_the_clean_head_bitwise(dense_variants, golden, stale):
    clean, conflicting = head(dense_variants, "clean", "f32"), head(dense_variants, stale, "f32")
    calls = three_calls(np.random.default_rng(4), 64, batch=2)
    for a, b in zip(run_sequence(compile_f32(clean), calls), run_sequence(compile_f32(conflicting), calls)):
        np.testing.assert_array_equal(a, b)
    on_golden = [golden_outputs(m, golden("dense-fp16"))[0] for m in (clean, conflicting)]
    for a, b in zip(*on_golden):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("variant, wrong", [("stale-prf", "prf-0.5"), ("stale-theta", "theta-1e6")])
def test_conflicting_config_head_matches_optimum_golden(dense_variants, golden, variant, wrong):
    """Within the f16 golden tolerance of test_build (1e-4, seen 1.6e-5); reading the stale copy instead (the
    `wrong` variant, whose rope_parameters carries it) moves the output far past it."""
    got, want = golden_outputs(head(dense_variants, variant), golden("dense-fp16"))
    assert max(np.abs(g - w).max() for g, w in zip(got, want)) <= 1e-4
    got, want = golden_outputs(head(dense_variants, wrong), golden("dense-fp16"))
    assert max(np.abs(g - w).max() for g, w in zip(got, want)) > 1e-2


def test_patch_prints_target_and_checkpoint_warnings_once_each(export, ckpt, tmp_path):
    target = strip_mtp(export("dense-fp16"), tmp_path / "target")
    write_config(target / "config.json", stale_prf)
    source = tmp_path / "ckpt"
    source.mkdir()
    shutil.copy(ckpt("qwen35-dense") / "model.safetensors", source)
    shutil.copy(ckpt("qwen35-dense") / "config.json", source)
    write_config(source / "config.json", stale_theta)
    result = CliRunner().invoke(main, ["patch", str(target), "--checkpoint", str(source)])
    assert result.exit_code == 0, result.output
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("warning:")]
    assert warnings == [
        f"warning: {target / 'config.json'}: text_config.partial_rotary_factor 0.5 disagrees with "
        f"text_config.rope_parameters.partial_rotary_factor 0.25; using 0.25 (as transformers does)",
        f"warning: {source / 'config.json'}: text_config.rope_theta 1000000.0 disagrees with "
        f"text_config.rope_parameters.rope_theta 10000000; using 10000000 (as transformers does)"]
