"""Hostile forms of every input file irsurgeon reads, where each file lives, and which commands read it.

A form takes the path of a pristine copy and makes it hostile: a FIFO (os.mkfifo), a link to /dev/zero, a sparse
2 GiB file, a directory, a link to a secret file, deep JSON, huge integers, absurd IR numbers and names, wrong-typed
openvino_config.json values. Each costs nothing on disk.

The inputs are derived for every registered family (families.registry) from its layout and its bundled pair
(lab.families.FIXTURE_PAIRS): `INPUTS[(family key, path)]` gives the file's role (ROLES), the commands that
read it and its forms: the generic ones of its kind (KIND_FORMS, NAMED_FORMS) plus the family's content forms for
that role (ROLE_FORMS, every family's; FAMILY_FORMS, optional). `all_cases()` is every combination; `sample()` the default run's slice. A new
family is attacked by its registry line and its fixture pair; a form table is all it may add.
"""
from __future__ import annotations

import json
import math
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

DEMO_CKPT = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_5" / "ckpt"
CANARY = "CANARY-7f3a-secret-bytes"
SPARSE = (2 << 30) + 4096


# --- forms: each makes the file at `path` hostile (its pristine version is there) ---------------------------------

def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def sparse(path: Path) -> None:
    """The real content, then zeros up to 2 GiB (no blocks written)."""
    os.truncate(path, SPARSE)


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def secret_link(path: Path) -> None:
    """A link to another file whose bytes must never reach an error message."""
    secret = path.parent / f".{path.name}.secret.txt"  # beside it, inside the case folder
    secret.write_text(f"{CANARY}\n" * 4)
    path.unlink()
    path.symlink_to(secret)


def secret_json_link(path: Path) -> None:
    secret = path.parent / f".{path.name}.secret.json"
    secret.write_text(json.dumps({CANARY: CANARY, "token": CANARY}))
    path.unlink()
    path.symlink_to(secret)


def secret_string_link(path: Path) -> None:
    """A link to a file that is JSON up to an unterminated string holding the secret: a parser's error that quotes
    what it last read quotes the secret."""
    secret = path.parent / f".{path.name}.secret-string.txt"
    secret.write_text(f'["{CANARY}\n')
    path.unlink()
    path.symlink_to(secret)


def not_utf8(path: Path) -> None:
    path.write_bytes(b'{"a": "\xff\xfe' + CANARY.encode() + b'"}')


def deep_json(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def deep_object(path: Path) -> None:
    """A config whose text_config is 100 levels of objects: under Python's recursion limit, over ours."""
    data = json.loads(path.read_text())
    node = data
    for _ in range(100):
        node["text_config"] = {}
        node = node["text_config"]
    path.write_text(json.dumps(data))


def huge_int(path: Path) -> None:
    """A 5000-digit integer: Python's int() refuses more than 4300 digits with a ValueError."""
    text = path.read_text().rstrip()[:-1].rstrip()
    path.write_text(text + ("" if text.endswith("{") else ",") + ' "x_huge": ' + "9" * 5000 + "}")


JSON_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory,
              "secret-link": secret_link, "secret-json-link": secret_json_link,
              "secret-string-link": secret_string_link, "not-utf8": not_utf8, "deep-array": deep_json,
              "deep-object": deep_object, "huge-int": huge_int}


def header(path: Path, edit: Callable[[dict], object]) -> None:
    """Rewrite a safetensors header (same data after it) with edit(header); the string "HUGE" becomes a
    5000-digit integer (which Python itself will not even print)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    raw = json.dumps(edit(json.loads(data[8:8 + n]))).replace('"HUGE"', "9" * 5000).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def header_raw(path: Path, raw: bytes) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def _victim(h: dict) -> str:
    """The tensor a header form edits: the first mtp.* one of a Qwen3.5 checkpoint, else the first one."""
    names = [k for k in h if k != "__metadata__"]
    return next((k for k in names if k.startswith("mtp.")), names[0])


def _with_shape(h: dict, shape) -> dict:
    h[_victim(h)]["shape"] = shape
    return h


def _spans(h: dict) -> list[tuple[str, int, int]]:
    """(name, begin, end) of every tensor of a header holding bytes, the longest first."""
    spans = [(k, *v["data_offsets"]) for k, v in h.items() if k != "__metadata__" and isinstance(v, dict)]
    return sorted((s for s in spans if s[2] > s[1]), key=lambda s: s[1] - s[2])


def aliased(h: dict) -> dict:
    """The victim's data_offsets moved onto the first bytes of the longest other tensor (k and v sharing one
    projection's bytes), or a second name for them in a file of one tensor: every entry still consistent with its
    dtype and shape, and with the file."""
    victim = _victim(h)
    begin, end = h[victim]["data_offsets"]
    other = next((s for s in _spans(h) if s[0] != victim), None)
    if other is None:  # a file of one tensor: a second name for its bytes
        h[f"{victim}.alias"] = dict(h[victim])
        return h
    if other[2] - other[1] < end - begin:  # the victim is the longest: the other one moves onto it
        victim, other = other[0], (victim, begin, end)
        begin, end = h[victim]["data_offsets"]
    h[victim]["data_offsets"] = [other[1], other[1] + end - begin]
    return h


def duplicate_name(path: Path) -> None:
    """The header names its victim twice, the second time over bytes of its own appended to the data: Python's json
    keeps the last of two equal names (so would a reader that took it: the bytes it reads are not the first
    entry's), safetensors' serde map too, and then refuses the first entry's bytes left as a hole."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])
    victim, end = _victim(h), len(data) - 8 - n
    begin, stop = h[victim]["data_offsets"]
    twin = json.dumps({victim: {**h[victim], "data_offsets": [end, end + stop - begin]}})[1:-1]
    raw = (json.dumps(h).rstrip()[:-1] + ", " + twin + "}").encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:] + data[8 + n + begin:8 + n + stop])


MILLION = 1_000_000


def many_tensors(count: int = MILLION) -> Callable[[Path], None]:
    """`count` more 1-element F32 tensors listed after the real ones, each with 4 bytes of its own appended to the
    data: a consistent header of ~60 MB for a million (below safetensors' 100 MB), built without a dict of them."""
    def form(path: Path) -> None:
        data = path.read_bytes()
        (n,) = struct.unpack("<Q", data[:8])
        end = len(data) - 8 - n
        head = data[8:8 + n].rstrip()
        assert head.endswith(b"}"), "a safetensors header is a JSON object"
        extra = b"".join(b',"extra.%d.weight":{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}'
                         % (i, end + 4 * i, end + 4 * i + 4) for i in range(count))
        raw = head[:-1] + extra + b"}"
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
        os.truncate(path, 8 + len(raw) + end + 4 * count)  # the extra tensors' bytes: zeros, as a hole
    return form


SAFETENSORS_FORMS = {
    "fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory, "secret-link": secret_link,
    "header-deep": lambda p: header_raw(p, b"[" * 100_000 + b"]" * 100_000),
    "header-huge-int": lambda p: header(p, lambda h: _with_shape(h, ["HUGE"])),
    "header-40-digit-int": lambda p: header(p, lambda h: _with_shape(h, [10 ** 39, 10 ** 39])),
    "header-not-utf8": lambda p: header_raw(p, b'{"\xff\xfe' + CANARY.encode() + b'": 1}'),
    "header-secret-values": lambda p: header(p, lambda h: {**h, _victim(h): {
        "dtype": CANARY, "shape": CANARY, "data_offsets": CANARY}}),
    "header-million-tensors": many_tensors(),
    "header-aliased-tensors": lambda p: header(p, aliased),
    "header-duplicate-name": duplicate_name,
}


def xml_edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data, old
    path.write_bytes(data.replace(old, new, 1))


def _rt_info(path: Path, element: bytes) -> None:
    """Add an element first in the net-level rt_info (the one after </edges>), replacing one of the same name."""
    data = path.read_bytes()
    at = data.index(b"<rt_info>", data.rindex(b"</edges>")) + len(b"<rt_info>")
    name = element.split(b" ", 1)[0]
    old = data.find(b"\t\t" + name + b" ", at)
    if old >= 0:
        data = data[:old] + data[data.index(b"\n", old) + 1:]
    path.write_bytes(data[:at] + b"\n\t\t" + element + data[at:])


XML_FORMS = {
    "fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory, "secret-link": secret_link,
    "offset-30-digits": lambda p: xml_edit(p, b'offset="', b'offset="' + b"9" * 30),
    "offset-5000-digits": lambda p: xml_edit(p, b'offset="', b'offset="' + b"9" * 5000),
    "version-5000-digits": lambda p: xml_edit(p, b'version="11"', b'version="' + b"1" * 5000 + b'"'),
    "char-ref-huge": lambda p: _rt_info(p, b'<aaa value="&#99999999999999;" />\n'),
    "char-ref-surrogate": lambda p: _rt_info(p, b'<aaa value="&#55296;" />\n'),
    "annotation-deep": lambda p: _rt_info(p, b'<hidden_states_decoder_layers value="' + b"[" * 50_000
                                          + b"]" * 50_000 + b'" />\n'),
    "annotation-huge-int": lambda p: _rt_info(p, b'<hidden_states_decoder_layers value="{&quot;layers&quot;:{&quot;'
                                              + b"9" * 5000 + b'&quot;:{&quot;producer&quot;:&quot;x&quot;,'
                                              b'&quot;output_index&quot;:0}}}" />\n'),
    "rt-info-deep-500": lambda p: _rt_info(p, b"<a>" * 500 + b'<b value="1" />' + b"</a>" * 500 + b"\n"),
    "rt-info-deep-100000": lambda p: _rt_info(p, b"<a>" * 100_000 + b'<b value="1" />' + b"</a>" * 100_000 + b"\n"),
    "name-5000-digits": lambda p: _layer_name(p, b"9" * 5000 + b"."),
    "name-superscript-digit": lambda p: _layer_name(p, "².".encode()),
    "name-char-ref-huge": lambda p: _layer_name(p, b"&#99999999999999;"),
    "name-char-ref-hex-surrogate": lambda p: _layer_name(p, b"&#xD800;"),
}


def _layer_name(path: Path, insert: bytes) -> None:
    """Insert bytes into the first layer's name after the `__module.` prefix of layer names (if it has one)."""
    data = path.read_bytes()
    at = data.find(b'name="__module.')
    at = at + len(b'name="__module.') if at >= 0 else data.index(b'name="', data.index(b"<layer ")) + len(b'name="')
    path.write_bytes(data[:at] + insert + data[at:])

BIN_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "directory": directory, "sparse-2GiB": sparse}


def lm_model(**values) -> Callable[[Path], None]:
    """openvino_config.json whose quantization_configs.lm_model holds `values` over an int4 entry."""
    def form(path: Path) -> None:
        entry = {"bits": 4, "sym": False, "group_size": 32, "ratio": 1.0, "backup_precision": None,
                 "all_layers": None, **values}
        path.write_text(json.dumps({"quantization_config": {"quantization_configs": {"lm_model": entry}}}))
    return form


OPENVINO_CONFIG_FORMS = {
    **JSON_FORMS,
    **{f"lm_model-{k}={json.dumps(v)[:20]}": lm_model(**{k: v}) for k, v in [
        ("bits", "4"), ("bits", 4.0), ("bits", True), ("bits", None), ("bits", [4]), ("group_size", "64"),
        ("group_size", 1e300), ("group_size", 10 ** 30), ("group_size", 48), ("group_size", 64.5), ("ratio", "x"),
        ("ratio", [1]), ("ratio", 1e309), ("ratio", 10 ** 30), ("ratio", -1), ("sym", "false"), ("sym", 1),
        ("backup_precision", 5), ("backup_precision", CANARY), ("all_layers", "yes"), ("all_layers", {})]},
    "lm_model-list": lambda p: p.write_text(json.dumps({"quantization_config": {"quantization_configs": {
        "lm_model": [4]}}})),
}

PROMPT_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "not-utf8": not_utf8,
                "secret-link": secret_link}


def tensors_edit(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    """A form rewriting a (small) safetensors file with edit(tensors) applied to its {name: array}."""
    def form(path: Path) -> None:
        from safetensors.numpy import load_file, save_file

        tensors = load_file(path)
        edit(tensors)
        save_file(tensors, path)
    return form


def _cast(name: str, dtype) -> Callable[[dict], None]:
    return lambda t: t.update({name: t[name].astype(dtype)})


def _poke(name: str, value) -> Callable[[dict], None]:
    def edit(t: dict) -> None:
        t[name] = t[name].copy()
        t[name].flat[-1] = value
    return edit


ORDERING, EMBED = "masked_embedding.token_ordering", "model.embed_tokens.weight"

# Well-formed safetensors whose content contradicts a gemma4_assistant config.json (FAMILY_FORMS: with the
# generic SAFETENSORS_FORMS)
GEMMA4_ASSISTANT_FORMS = {
    "token_ordering-float": tensors_edit(_cast(ORDERING, "float32")),
    "token_ordering-int32": tensors_edit(_cast(ORDERING, "int32")),
    "embed-int": tensors_edit(_cast(EMBED, "int32")),
    "embed-f64": tensors_edit(_cast(EMBED, "float64")),
    "weight-nan": tensors_edit(_poke("pre_projection.weight", float("nan"))),
    "weight-inf": tensors_edit(_poke("model.norm.weight", float("inf"))),
    "token_ordering-duplicate": tensors_edit(_poke(ORDERING, 0)),
    "token_ordering-out-of-range": tensors_edit(_poke(ORDERING, 1 << 40)),
    "token_ordering-negative": tensors_edit(_poke(ORDERING, -1)),
    "token_ordering-short": tensors_edit(lambda t: t.update({ORDERING: t[ORDERING][:-1]})),
    "extra-tensor": tensors_edit(lambda t: t.update({"model.layers.2.input_layernorm.weight": t["model.norm.weight"]})),
    "missing-tensor": tensors_edit(lambda t: t.pop("model.norm.weight")),
    "missing-token_ordering": tensors_edit(lambda t: t.pop(ORDERING)),
    "wrong-shape": tensors_edit(lambda t: t.update({"pre_projection.weight": t["pre_projection.weight"][:, :-1]})),
    "scalar-0-d": tensors_edit(lambda t: t.update({"model.layers.0.layer_scalar": t["model.layers.0.layer_scalar"]
                                                   .reshape(())})),
}


def json_edit(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    """A form rewriting a JSON object file with edit(object) applied."""
    def form(path: Path) -> None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return form


def _text(**values) -> Callable[[Path], None]:
    return json_edit(lambda d: d["text_config"].update(values))


# Well-formed JSON whose values a gemma4_assistant config.json cannot have (with the generic JSON_FORMS)
GEMMA4_CONFIG_FORMS = {
    "json-list": lambda p: p.write_text("[]"),
    "model_type-list": json_edit(lambda d: d.update(model_type=["gemma4_assistant"])),
    "text_config-list": json_edit(lambda d: d.update(text_config=[1])),
    "layer_types-int": _text(layer_types=5),
    "layer_types-string": _text(layer_types="sliding_attention"),
    "layer_types-lists": _text(layer_types=[["x"], {}]),
    "layer_types-100000": _text(layer_types=["x" * 100] * 100_000),
    "per_layer_config-list": _text(per_layer_config=[1]),
    "per_layer_config-value-int": _text(per_layer_config={"1": 5}),
    "per_layer_config-head_dim-str": _text(per_layer_config={"1": {"head_dim": "32"}}),
    "rope_parameters-list": _text(rope_parameters=[1]),
    "rope_theta-str": _text(rope_parameters={"sliding_attention": {"rope_theta": "1e4"},
                                             "full_attention": {"rope_theta": 1e6}}),
    "partial_rotary_factor-str": _text(rope_parameters={"sliding_attention": {"rope_theta": 1e4}, "full_attention": {
        "rope_type": "proportional", "partial_rotary_factor": "x", "rope_theta": 1e6}}),
    "partial_rotary_factor-1e300": _text(rope_parameters={"sliding_attention": {"rope_theta": 1e4}, "full_attention": {
        "rope_type": "proportional", "partial_rotary_factor": 1e300, "rope_theta": 1e6}}),
    "hidden_activation-list": _text(hidden_activation=["gelu"]),
    "rms_norm_eps-nan": lambda p: p.write_text(p.read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN')),
    "vocab_size-0": _text(vocab_size=0),
    "vocab_size-2e24": _text(vocab_size=1 << 24),
    "num_centroids-0": json_edit(lambda d: d.update(num_centroids=0)),
    "num_centroids-not-dividing": json_edit(lambda d: d.update(num_centroids=3)),
    "backbone-mismatch": json_edit(lambda d: d.update(backbone_hidden_size=32)),
    "head_dim-mismatch": _text(head_dim=8),
    "num_hidden_layers-1": _text(num_hidden_layers=1),
    "sliding_window-float": _text(sliding_window=16.0),
    "use_ordered_embeddings-off": json_edit(lambda d: d.update(use_ordered_embeddings=False)),
    "use_ordered_embeddings-str": json_edit(lambda d: d.update(use_ordered_embeddings="false")),
}


def _top(**values) -> Callable[[Path], None]:
    return json_edit(lambda d: d.update(values))


# Well-formed JSON whose values a text-only Gemma 4 target's config.json (gemma4_text, flat) cannot have (with
# the generic JSON_FORMS)
GEMMA4_TARGET_CONFIG_FORMS = {
    "json-list": lambda p: p.write_text("[]"),
    "model_type-list": _top(model_type=["gemma4_text"]),
    "model_type-gemma4-without-text_config": _top(model_type="gemma4"),
    "layer_types-int": _top(layer_types=5),
    "layer_types-100000": _top(layer_types=["x" * 100] * 100_000),
    "num_hidden_layers-str": _top(num_hidden_layers="4"),
    "num_kv_shared_layers-str": _top(num_kv_shared_layers="2"),
    "num_kv_shared_layers-all": _top(num_kv_shared_layers=4),
    "per_layer_config-value-int": _top(per_layer_config={"1": 5}),
    "head_dim-mismatch": _top(head_dim=8),
    "global_head_dim-str": _top(global_head_dim="x"),
    "rope_parameters-str": _top(rope_parameters="x"),
}


# --- where each input lives and which commands read it, for every registered family --------------------------------

# Forms by kind of file: every family's file of that kind gets all of them
def _rope(key: str, value, scaling: dict | None = None) -> Callable[[Path], None]:
    """Set `key` to value wherever the config tree has it; where it has none, add it at the level that holds
    rope_theta or the text settings (scaling: the rope_scaling object added with it, for a factor)."""
    def edit(data: dict) -> None:
        if set_everywhere(data, key, value):
            return
        if scaling is not None and _set_in_rope_objects(data, key, value):
            return  # a factor joins the RoPE objects the config has (Gemma 4's per-layer-type rope_parameters)
        level = data.get("text_config") if isinstance(data.get("text_config"), dict) else data
        if scaling is None:
            level[key] = value
        else:
            level["rope_scaling"] = {**scaling, key: value}
    return json_edit(edit)


def _set_in_rope_objects(node, key: str, value) -> int:
    """Set key in every object that holds a rope_type (a RoPE parameter set); returns how many."""
    count = 0
    if isinstance(node, dict):
        if "rope_type" in node:
            node[key] = value
            count += 1
        count += sum(_set_in_rope_objects(v, key, value) for v in node.values())
    elif isinstance(node, list):
        count += sum(_set_in_rope_objects(x, key, value) for x in node)
    return count


def set_everywhere(node, key: str, value) -> int:
    """Set `key` to value wherever it appears in a config tree; returns how many were set (tests/test_rope_values.py
    edits configs with it too)."""
    count = 0
    if isinstance(node, dict):
        for k in list(node):
            if k == key:
                node[k] = value
                count += 1
            else:
                count += set_everywhere(node[k], key, value)
    elif isinstance(node, list):
        count += sum(set_everywhere(x, key, value) for x in node)
    return count


# RoPE values every family reads from its checkpoint config, computed with before they were checked (math domain
# errors, a ZeroDivisionError, float32 overflow into the tables): each must be refused in one line naming the key
ROPE_CONFIG_FORMS = {
    "rope_theta-nan": _rope("rope_theta", math.nan),
    "rope_theta-inf": _rope("rope_theta", math.inf),
    "rope_theta-1e308": _rope("rope_theta", 1e308),
    "rope_theta-negative": _rope("rope_theta", -10000.0),
    "rope-factor-1e300": _rope("factor", 1e300, {"rope_type": "linear"}),
    "rope-factor-subnormal": _rope("factor", 5e-324, {"rope_type": "linear"}),
}

KIND_FORMS = {".json": JSON_FORMS, ".xml": XML_FORMS, ".bin": BIN_FORMS, ".safetensors": SAFETENSORS_FORMS}
# Forms by file name, whoever's target holds it (the house reads it: irsurgeon.quant.precision for every family)
NAMED_FORMS = {"openvino_config.json": OPENVINO_CONFIG_FORMS}
# role -> content forms every family's file of that role gets (the registry's families alike, a new one included)
ROLE_FORMS = {"checkpoint config": ROPE_CONFIG_FORMS}
# family key -> role -> content forms added to the generic ones of the file's kind (a family without a table still
# gets every generic form)
FAMILY_FORMS = {
    "gemma4": {"checkpoint config": GEMMA4_CONFIG_FORMS, "checkpoint weights": GEMMA4_ASSISTANT_FORMS,
               "target config": GEMMA4_TARGET_CONFIG_FORMS, "patched config": GEMMA4_TARGET_CONFIG_FORMS},
}

# What a file is to the commands, in the order the lab lists them. Paths are relative to a family's folder of a Lab
# (hostile.Lab): ckpt/ (its bundled checkpoint), sharded/ (the same tensors in SHARDS with INDEX), target/ (its
# bundled target, with an openvino_config.json), patched/ (the target patched with ckpt/), prompts.txt.
ROLES = ("checkpoint config", "checkpoint weights", "sharded index", "shard", "target config",
         "target generation config", "target openvino_config", "target IR", "target IR weights", "other IR",
         "other IR weights", "draft IR", "written", "patched config", "patched generation config", "prompts file")
# the roles every family has, whatever its fixtures hold (the lab makes sharded/, openvino_config.json, prompts.txt)
REQUIRED_ROLES = frozenset(ROLES) - {"target generation config", "other IR", "other IR weights", "written",
                                     "patched generation config"}
INDEX = "model.safetensors.index.json"
SHARDS = ("model-1.safetensors", "model-2.safetensors")  # the second holds the draft's tensors (hostile.sharded_copy)
PROMPTS = "prompts.txt"


@dataclass(frozen=True)
class Input:
    family: str                  # registry key
    path: str                    # relative to the family's folder of a lab
    role: str                    # one of ROLES
    commands: tuple[str, ...]    # hostile.command_args names
    forms: dict = field(compare=False, hash=False, repr=False)


def forms_for(family: str, path: str, role: str) -> dict[str, Callable[[Path], None]]:
    """The generic forms of the file's kind (or name), then the family's content forms for its role."""
    if role == "prompts file":
        return PROMPT_FORMS
    name = path.rsplit("/", 1)[-1]
    generic = NAMED_FORMS.get(name) or KIND_FORMS.get(Path(name).suffix, BIN_FORMS)
    return {**generic, **ROLE_FORMS.get(role, {}), **FAMILY_FORMS.get(family, {}).get(role, {})}


def family_inputs(family) -> list[Input]:
    """Every input of a family's lab folder, from its layout and its bundled pair (lab.families.FIXTURE_PAIRS)."""
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.ir.export import LANGUAGE_MODELS

    target, ckpt = FIXTURE_PAIRS[family.key]
    layout = family.layout
    build = ("build-mtp",) if family.standalone else ()  # build-mtp of another family's checkpoint reads its config
    annotate = ("annotate",) if layout.target_xml in LANGUAGE_MODELS else ()  # the IR `annotate TARGET` edits
    bin_of = lambda xml: xml[:-len(".xml")] + ".bin"
    rows = [("ckpt/config.json", "checkpoint config", ("patch", "build-mtp"))]
    rows += [(f"ckpt/{p.name}", "checkpoint weights", ("patch", *build)) for p in sorted(ckpt.glob("*.safetensors"))]
    rows += [(f"ckpt/{p.name}", "sharded index", ("patch", *build)) for p in sorted(ckpt.glob("*.index.json"))]
    rows += [(f"sharded/{INDEX}", "sharded index", ("patch", *build))]
    rows += [(f"sharded/{shard}", "shard", ("patch", *build)) for shard in SHARDS]
    rows += [("target/config.json", "target config", ("show", *annotate, "patch"))]
    if (target / "generation_config.json").is_file():
        rows += [("target/generation_config.json", "target generation config", ("patch",))]
    auto = ("build-mtp-auto",) if family.standalone else ()  # --weight-format auto --target reads it
    rows += [("target/openvino_config.json", "target openvino_config", ("patch", *auto))]
    rows += [(f"target/{layout.target_xml}", "target IR", ("show-xml", "show", *annotate, "patch")),
             (f"target/{bin_of(layout.target_xml)}", "target IR weights", ("show-xml", "show", *annotate, "patch"))]
    for xml in sorted(target.glob("*.xml")):
        if xml.name != layout.target_xml:  # `show` describes every IR; patch may read some (the embeddings)
            rows += [(f"target/{xml.name}", "other IR", ("show", "patch"))]
            if xml.with_suffix(".bin").is_file():
                rows += [(f"target/{xml.with_suffix('.bin').name}", "other IR weights", ("show", "patch"))]
    # the patched directory: `verify --genai` hands it to openvino-genai, which reads these files itself
    for name in written(family, target):
        if name == layout.draft_xml:
            rows += [(f"patched/{name}", "draft IR", ("show-xml", "show", "verify", "verify-genai", "patch"))]
        else:
            rows += [(f"patched/{name}", "written", ("show", "verify", "verify-genai", "patch"))]
    rows += [("patched/config.json", "patched config", ("show", "verify", "verify-genai"))]
    if (target / "generation_config.json").is_file():
        rows += [("patched/generation_config.json", "patched generation config", ("verify-genai",))]
    rows += [(PROMPTS, "prompts file", ("verify-prompts",))]
    seen: dict[str, Input] = {}
    for path, role, commands in rows:  # a file with two roles (a family writing its config.json) keeps the first
        if path not in seen:
            seen[path] = Input(family.key, path, role, commands, forms_for(family.key, path, role))
    return list(seen.values())


def written(family, target: Path) -> list[str]:
    """The names of layout.writes a patch of the lab's target leaves there: the draft's own files (its IR, that IR's
    .bin, whatever it puts in a subfolder) and those the target already holds (rewritten in place), not the
    alternatives a target of another layout would get. hostile.make_family_folder checks it against the patch."""
    layout = family.layout
    draft = {layout.draft_xml, layout.draft_xml[:-len(".xml")] + ".bin"}
    held = {p.name for p in target.iterdir()} | {"openvino_config.json"}  # the lab gives every target one
    return [n for n in layout.writes if n in draft or "/" in n or n in held]


def _inputs() -> dict[tuple[str, str], Input]:
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.families import registry

    # a family without a bundled pair has no inputs: test_bounds' coverage test names it
    return {(i.family, i.path): i for family in registry.FAMILIES if family.key in FIXTURE_PAIRS
            for i in family_inputs(family)}


INPUTS = _inputs()  # (family key, path) -> Input


@dataclass(frozen=True)
class Case:
    family: str
    input: str    # a path of INPUTS for the family
    form: str
    command: str

    @property
    def role(self) -> str:
        return INPUTS[(self.family, self.input)].role

    def __str__(self) -> str:
        return f"{self.family}/{self.input} / {self.form} / {self.command}"


def all_cases(family: str | None = None) -> list[Case]:
    """The full matrix (of one family): every form of every input through every command reading it."""
    return [Case(i.family, i.path, form, command) for i in INPUTS.values() if family in (None, i.family)
            for form in i.forms for command in i.commands]


def sample(pinned: list[Case], avoid=frozenset()) -> list[Case]:
    """The default run's slice: the pinned cases, and for every family and role no pinned case covers, one case of
    that role picked by a stable hash of family and role (a new family gets one case of each of its roles), never
    one of `avoid` (the known failures)."""
    covered = {(c.family, c.role) for c in pinned}
    picked = list(pinned)
    for (family, role), cases in _by_role([c for c in all_cases() if c not in avoid]).items():
        if (family, role) not in covered:
            picked.append(cases[zlib.crc32(f"{family} {role}".encode()) % len(cases)])
    return picked


def _by_role(cases: list[Case]) -> dict[tuple[str, str], list[Case]]:
    out: dict[tuple[str, str], list[Case]] = {}
    for case in cases:
        out.setdefault((case.family, case.role), []).append(case)
    return out


def roles_of(cases: list[Case], family: str) -> set[str]:
    return {c.role for c in cases if c.family == family}


# --- an absurd but consistent checkpoint ----------------------------------------------------------------------------

def absurd_checkpoint(directory: Path, hidden: int = 1 << 17) -> int:
    """A config at hidden_size `hidden` (config.py's bound) and a sparse model.safetensors whose header matches it
    exactly: every check of shapes and offsets passes, and the file really holds the bytes (as zeros). Returns the
    file's size."""
    from irsurgeon.families.qwen35_mtp.model import PREFIX, parse_config, tensors

    directory.mkdir(parents=True)
    cfg = json.loads((DEMO_CKPT / "config.json").read_text())
    tc = cfg["text_config"]
    tc.update(hidden_size=hidden, intermediate_size=hidden, num_attention_heads=hidden // 64, num_key_value_heads=2,
              head_dim=64)
    (directory / "config.json").write_text(json.dumps(cfg))
    offset, entries = 0, {}
    for name, shape in sorted(tensors(parse_config(cfg)).shapes().items()):
        nbytes = 2 * math.prod(shape)
        entries[PREFIX + name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(entries).encode()
    path = directory / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return 8 + len(raw) + offset
