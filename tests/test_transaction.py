"""DirectoryTransaction: all or nothing, a lock per directory, recovery of an interrupted commit, and leftovers that
irsurgeon cannot prove it wrote (links, foreign or inconsistent journals, folders swapped mid-run) left alone.

Every attack test keeps a sibling `outside` folder and asserts that neither it nor the target changed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from lab.families import WRITABLE
from lab.dirsnap import full_disk_on_nth_replace, snapshot
from lab.procs import killed_commit
from irsurgeon.commit import journal
from irsurgeon.core.errors import OutputError
from irsurgeon.commit.transaction import (BACKUP_SUFFIX, JOURNAL, STAGE_DIR, DirectoryTransaction, ForeignLeftovers,
                                   leftover_state, recover)

LM = "openvino_language_model.xml"
HEAD = "openvino_mtp_model.xml"
CONFIG = "openvino_config.json"


@pytest.fixture
def target(tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    (d / LM).write_text("old language model")
    (d / "openvino_language_model.bin").write_bytes(b"\x00" * 100)
    return d


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("not irsurgeon's")
    return d


def test_commit_replaces_and_adds_and_leaves_nothing_else(target):
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        tx.stage(LM).write_text("new language model")
        tx.stage(HEAD).write_text("head")
        tx.commit()
    assert (target / LM).read_text() == "new language model" and (target / HEAD).read_text() == "head"
    assert sorted(p.name for p in target.iterdir()) == sorted([LM, HEAD, "openvino_language_model.bin"])


def test_only_the_files_irsurgeon_writes_can_be_staged(target):
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        with pytest.raises(ValueError, match="openvino_language_model.bin"):
            tx.stage("openvino_language_model.bin")


def test_leaving_without_commit_changes_nothing(target):
    before = snapshot(target)
    with pytest.raises(RuntimeError):
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            tx.stage(LM).write_text("new")
            raise RuntimeError("verification failed")
    assert snapshot(target) == before


def test_failure_in_the_middle_of_commit_rolls_back(target, monkeypatch):
    before = snapshot(target)
    full_disk_on_nth_replace(monkeypatch, 3)  # the journal, the first file in, then the second fails
    with pytest.raises(OutputError, match="rolled back"):
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            tx.stage(LM).write_text("new")
            tx.stage(HEAD).write_text("head")
            tx.commit()
    monkeypatch.undo()
    assert snapshot(target) == before


@pytest.mark.parametrize("at", [2, 3, 4], ids=["before-first-move", "after-first-move", "after-last-move"])
def test_recover_rolls_back_a_killed_commit(target, at):
    before = snapshot(target)
    assert killed_commit(target, {LM: "new", HEAD: "head"}, at) == -9
    assert (target / STAGE_DIR / JOURNAL).exists()
    assert leftover_state(target, WRITABLE)[0] is False
    notes = recover(target, writable=WRITABLE)
    assert notes and "rolled back" in notes[0], notes
    assert snapshot(target) == before


def test_killed_after_the_commit_mark_is_just_cleared(target):
    assert killed_commit(target, {LM: "new"}, 1, "unlink") == -9  # `journal.json` already renamed `committed`
    assert "leftovers" in leftover_state(target, WRITABLE)[1]
    notes = recover(target, writable=WRITABLE)
    assert "removed leftover" in notes[0] and (target / LM).read_text() == "new"
    assert not (target / STAGE_DIR).exists()


def test_recovery_killed_halfway_never_deletes_a_restored_original(target):
    """Rolled back once up to the first restore (the backup consumed), killed, then recovered again."""
    before = snapshot(target)
    assert killed_commit(target, {LM: "new", HEAD: "head"}, 4) == -9
    stage = target / STAGE_DIR
    os.replace(stage / (LM + BACKUP_SUFFIX), target / LM)  # what the first recovery's restore did
    recover(target, writable=WRITABLE)
    assert snapshot(target) == before


def test_a_new_transaction_recovers_leftovers_first(target):
    (target / STAGE_DIR).mkdir()
    (target / STAGE_DIR / "openvino_mtp_model.bin").write_bytes(b"partial")
    seen = []
    with DirectoryTransaction(target, writable=WRITABLE, echo=seen.append):
        pass
    assert not (target / STAGE_DIR).exists()
    assert any("leftover" in s for s in seen)


def test_second_run_on_a_locked_directory_is_refused(target):
    with DirectoryTransaction(target, writable=WRITABLE):
        with pytest.raises(OutputError, match="another irsurgeon run holds"):
            with DirectoryTransaction(target, writable=WRITABLE):
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
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        tx.stage(CONFIG).write_text("{}")
        tx.commit()
    assert (target / CONFIG).read_text() == "{}"


# --- leftovers irsurgeon cannot prove it wrote ---------------------------------------------------------------------

def refused_untouched(target, outside, match: str) -> None:
    """recover, a new transaction and verify's check all refuse; neither folder changes."""
    before, around = snapshot(target), snapshot(outside)
    with pytest.raises(ForeignLeftovers, match=match):
        recover(target, writable=WRITABLE)
    with pytest.raises(ForeignLeftovers, match="nothing was touched"):
        with DirectoryTransaction(target, writable=WRITABLE):
            pass
    ok, detail = leftover_state(target, WRITABLE)
    assert not ok and "by hand" in detail
    assert snapshot(target) == before and snapshot(outside) == around


def test_staging_folder_that_is_a_link_to_a_killed_runs_leftovers_outside(target, outside):
    """The real leftovers of a killed commit, moved outside and linked back: recovery must not follow the link."""
    assert killed_commit(target, {LM: "new"}, 3) == -9  # journal in place, LM moved in
    os.replace(target / STAGE_DIR, outside / "leftovers")
    (target / STAGE_DIR).symlink_to(outside / "leftovers")
    refused_untouched(target, outside, "a link")


def test_staging_link_to_a_missing_folder_is_refused(target, outside):
    (target / STAGE_DIR).symlink_to(outside / "nowhere")
    refused_untouched(target, outside, "a link")


@pytest.mark.parametrize("form", ["bare-list", "named-lists", "checksummed-foreign-name", "checksummed-wrong-hash",
                                  "nested-deeper-than-python-parses"])
def test_journal_not_written_by_a_commit_is_refused(target, outside, form):
    """A journal shipped inside a downloaded directory: it must never delete the files it names."""
    stage = target / STAGE_DIR
    stage.mkdir()
    lm, here = os.stat(target / LM), {"dev": os.stat(stage).st_dev, "ino": os.stat(stage).st_ino}
    entry = {"name": LM, "new": {"size": 3, "sha256": "0" * 64, "dev": lm.st_dev, "ino": lm.st_ino}, "old": None}
    data = {"bare-list": json.dumps(["openvino_language_model.bin", LM]),
            "named-lists": json.dumps({"files": ["openvino_language_model.bin"], "replaced": []}),
            "checksummed-foreign-name": journal.encode("x", [{**entry, "name": "openvino_language_model.bin"}], here),
            "checksummed-wrong-hash": journal.encode("x", [entry], here),
            "nested-deeper-than-python-parses": "[" * 60000}[form]
    (stage / JOURNAL).write_bytes(data.encode() if isinstance(data, str) else data)
    refused_untouched(target, outside, "irsurgeon wrote" if form != "checksummed-wrong-hash" else "matches neither")
    assert (target / "openvino_language_model.bin").exists() and (target / LM).read_text() == "old language model"


def test_file_changed_after_a_killed_commit_stops_the_rollback(target, outside):
    assert killed_commit(target, {LM: "new", HEAD: "head"}, 4) == -9
    (target / HEAD).write_text("edited by the user since")
    refused_untouched(target, outside, HEAD)


def test_backup_that_is_not_the_original_stops_the_rollback(target, outside):
    assert killed_commit(target, {LM: "new"}, 2) == -9  # journal in place, nothing moved yet
    backup = target / STAGE_DIR / (LM + BACKUP_SUFFIX)
    backup.unlink()
    backup.write_text("old language model")  # same bytes, but not the file the journal recorded
    refused_untouched(target, outside, LM)


@pytest.mark.parametrize("entry", ["unknown-name", "subfolder", "link"])
def test_staging_folder_holding_what_irsurgeon_never_writes_is_refused(target, outside, entry):
    stage = target / STAGE_DIR
    stage.mkdir()
    if entry == "unknown-name":
        (stage / "notes.txt").write_text("mine")
    elif entry == "subfolder":
        (stage / HEAD).mkdir()
    else:
        (stage / HEAD).symlink_to(outside / "precious.txt")
    refused_untouched(target, outside, "not a file irsurgeon writes")


# --- folders swapped for links while a transaction runs ------------------------------------------------------------

def test_staging_folder_swapped_for_a_link_mid_run_is_refused_before_anything_moves(target, outside):
    """The journal would be in a folder the next run cannot find under the staging name: no commit without it."""
    around, before = snapshot(outside), (target / LM).read_text()
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        tx.stage(LM).write_text("new")
        tx.stage(HEAD).write_text("head")
        os.replace(target / STAGE_DIR, target / "moved-away")
        (target / STAGE_DIR).symlink_to(outside)
        with pytest.raises(OutputError, match="replaced or moved since files were staged in it; nothing was written"):
            tx.commit()
    assert snapshot(outside) == around
    assert (target / LM).read_text() == before and not (target / HEAD).exists()
    assert list((target / "moved-away").iterdir()) == []  # emptied through its descriptor; the link left alone
    assert (target / STAGE_DIR).is_symlink()


def test_target_swapped_for_a_link_mid_run_redirects_nothing(target, outside):
    around = snapshot(outside)
    real = target.parent / "real-target"
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        os.replace(target, real)
        target.symlink_to(outside)
        tx.stage(LM).write_text("new")
        tx.commit()
    assert snapshot(outside) == around
    assert (real / LM).read_text() == "new" and not (real / STAGE_DIR).exists()


def test_a_linked_original_is_replaced_never_written_through_and_restored_as_the_link(target, outside):
    """target/LM links to a file outside: the commit replaces the link (the outside file keeps its bytes), and a
    rollback puts the very link back (its backup is a hard link of the link itself)."""
    os.replace(target / LM, outside / "lm.xml")
    (target / LM).symlink_to(outside / "lm.xml")
    before, around = snapshot(target), snapshot(outside)
    assert killed_commit(target, {LM: "new", HEAD: "head"}, 4) == -9
    assert snapshot(outside) == around and (target / LM).read_text() == "new" and not (target / LM).is_symlink()
    recover(target, writable=WRITABLE)
    assert snapshot(target) == before and snapshot(outside) == around and (target / LM).is_symlink()


def test_forged_commit_mark_is_refused_like_a_forged_journal(target, outside):
    """`committed` is the journal renamed; a garbled one would let recovery clear backups it cannot vouch for."""
    (target / STAGE_DIR).mkdir()
    (target / STAGE_DIR / "committed").write_text("[]")
    (target / STAGE_DIR / (LM + BACKUP_SUFFIX)).write_text("someone's only copy")
    refused_untouched(target, outside, "committed: not a journal irsurgeon wrote")


class Handed:
    """A Tail stand-in handing over a fixed digest (and saying whether it was stopped)."""

    def __init__(self, digest: dict):
        self.value, self.stopped = digest, False

    def digest(self) -> dict:
        return self.value

    def stop(self) -> None:
        self.stopped = True


def journaled() -> tuple[dict, object]:
    """The journal's entries by name (filled in by the os.replace spy returned with them), read at the moment the
    commit renames the journal `committed`."""
    seen = {}
    real = os.replace

    def spy(src, dst, **kw):
        if src == JOURNAL:
            fd = os.open(JOURNAL, os.O_RDONLY, dir_fd=kw["src_dir_fd"])
            with os.fdopen(fd) as f:
                seen.update({e["name"]: e["new"] for e in json.load(f)["files"]})
        return real(src, dst, **kw)
    return seen, spy


def test_a_digest_made_as_the_file_was_written_is_the_one_journaled(target, monkeypatch):
    seen, spy = journaled()
    monkeypatch.setattr(os, "replace", spy)
    handed = Handed({"size": 4, "sha256": "0" * 64})  # not the file's: proves which one the journal took
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        staged = tx.stage(HEAD)
        staged.write_text("head")
        tx.written(HEAD, handed, os.stat(staged))
        tx.commit()
    assert {k: seen[HEAD][k] for k in ("size", "sha256")} == handed.value
    assert handed.stopped  # the transaction is over: nothing goes on hashing for it


def test_a_file_written_again_after_it_was_recorded_is_refused_and_nothing_moves_in(target):
    before = snapshot(target)
    with pytest.raises(OutputError, match=f"{HEAD}: its staged copy changed after it was written and checked"):
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            staged = tx.write(HEAD, b"head")
            tx.write(LM, b"new language model")
            time.sleep(0.02)  # past the file system's timestamp tick (a jiffy, at most 10 ms)
            staged.write_text("HEAD")  # the same size; its times change
            tx.commit()
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()


def test_dropping_a_transaction_stops_the_hash_of_what_it_staged(target):
    handed = Handed({"size": 4, "sha256": "0" * 64})
    with pytest.raises(RuntimeError):
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            staged = tx.stage(HEAD)
            staged.write_text("head")
            tx.written(HEAD, handed, os.stat(staged))
            raise RuntimeError("the smoke test failed")
    assert handed.stopped and not (target / HEAD).exists()


def test_a_recorded_transaction_refuses_a_file_staged_without_its_record(target):
    before = snapshot(target)
    with pytest.raises(OutputError, match=f"{LM}: staged with no record of what was written"):
        with DirectoryTransaction(target, writable=WRITABLE, recorded=True) as tx:
            tx.write(HEAD, b"head")
            tx.stage(LM).write_text("written around the record")
            tx.commit()
    assert snapshot(target) == before


# --- the staging folder checked again once the journal is written --------------------------------------------------

def test_a_staging_folder_moved_while_the_files_are_hashed_is_refused_before_anything_moves(tmp_path, monkeypatch):
    """The check before the journal came before the files were fsynced and hashed (seconds for a large head): a
    folder moved then took the journal with it, and a kill during the moves left a half patch that the next run,
    finding an empty staging folder under the name, could not roll back."""
    from irsurgeon.commit.transaction import JOURNAL, STAGE_DIR, DirectoryTransaction

    target = tmp_path / "target"
    target.mkdir()
    (target / "openvino_language_model.xml").write_text("old")
    real = DirectoryTransaction._prepare

    def prepare(self, name):
        if not (target / "moved-away").exists():
            os.rename(target / STAGE_DIR, target / "moved-away")
            (target / STAGE_DIR).mkdir()
        return real(self, name)

    monkeypatch.setattr(DirectoryTransaction, "_prepare", prepare)
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        tx.stage("openvino_language_model.xml").write_text("new")
        tx.stage("openvino_mtp_model.xml").write_text("head")
        with pytest.raises(OutputError, match="replaced or moved since files were staged in it; nothing was written"):
            tx.commit()
    assert (target / "openvino_language_model.xml").read_text() == "old"
    assert not (target / "openvino_mtp_model.xml").exists() and not list(target.rglob(JOURNAL))
    assert list((target / "moved-away").iterdir()) == []
