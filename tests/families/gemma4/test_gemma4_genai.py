"""openvino-genai 2026.4.1 runs the patched pairs (the optimum-intel fixture and `synth --kind gemma4`): Gemma 4 MTP
output is token-identical to target-only greedy decoding for several prompts (shorter and longer than the sliding
window of 16) and draft lengths 1..4, and the predicting assistants get their drafts accepted
(scripts/make_gemma4_pair.py, irsurgeon.families.gemma4_mtp.synth: a bigram target and an assistant that drafts the same bigram).

The fixture's permutation fixes the special ids, so no continuation reaches EOS: genai's MTP path stops at EOS where
plain greedy with ignore_eos does not (seen with openvino-genai 2026.4.1), which would compare different things.
"""
from __future__ import annotations

import numpy as np
import openvino_genai as genai
import pytest
from click.testing import CliRunner

from helpers.gemma4 import as_unified, copy_pair
from irsurgeon.cli import main as cli

PROMPTS = ("abc", "hello world, this is a test", "The quick brown fox jumps over the lazy dog, twice or more.")
NEW = 30
PRECISE = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def config(k: int | None = None):
    cfg = genai.GenerationConfig()
    cfg.max_new_tokens, cfg.do_sample = NEW, False
    if k:
        cfg.num_assistant_tokens = k
    return cfg


def make_pair(kind: str, tmp):
    """optimum: the fixture exported by optimum-intel 2.2.0; unified: the same labelled as the 12B unified release
    (genai's Gemma 4 MTP path matches the pair by its ports, never its model type); synth: `irsurgeon synth --kind
    gemma4`."""
    if kind == "optimum":
        return copy_pair(tmp)
    if kind == "unified":
        return as_unified(tmp)
    assert CliRunner().invoke(cli, ["synth", str(tmp / "s"), "--kind", "gemma4"]).exit_code == 0
    return tmp / "s" / "target", tmp / "s" / "ckpt"


@pytest.fixture(scope="module", params=[pytest.param("optimum", marks=[pytest.mark.extended, pytest.mark.genai]),
                                        pytest.param("unified", marks=pytest.mark.genai),
                                        pytest.param("synth", marks=pytest.mark.genai)])  # extended: CI's
def runs(request, tmp_path_factory):
    target, source = make_pair(request.param, tmp_path_factory.mktemp("g4genai"))
    assert CliRunner().invoke(cli, ["patch", str(target), "--checkpoint", str(source)]).exit_code == 0
    base = genai.LLMPipeline(str(target), "CPU", ATTENTION_BACKEND="SDPA", **PRECISE)
    mtp = genai.LLMPipeline(str(target), "CPU", draft_model=genai.draft_model(str(target / "mtp_assistant"), "CPU"),
                            ATTENTION_BACKEND="SDPA", **PRECISE)
    ids = {p: base.get_tokenizer().encode(p).input_ids for p in PROMPTS}
    out = []
    for p in PROMPTS:
        ref = np.array(base.generate(ids[p], config()).tokens[0])
        for k in (1, 2, 3, 4):
            res = mtp.generate(ids[p], config(k))
            m = res.extended_perf_metrics
            out.append((p, k, ref, np.array(res.tokens[0]), m.get_num_draft_tokens(), m.get_num_accepted_tokens()))
    return out


def test_mtp_is_token_identical_to_greedy(runs):
    for prompt, k, ref, got, _, _ in runs:
        assert len(ref) == NEW and np.array_equal(ref, got), (prompt, k)
    assert len({tuple(r[2]) for r in runs}) == len(PROMPTS)  # the prompts lead to different continuations


def test_drafts_are_accepted(runs):
    drafted, accepted = sum(r[4] for r in runs), sum(r[5] for r in runs)
    print(f"drafts accepted: {accepted}/{drafted}")
    for prompt, k, _, _, d, a in runs:
        print(f"  {prompt[:12]!r} K={k}: {a}/{d}")
    assert drafted > 0 and accepted > 0.8 * drafted
