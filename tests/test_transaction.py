"""DirectoryTransaction: all or nothing, a lock per directory, recovery of an interrupted commit."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dirsnap import full_disk_on_nth_replace, snapshot
from irsurgeon.errors import OutputError
from irsurgeon.transaction import BACKUP_SUFFIX, JOURNAL, STAGE_DIR, DirectoryTransaction, recover


@pytest.fixture
def target(tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    (d / "a.xml").write_text("old a")
    (d / "keep.bin").write_bytes(b"\x00" * 100)
    return d


def test_commit_replaces_and_adds_and_leaves_nothing_else(target):
    with DirectoryTransaction(target) as tx:
        tx.stage("a.xml").write_text("new a")
        tx.stage("b.xml").write_text("new b")
        tx.commit()
    assert (target / "a.xml").read_text() == "new a" and (target / "b.xml").read_text() == "new b"
    assert sorted(p.name for p in target.iterdir()) == ["a.xml", "b.xml", "keep.bin"]


def test_leaving_without_commit_changes_nothing(target):
    before = snapshot(target)
    with pytest.raises(RuntimeError):
        with DirectoryTransaction(target) as tx:
            tx.stage("a.xml").write_text("new a")
            raise RuntimeError("verification failed")
    assert snapshot(target) == before


def test_failure_in_the_middle_of_commit_rolls_back(target, monkeypatch):
    before = snapshot(target)
    full_disk_on_nth_replace(monkeypatch, 2)
    with pytest.raises(OutputError, match="rolled back"):
        with DirectoryTransaction(target) as tx:
            tx.stage("a.xml").write_text("new a")
            tx.stage("b.xml").write_text("new b")
            tx.commit()
    monkeypatch.undo()
    assert snapshot(target) == before


def test_recover_rolls_back_a_killed_commit(target):
    """The state a SIGKILL leaves after the first of two moves: journal present, no 'committed' mark."""
    before = snapshot(target)
    stage = target / STAGE_DIR
    stage.mkdir()
    (stage / ("a.xml" + BACKUP_SUFFIX)).write_text("old a")
    (target / "a.xml").write_text("new a")  # first move done
    (stage / "b.xml").write_text("new b")  # second not yet
    (stage / JOURNAL).write_text(json.dumps(["a.xml", "b.xml"]))
    notes = recover(target)
    assert notes and "rolled back" in notes[0]
    assert snapshot(target) == before


def test_a_new_transaction_recovers_leftovers_first(target):
    (target / STAGE_DIR).mkdir()
    (target / STAGE_DIR / "openvino_mtp_model.bin").write_bytes(b"partial")
    seen = []
    with DirectoryTransaction(target, echo=seen.append):
        pass
    assert not (target / STAGE_DIR).exists()
    assert any("leftover" in s for s in seen)


def test_second_run_on_a_locked_directory_is_refused(target):
    with DirectoryTransaction(target):
        with pytest.raises(OutputError, match="another irsurgeon run"):
            with DirectoryTransaction(target):
                pass


def test_lock_of_a_dead_process_is_released(target):
    code = textwrap.dedent(f"""
        import fcntl, os
        fd = os.open({str(target)!r}, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", code])
    assert proc.returncode == -9
    with DirectoryTransaction(target) as tx:
        tx.stage("c.xml").write_text("c")
        tx.commit()
    assert (target / "c.xml").read_text() == "c"
