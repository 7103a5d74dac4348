"""`synthesize()`: a seeded model directory (target/) and its Hugging Face checkpoint (ckpt/), for each kind.

    out/target/   qwen35, qwen35-moe: openvino_language_model, openvino_text_embeddings_model, the three vision
                  IRs, openvino_tokenizer/detokenizer, config.json, generation_config.json, preprocessor_config.json
                  llama: openvino_model, openvino_tokenizer/detokenizer, config.json, generation_config.json
    out/ckpt/     config.json + model.safetensors (bf16): every tensor the IRs hold, plus `mtp.*` with with_mtp

The IR weights are the checkpoint's bf16 values, so the checkpoint rebuilds exactly what the IRs compute. qwen35
kinds are bigram models by default (see checkpoint.mtp_tensors), so an MTP head built from ckpt/ gets drafts accepted,
and hybrid like Qwen3.5: by default every 4th layer full attention, the others Gated DeltaNet linear attention
(synth.linear_attn; `layer_types` / `full_attention_interval` of the spec, `--layer-types` on the command line).
Everything is a function of (kind, spec, seed, with_mtp, weight_format): files are byte-identical across runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon.core.limits import SYNTH_SIZE_LIMITS
from irsurgeon.core import limits, rtinfo
from irsurgeon.draft.save import name_anonymous_nodes
from irsurgeon.core.errors import ConfigError, OutputError, with_hint
from irsurgeon.ir import export as ex
from irsurgeon.ops.core import WeightFormat
from irsurgeon.synth import configs
from irsurgeon.synth.checkpoint import (FULL, LINEAR, SynthSpec, bf16_round, layer_types, lm_tensors, mtp_tensors,
                                        write_tensors)
from irsurgeon.synth.tokenizer import SPECIAL, detokenizer_model, tokenizer_model, tokenizer_rt_info
from irsurgeon.synth.vision import VisionSpec, merger_model, patch_embed_model, pos_embed_model, vision_tensors
from irsurgeon.synth import target as tg
from irsurgeon.synth.output import OWN, output_pair

from irsurgeon.synth.kinds import QWEN_KINDS as KINDS
WEIGHT_FORMATS = ("f32", "f16", "int4")
MIN_VOCAB = SPECIAL + 8
LIMITS = SYNTH_SIZE_LIMITS  # core.limits: the CLI's option ranges read them without importing this module
LINEAR_LIMITS = {"linear_key_heads": 256, "linear_value_heads": 256, "linear_key_head_dim": 1024,
                 "linear_value_head_dim": 1024, "linear_conv_kernel": 16, "full_attention_interval": 64}


@dataclass(frozen=True)
class Synthesized:
    target: Path
    ckpt: Path
    spec: SynthSpec


def default_spec(kind: str) -> SynthSpec:
    """The tiny default of each kind; qwen35 kinds are bigram models so their MTP head predicts."""
    check_kind(kind)
    if kind == "llama":
        return SynthSpec(hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=256, layers=2,
                         partial_rotary_factor=1.0, rope_theta=10000.0, rms_norm_eps=1e-5, vlm=False)
    moe = dict(num_experts=4, top_k=2, expert_size=32, shared_expert_size=32) if kind == "qwen35-moe" else {}
    return SynthSpec(bigram=True, layers=4, full_attention_interval=4, **moe)  # hybrid 3:1, as Qwen3.5 ships


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")


def validate(kind: str, s: SynthSpec, with_mtp: bool, weight_format: str) -> None:
    """Reject impossible sizes with one line naming the option, before anything is written."""
    check_kind(kind)
    for key, upper in LIMITS.items():
        value = getattr(s, key)
        if not 1 <= value <= upper:
            raise with_hint(ConfigError(f"{key.replace('_', ' ')} {value}: expected 1..{upper}"),
                            f"--{key.replace('_', '-')}", f"--{key.replace('_', '-')}")
    if s.hidden % s.heads:
        raise with_hint(ConfigError(f"heads {s.heads} does not divide hidden {s.hidden}"), "--heads", "--heads, --hidden")
    if s.heads % s.kv_heads:
        raise with_hint(ConfigError(f"kv heads {s.kv_heads} does not divide heads {s.heads}"), "--kv-heads",
                        "--kv-heads, --heads")
    rotary = int(s.head_dim * s.partial_rotary_factor)
    if rotary < 2 or rotary % 2:
        raise ConfigError(f"head dim {s.head_dim} x partial rotary factor {s.partial_rotary_factor} = {rotary} "
                          f"rotary dims: expected an even number >= 2")
    if kind != "llama":
        validate_layer_types(s)
    elif s.layer_types or s.full_attention_interval != 1:
        raise ConfigError("layer types: kind llama has full-attention layers only")
    if s.vocab < MIN_VOCAB:
        raise with_hint(ConfigError(f"vocab {s.vocab}: expected at least {MIN_VOCAB} ({SPECIAL} special tokens + "
                                    f"bytes)"), "--vocab", "--vocab")
    if s.num_experts and s.top_k > s.num_experts:
        raise ConfigError(f"top-k {s.top_k} exceeds the {s.num_experts} experts")
    if kind == "llama" and with_mtp:
        raise with_hint(ConfigError("kind llama has no MTP head"), "--no-mtp", "use --no-mtp")
    if weight_format not in WEIGHT_FORMATS:
        raise ConfigError(f"weight format {weight_format!r}: expected one of {', '.join(WEIGHT_FORMATS)}")
    if weight_format == "int4" and s.hidden % 16:
        raise with_hint(ConfigError(f"weight format int4 needs hidden divisible by 16 (the group size), got "
                                    f"{s.hidden}"), "--hidden", "--hidden")


def layer_pattern(text: str) -> dict:
    """`--layer-types`: an interval N (every N-th layer full attention, 1: all) or a comma list of full / linear
    (or their config spellings full_attention / linear_attention); returns SynthSpec fields."""
    text = text.strip()
    if text.isdigit():
        return {"full_attention_interval": int(text), "layer_types": ()}
    names = {"full": FULL, FULL: FULL, "linear": LINEAR, LINEAR: LINEAR}
    items = [t.strip() for t in text.split(",")]
    bad = [t for t in items if t not in names]
    if bad or not text:
        raise ConfigError(f"layer types {text!r}: expected an interval (a positive integer) or a comma list of "
                          f"full / linear, got {bad[0] if bad else 'nothing'!r}")
    return {"layer_types": tuple(names[t] for t in items)}


def spec_from_options(kind: str, sizes: dict, layer_types: str | None) -> SynthSpec:
    """The spec `irsurgeon synth` asks for: the kind's default with the sizes given (head_dim follows hidden /
    heads when only those are given) and the --layer-types pattern."""
    given = dict(sizes)
    pattern = layer_pattern(layer_types) if layer_types is not None else {}
    if pattern.get("layer_types") and "layers" not in given:
        given["layers"] = len(pattern["layer_types"])
    spec = default_spec(kind).with_(**given, **pattern)
    if {"hidden", "heads"} & given.keys() and "head_dim" not in given and spec.hidden % spec.heads == 0:
        spec = spec.with_(head_dim=spec.hidden // spec.heads)
    return spec


def validate_layer_types(s: SynthSpec) -> None:
    """The hybrid pattern and the linear-attention sizes of a qwen35 kind."""
    for key, upper in LINEAR_LIMITS.items():
        value = getattr(s, key)
        if not 1 <= value <= upper:
            raise ConfigError(f"{key} {value}: expected 1..{upper}")
    if s.linear_value_heads % s.linear_key_heads:
        raise ConfigError(f"linear value heads {s.linear_value_heads} are not a multiple of the "
                          f"{s.linear_key_heads} linear key heads")
    types = layer_types(s)
    if len(types) != s.layers or not set(types) <= {FULL, LINEAR}:
        raise ConfigError(f"layer types {','.join(types)}: expected {s.layers} entries, each "
                          f"{FULL} or {LINEAR}")
    if FULL not in types:  # openvino-genai's paged-attention pipeline needs one: "No ScaledDotProductAttention ..."
        every = min(s.layers, s.full_attention_interval) if s.layers > 1 else 1
        raise with_hint(ConfigError(f"{s.layers} layers with full attention every {s.full_attention_interval} layers "
                                    f"give no {FULL} layer, which openvino-genai needs to load the target"),
                        "--layer-types", f"pass --layer-types {every} or a list with 'full'")


def synthesize(out_dir: str | Path, kind: str = "qwen35", spec: SynthSpec | None = None, seed: int = 0,
               with_mtp: bool = True, weight_format: str = "f32", wait: bool = False,
               force: bool = False) -> Synthesized:
    """Write out_dir/target and out_dir/ckpt for `kind` (see the module docstring), holding out_dir's lock; an
    earlier output there is replaced with force, else refused (synth.output)."""
    s = spec or default_spec(kind)
    validate(kind, s, with_mtp, weight_format)
    limits.check_memory(memory_need(s, with_mtp), f"synth {kind} at hidden {s.hidden}, vocab {s.vocab}, "
                        f"{s.layers} layers", ConfigError)
    with output_pair(out_dir, wait, force) as (target, ckpt):
        _write(kind, s, seed, with_mtp, weight_format, target, ckpt)
    return Synthesized(Path(out_dir) / OWN[0], Path(out_dir) / OWN[1], s)


def _write(kind: str, s: SynthSpec, seed: int, with_mtp: bool, weight_format: str, target: Path,
           ckpt: Path) -> None:
    tensors = checkpoint_tensors(kind, s, seed, with_mtp)
    write_tensors(ckpt / "model.safetensors", tensors)
    write_json(ckpt / ex.CONFIG, write_target(kind, s, tensors, with_mtp, weight_format, target))


def write_target(kind: str, s: SynthSpec, tensors: dict[str, np.ndarray], with_mtp: bool, weight_format: str,
                 target: Path) -> dict:
    """Every file of out/target from the checkpoint's float32 tensors (their bf16 values); returns its config.json."""
    cfg = configs.config_json(kind, s, VisionSpec(), with_mtp)
    for name, model in target_models(kind, s, bf16_round(tensors), weight_format).items():
        save(model, target / name)
    write_json(target / ex.CONFIG, cfg)
    write_json(target / ex.GENERATION_CONFIG, configs.generation_config())
    if kind != "llama":
        write_json(target / ex.PREPROCESSOR_CONFIG, configs.preprocessor_config(VisionSpec()))
    return cfg


def memory_need(s: SynthSpec, with_mtp: bool) -> int:
    """A lower bound of synthesize's peak: every checkpoint matrix held in float32 at once (checkpoint_tensors),
    while the embedding table is drawn in float64 (Draw.mat)."""
    H, D = s.hidden, s.head_dim
    attention = (2 * s.heads + 2 * s.kv_heads + s.heads) * D * H
    mlp = 3 * s.intermediate * H if not s.num_experts else \
        s.num_experts * (H + 3 * s.expert_size * H) + 3 * s.shared_expert_size * H
    params = 2 * s.vocab * H + s.layers * (attention + mlp) + (2 * H * H + attention + mlp if with_mtp else 0)
    return 4 * params + 8 * s.vocab * H


def checkpoint_tensors(kind: str, s: SynthSpec, seed: int, with_mtp: bool) -> dict[str, np.ndarray]:
    """Every checkpoint tensor in float32; each part draws from its own stream, so parts never shift each other."""
    if kind == "llama":
        return lm_tensors(s, np.random.default_rng([seed, 0]), prefix="model.", qwen=False)
    t = lm_tensors(s, np.random.default_rng([seed, 0]))
    t.update(vision_tensors(VisionSpec(), s.hidden, np.random.default_rng([seed, 1])))
    if with_mtp:
        t.update(mtp_tensors(s, np.random.default_rng([seed, 2]), final_norm=t["model.language_model.norm.weight"]))
    return t


def target_models(kind: str, s: SynthSpec, t: dict[str, np.ndarray], weight_format: str) -> dict[str, ov.Model]:
    """Every IR of the target directory by file name, weights in `weight_format` (int4: the LM's MatMuls)."""
    fmt = WeightFormat.F16 if weight_format == "int4" else WeightFormat(weight_format)
    lm_fmt = WeightFormat.F32 if weight_format == "int4" else fmt  # nncf compresses from f32
    w = tg.Weights(t, lm_fmt, zero_centred=kind != "llama")
    if kind == "llama":
        models = {ex.TEXT_ONLY_MODEL: tg.llama_model(s, w)}
    else:
        v = VisionSpec()
        vw = tg.Weights(t, fmt, zero_centred=False)
        models = {ex.LANGUAGE_MODEL: tg.qwen35_language_model(s, w),
                  ex.TEXT_EMBEDDINGS: tg.text_embeddings_model(s, tg.Weights(t, fmt, True)),
                  ex.VISION_EMBEDDINGS: patch_embed_model(v, vw),
                  ex.VISION_POS: pos_embed_model(v, vw),
                  ex.VISION_MERGER: merger_model(v, s.hidden, vw)}
    lm = models.get(ex.LANGUAGE_MODEL) or models[ex.TEXT_ONLY_MODEL]
    if weight_format == "int4":
        models[next(k for k, m in models.items() if m is lm)] = lm = compress_int4(lm)
    rtinfo.set_runtime_option(lm, "ACTIVATIONS_SCALE_FACTOR", "8.0")
    if weight_format != "int4":
        rtinfo.set_runtime_option(lm, rtinfo.KV_CACHE_PRECISION, "f16")
    tok, detok = tokenizer_model(s.vocab), detokenizer_model(s.vocab)
    tokenizer_rt_info(tok, detokenizer=False)
    tokenizer_rt_info(detok, detokenizer=True)
    return {**models, ex.TOKENIZER: tok, ex.DETOKENIZER: detok}


def compress_int4(model: ov.Model) -> ov.Model:
    """4-bit asymmetric weights, group 16, every MatMul (lm_head included): deterministic, data-free."""
    import nncf

    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=16, ratio=1.0,
                                 all_layers=True)


def save(model: ov.Model, xml: Path) -> None:
    name_anonymous_nodes(model)
    try:
        ov.save_model(model, xml, compress_to_fp16=False)
    except (OSError, RuntimeError) as e:
        raise OutputError(f"{xml}: cannot write: {e}") from None


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Fixture:
    kind: str
    seed: int = 0
    with_mtp: bool = True
    weight_format: str = "f16"
    sizes: tuple[tuple[str, int], ...] = ()

    def spec(self) -> SynthSpec:
        return default_spec(self.kind).with_(**dict(self.sizes))


# The committed fixtures/synth/<name>/ directories, regenerated by scripts/make_fixtures.py.
FIXTURES = {
    "qwen35": Fixture("qwen35", seed=1, sizes=(("layers", 2), ("full_attention_interval", 2))),
    "qwen35-moe": Fixture("qwen35-moe", seed=2, sizes=(("layers", 2), ("hidden", 32), ("heads", 2), ("kv_heads", 1),
                                                       ("full_attention_interval", 2))),
    "llama": Fixture("llama", seed=3, with_mtp=False,
                     sizes=(("hidden", 32), ("heads", 4), ("kv_heads", 2), ("head_dim", 8), ("intermediate", 64))),
}


def make_fixture(name: str, out_dir: str | Path) -> Synthesized:
    f = FIXTURES[name]
    return synthesize(Path(out_dir) / name, f.kind, f.spec(), f.seed, f.with_mtp, f.weight_format)
