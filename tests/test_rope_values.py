"""RoPE values are checked before a table is computed with them, for every family that reads them.

A NaN, an infinity, a negative beta, a subnormal or huge factor or a huge theta used to reach math.log, a division or
a float32 cast: "unexpected ValueError: math domain error", a RuntimeWarning and a draft built from overflowed
tables. Each is now one line naming the key, exit 1, the target untouched, and no warning. The CLI runs in-process
(helpers.cli.invoke): every warning raised during the command is recorded (the categories a Python process shows by
default), under numpy's default floating-point error handling.
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import invoke
from lab.dirsnap import snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS
from lab.hostile_forms import set_everywhere
from irsurgeon.families import registry

HOSTILE_THETA = [float("nan"), float("inf"), 1e308, 0.5, -10000.0]


def patch_with(tmp_path: Path, family, edit) -> tuple[object, list, dict, dict]:
    target_src, ckpt_src = FIXTURE_PAIRS[family.key]
    target = Path(shutil.copytree(target_src, tmp_path / "target"))
    ckpt = Path(shutil.copytree(ckpt_src, tmp_path / "ckpt"))
    config = json.loads((ckpt / "config.json").read_text())
    edit(config)
    (ckpt / "config.json").write_text(json.dumps(config))  # NaN / Infinity as Python's json writes them
    before = snapshot(target)
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide="warn", over="warn", invalid="warn"):
        warnings.simplefilter("always")
        for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning):  # hidden by default
            warnings.simplefilter("ignore", hidden)
        result = invoke("patch", target, "--checkpoint", ckpt)
    return result, caught, before, snapshot(target)


def refused_in_one_line(result, caught, before, after, key: str) -> None:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error: ")]
    assert result.exit_code == 1 and len(errors) == 1 and key in errors[0], (result.stderr, result.exception)
    assert "unexpected" not in result.stderr and "Warning" not in result.stderr, result.stderr
    assert [str(w.message) for w in caught] == []
    assert before == after


@pytest.mark.parametrize("theta", HOSTILE_THETA, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_hostile_rope_theta_is_refused_naming_it(family, theta, tmp_path):
    def edit(config):
        if not set_everywhere(config, "rope_theta", theta):
            config["rope_theta"] = theta
    refused_in_one_line(*patch_with(tmp_path, family, edit), "rope_theta")


YARN = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32}


@pytest.mark.parametrize("key,value", [("beta_fast", float("nan")), ("beta_fast", float("inf")), ("beta_fast", -1.0),
                                       ("beta_slow", float("inf")), ("factor", 1e300), ("factor", 5e-324),
                                       ("attention_factor", float("nan")), ("mscale_all_dim", -100.0)], ids=str)
def test_a_hostile_yarn_value_is_refused_naming_it(key, value, tmp_path):
    dflash = registry.by_key("dflash")

    def edit(config):
        config["rope_scaling"] = {**YARN, key: value}
    refused_in_one_line(*patch_with(tmp_path, dflash, edit), key)


def test_an_odd_head_dim_is_refused_naming_it(tmp_path):
    dflash = registry.by_key("dflash")

    def edit(config):
        config["head_dim"] = 7
    refused_in_one_line(*patch_with(tmp_path, dflash, edit), "head_dim")
