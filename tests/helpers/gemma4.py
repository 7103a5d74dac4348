"""Gemma 4 assistant goldens (tests/data/gemma4, made by scripts/make_gemma4_golden.py) and how to compare with them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
from helpers.cli import result_of

DATA = Path(__file__).resolve().parents[1] / "data" / "gemma4"
CASES = ("ordered", "plain", "untied", "untied_ordered", "unified")  # untied*: tie_word_embeddings false;
# unified: Gemma4UnifiedAssistantForCausalLM (gemma4_unified_assistant), transformers 5.25.0
OUTPUTS = ("logits", "last_hidden_state")


def calls(case: str) -> list[tuple[dict, dict]]:
    """[(genai-style feed, transformers' outputs)] per stored call."""
    g = np.load(DATA / case / "golden.npz")
    n = len({k.split("_", 1)[0] for k in g.files})
    out = []
    for c in range(n):
        items = {k.split("_", 1)[1]: g[k] for k in g.files if k.startswith(f"c{c}_")}
        out.append(({k: v for k, v in items.items() if k not in OUTPUTS}, {k: items[k] for k in OUTPUTS}))
    return out


def worst_errors(model: ov.Model, case: str) -> list[dict[str, float]]:
    """Per call, max |irsurgeon - transformers| of each output, the model run at f32."""
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    errors = []
    for feed, want in calls(case):
        got = compiled(feed)
        errors.append({k: float(np.abs(got[k] - want[k]).max()) for k in OUTPUTS})
    return errors


PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "gemma4"  # made by scripts/make_gemma4_pair.py


def copy_pair(tmp: Path) -> tuple[Path, Path]:
    """A writable copy of the fixture target and the assistant checkpoint."""
    import shutil

    target = tmp / "target"
    shutil.copytree(PAIR / "target", target)
    return target, PAIR / "ckpt"


def genai_report(directory: Path) -> dict:
    """The JSON report of `irsurgeon verify DIR --genai --prompts 3 --rounds 1 --json`, which must exit 0."""

    from click.testing import CliRunner

    from irsurgeon.cli import main

    result = CliRunner().invoke(main, ["verify", str(directory), "--genai", "--prompts", "3", "--rounds", "1", "--json"])
    assert result.exit_code == 0, result.output
    return result_of(result.stdout)
