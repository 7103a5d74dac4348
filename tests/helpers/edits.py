"""Small edits of a copied input: a JSON file's keys, a bundled checkpoint's config.json with one value replaced, a
file replaced by a FIFO or a folder."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lab.families import FIXTURE_PAIRS


def edit_json(path: Path, **values) -> None:
    data = json.loads(path.read_text())
    data.update(values)
    path.write_text(json.dumps(data))


def checkpoint_config(family: str, path: str, value) -> dict:
    """The family's bundled checkpoint config.json with the value at dotted `path` replaced."""
    cfg = json.loads((FIXTURE_PAIRS[family][1] / "config.json").read_text())
    *parents, key = path.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[key] = value
    return cfg


def not_regular(path: Path, kind: str) -> None:
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
