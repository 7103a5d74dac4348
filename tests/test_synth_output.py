"""synth's OUT_DIR (irsurgeon.synth.output): it holds the earlier pair or the new one, never one of each, whatever kills
or interrupts the move; --force replaces an earlier synth output with the output a fresh run makes, and without it an
earlier output is refused before any work; an entry named like synth's staging that synth did not make is refused,
never removed. The kills run in a child process.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import invoke, one_error
from lab.dirsnap import snapshot
from lab.families import FAMILIES
from irsurgeon.core.errors import OutputError
from irsurgeon.families import registry


# --- OUT_DIR holds the earlier pair or the new one, never one of each ------------------------------------------------

MOVE_THEN_SIGNAL = r'''
import os, signal, sys
from irsurgeon.synth import output
out, at, sig, text = sys.argv[1], int(sys.argv[2]), getattr(signal, sys.argv[3]), sys.argv[4]
real, calls = os.rename, []
def rename(*args, **kwargs):
    calls.append(args)
    if len(calls) == at:
        os.kill(os.getpid(), sig)
    return real(*args, **kwargs)
os.rename = rename
with output.output_pair(out, False, True) as (target, ckpt):
    (target / "f").write_text(text)
    (ckpt / "f").write_text(text)
'''


def pair_state(out) -> tuple[str | None, str | None]:
    return tuple((out / name / "f").read_text() if (out / name / "f").exists() else None for name in ("target", "ckpt"))


def old_pair(out, earlier: bool = True) -> None:
    """OUT_DIR holding an earlier synth output (or, not earlier, nothing yet)."""
    for name in ("target", "ckpt") if earlier else ():
        (out / name).mkdir(parents=True)
        (out / name / "f").write_text("old")


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}


def move_then_signal(out, at: int, sig: str) -> int:
    return subprocess.run([sys.executable, "-c", MOVE_THEN_SIGNAL, str(out), str(at), sig, "new"], env=child_env(),
                          capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("earlier,at", [(True, 1), (True, 2), (True, 3), (True, 4), (False, 1), (False, 2)])
def test_synth_killed_between_its_renames_is_rolled_back_by_the_next_run(tmp_path, earlier, at):
    """SIGKILL before the at-th rename of the move (--force over an earlier output: four; into an empty OUT_DIR:
    two). The next run (here its first step, recover) puts back what OUT_DIR held: the old target came back
    missing, or a new target beside the old ckpt, before the move was undone."""
    from irsurgeon.synth.output import recover

    out = tmp_path / "out"
    old_pair(out, earlier)
    before = pair_state(out)
    assert move_then_signal(out, at, "SIGKILL") == -9
    recover(out, False)
    assert pair_state(out) == before and sorted(p.name for p in out.iterdir()) == (["ckpt", "target"] if earlier
                                                                                     else [])


RECOVER_THEN_KILL = r'''
import os, signal, sys
from irsurgeon.synth import output
at, calls = int(sys.argv[2]), []
def wrap(real):
    def call(*args, **kwargs):
        calls.append(args)
        if len(calls) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for name in ("rename", "unlink", "rmdir"):
    setattr(os, name, wrap(getattr(os, name)))
output.recover(sys.argv[1], False)
'''


@pytest.mark.slow  # ~90 child processes
@pytest.mark.parametrize("earlier,at", [(True, 1), (True, 2), (True, 3), (True, 4), (False, 1), (False, 2)])
def test_a_killed_rollback_of_a_killed_synth_is_finished_by_the_run_after(tmp_path, earlier, at):
    """The move killed before its at-th rename, then the next run's rollback killed at each of its renames and
    removals in turn: the run after that still ends with what OUT_DIR held first (a rollback done, then killed
    while the staging folder went, once took the earlier ckpt for a new one that had moved in)."""
    from irsurgeon.synth.output import recover

    for call in range(1, 100):
        out = tmp_path / str(call)
        old_pair(out, earlier)
        before = pair_state(out)
        assert move_then_signal(out, at, "SIGKILL") == -9
        proc = subprocess.run([sys.executable, "-c", RECOVER_THEN_KILL, str(out), str(call)], env=child_env(),
                              capture_output=True, timeout=60)
        if proc.returncode == 0:  # the rollback made fewer calls: every one was a kill point
            break
        recover(out, False)
        assert pair_state(out) == before and not list(out.glob(".synth-*")), call
    assert call > 3 and pair_state(out) == before


def test_synth_interrupted_during_its_renames_finishes_the_move_first(tmp_path):
    """Ctrl-C between two renames is held until the move is done: the new pair, then the interruption."""
    out = tmp_path / "out"
    old_pair(out)
    assert move_then_signal(out, 2, "SIGINT") != 0
    assert pair_state(out) == ("new", "new") and sorted(p.name for p in out.iterdir()) == ["ckpt", "target"]


@pytest.mark.parametrize("kind", ["a link", "a file", "a folder of the user's"])
def test_an_entry_named_like_synths_staging_that_synth_did_not_make_is_refused_never_removed(tmp_path, kind):
    """It used to be removed as a killed run's staging (a folder of the user's with it, even without --force), or
    to end the run with 'Error: Cannot call rmtree on a symbolic link'."""
    from irsurgeon.synth.output import output_pair

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("keep")
    entry = out / ".synth-abcd1234"
    {"a link": lambda: entry.symlink_to(outside), "a file": lambda: entry.write_text("x"),
     "a folder of the user's": lambda: (entry.mkdir(), (entry / "notes.txt").write_text("mine"))}[kind]()
    with pytest.raises(OutputError, match=r"\.synth-abcd1234: not a staging folder synth made"):
        with output_pair(out, False, True):
            pass
    assert (outside / "keep").read_text() == "keep" and (entry.is_symlink() or entry.exists())
    assert sorted(p.name for p in out.iterdir()) == [".synth-abcd1234"]


# --- synth over an earlier synth output ----------------------------------------------------------------------------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("family", FAMILIES)
def test_synth_force_replaces_an_earlier_synth_output(tmp_path, family):
    kind = next(iter(family.synth_kinds))
    first, again, fresh = tmp_path / "first", tmp_path / "again", tmp_path / "fresh"
    for out, seed in ((first, 0), (again, 0), (fresh, 1)):
        assert invoke("synth", out, "--kind", kind, "--seed", seed).exit_code == 0
    result = invoke("synth", again, "--kind", kind, "--seed", 1, "--force")
    assert result.exit_code == 0, result.output
    assert snapshot(again) == snapshot(fresh) != snapshot(first)


@pytest.mark.usefixtures("no_hang")
def test_synth_without_force_refuses_an_earlier_output_before_any_work(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert invoke("synth", out, "--kind", "gemma4").exit_code == 0
    before = snapshot(out)
    family = registry.synth_kinds()["gemma4"]
    monkeypatch.setattr(type(family), "synth", lambda *a, **k: pytest.fail("synth ran"))
    line = one_error(invoke("synth", out, "--kind", "gemma4", "--seed", 1))
    assert line == f"Error: {out / 'target'}: exists and is not empty (--force replaces {out / 'target'}/ and " \
                   f"{out / 'ckpt'}/)"
    assert snapshot(out) == before
