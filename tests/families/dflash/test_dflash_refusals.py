"""What a DFlash refusal says: the family that refuses, never another's words ("MTP head")."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers.cli import refused
from lab.families import FIXTURE_PAIRS
from irsurgeon.core.config import Key, read_keys
from irsurgeon.core.errors import ConfigError
from irsurgeon.core.config import read_json

TARGET, CKPT = FIXTURE_PAIRS["dflash"]


@pytest.mark.parametrize("rope", [{"rope_type": "llama3", "factor": 8.0}, {"type": "longrope", "factor": 2.0}])
def test_an_unported_rope_is_refused_by_the_dflash_family_by_name(tmp_path, rope):
    target = shutil.copytree(TARGET, tmp_path / "t")
    ckpt = shutil.copytree(CKPT, tmp_path / "ckpt")
    cfg = read_json(ckpt / "config.json")
    cfg["rope_scaling"] = rope
    (ckpt / "config.json").write_text(json.dumps(cfg))
    line = refused(("patch", target, "--checkpoint", ckpt), target)
    kind = rope.get("rope_type") or rope["type"]
    home = "rope_type" if "rope_type" in rope else "type"
    assert f"rope_scaling.{home} {kind} is not supported by the DFlash draft build" in line, line
    assert "MTP" not in line, line


def test_the_shared_reader_names_the_family_it_is_given():
    key = Key("act", ("act",), "silu", str, allowed=("silu",))
    for family in ("DFlash draft", "EAGLE-3 draft", "Qwen3.5 / Qwen3.6 MTP head"):
        with pytest.raises(ConfigError, match=f"act gelu is not supported by the {family} build"):
            read_keys({"act": "gelu"}, (key,), "x", {}, "c.json", family=family)
