"""Reading a Hugging Face `config.json` exactly as transformers reads it: generic machinery, no model family.

A family module (families.<family>.model) lists every key its head uses once, as `Key` rows: where transformers
reads it (its homes, first present wins), its default when absent, and the values the head accepts. `read_key` reads
one row; when a key's homes disagree, the value transformers uses wins and one warning line says so. Bounds reject
absurd values before anything is allocated (a hostile hidden_size of 10**9 ...).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from irsurgeon.core import limits
from irsurgeon.core.errors import ConfigError

MAX_WIDTH = 1 << 17
MAX_HEADS = 1 << 12
MAX_EXPERTS = 1 << 12
MAX_VOCAB = 1 << 23

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
    types: tuple[str, ...] | None = None  # the text model types that have the key (None: all)
    null_is_absent: bool = False
    ignored: tuple[str, ...] = ()

    def default_for(self, text_type: str) -> Any:
        return self.default.get(text_type, REQUIRED) if isinstance(self.default, dict) else self.default


# The RoPE base every family reads, bounded before a table is computed with it: above 1 (log(theta) divides), finite,
# and far below what would overflow float32 in theta^(2j/d) (a 1e308 theta cast to float32 is inf). Published
# configs use 1e4..1e7.
ROPE_THETA = Range(1, 1e12, lo_open=True)


def ints(hi: int) -> Range:
    """Positive integers up to hi."""
    return Range(1, hi)


def read_keys(cfg: dict, keys: tuple[Key, ...], text_type: str, where: dict[str, str],
              source: str, *, family: str) -> tuple[dict[str, Any], list[str]]:
    """Every key a text model of `text_type` has, by name, with the warning lines of disagreeing homes; `family`
    (its title: "DFlash draft") names who refuses a value outside a key's allowed ones."""
    values, warnings = {}, []
    for key in keys:
        if key.types is None or text_type in key.types:
            values[key.name], lines = read_key(cfg, key, key.default_for(text_type), where, source, family=family)
            warnings += lines
    return values, warnings


def read_json(path: Path) -> dict:
    """Read a JSON object from path (bounded: irsurgeon.core.limits); any failure is a ConfigError naming the file."""
    data = limits.read_json(path, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def peek_json(path: Path) -> dict | None:
    """The JSON object at path through the bounded reader, or None when it is absent or cannot be read: for what only
    looks (which family a directory or checkpoint is); the flow that then runs reads the file again and reports what
    is wrong with it. A readable object whose model_type is no name is refused here (checked_model_type): taken
    for an unknown type, the directory would be judged as another family's."""
    if not Path(path).is_file():
        return None
    try:
        data = read_json(Path(path))
    except ConfigError:
        return None
    return checked_model_type(data, str(path))


def checked_model_type(cfg: dict, source: str) -> dict:
    """cfg, once its model_type (top level, and text_config's) is a string wherever it is present: transformers
    5.2.0 looks it up by name (models/auto/configuration_auto.py, AutoConfig.from_pretrained: `config_dict[
    "model_type"] in CONFIG_MAPPING`, then `CONFIG_MAPPING[config_dict["model_type"]]`), so a list, object, number or
    null names no model (a list there is a TypeError inside transformers)."""
    for path in ("model_type", "text_config.model_type"):
        if (value := lookup(cfg, path)) is not MISSING:
            checked(Key(path, (), kind=str), path, value, source)
    return cfg


def present(path: str | Path) -> bool:
    """Whether there is anything at path (a dangling link included): a config file that is optional is absent only
    when nothing is there; a FIFO, device or folder in its place is then refused by name by the reader, never taken
    for a missing file."""
    return os.path.lexists(path)


def read_optional_json(path: str | Path) -> dict | None:
    """The JSON object at path (read_json), or None when nothing is there (present)."""
    return read_json(Path(path)) if present(path) else None


TOKEN_KEYS = ("eos_token_id", "bos_token_id", "pad_token_id", "stop_token_ids")

# How openvino-genai reads generation_config.json (src/cpp/src/generation_config.cpp, GenerationConfig(json_path):
# read_json_param of src/cpp/src/json_utils.hpp converts a number, boolean, string or object with nlohmann's
# get<T>(), which throws for another JSON type, skips an array or null, and reads a set from an array only, item by
# item). Measured on 2026.4.1 with openvino_genai.GenerationConfig(path): these integer fields refuse a string, a
# boolean or an object; the float fields a string or an object (true reads as 1); the boolean fields anything but
# true or false; num_assistant_tokens anything but an integer; stop_strings an array holding a non-string; and
# nlohmann refuses the whole file for a number beyond a double (1e400, which Python reads as inf) or NaN/Infinity.
GENAI_INTEGERS = ("max_new_tokens", "max_length", "min_new_tokens", "num_beam_groups", "num_beams",
                  "num_return_sequences", "no_repeat_ngram_size", "top_k", "eos_token_id", "logprobs",
                  "max_ngram_size")
GENAI_FLOATS = ("diversity_penalty", "length_penalty", "temperature", "top_p", "repetition_penalty",
                "presence_penalty", "frequency_penalty", "assistant_confidence_threshold")
GENAI_BOOLS = ("ignore_eos", "include_stop_str_in_output", "do_sample", "echo")


GENERATED_TOKEN_KEYS = ("eos_token_id", "stop_token_ids")  # ids generation stops at: the model must be able to emit them


def vocabulary_of(config: Path) -> int | None:
    """The vocabulary a model's config.json states (vocab_size, top level or its text_config), None where it states
    none or cannot be read (its own check says why)."""
    try:
        data = peek_json(config)
    except ConfigError:  # a model_type that is no name: the directory's own checks refuse it
        return None
    vocab = text_section(data).get("vocab_size") if data is not None else None
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


def check_generation_config(path: Path, vocab: int | None = None) -> None:
    """openvino-genai reads generation_config.json itself, and its errors quote the file (bytes of a linked-to
    file, non-UTF-8 text), name no key ("type must be number, but is string") or come at generate time
    ("'stop_token_ids' must be non-negative"): read it first through the bounded reader, check each value as
    openvino-genai converts it and the token ids it holds, one line naming the file and key otherwise. Nothing
    there: nothing to check."""
    data = read_optional_json(path)
    if data is None:
        return
    if not finite(data):
        raise ConfigError(f"{path}: holds a number openvino-genai cannot read (NaN, Infinity, or beyond a double)")
    for key, value in data.items():
        if (why := genai_type_problem(key, value)) is not None:
            raise ConfigError(f"{path}: {key} must be {why} (openvino-genai refuses the file), found {brief(value)}")
    for key in TOKEN_KEYS:
        value = data.get(key)
        ids = value if isinstance(value, list) else [] if value is None else [value]
        if any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 1 << 31 for i in ids):
            raise ConfigError(f"{path}: {key} must be a non-negative token id or a list of them")
        outside = [i for i in ids if vocab is not None and key in GENERATED_TOKEN_KEYS and i >= vocab]
        if outside:
            raise ConfigError(f"{path}: {key} {outside[0]} is outside the vocabulary of {vocab} tokens (config.json "
                              f"vocab_size): the model can never generate it, so generation would not stop there")


def generation_config_text(where: Path) -> str | None:
    """The text of the generation_config.json at `where`, handed on as the file says it once it reads as genai will
    read it (check_generation_config: bounded, a regular file, token ids in range); None when nothing is there (a
    FIFO or folder in its place is refused by name, never taken for an absent file). A draft folder genai reads its
    own generation config from gets a copy of it (Gemma 4, EAGLE-3)."""
    if not present(where):
        return None
    check_generation_config(where)
    return limits.read_text(where, limits.CONFIG_JSON_BYTES, ConfigError, "generation config")


def genai_type_problem(key: str, value: Any) -> str | None:
    """What openvino-genai expects of key when it would refuse value (see GENAI_INTEGERS), else None."""
    if key == "num_assistant_tokens":
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < 1 << 64)
        return None if ok else "an integer"
    if key == "stop_strings":
        return "a list of strings" if isinstance(value, list) and not all(isinstance(v, str) for v in value) else None
    if value is None or isinstance(value, list):  # skipped by read_json_param
        return None
    if key in GENAI_INTEGERS and isinstance(value, (bool, str, dict)):
        return "a number"
    if key in GENAI_FLOATS and isinstance(value, (str, dict)):
        return "a number"
    if key in GENAI_BOOLS and not isinstance(value, bool):
        return "true or false"
    return None


def finite(value: Any) -> bool:
    """No NaN or infinite number anywhere in a JSON value."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True


def text_section(cfg: dict) -> dict:
    """The text-model part of a config: `text_config` when present, else the top level."""
    tc = cfg.get("text_config")
    return tc if isinstance(tc, dict) else cfg



def lookup(cfg: dict, path: str) -> Any:
    """The value at a dotted path, or MISSING when any step is absent or not an object."""
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def read_key(cfg: dict, key: Key, default: Any, where: dict[str, str], source: str, *,
             family: str) -> tuple[Any, list[str]]:
    """A key's value from its first present home (else its default), checked; a warning per disagreeing home."""
    homes = list(dict.fromkeys(h.format(**where) for h in key.homes))  # text-only configs fold `{text}dtype`
    found = [(h, v) for h in homes if (v := lookup(cfg, h)) is not MISSING and not (v is None and key.null_is_absent)]
    if not found:
        if default is REQUIRED:
            raise ConfigError(f"{source}: missing required key {homes[0]!r}")
        value, path = default, None
    else:
        path, raw = found[0]
        value = checked(key, path, raw, source, family)
    warnings = [disagreement(source, h, v, path, raw) for h, v in found[1:] if v != value]
    for home in (h.format(**where) for h in key.ignored):
        if (v := lookup(cfg, home)) is not MISSING and v != value:
            warnings.append(f"warning: {source}: {home} {show(v)} is not read by transformers for this model; "
                            f"using {show(value)} (as transformers does)")
    return value, warnings


KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def flag(section: dict, key: str, default: bool, source: str, prefix: str = "") -> bool:
    """section[key] (default when absent) as a JSON true/false, else a ConfigError naming `prefix + key` and the
    value: transformers' config classes keep whatever config.json holds and test its truth, so the string "false"
    would switch the feature on."""
    value = section.get(key, default)
    return checked(Key(prefix + key, (), default, bool), prefix + key, value, source)


def checked(key: Key, path: str, value: Any, source: str, family: str = "") -> Any:
    """value if it has the key's type, bounds and allowed values; a ConfigError naming the path otherwise (and, for
    a value outside the allowed ones, the family whose build refuses it: a key with allowed values is read through
    read_keys, which names it)."""
    ok_type = isinstance(value, (int, float) if key.kind is float else key.kind)
    if not ok_type or (key.kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{source}: {path} must be {KIND_NAMES[key.kind]}, found {brief(value)}")
    if key.kind is float:
        try:
            value = float(value)
        except OverflowError:
            raise ConfigError(f"{source}: {path} = {value} is out of range (expected {key.bounds})") from None
    if key.bounds is not None and value not in key.bounds:
        raise ConfigError(f"{source}: {path} = {value} is out of range (expected {key.bounds})")
    if key.allowed is not None and value not in key.allowed:
        raise ConfigError(f"{source}: {path} {show(value)} is not supported by the {family} build "
                          f"(expected {' or '.join(show(a) for a in key.allowed)})")
    return value


def show(value: Any) -> str:
    """A config value as config.json spells it."""
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))


def brief(value: Any, limit: int = 80) -> str:
    """A value of the wrong type as JSON text (a string quoted: "false" is not false), cut to `limit` characters
    (a list of 100 000 names is named by its start)."""
    text = json.dumps(value, separators=(", ", ": "))
    return text if len(text) <= limit else f"{text[:limit]}..."


def disagreement(source: str, ignored: str, ignored_value: Any, used: str, used_value: Any,
                 label: str | None = None) -> str:
    """The one line reporting a home transformers does not use; label names the value used (default: itself)."""
    label = label or show(used_value)
    return (f"warning: {source}: {ignored} {show(ignored_value)} disagrees with {used} {show(used_value)}; "
            f"using {label} (as transformers does)")
