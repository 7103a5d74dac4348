"""The bundled EAGLE-3 pair through openvino-genai 2026.4.1: genai's load-time surgery takes the built draft (its
one-row embedding placeholder replaced by the target's table, fc moved into the target, the taps the draft's rt_info
names) and speculative decoding gives exactly plain greedy's tokens at f32 for K = 1..4.

The bundled draft is random, so its drafts are accepted about never: this proves the plumbing and exactness, not
a speed-up (--min-acceptance 0).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.cli import invoke
from lab.families import FIXTURE_PAIRS
from helpers.cli import result_of

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]


@pytest.mark.extended  # CI's extended tier: the trained pair and the speculators' layer run through genai in the default tier
@pytest.mark.genai
def test_the_bundled_pair_is_token_identical_to_greedy_in_genai(tmp_path):
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    report = tmp_path / "report.json"
    result = invoke("verify", target, "--genai", "--prompts", "2", "--sweep", "1,2,3,4", "--min-acceptance", "0",
                    "--rounds", "1", "--json", report)
    assert result.exit_code == 0, result.output
    assert "8/8 speculative runs token-identical to plain greedy" in result.output, result.output
    doc = result_of(report.read_text())
    assert doc["ready"] is True, doc


def test_a_draft_folder_without_its_generation_config_is_not_ready(tmp_path):
    """patch copies the target's generation_config.json into eagle3_draft/: without it genai 2026.4.1's draft pipeline
    has stop tokens -1 and generate fails ("'stop_token_ids' must be non-negative"), so verify refuses the folder
    before genai runs."""
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    (target / "eagle3_draft" / "generation_config.json").unlink()
    result = invoke("verify", target, "--genai", "--prompts", "1", "--sweep", "1", "--min-acceptance", "0")
    assert result.exit_code == 1 and "generation_config.json" in result.output, result.output


@pytest.mark.genai
def test_a_random_draft_below_the_acceptance_floor_is_said_to_be_possibly_untrained(tmp_path):
    """synth's eagle3 draft is random: verify --genai used to blame it as another target's only; it now names the
    random synth kinds, --min-acceptance 0 and the trained kinds."""
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    assert invoke("patch", target, "--checkpoint", CKPT).exit_code == 0
    result = invoke("verify", target, "--genai", "--prompts", "1", "--sweep", "1", "--rounds", "1")
    assert result.exit_code == 1 and "or untrained" in result.output and "--min-acceptance 0" in result.output \
        and "eagle3-trained" in result.output, result.output
