"""lab/perf_pair.py, bench_tune's performance fixture: the dflash-cycle construction with a wider, deeper target.

At the kind's own size it must give the kind's tensors exactly (it runs synth_cycle's functions); wider, its draft
must still load (patch checks every shape against the target) and its drafts still be accepted with tokens identical
to greedy decoding (slow: openvino-genai).
"""
from __future__ import annotations

import numpy as np
import pytest

from helpers.cli import invoke
from irsurgeon.families.dflash import synth_cycle
from lab import perf_pair


def test_at_the_kinds_size_the_tensors_are_the_kinds():
    target, draft = perf_pair.tensors(0, synth_cycle.SPEC)
    for mine, theirs in ((target, synth_cycle.cycle_target(0)), (draft, synth_cycle.cycle_draft(0))):
        assert sorted(mine) == sorted(theirs)
        assert [k for k in theirs if not np.array_equal(mine[k], theirs[k])] == []


def test_wider_the_draft_reads_the_token_from_dims_1_to_63():
    _, draft = perf_pair.tensors(0, perf_pair.spec(256, 4))
    v, o = draft["layers.0.self_attn.v_proj.weight"], draft["layers.0.self_attn.o_proj.weight"]
    assert v.shape == (64, 256) and o.shape == (256, 128)
    assert np.array_equal(v[1:, 1:64], np.eye(63)) and not v[0].any() and not v[:, 64:].any()
    assert np.array_equal(o[:, :64], v.T / 2) and np.array_equal(o[:, 64:], v.T / 2)


@pytest.mark.slow
def test_a_wider_pair_patches_and_its_drafts_are_accepted(tmp_path):
    from irsurgeon.flows.genai import run_equivalence
    from irsurgeon.flows.prompts import prompt_list

    target, ckpt = perf_pair.synthesize(tmp_path / "pair", 256, 4)
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    report = run_equivalence(target, prompt_list(3), (3,), 32, echo=lambda _: None)
    assert report.identical and report.acceptance > 0.5, report.as_dict()
