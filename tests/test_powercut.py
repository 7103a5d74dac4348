"""Power cuts during `irsurgeon patch` (lab.powercut): the patch of a family is recorded under strace, the states a
power cut may leave at every sync point are built under ext4 data=ordered's rules (and a stricter reordering
model), each is materialised on a copy, and the next run must end as the original or the complete patch, with
`verify` never calling a broken directory ready. The rules, the bounds and what is not modelled: lab/powercut.py.

The figures print with the test (`-rP` shows them): crash points, states built per model, distinct states checked.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab.families import FIXTURE_PAIRS
from lab.powercut import PowerCutLab, sweep

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "tests" / "data" / "eagle3_moe" / "target"  # an EAGLE-3 patch there rewrites openvino_model.xml
PAIRS = {**{key: pair for key, pair in FIXTURE_PAIRS.items()}, "eagle3-moe": (MOE, FIXTURE_PAIRS["eagle3"][1])}

pytestmark = pytest.mark.skipif(shutil.which("strace") is None,
                                reason="strace is not installed: the power-cut lab records the patch with it")


@pytest.fixture(scope="module")
def qwen_lab(tmp_path_factory) -> PowerCutLab:
    return PowerCutLab(tmp_path_factory.mktemp("powercut-qwen3_5"), *PAIRS["qwen3_5"])


def test_the_recording_sees_every_step_of_the_commit(qwen_lab):
    """Each staged file's fsync, the journal's, the staging folder's and the target's are crash points, and the
    moves into the target lie between two of them."""
    whats = [p.what for p in qwen_lab.model.points]
    for what in ("fsync .irsurgeon-staging/openvino_mtp_model.bin", "fsync .irsurgeon-staging/journal.json.tmp",
                 "fsync .irsurgeon-staging", "fsync .", "end"):
        assert what in whats, whats
    renames = [op.paths for op in qwen_lab.model.ops if op.kind == "rename"]
    assert (".irsurgeon-staging/openvino_language_model.xml", "openvino_language_model.xml") in renames
    assert not qwen_lab.model.in_place  # no file of the original target is written in place


def test_power_cut_while_files_move_in(qwen_lab):
    """The default tier: the Qwen3.5 patch (it edits the target's own openvino_language_model.xml), the crash
    points where files have just moved into the target and after the end, under both models."""
    result = sweep(qwen_lab, qwen_lab.moving_points())
    print(result.line("qwen3_5 (moves into the target, end)"))
    assert result.checked >= 10, result.line("qwen3_5")
    assert not result.problems, "\n".join(result.problems)


@pytest.mark.extended  # the lab's own proof: CI's extended tier
def test_the_lab_catches_a_left_out_fsync(tmp_path):
    """The same patch with the staged head's .bin never fsynced (the runner leaves that one call out): a power cut
    once it has moved in leaves it torn beside a journal that names its digest, which recovery cannot prove. The
    lab must say so: it is what a product missing that fsync would do."""
    lab = PowerCutLab(tmp_path, *PAIRS["qwen3_5"], drop=("openvino_mtp_model.bin",))
    result = sweep(lab, lab.moving_points()[:1], models=("ext4",), first_problem=True)
    print(result.line("qwen3_5 with the head's fsync left out"))
    assert result.problems and "openvino_mtp_model.bin" in result.problems[0], result.problems


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PAIRS))
def test_power_cut_at_every_sync_point(name, tmp_path):
    """Every family (and the EAGLE-3 patch that rewrites a MoE target's openvino_model.xml): every crash point of
    the patch, every state of both models."""
    lab = PowerCutLab(tmp_path, *PAIRS[name])
    result = sweep(lab)
    print(result.line(name))
    assert result.points == len(lab.model.points) >= 6
    assert not result.problems, "\n".join(result.problems)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["qwen3_5", "eagle3-moe"])
def test_power_cut_during_the_next_runs_recovery(name, tmp_path):
    """A power cut while the next run rolls back a pending commit (the state with the most moved in: the target's
    own .xml replaced, and for EAGLE-3 on the MoE target the draft's folder made) and then patches: every crash
    point of that run, both models, judged by the original and the complete patch."""
    lab = PowerCutLab(tmp_path / "patch", *PAIRS[name])
    start = lab.pending_commit()
    again = PowerCutLab.after_power_cut(tmp_path / "next", lab, start)
    assert any(op.kind == "rename" and op.paths[0].endswith(".orig") for op in again.model.ops), start.describe(lab)
    result = sweep(again)
    print(result.line(f"{name}, the next run from {start.describe(lab)}"))
    assert not result.problems, "\n".join(result.problems)
