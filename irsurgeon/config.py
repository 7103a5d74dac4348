"""The MTP head's configuration, read from a Hugging Face `config.json` exactly as transformers 5.x reads it.

Every key the head uses is listed once, in QWEN35_KEYS: where transformers reads it (its homes, first present wins),
its default when absent, and the values the head accepts. A VLM checkpoint (`qwen3_5`, `qwen3_5_moe`) keeps its text
model under `text_config`; a text-only one (`qwen3_5_text`, `qwen3_5_moe_text`) at the top level. When a key's
homes disagree, the value transformers uses wins and MTPConfig.warnings says so, one line per disagreement; the
callers that build a head print them. Nothing about any particular checkpoint size is assumed.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from irsurgeon.errors import ConfigError

DENSE_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
DENSE_TEXT, MOE_TEXT = "qwen3_5_text", "qwen3_5_moe_text"
# transformers 5.23.0 Qwen3_5Config / Qwen3_5MoeConfig: `sub_configs_defaults` fixes the text config class by the
# top-level model_type (text_config.model_type does not choose it); the *_text types are their own text config.
TEXT_TYPE = {"qwen3_5": DENSE_TEXT, "qwen3_5_text": DENSE_TEXT, "qwen3_5_moe": MOE_TEXT, "qwen3_5_moe_text": MOE_TEXT}

# Bounds that reject absurd configs before anything is allocated (a hostile hidden_size of 10**9 ...).
MAX_WIDTH = 1 << 17
MAX_HEADS = 1 << 12
MAX_EXPERTS = 1 << 12
MAX_VOCAB = 1 << 23


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    expert_size: int
    shared_expert_size: int
    norm_topk_prob: bool = True


@dataclass(frozen=True)
class MTPConfig:
    model_type: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    intermediate_size: int | None
    vocab_size: int | None
    num_hidden_layers: int | None = None
    moe: MoEConfig | None = None
    dtype: str | None = None  # the checkpoint's declared storage dtype ("bfloat16", ...), when it declares one
    quantized: bool = False  # a quantization_config is present (FP8 releases): stored dtypes may differ from dtype
    source: str = field(default="", compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)  # "warning: <file>: ..." lines, for the caller

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def kv_groups(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


REQUIRED = object()  # no default: the key must be present
MISSING = object()  # lookup: no value at that path


@dataclass(frozen=True)
class Range:
    """lo..hi, each end closed unless marked open; NaN is never inside."""
    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, v: float) -> bool:
        return (v > self.lo if self.lo_open else v >= self.lo) and (v < self.hi if self.hi_open else v <= self.hi)

    def __str__(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if math.isfinite(x) and float(x).is_integer() else f"{x:g}"
        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class Key:
    """One key the head reads. homes: paths from the config root, in the order transformers prefers them; `{text}`
    is the text model's section (`text_config.` or nothing), `{rope}` its RoPE dict (`rope_scaling` replaces
    `rope_parameters` when set). default: transformers' value when no home is present, per text model type when
    it differs. ignored: homes transformers never reads (a value there that differs from the one used is reported)."""
    name: str
    homes: tuple[str, ...]
    default: Any = REQUIRED
    kind: type = int
    bounds: Range | None = None
    allowed: tuple | None = None
    types: tuple[str, ...] = (DENSE_TEXT, MOE_TEXT)
    null_is_absent: bool = False
    ignored: tuple[str, ...] = ()

    def default_for(self, text_type: str) -> Any:
        return self.default.get(text_type, REQUIRED) if isinstance(self.default, dict) else self.default


def _ints(hi: int) -> Range:
    return Range(1, hi)


# transformers 5.23.0: models/qwen3_5/configuration_qwen3_5.py (Qwen3_5TextConfig) and
# models/qwen3_5_moe/configuration_qwen3_5_moe.py (Qwen3_5MoeTextConfig) field defaults; RoPE precedence from
# modeling_rope_utils.py RotaryEmbeddingConfigMixin.convert_rope_params_to_dict (values already in rope_parameters
# win, `setdefault` only fills them from the legacy top-level rope_theta / partial_rotary_factor; partial_rotary_factor
# defaults to 0.25 in Qwen3_5TextConfig.__post_init__, rope_theta to `default_theta` 10000.0), and `rope_scaling`, when
# set, replaces rope_parameters; standardize_rope_params reads rope_type, else the legacy `type`, else "default".
# dtype: configuration_utils.py PreTrainedConfig.__post_init__ keeps `dtype` over `torch_dtype`; modeling_utils.py
# _get_dtype reads the top-level config's dtype only (a VLM's text_config.dtype is irsurgeon's fallback declaration:
# transformers would take the weights' dtype there, which check_dtype then compares against).
D, M = DENSE_TEXT, MOE_TEXT
QWEN35_KEYS: tuple[Key, ...] = (
    # hidden_size: transformers defaults to 4096 (dense) / 2048 (MoE); kept required, a head of a default width
    # could only fail later with a weight-shape error.
    Key("hidden_size", ("{text}hidden_size",), bounds=_ints(MAX_WIDTH)),
    Key("num_heads", ("{text}num_attention_heads",), 16, bounds=_ints(MAX_HEADS)),
    Key("num_kv_heads", ("{text}num_key_value_heads",), {D: 4, M: 2}, bounds=_ints(MAX_HEADS)),
    Key("head_dim", ("{text}head_dim",), 256, bounds=_ints(MAX_WIDTH)),
    Key("rms_norm_eps", ("{text}rms_norm_eps",), 1e-6, float, Range(0, 1, lo_open=True, hi_open=True)),
    Key("rope_theta", ("{rope}rope_theta", "{text}rope_theta"), 10000.0, float,
        Range(1, math.inf, lo_open=True, hi_open=True)),
    Key("partial_rotary_factor", ("{rope}partial_rotary_factor", "{text}partial_rotary_factor"), 0.25, float,
        Range(0, 1, lo_open=True)),
    # Qwen3_5TextRotaryEmbedding uses ROPE_INIT_FUNCTIONS[rope_type] for anything but "default"; the head has only
    # the default inverse frequencies. mrope_section / mrope_interleaved: equal t/h/w positions for text, a no-op.
    Key("rope_type", ("{rope}rope_type", "{rope}type"), "default", str, allowed=("default",)),
    Key("intermediate_size", ("{text}intermediate_size",), 12288, bounds=_ints(MAX_WIDTH * 4), types=(D,)),
    Key("vocab_size", ("{text}vocab_size",), 248320, bounds=_ints(MAX_VOCAB)),
    Key("num_hidden_layers", ("{text}num_hidden_layers",), {D: 32, M: 40}, bounds=_ints(4096)),
    # The two mtp_* keys are not transformers fields (kept as extra attributes of the text config; transformers
    # drops mtp.* at load). Dedicated embeddings would be a table of the head's own; it is fed the model's embeddings.
    Key("mtp_num_hidden_layers", ("{text}mtp_num_hidden_layers",), 0, bounds=Range(0, 4096)),
    Key("mtp_use_dedicated_embeddings", ("{text}mtp_use_dedicated_embeddings",), False, bool, allowed=(False,)),
    # Qwen3_5Attention: nn.Linear(..., bias=config.attention_bias); Qwen3_5MLP: ACT2FN[config.hidden_act]. The head
    # has no biases and only SiLU.
    Key("attention_bias", ("{text}attention_bias",), False, bool, allowed=(False,)),
    Key("hidden_act", ("{text}hidden_act",), "silu", str, allowed=("silu",)),
    Key("num_experts", ("{text}num_experts",), 256, bounds=_ints(MAX_EXPERTS), types=(M,)),
    Key("top_k", ("{text}num_experts_per_tok",), 8, bounds=_ints(MAX_EXPERTS), types=(M,)),
    Key("expert_size", ("{text}moe_intermediate_size",), 512, bounds=_ints(MAX_WIDTH * 4), types=(M,)),
    Key("shared_expert_size", ("{text}shared_expert_intermediate_size",), 512, bounds=_ints(MAX_WIDTH * 4),
        types=(M,)),
    # Qwen3_5MoeTopKRouter.forward always divides the top-k weights by their sum; the config has no such field.
    Key("norm_topk_prob", (), True, bool, types=(M,), ignored=("{text}norm_topk_prob",)),
    Key("dtype", ("dtype", "torch_dtype", "{text}dtype", "{text}torch_dtype"), None, str, null_is_absent=True),
)
del D, M


def read_json(path: Path) -> dict:
    """Read a JSON object from path (bounded: irsurgeon.limits); any failure is a ConfigError naming the file."""
    from irsurgeon import limits

    data = limits.read_json(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def text_section(cfg: dict) -> dict:
    """The text-model part of a config: `text_config` when present, else the top level."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) else cfg


def load_config(path: str | Path) -> MTPConfig:
    """Read and validate the MTP configuration in a config.json."""
    return parse_config(read_json(Path(path)), source=str(path))


def parse_config(cfg: dict, source: str = "config.json") -> MTPConfig:
    """The head's configuration as transformers reads config.json (QWEN35_KEYS), validated and bounded."""
    text_type, text = text_model(cfg, source)
    rope, warnings = rope_section(cfg, text, source)
    values = {}
    for key in QWEN35_KEYS:
        if text_type in key.types:
            values[key.name], lines = read_key(cfg, key, key.default_for(text_type), {"text": text, "rope": rope},
                                               source)
            warnings += lines
    check_head(values, source)
    moe = None
    if text_type == MOE_TEXT:
        moe = MoEConfig(num_experts=values["num_experts"], top_k=values["top_k"], expert_size=values["expert_size"],
                        shared_expert_size=values["shared_expert_size"], norm_topk_prob=values["norm_topk_prob"])
    # transformers reads only the top-level quantization_config; a text-level one is honoured too, as
    # weights/moe.py decodes FP8 experts from either place.
    quantized = any(isinstance(lookup(cfg, p), dict) for p in ("quantization_config", f"{text}quantization_config"))
    return MTPConfig(
        model_type=text_type, hidden_size=values["hidden_size"], num_heads=values["num_heads"],
        num_kv_heads=values["num_kv_heads"], head_dim=values["head_dim"], rms_norm_eps=values["rms_norm_eps"],
        rope_theta=values["rope_theta"], partial_rotary_factor=values["partial_rotary_factor"],
        intermediate_size=values.get("intermediate_size"), vocab_size=values["vocab_size"],
        num_hidden_layers=values["num_hidden_layers"], moe=moe, dtype=values["dtype"], quantized=quantized,
        source=source, warnings=tuple(warnings))


def text_model(cfg: dict, source: str) -> tuple[str, str]:
    """(text model type, path prefix of its section) as transformers resolves them from the top-level model_type."""
    outer = cfg.get("model_type")
    text_type = TEXT_TYPE.get(outer) if isinstance(outer, str) else None
    if text_type is None:
        raise ConfigError(f"{source}: model_type {outer!r} has no supported MTP head "
                          f"(expected one of {', '.join(DENSE_TYPES + MOE_TYPES)})")
    if outer == text_type:
        return text_type, ""
    tc = cfg.get("text_config")
    if tc is None:  # transformers would build the text model from its class defaults, which have no MTP head
        raise ConfigError(f"{source}: model_type {outer!r} keeps its text model under text_config, which is absent")
    if not isinstance(tc, dict):
        raise ConfigError(f"{source}: text_config must be a JSON object, found {type(tc).__name__}")
    inner = tc.get("model_type", text_type)
    if inner not in (text_type, outer):
        raise ConfigError(f"{source}: text_config.model_type {inner!r} does not match model_type {outer!r} "
                          f"(expected {text_type!r})")
    return text_type, "text_config."


def rope_section(cfg: dict, text: str, source: str) -> tuple[str, list[str]]:
    """The `{rope}` prefix: rope_scaling when set (transformers: `rope_scaling or rope_parameters`), else
    rope_parameters; one flat dict, as Qwen3_5TextRotaryEmbedding reads it."""
    params, scaling = f"{text}rope_parameters", f"{text}rope_scaling"
    chosen, warnings = params, []
    if (replacing := lookup(cfg, scaling)) is not MISSING and replacing:
        chosen = scaling
        other = lookup(cfg, params)
        if other is not MISSING and other and other != replacing:
            warnings.append(disagreement(source, params, other, scaling, replacing, label=scaling))
    rope = lookup(cfg, chosen)
    if rope not in (MISSING, None) and not isinstance(rope, dict):
        raise ConfigError(f"{source}: {chosen} must be a JSON object, found {type(rope).__name__}")
    nested = [k for k, v in (rope or {}).items() if isinstance(v, dict)] if rope is not MISSING else []
    if nested:
        raise ConfigError(f"{source}: {chosen}.{nested[0]}: RoPE parameters per layer type are not supported "
                          f"(Qwen3.5 reads one flat {chosen.rsplit('.', 1)[-1]} dict)")
    return chosen + ".", warnings



def lookup(cfg: dict, path: str) -> Any:
    """The value at a dotted path, or MISSING when any step is absent or not an object."""
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def read_key(cfg: dict, key: Key, default: Any, where: dict[str, str], source: str) -> tuple[Any, list[str]]:
    """A key's value from its first present home (else its default), checked; a warning per disagreeing home."""
    homes = list(dict.fromkeys(h.format(**where) for h in key.homes))  # text-only configs fold `{text}dtype`
    found = [(h, v) for h in homes if (v := lookup(cfg, h)) is not MISSING and not (v is None and key.null_is_absent)]
    if not found:
        if default is REQUIRED:
            raise ConfigError(f"{source}: missing required key {homes[0]!r}")
        value, path = default, None
    else:
        path, raw = found[0]
        value = checked(key, path, raw, source)
    warnings = [disagreement(source, h, v, path, raw) for h, v in found[1:] if v != value]
    for home in (h.format(**where) for h in key.ignored):
        if (v := lookup(cfg, home)) is not MISSING and v != value:
            warnings.append(f"warning: {source}: {home} {show(v)} is not read by transformers for this model; "
                            f"using {show(value)} (as transformers does)")
    return value, warnings


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def checked(key: Key, path: str, value: Any, source: str) -> Any:
    """value if it has the key's type, bounds and allowed values; a ConfigError naming the path otherwise."""
    ok_type = isinstance(value, (int, float) if key.kind is float else key.kind)
    if not ok_type or (key.kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{source}: {path} must be {KIND_NAMES[key.kind]}, found {show(value)}")
    if key.kind is float:
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"{source}: {path} = {value} is out of range (expected {key.bounds})") from None
    if key.bounds is not None and value not in key.bounds:
        raise ConfigError(f"{source}: {path} = {value} is out of range (expected {key.bounds})")
    if key.allowed is not None and value not in key.allowed:
        raise ConfigError(f"{source}: {path} {show(value)} is not supported by the MTP head "
                          f"(expected {' or '.join(show(a) for a in key.allowed)})")
    return value


def show(value: Any) -> str:
    """A config value as config.json spells it."""
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def disagreement(source: str, ignored: str, ignored_value: Any, used: str, used_value: Any,
                 label: str | None = None) -> str:
    """The one line reporting a home transformers does not use; label names the value used (default: itself)."""
    label = label or show(used_value)
    return (f"warning: {source}: {ignored} {show(ignored_value)} disagrees with {used} {show(used_value)}; "
            f"using {label} (as transformers does)")


def check_head(v: dict[str, Any], source: str) -> None:
    """What the head needs across keys: one MTP layer, whole KV groups, an even rotary width, top-k <= experts."""
    if not v["mtp_num_hidden_layers"]:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is absent or 0: this checkpoint has no MTP head")
    if v["mtp_num_hidden_layers"] != 1:
        raise ConfigError(f"{source}: mtp_num_hidden_layers is {v['mtp_num_hidden_layers']}; "
                          f"only a one-layer MTP head is supported")
    heads, kv_heads, head_dim, prf = v["num_heads"], v["num_kv_heads"], v["head_dim"], v["partial_rotary_factor"]
    if heads % kv_heads:
        raise ConfigError(f"{source}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    rot = int(head_dim * prf)  # transformers: dim = int(head_dim * partial_rotary_factor)
    if rot < 2 or rot % 2:
        raise ConfigError(f"{source}: head_dim {head_dim} x partial_rotary_factor {prf} = {rot} rotary dims; "
                          f"expected an even number >= 2")
    if "top_k" in v and v["top_k"] > v["num_experts"]:
        raise ConfigError(f"{source}: num_experts_per_tok {v['top_k']} exceeds num_experts {v['num_experts']}")
