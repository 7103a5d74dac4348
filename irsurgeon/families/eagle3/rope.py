"""The RoPE an EAGLE-3 draft layer's config names, as the code that trained it computes it: default, linear,
dynamic, yarn, longrope, llama3 (the Llama 3.1 drafts'), or AngelSlim's mrope (its VLM drafts'); an AngelSlim text
draft's is the default at its trainer's base, 10000 (read_angelslim). The tables: rope_tables.py.

transformers 5.2.0 modeling_rope_utils.py, the rope dict: rope_scaling, when set, replaces rope_parameters
(RotaryEmbeddingConfigMixin.convert_rope_params_to_dict); its type is `rope_type`, else `type`; its own rope_theta
wins over the layer's. standardize_rope_params, as each `_compute_*_parameters` calls it on the built config, gives
llama3, yarn and longrope their original_max_position_embeddings: a layer-level one (Phi-3's place) wins, else the
dict's, else max_position_embeddings. dynamic scales from max_position_embeddings. Keys each type requires
(`_validate_<type>_rope_parameters`, a KeyError at config load when missing): linear, dynamic: factor; yarn: factor
(null: max_position_embeddings / original); longrope: short_factor, long_factor (factor optional, the same ratio
when absent); llama3: factor, low_freq_factor, high_freq_factor. Optional: yarn attention_factor, beta_fast,
beta_slow (`or` 32 / 1, so 0 reads as unset), mscale, mscale_all_dim (used only when both are non-zero), truncate;
longrope attention_factor. Every value is checked before a table is computed with it (`number`): the validators
ask for factors >= 1 and positive attention factors and betas; the upper bounds are far above any published config
and keep float32 tables finite. A scaled type with partial_rotary_factor other than 1 is refused: Llama's
apply_rotary_pos_emb multiplies whole heads, so transformers' partial tables could not have trained.

dynamic and longrope change with the length: transformers' `dynamic_rope_update` decorator recomputes them in
each forward from seq_len = max(position_ids) + 1 (dynamic: theta' when seq_len > max_position_embeddings, else
the table at max_position_embeddings, the default one; longrope: long_factor when seq_len >
original_max_position_embeddings, else short_factor). The graph does the same from the position_ids of each call
(ReduceMax, then a Select between the two tables), so the IR matches transformers at every length. openvino-genai
calls the draft with growing positions (the prompt, then each draft step, only the new rows): each call gets the
table of its own positions, and the keys cached by earlier calls keep the rotation of their call, as in
transformers' KV cache. Across forwards transformers differs by version, and for growing positions they all agree:
5.2.0 recomputes whenever seq_len > max_position_embeddings and then never returns to the default table
(dynamic_frequency_update stores max_seq_len_cached as "None_max_seq_len_cached" when the model has no layer
types, so its reset branch never fires; tests/helpers/check_rope_reference.py shows it), 4.56.1 recomputes only past the
longest length seen and resets below max_position_embeddings. 4.56.1's longrope threshold is the layer-level
original_max_position_embeddings only (else max_position_embeddings); 5.2.0's is read here.

Which code computes a draft's tables (the `trainer` argument of read): a speculators draft (Eagle3Speculator) is
transformers' LlamaRotaryEmbedding over its transformer_layer_config (vllm-project/speculators
src/speculators/models/eagle3/core.py Eagle3DraftModel.__init__ at c05b95b). A SafeAILab / SpecForge layout draft
is SpecForge's (sgl-project/SpecForge specforge/modeling/draft/llama3_eagle.py at a6b6b02, LlamaAttention._init_rope;
under transformers 5 it reads config.rope_parameters, standardized at load): linear and llama3 compute the same
numbers; its LlamaDynamicNTKScalingRotaryEmbedding builds its cache at max_position_embeddings + 20 at init, so
theta' is computed at max(seq_len, max_position_embeddings + 20) and never equals theta; its
LlamaYarnRotaryEmbedding scales cos and sin by get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
(attention_factor unread; mscale_all_dim 0 divides by 1, where transformers takes get_mscale(factor)), always
truncates, and takes beta_fast, beta_slow, mscale, mscale_all_dim as given (an absent one fails there, so each is
required here); it raises on longrope. SafeAILab's own eagle/model/cnets.py (cb7e084) reads only `type` linear and
dynamic and builds them at base 10000 with a transformers-like dynamic threshold; a checkpoint does not say which of
the two trained it, and such configs are built as SpecForge's.

SpecForge's VLM drafts (configs/qwen2-5-vl-7b-eagle3.json: rope_scaling type "mrope" with target_model_type
qwen2_5_vl, no modal_type): specforge/modeling/draft/llama3_eagle.py LlamaAttention._init_rope takes
LlamaMutiRotaryEmbedding(base=rope_theta) for type "mrope", and its forward applies apply_multimodal_rotary_pos_emb
with rope_scaling.mrope_section: the chunked layout of Qwen2-VL (mrope_rows).

mrope: Tencent/AngelSlim compressor/speculative/train/models/draft/llama_eagle3.py LlamaAttention._init_rope takes
MRotaryEmbedding when rope_scaling's type is "mrope" or it sets mrope_interleaved; MRotaryEmbedding.forward computes
the default inv_freq (theta: rope_scaling.rope_theta, else rope_theta) against each of the 3 position rows
[T, H, W] of position_ids [3, B, S] and always interleaves them (apply_interleaved_mrope: frequency j takes row H
for j = 1, 4, .. < 3 * mrope_section[1], row W for j = 2, 5, .. < 3 * mrope_section[2], row T otherwise), whatever
the target's own layout (Qwen2.5-VL's is chunked): the draft runs as it was trained.

AngelSlim text drafts (Eagle3LlamaForCausalLM without modal_type VLM): the same LlamaAttention._init_rope makes
LlamaRotaryEmbedding(head_dim, max_position_embeddings=...) and passes no base, so the draft trains with that class's
default 10000 whatever rope_theta says (every version of the file: 917de3a 2025-10-31 to 67394ce, the release/0.2 to
0.5 branches; under transformers 5 rope_scaling reads {"rope_type": "default", ...}, the same branch). Its
rope_scaling types: "default" (that class), "linear" / "dynamic" (scaled classes, also base 10000, not built here),
any other raises ValueError("Unknown RoPE scaling type"). SafeAILab/SpecForge drafts keep the config's theta: SpecForge
specforge/modeling/draft/llama3_eagle.py LlamaAttention._init_rope passes base=rope_theta (since d3472dde, PR #270,
2025-10-30; get_rope_config at its head), as SafeAILab eagle/model/cnets.py LlamaAttention._init_rope does
(base=self.config.rope_theta) and the runtimes these drafts are served and measured with (SGLang, vLLM). SafeAILab's
training copy, eagle/traineagle3/cnets.py, and SpecForge before d3472dde pass no base either; a checkpoint does not
say which code trained it, so those drafts are built at the config's theta.

Where a checkpoint leaves the base open (readings.py), `irsurgeon tune` judges both by the drafts genai accepts and
records the winner as BASE_KEY in the draft's config.json (settled_base), read over the trainer's base above.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.core.config import MISSING, ROPE_THETA, Range, lookup
from irsurgeon.core.errors import ConfigError
from irsurgeon.families.eagle3 import rope_tables
from irsurgeon.families.eagle3.rope_tables import Rope
from irsurgeon.ops.core import const, named

TRANSFORMERS, SPECFORGE = "transformers", "specforge"  # whose code computes the tables (the module docstring)
TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "llama3")  # transformers' ROPE_INIT_FUNCTIONS + default
TRAINER_TYPES = {TRANSFORMERS: TYPES, SPECFORGE: ("default", "linear", "dynamic", "yarn", "llama3")}
SPECFORGE_MARGIN = 20  # llama3_eagle.py LlamaRotaryEmbedding.__init__: _set_cos_sin_cache(max_position_embeddings + 20)
FINITE = 1e6  # bound of attention factors, betas, mscales, longrope factors, a dynamic factor
FACTOR = Range(1, 1e12)
POSITIONS = Range(1, 1 << 24)  # the bound of max_position_embeddings (model.py)
MROPE_TYPES = ("default", "mrope")  # the rope_type an mrope rope_scaling may name (AngelSlim: "mrope" -> default)
MROPE_ROWS = 3  # position_ids [T, H, W] rows
MROPE_DEFAULT_SECTION = (24, 20, 20)  # MRotaryEmbedding.__init__: rope_scaling.get("mrope_section", [24, 20, 20])
ANGELSLIM_THETA = 10000.0  # llama_eagle3.py LlamaRotaryEmbedding.__init__(dim, max_position_embeddings=2048, base=10000)
inv_freq = rope_tables.inv_freq  # [D/2] f32: the table of a call at or below the type's threshold


def is_mrope(section: dict) -> bool:
    """Whether AngelSlim's draft would take MRotaryEmbedding for this layer config (LlamaAttention._init_rope)."""
    r = section.get("rope_scaling")
    return isinstance(r, dict) and (r.get("type", r.get("rope_type")) == "mrope" or bool(r.get("mrope_interleaved")))


def is_specforge_mrope(section: dict) -> bool:
    """SpecForge's mrope (llama3_eagle.py LlamaAttention._init_rope: rope_scaling type "mrope", read as
    rope_type, else type), without AngelSlim's mrope_interleaved."""
    r = section.get("rope_scaling")
    return (isinstance(r, dict) and r.get("rope_type", r.get("type")) == "mrope"
            and "mrope_interleaved" not in r)


def read_mrope(section: dict, theta: float, head_dim: int, source: str, interleaved: bool = True) -> Rope:
    """AngelSlim's MRotaryEmbedding (interleaved), or SpecForge's LlamaMutiRotaryEmbedding (chunked: the module
    docstring), from rope_scaling, each value checked."""
    r = section["rope_scaling"]
    kind = r.get("rope_type", r.get("type", "default"))
    if kind not in MROPE_TYPES:
        raise ConfigError(f"{source}: rope_scaling.rope_type {kind!r:.40} with mrope: only {', '.join(MROPE_TYPES)} "
                          f"is built (AngelSlim's MRotaryEmbedding computes any other by transformers' ROPE_INIT_FUNCTIONS)")
    factor = section.get("partial_rotary_factor", 1.0)
    if factor != 1.0:
        raise ConfigError(f"{source}: partial_rotary_factor is {factor!r:.20}: only full-width mrope is built")
    theta = number(r, "rope_theta", theta, "rope_scaling", source, ROPE_THETA)
    got = r.get("mrope_section", list(MROPE_DEFAULT_SECTION))
    if (not isinstance(got, list) or len(got) != MROPE_ROWS
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in got) or sum(got) != head_dim // 2):
        raise ConfigError(f"{source}: rope_scaling.mrope_section must be {MROPE_ROWS} positive integers summing to "
                          f"head_dim / 2 = {head_dim // 2}, found {got!r:.60}")
    return Rope("mrope", theta, mrope_section=tuple(got), interleaved=interleaved)


def read(section: dict, theta: float, max_positions: int, source: str, *, head_dim: int | None = None,
         trainer: str = TRANSFORMERS) -> Rope:
    """The layer's RoPE (rope_scaling, else rope_parameters) as `trainer` computes it, each value checked before
    it is computed with; head_dim, when given, checks the widths here rather than at the build (cos_sin)."""
    home = "rope_scaling" if section.get("rope_scaling") else "rope_parameters"
    r = lookup(section, home)
    if r in (MISSING, None):
        return Rope("default", theta)
    if not isinstance(r, dict):
        raise ConfigError(f"{source}: {home} must be a JSON object, found {type(r).__name__}")
    kind, types = r.get("rope_type", r.get("type", "default")), TRAINER_TYPES[trainer]
    if kind not in types:
        raise ConfigError(f"{source}: {home}.rope_type {kind!r:.40} is not one of {', '.join(types)}"
                          + (" (SpecForge's LlamaAttention._init_rope raises on any other)" if trainer == SPECFORGE
                             else ""))
    theta = number(r, "rope_theta", theta, home, source, ROPE_THETA)
    if kind == "default":
        return Rope(kind, theta)
    values = Values(r, home, source, section, max_positions, trainer == SPECFORGE)
    values.check_partial(kind)
    rope = READERS[kind](values, theta)
    if head_dim is not None:
        check_width(rope, head_dim, f"{source}: {home}.")
    return rope


@dataclass(frozen=True)
class Values:
    """One rope dict's values as a type's reader takes them, each checked (`number`)."""
    r: dict
    home: str
    source: str
    section: dict  # the layer config around it
    max_positions: int
    specforge: bool

    def number(self, key: str, default=None, bounds: Range = FACTOR) -> float:
        return number(self.r, key, default, self.home, self.source, bounds)

    def optional(self, key: str, bounds: Range) -> float | None:
        """The key's number, or None when it is absent or null (transformers' rope_parameters_dict.get(key))."""
        return None if self.r.get(key) is None else self.number(key, None, bounds)

    def original(self, bounds: Range = POSITIONS) -> int:
        """original_max_position_embeddings as standardize_rope_params leaves it (the module docstring); SpecForge
        reads the dict as loaded, before a layer-level one replaces it."""
        key, home, where = "original_max_position_embeddings", "", self.section
        if key not in self.section or self.specforge:
            home, where = self.home, self.r
        value = number(where, key, self.max_positions, home, self.source, bounds)
        if not value.is_integer():
            raise ConfigError(f"{self.source}: {home + '.' if home else ''}{key} must be an integer, found {value!r:.40}")
        return int(value)

    def factors(self, key: str) -> tuple[float, ...]:
        got = self.r.get(key)
        bad = not isinstance(got, list) or not got or any(
            isinstance(x, bool) or not isinstance(x, (int, float)) or x not in Range(0, FINITE, lo_open=True)
            for x in got)
        if bad:
            raise ConfigError(f"{self.source}: {self.home}.{key} must be a list of head_dim / 2 numbers in "
                              f"(0, {FINITE:g}], found {got!r:.60}")
        return tuple(float(x) for x in got)

    def check_partial(self, kind: str) -> None:
        for where, home in ((self.r, self.home + "."), (self.section, "")):
            value = where.get("partial_rotary_factor", 1.0)
            if value != 1.0:
                raise ConfigError(f"{self.source}: {home}partial_rotary_factor is {value!r:.20} with rope_type "
                                  f"{kind!r}: only a RoPE over the whole head is built (Llama's "
                                  f"apply_rotary_pos_emb rotates every head dim)")


def read_linear(v: Values, theta: float) -> Rope:
    return Rope("linear", theta, v.number("factor"))


def read_dynamic(v: Values, theta: float) -> Rope:
    margin = SPECFORGE_MARGIN if v.specforge else 0
    return Rope("dynamic", theta, v.number("factor", None, Range(1, FINITE)), original=v.max_positions,
                floor=v.max_positions + margin)


def read_llama3(v: Values, theta: float) -> Rope:
    factor = v.number("factor")
    low = v.number("low_freq_factor", None, Range(0, 1e12, lo_open=True))
    high = v.number("high_freq_factor", None, Range(low, 1e12, lo_open=True))  # llama3 divides by their difference
    return Rope("llama3", theta, factor, low, high, v.original())


def read_yarn(v: Values, theta: float) -> Rope:
    """_compute_yarn_parameters' values (SpecForge: LlamaYarnRotaryEmbedding's, the module docstring)."""
    if "factor" not in v.r:
        raise ConfigError(f"{v.source}: {v.home}.factor is required for its rope_type")
    original = v.original()
    if v.specforge:
        factor = v.number("factor")
        betas = [v.number(k, None, Range(0, FINITE, lo_open=True)) for k in ("beta_fast", "beta_slow")]
        attention = 1.0  # yarn_get_mscale returns 1 for a factor <= 1 before it reads mscale
        if factor > 1:
            m, m_all = (v.number(k, None, Range(0, FINITE)) for k in ("mscale", "mscale_all_dim"))
            attention = rope_tables.yarn_mscale(factor, m) / rope_tables.yarn_mscale(factor, m_all)
        return Rope("yarn", theta, factor, original=original, attention=attention, beta_fast=betas[0],
                    beta_slow=betas[1])
    factor = v.optional("factor", FACTOR)
    factor = v.max_positions / original if factor is None else factor
    attention = v.optional("attention_factor", Range(0, FINITE, lo_open=True))
    m, m_all = (v.optional(k, Range(0, FINITE)) for k in ("mscale", "mscale_all_dim"))
    if attention is None:
        attention = (rope_tables.yarn_mscale(factor, m) / rope_tables.yarn_mscale(factor, m_all) if m and m_all
                     else rope_tables.yarn_mscale(factor))
    truncate = v.r.get("truncate", True)
    if not isinstance(truncate, bool):
        raise ConfigError(f"{v.source}: {v.home}.truncate must be true or false, found {truncate!r:.40}")
    return Rope("yarn", theta, factor, original=original, attention=attention, truncate=truncate,
                beta_fast=v.optional("beta_fast", Range(0, FINITE)) or 32.0,
                beta_slow=v.optional("beta_slow", Range(0, FINITE)) or 1.0)


def read_longrope(v: Values, theta: float) -> Rope:
    """_compute_longrope_parameters' values; original >= 2 (its attention factor divides by log(original))."""
    short, long = v.factors("short_factor"), v.factors("long_factor")
    original = v.original(Range(2, POSITIONS.hi))
    factor = v.optional("factor", FACTOR)
    factor = v.max_positions / original if factor is None else factor
    attention = v.optional("attention_factor", Range(0, FINITE, lo_open=True))
    if attention is None:
        attention = rope_tables.longrope_attention(factor, original)
    return Rope("longrope", theta, factor, original=original, attention=attention, short_factor=short,
                long_factor=long)


READERS = {"linear": read_linear, "dynamic": read_dynamic, "yarn": read_yarn, "longrope": read_longrope,
           "llama3": read_llama3}


def check_width(rope: Rope, head_dim: int, where: str = "") -> None:
    """The values that must fit head_dim: longrope's D/2 factors each, dynamic's exponent D / (D - 2)."""
    for key in ("short_factor", "long_factor"):
        got = len(getattr(rope, key))
        if rope.kind == "longrope" and got != head_dim // 2:
            raise ConfigError(f"{where}{key} has {got} values: head_dim {head_dim} takes {head_dim // 2} "
                              f"(one per rotated pair)")
    if rope.kind == "dynamic" and head_dim <= 2:
        raise ConfigError(f"{where}rope_type 'dynamic' needs head_dim above 2 (its base is raised to "
                          f"D / (D - 2)), found {head_dim}")


def read_angelslim(section: dict, theta: float, source: str) -> tuple[Rope, list[str]]:
    """An AngelSlim text draft's RoPE as its trainer computes it: the default at base 10000 (the module docstring),
    with one line when the config names another theta."""
    theta = angelslim_theta(section, theta, source)
    if theta == ANGELSLIM_THETA:
        return Rope("default", ANGELSLIM_THETA), []
    return Rope("default", ANGELSLIM_THETA), [
        f"{source}: rope_theta {theta:.12g} overridden by 10000: AngelSlim's trainer gives a text draft's "
        f"LlamaRotaryEmbedding no base (llama_eagle3.py LlamaAttention._init_rope), so the draft was trained at 10000"]


def angelslim_theta(section: dict, theta: float, source: str) -> float:
    """The theta an AngelSlim text draft's config names (its rope dict's, else the layer's), checked: the base its
    inference code and the runtimes use, and its trainer does not (read_angelslim)."""
    home = "rope_scaling" if section.get("rope_scaling") else "rope_parameters"
    r = lookup(section, home)
    if r in (MISSING, None):
        return theta
    if not isinstance(r, dict):
        raise ConfigError(f"{source}: {home} must be a JSON object, found {type(r).__name__}")
    kind = r.get("type", r.get("rope_type", "default"))  # _init_rope reads "type" first, then "rope_type"
    if kind != "default":
        raise ConfigError(f"{source}: {home} type {kind!r:.40} in an AngelSlim text draft: only the default RoPE "
                          f"is built (AngelSlim's LlamaAttention._init_rope scales linear / dynamic ones, which "
                          f"are not built here, and raises on any other)")
    return number(r, "rope_theta", theta, home, source, ROPE_THETA)


# A draft config's RoPE base as a reading settled it (Family.readings, `irsurgeon tune`): a top-level key irsurgeon
# sets over the checkpoint's config.json (Options.config_edits) and stages in the draft's config.json, read over the
# base the layout's trainer would use. Only a default RoPE takes it: the readings offer it nowhere else.
BASE_KEY = "irsurgeon_rope_base"


def settled_base(cfg: dict, rope: Rope, source: str) -> tuple[Rope, list[str]]:
    """`rope` at the base BASE_KEY names, with the line saying so; `rope` itself when the config names none."""
    if BASE_KEY not in cfg:
        return rope, []
    base = number(cfg, BASE_KEY, None, "", source, ROPE_THETA)
    if rope.kind != "default":
        raise ConfigError(f"{source}: {BASE_KEY} is set, and this draft's RoPE is {rope.kind}: only a default RoPE "
                          f"is read at a settled base")
    return Rope("default", base), [f"{source}: RoPE base {base:.12g}, as {BASE_KEY} settles it"]


def number(r: dict, key: str, default, home: str, source: str, bounds: Range) -> float:
    value, path = r.get(key, default), f"{home}.{key}" if home else key
    if value is None:
        raise ConfigError(f"{source}: {path} is required for its rope_type")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in bounds:
        raise ConfigError(f"{source}: {path} must be a number in {bounds}, found {value!r:.40}")
    return float(value)


def mrope_rows(section: tuple[int, ...], head_dim: int, interleaved: bool = True) -> np.ndarray:
    """One-hot [3, 1, 1, D/2] f32: which position row (T, H, W) frequency j reads: interleaved
    (apply_interleaved_mrope), or chunked (Qwen2-VL's apply_multimodal_rotary_pos_emb, which SpecForge's draft
    calls: the cos/sin halves split by mrope_section * 2, chunk i from row i % 3, so frequency j reads row T below
    section[0], H below section[0] + section[1], W above)."""
    rows = np.zeros(head_dim // 2, np.int64)
    if interleaved:
        for row in (1, 2):
            rows[row:section[row] * MROPE_ROWS:MROPE_ROWS] = row
    else:
        rows[section[0]:section[0] + section[1]], rows[section[0] + section[1]:] = 1, 2
    return (np.arange(MROPE_ROWS)[:, None] == rows[None]).astype(np.float32)[:, None, None, :]


def cos_sin(position_ids: ov.Output, rope: Rope, head_dim: int, name: str) -> tuple[ov.Output, ov.Output]:
    """cos and sin tables [B, 1, S, D] for int64 position_ids [B, S], or [3, B, S] for mrope (rotate_half layout:
    the angles twice), times the type's attention factor; dynamic and longrope pick their table from the
    positions of the call (the module docstring)."""
    check_width(rope, head_dim)
    pos = ops.unsqueeze(ops.convert(position_ids, ov.Type.f32), const([-1], np.int64))  # [B, S, 1] / [3, B, S, 1]
    inv = rope_tables.call_inv(position_ids, rope, head_dim, name)  # [D/2]
    ang = named(ops.multiply(pos, inv), f"{name}/angles")
    if rope.kind == "mrope":  # each frequency from its row: a one-hot sum over the rows is exact
        pick = const(mrope_rows(rope.mrope_section, head_dim, rope.interleaved), name=f"{name}.mrope_rows")
        ang = named(ops.reduce_sum(ops.multiply(ang, pick), const([0], np.int64), keep_dims=False),
                    f"{name}/mrope_angles")  # [B, S, D/2]
    emb = ops.unsqueeze(ops.concat([ang, ang], axis=-1), const([1], np.int64))
    cos, sin = ops.cos(emb), ops.sin(emb)
    if rope.attention != 1.0:  # LlamaRotaryEmbedding.forward: cos() * attention_scaling, sin() likewise
        scale = const(rope.attention, name=f"{name}.attention_scaling")
        cos, sin = ops.multiply(cos, scale), ops.multiply(sin, scale)
    return named(cos, f"{name}/cos"), named(sin, f"{name}/sin")
