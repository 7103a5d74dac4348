"""Fuzz inputs for every registered family: seeded mutators of config.json, safetensors headers, index files and IR
XML, the inputs of a family (`kinds`, from its layout and its bundled pair), and the rules an outcome is judged by.

    KINDS[family key][kind]    Kind(path in the family's lab folder, mutator, the commands reading it)
    Bench(root).example(...)   one mutated copy of a family's pristine folder through one command (click's CliRunner)
    judge(...)                 success, or exit 1 with exactly one `Error: ...` line (no traceback, no "unexpected"
                               fallback); the checkpoint unchanged, the target unchanged unless the command wrote it,
                               nothing changed outside the output folder

tests/test_fuzz.py draws the seeds with hypothesis (bounded, seeded); benchmarks/bench_reliability.py runs the long
count.
"""
from __future__ import annotations

import json
import random
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from lab.dirsnap import digest as snapshot
from lab.hostile import Pristine
from lab.hostile_forms import INDEX, SHARDS
from irsurgeon.families import registry

FALLBACK = "IRSURGEON_DEBUG"
HOSTILE_VALUES = [None, True, False, -1, 0, 1, 3, 2 ** 31, 2 ** 63, 10 ** 9, 1e308, -0.5, 0.5, float("nan"),
                  float("inf"), "", "64", "bfloat16", "float8", "../x", [], {}, [1, 2], {"a": 1}, [[64]],
                  10 ** 50, json.loads("[" * 70 + "]" * 70)]  # over the readers' 40-digit and 64-level limits
HOSTILE_SHARDS = ["../model-2.safetensors", "/etc/passwd", "", ".", "..", "model-2.safetensors/", "pytorch_model.bin",
                  "missing.safetensors", "model-1.safetensors", "a\\b.safetensors", "model.safetensors.index.json",
                  123, None, ["model-2.safetensors"]]
HOSTILE_ATTRS = ["", "-1", "0", "1", "99999999999999999999", "?,?,64", "-1,-1", "f16", "u4", "abc", "&amp;", "&lt;",
                 "1,2,3,4,5,6,7,8", "opset999", "Parameter", "Result", "nan", "1e400"]


# --- mutators: each takes the bytes of one file and a seeded Random -----------------------------------------------

def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return bytes(rng.randrange(256) for _ in range(8))
    i = rng.randrange(len(data))
    op = rng.choice(["flip", "truncate", "delete", "duplicate", "insert"])
    if op == "flip":
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    if op == "truncate":
        return data[:i]
    j = min(len(data), i + rng.randint(1, 64))
    if op == "delete":
        return data[:i] + data[j:]
    if op == "duplicate":
        return data[:j] + data[i:j] + data[j:]
    return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + data[i:]


def json_paths(node, prefix=()) -> list[tuple]:
    out = [prefix]
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out += json_paths(v, prefix + (k,))
    return out


def mutate_json(obj, rng: random.Random, prefer: str = ""):
    """Replace, delete, retype or add one value somewhere in obj (paths containing `prefer` twice as likely)."""
    paths = [p for p in json_paths(obj) if p]
    paths += [p for p in paths if any(prefer and prefer in str(k) for k in p)]
    if not paths:
        return rng.choice(HOSTILE_VALUES)
    path = rng.choice(paths)
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    key, op = path[-1], rng.choice(["replace", "replace", "delete", "wrap", "add"])
    if op == "delete":
        del parent[key]
    elif op == "wrap":
        parent[key] = [parent[key]]
    elif op == "add" and isinstance(parent, dict):
        parent[rng.choice(["hidden_size", "extra", "__metadata__", "mtp.x"])] = rng.choice(HOSTILE_VALUES)
    else:
        parent[key] = rng.choice(HOSTILE_VALUES)
    return obj


def mutate_config(data: bytes, rng: random.Random) -> bytes:
    if rng.random() < 0.2:
        return mutate_bytes(data, rng)
    return json.dumps(mutate_json(json.loads(data), rng, prefer="text_config")).encode()


def mutate_safetensors(data: bytes, rng: random.Random, prefer: str = "mtp.") -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header, body = data[8:8 + n], data[8 + n:]
    roll = rng.random()
    if roll < 0.15:
        return struct.pack("<Q", rng.choice([0, 1, n - 1, n + 1, len(data), 1 << 40, (1 << 64) - 1])) + data[8:]
    if roll < 0.35:
        return data[:8] + mutate_bytes(header, rng) + body
    raw = json.dumps(mutate_json(json.loads(header), rng, prefer=prefer)).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def mutate_index(data: bytes, rng: random.Random, prefer: str = "mtp.") -> bytes:
    """Point one of the draft's tensors (`prefer*`, else any) at a hostile shard name, or mutate the JSON."""
    if rng.random() < 0.2:
        return mutate_bytes(data, rng)
    index = json.loads(data)
    if rng.random() < 0.6:
        names = list(index["weight_map"])
        draft = [k for k in names if prefer and k.startswith(prefer)] or names
        index["weight_map"][rng.choice(draft)] = rng.choice(HOSTILE_SHARDS)
        return json.dumps(index).encode()
    return json.dumps(mutate_json(index, rng, prefer=prefer)).encode()


ATTR = re.compile(rb'(\w+)="([^"]*)"')


def mutate_rt_info(data: bytes, rng: random.Random) -> bytes:
    """Mutate the net-level rt_info only: the annotation's JSON, or an attribute or byte of the block."""
    start = data.rindex(b"</edges>")
    m = re.search(rb'<hidden_states_decoder_layers value="([^"]*)"', data[start:])
    if m and rng.random() < 0.5:
        value = json.loads(m.group(1).replace(b"&quot;", b'"'))
        new = json.dumps(mutate_json(value, rng, prefer="producer")).replace('"', "&quot;").encode()
        return data[:start + m.start(1)] + new + data[start + m.end(1):]
    if rng.random() < 0.5:
        return data[:start] + mutate_xml(data[start:], rng, attrs_only=True)
    return data[:start] + mutate_bytes(data[start:], rng)


def mutate_xml(data: bytes, rng: random.Random, attrs_only: bool = False) -> bytes:
    roll = 0.0 if attrs_only else rng.random()
    if roll < 0.6:
        matches = list(ATTR.finditer(data))
        m = rng.choice(matches)
        value = rng.choice(HOSTILE_ATTRS).encode()
        return data[:m.start(2)] + value + data[m.end(2):]
    if roll < 0.75:
        lines = data.split(b"\n")
        del lines[rng.randrange(len(lines))]
        return b"\n".join(lines)
    if roll < 0.8:
        return data.replace(b"<net ", b'<!DOCTYPE net [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<net ', 1)
    return mutate_bytes(data, rng)


# --- one example --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kind:
    path: str                                   # the file it mutates, relative to the family's folder
    mutate: Callable[[bytes, random.Random], bytes]
    commands: tuple[str, ...]                   # the commands that read it


def kinds(family) -> dict[str, Kind]:
    """A family's fuzz inputs, from its layout and its bundled checkpoint."""
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.ir.export import LANGUAGE_MODELS

    layout, (_, ckpt) = family.layout, FIXTURE_PAIRS[family.key]
    build = ("build-mtp",) if family.standalone else ()
    annotate = ("annotate",) if layout.target_xml in LANGUAGE_MODELS else ()
    prefer = family.hub_prefix or ""
    weights = sorted(ckpt.glob("*.safetensors"))[0].name
    out = {
        "ckpt-config": Kind("ckpt/config.json", mutate_config, (*build, "patch")),
        "safetensors": Kind(f"ckpt/{weights}", partial(mutate_safetensors, prefer=prefer), (*build, "patch")),
        "index": Kind(f"sharded/{INDEX}", partial(mutate_index, prefer=prefer), (*build, "patch")),
        "shard-header": Kind(f"sharded/{SHARDS[1]}", partial(mutate_safetensors, prefer=prefer), build or ("patch",)),
        "target-config": Kind("target/config.json", mutate_config, ("show", *annotate, "patch")),
        "ir-xml": Kind(f"target/{layout.target_xml}", mutate_xml, ("show", *annotate, "patch")),
        "draft-xml": Kind(f"patched/{layout.draft_xml}", mutate_xml, ("show", "patch", "verify")),
    }
    if layout.target_xml in layout.writes:  # the family rewrites the target IR: its annotation, its new outputs
        out["annotated-rt-info"] = Kind(f"patched/{layout.target_xml}", mutate_rt_info,
                                        ("show", *annotate, "patch", "verify"))
    return out


def _kinds() -> dict[str, dict[str, Kind]]:
    from lab.families import FIXTURE_PAIRS

    # a family without a bundled pair has no kinds: test_every_family_is_fuzzed names it
    return {family.key: kinds(family) for family in registry.FAMILIES if family.key in FIXTURE_PAIRS}


KINDS = _kinds()  # family key -> kind -> Kind
TARGETS = [(key, kind) for key, table in KINDS.items() for kind in sorted(table)]


@dataclass
class Tally:
    """Figures of a fuzz run; `problems` holds one line per broken rule."""
    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    tracebacks: int = 0
    unexpected: int = 0
    outside_changes: int = 0
    problems: list[str] = field(default_factory=list)


class Bench:
    """Pristine folders made once per family (on first use); each example works on a fresh copy in its own folder."""

    def __init__(self, root: Path, pristine: Pristine | None = None):
        self.root = root
        self.pristine = pristine or Pristine(root / "pristine")  # one Pristine may serve several benches and labs
        self.count = 0

    def example(self, key: str, kind: str, seed: int, command: str, tally: Tally) -> None:
        from click.testing import CliRunner

        from irsurgeon.cli import main

        source = self.pristine.folder(key)
        self.count += 1
        work = Path(tempfile.mkdtemp(prefix=f"ex{self.count}-", dir=self.root))
        try:
            spec = KINDS[key][kind]
            top = spec.path.split("/")[0]
            ckpt = work / ("sharded" if top == "sharded" else "ckpt")
            target = work / top if top in ("target", "patched") else work / "target"
            for folder in (ckpt, target):  # only what the commands read: less to copy and to compare
                shutil.copytree(source / folder.name, folder)
            victim = work / spec.path
            victim.write_bytes(spec.mutate(victim.read_bytes(), random.Random(seed)))
            args = {"show": ["show", victim if seed % 2 else target],
                    "build-mtp": ["build-mtp", ckpt, "-o", work / "out"],
                    "annotate": ["annotate", target],
                    "patch": ["patch", target, "--checkpoint", ckpt],
                    "verify": ["verify", target]}[command]
            before = snapshot(work)
            result = CliRunner().invoke(main, [str(a) for a in args])
            judge(f"{key} {kind} seed {seed} {command}", result, before, snapshot(work), command, tally)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def judge(where: str, result, before: dict, after: dict, command: str, tally: Tally) -> None:
    tally.inputs += 1
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        tally.tracebacks += 1
        tally.problems.append(f"{where}: {type(result.exception).__name__} escaped: {result.exception}")
        return
    if "Traceback" in result.output:
        tally.tracebacks += 1
        tally.problems.append(f"{where}: traceback printed")
    if result.exit_code == 0:
        tally.accepted += 1
    else:
        tally.refused += 1
        if FALLBACK in err:  # the CLI's last-resort report of an exception that is no irsurgeon error
            tally.unexpected += 1
        if result.exit_code != 1 or not err.startswith("Error: ") or len(err.splitlines()) != 1:
            tally.problems.append(f"{where}: exit {result.exit_code}, stderr {err.strip()[:300]!r}")
    allowed = {"build-mtp": "out/", "annotate": ("target/", "patched/"), "patch": ("target/", "patched/")}.get(
        command, "\0")
    if result.exit_code != 0:
        allowed = "\0"  # a refused run changes nothing at all, not even inside its output location
    changed = [k for k in set(before) | set(after)
               if k != "<dirs>" and before.get(k) != after.get(k) and not k.startswith(allowed)]
    if result.exit_code != 0 and before["<dirs>"] != after["<dirs>"]:
        changed.append("folders created or removed")
    if changed:
        tally.outside_changes += 1
        tally.problems.append(f"{where}: changed {sorted(changed)[:4]}")
