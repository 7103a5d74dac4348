"""`irsurgeon synth --kind gemma4`: the synthesized target computes what transformers' Gemma4ForCausalLM computes
with the same weights, and synthesis is deterministic.

Golden: tests/data/gemma4/synth_target.npz (scripts/make_gemma4_synth_golden.py, transformers 5.5.4 eager f32), the
target's weights with output gains 0.7 so attention and MLP matter, 40 tokens (window 16). Tolerance 1e-4 on logits
of magnitude ~14: the f32 graph differs by ~3e-5; a window one off either way moves them by more than 10.
"""
from __future__ import annotations

import hashlib

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from helpers.gemma4 import DATA
from irsurgeon.cli import main as cli
from irsurgeon.families.gemma4_mtp import synth

TOL = 1e-4


def logits_error(window: int) -> float:
    golden = np.load(DATA / "synth_target.npz")
    model = synth.target_model(synth.target_tensors(int(golden["seed"]), float(golden["output_gain"])), window)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    ids = golden["input_ids"]
    out = compiled.create_infer_request().infer({
        "input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None],
        "beam_idx": np.zeros(1, np.int32)})
    return float(np.abs(out["logits"] - golden["logits"]).max())


def test_target_matches_transformers():
    error = logits_error(synth.WINDOW)
    print(f"synth target vs transformers: {error:.2e}")
    assert error < TOL


@pytest.mark.parametrize("window", [synth.WINDOW - 1, synth.WINDOW + 1])
def test_wrong_window_breaks_the_tolerance(window):
    assert logits_error(window) > 1.0


def digest(root) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_synth_is_deterministic_per_seed(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        result = CliRunner().invoke(cli, ["synth", str(tmp_path / name), "--kind", "gemma4", "--seed", str(seed)])
        assert result.exit_code == 0, result.output
    a, b, c = (digest(tmp_path / n) for n in "abc")
    assert a == b and len(a) == 10  # target: 3 IRs (xml + bin), 2 configs; assistant: config, safetensors
    assert a["target/openvino_model.bin"] != c["target/openvino_model.bin"]


def test_synth_refuses_sizes():
    result = CliRunner().invoke(cli, ["synth", "/nonexistent/x", "--kind", "gemma4", "--layers", "3"])
    assert result.exit_code != 0 and ("the layers option does not apply (it takes only a seed, wait and force) "
                                      "(--layers: not for this kind)") in result.output
