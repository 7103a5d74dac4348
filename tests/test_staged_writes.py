"""Faults in the writes of a patch's staged draft (irsurgeon.draft.save.save_appended, irsurgeon.ir.streamed.Tail, the
journal's digest taken from the write: DirectoryTransaction.written), each stating a rule of docs/reliability.md or of
the docstrings of those modules: a staged file changed after its write or its check is never moved in; a full disk,
an I/O error or Ctrl-C at a write is one line (or `Error: interrupted`) with the target as before; no thread or
descriptor of the patch is left behind.

Each case patches a bundled fixture in-process with every constant of the draft appended by irsurgeon
(`draft.save.DETACH_BYTES = 1`: the `every_constant_appended` fixture of conftest.py); the faults are made by wrapping the
product's own calls (Tail's writes, its fsync thread, the commit), the kills by a child process.
"""
from __future__ import annotations

import errno
import os
import signal
import threading
from pathlib import Path

import pytest

from helpers.cli import one_error
from helpers.leftovers import house_threads
from helpers.staging import QWEN_HEAD_BIN, QWEN_HEAD_XML, copy_target, failing_tail_write, on_tail_write, patch
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft import save as draft_save
from irsurgeon.commit import transaction
from irsurgeon.commit.journal_format import STAGE_DIR, staged
from helpers.cli import PATCH_INTERRUPTED

pytestmark = pytest.mark.usefixtures("every_constant_appended")


def open_fds() -> set[str]:
    return {f"{n} -> {os.readlink(f'/proc/self/fd/{n}')}" for n in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{n}")}


def before_commit(monkeypatch, act) -> None:
    """Run act(tx) just before the transaction's commit (after every file was staged and checked)."""
    real = transaction.DirectoryTransaction.commit

    def commit(tx):
        act(tx)
        return real(tx)
    monkeypatch.setattr(transaction.DirectoryTransaction, "commit", commit)


def staged_file(tx, name: str) -> Path:
    return tx.stage_dir / staged(name)


# --- the journal's digest is the digest of the file that is moved in ------------------------------------------------

def flip_in_place(path: Path, keep_times: bool) -> None:
    """One byte of the file's last 64 changed, its size kept (and its times put back, when asked)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    if keep_times:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("keep_times", [False, True], ids=["rewritten", "rewritten, times put back"])
def test_a_bin_rewritten_in_place_after_its_write_is_refused_at_the_commit(tmp_path, monkeypatch, keep_times):
    """Rule (DirectoryTransaction.written): what is committed is what was written and checked; a same-size rewrite
    of the staged .bin before the commit (its mtime even put back: its ctime still moves) refuses the commit with
    one line naming the file, and nothing in the target changes."""
    target = copy_target(tmp_path)
    before = snapshot(target)
    before_commit(monkeypatch, lambda tx: flip_in_place(staged_file(tx, QWEN_HEAD_BIN), keep_times))
    error = one_error(patch(target))
    assert f"{QWEN_HEAD_BIN}: its staged copy changed after it was written and checked" in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()


def test_a_rewrite_right_after_the_write_is_not_taken_for_the_written_file(tmp_path, monkeypatch):
    """Rule: the stat key (dev, ino, size, mtime_ns, ctime_ns) tells a rewrite made microseconds after the write
    (within one tick of a coarse clock) from the file written: the commit refuses it."""
    target = copy_target(tmp_path)
    before = snapshot(target)
    real = draft_save.save_appended

    def save_then_rewrite(model, xml, stream=None, spend=False):
        saved = real(model, xml, stream, spend)
        flip_in_place(xml.with_suffix(".bin"), keep_times=True)  # no pause: the same clock tick, most likely
        return saved
    monkeypatch.setattr(draft_save, "save_appended", save_then_rewrite)
    error = one_error(patch(target))
    assert f"{QWEN_HEAD_BIN}: its staged copy changed after it was written and checked" in error, error
    assert snapshot(target) == before


# --- a staged file changed between its check and the commit ------------------------------------------------------


def truncate(path: Path, elsewhere: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def rewrite_same_size(path: Path, elsewhere: Path) -> None:
    flip_in_place(path, keep_times=False)


def hard_link_foreign(path: Path, elsewhere: Path) -> None:
    """The staged name made a hard link of a file of the same size elsewhere on the file system (one byte off)."""
    foreign = elsewhere / "foreign.bin"
    foreign.write_bytes(path.read_bytes()[:-1] + b"\0")
    os.unlink(path)
    os.link(foreign, path)


def symlink_foreign(path: Path, elsewhere: Path) -> None:
    foreign = elsewhere / "foreign.bin"
    foreign.write_bytes(path.read_bytes())
    os.unlink(path)
    os.symlink(foreign, path)


TAMPER = {"truncated": truncate, "rewritten": rewrite_same_size, "hard link": hard_link_foreign,
          "symlink": symlink_foreign}


@pytest.mark.parametrize("how", [
    "truncated",
    "rewritten",
    "hard link",
    "symlink"])
def test_a_staged_bin_changed_after_its_check_is_never_moved_in(tmp_path, monkeypatch, how):
    """Rule: what is committed is what was checked. The .bin's digest is known from its write; a staged .bin that
    no longer has it at the commit (truncated, rewritten, replaced by a link) fails the patch with one line,
    nothing in the target changed."""
    target = copy_target(tmp_path)
    before = snapshot(target)
    before_commit(monkeypatch, lambda tx: TAMPER[how](staged_file(tx, QWEN_HEAD_BIN), tmp_path))
    result = patch(target)
    error = one_error(result)
    assert QWEN_HEAD_BIN in error, error
    assert snapshot(target) == before


# --- faults in the writes of Tail, the xml rewrite and the fsync thread -------------------------------------------


def fds_into(directory: Path) -> list[str]:
    return sorted(fd for fd in open_fds() if str(directory) in fd)


@pytest.mark.parametrize("at", [1, pytest.param(3, marks=pytest.mark.slow), pytest.param(-1, marks=pytest.mark.slow)],
                         ids=["first write", "third write", "last write"])
def test_a_full_disk_at_a_write_of_the_tail_is_one_line_and_nothing_changes(tmp_path, monkeypatch, at):
    """Rule: ENOSPC at any write of an appended weight: one `Error:` line with the reason, exit 1, the target as
    before, no staging folder, no hashing or syncing thread and no descriptor of the staged files left behind."""
    target = copy_target(tmp_path)
    failing_tail_write(monkeypatch, tmp_path, at)
    before = snapshot(target)
    error = one_error(patch(target))
    assert "No space left on device" in error and STAGE_DIR in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert fds_into(target / STAGE_DIR) == [] and house_threads() == []


def test_a_full_disk_at_a_write_of_the_tail_names_the_bin(tmp_path, monkeypatch):
    """Rule (write_staged): the one line names the file that could not be written: the .bin being appended to."""
    target = copy_target(tmp_path)
    failing_tail_write(monkeypatch, tmp_path, 1)
    error = one_error(patch(target))
    assert f"{QWEN_HEAD_BIN}: cannot write it: No space left on device" in error, error


def test_a_failed_patch_leaves_no_descriptor_open(tmp_path, monkeypatch):
    """Rule: a patch that fails (here ENOSPC in the head's .bin) leaves the process as it found it: no descriptor
    of the target's files open (a library caller patching many directories would hold one .bin of each)."""
    from irsurgeon.ir import files
    files._KEPT.clear()
    target = copy_target(tmp_path)
    failing_tail_write(monkeypatch, tmp_path, 1)
    files._KEPT.clear()  # the probe's
    one_error(patch(target))
    assert fds_into(target) == []


def test_a_full_disk_at_the_xml_rewrite_is_one_line_and_nothing_changes(tmp_path, monkeypatch):
    """Rule: the placeholders made Const layers are written over the serializer's .xml; ENOSPC there is one line
    naming the staged .xml, and nothing changes."""
    target = copy_target(tmp_path)
    real = Path.write_bytes

    def write_bytes(self, data):
        if self.name == QWEN_HEAD_XML:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)
    before = snapshot(target)
    error = one_error(patch(target))
    assert QWEN_HEAD_XML in error and "No space left on device" in error, error
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
    assert fds_into(target / STAGE_DIR) == [] and house_threads() == []


def fsync_failing_once_on_the_sync_thread(monkeypatch) -> list[str]:
    """os.fsync on the `irsurgeon-sync` thread reports EIO once, as Linux reports a lost write-back once per file
    (errseq: the next fsync, through any descriptor opened later, reports nothing)."""
    real, failed = os.fsync, []

    def fsync(fd):
        if threading.current_thread().name.startswith("irsurgeon-sync") and not failed:
            failed.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def test_an_io_error_reported_by_the_background_fsync_fails_the_patch(tmp_path, monkeypatch):
    """Rule: an EIO from the fsync of the staged .bin fails the patch with one line and changes nothing; Linux
    reports a failed write-back once, so the one fsync that saw it must be the one that is heard."""
    target = copy_target(tmp_path)
    failed = fsync_failing_once_on_the_sync_thread(monkeypatch)
    before = snapshot(target)
    result = patch(target)
    assert failed and failed[0].endswith(QWEN_HEAD_BIN)  # the fault was reached
    error = one_error(result)
    assert QWEN_HEAD_BIN in error, error
    assert snapshot(target) == before


# --- kills at every write, in child processes (slow) -------------------------------------------------------------

DETACH_ALL = "import irsurgeon.draft.build as _build; _build.DETACH_BYTES = 1\n"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kills_at_every_write_of_a_patch_with_every_constant_appended(tmp_path, monkeypatch, sig):
    """Rule (docs/reliability.md, the kill lab): a kill or Ctrl-C before any filesystem write of a patch (the
    DFlash pair: a draft folder, and the target's annotation staged on its thread) leaves the target as before,
    complete, or holding a commit the next run rolls back; here with every constant appended by irsurgeon."""
    from lab import kills
    monkeypatch.setattr(kills, "KILLER", kills.KILLER.replace("from irsurgeon.cli import main",
                                                              DETACH_ALL + "from irsurgeon.cli import main"))
    monkeypatch.setattr(kills, "CLI", DETACH_ALL.replace("\n", "; ") + kills.CLI)
    lab = kills.KillLab(tmp_path / "kills", *FIXTURE_PAIRS["dflash"])
    sweep = kills.Sweep()
    for at in range(1, len(lab.points) + 1):
        lab.kill(at, sig, sweep)
    assert sweep.kills == len(lab.points) > 10
    assert not sweep.problems, "\n".join(sweep.problems)


# --- the head's .xml changed after its check, Ctrl-C inside the writes, the fsync thread after a patch ------------


def test_a_staged_head_xml_rewritten_after_its_check_is_never_moved_in(tmp_path, monkeypatch):
    """Rule: what is committed is what was checked. The staged head's .xml rewritten between its smoke test and the
    commit (one weight's Const layer pointed at another's bytes: a valid IR, a different head) fails the patch,
    nothing in the target changed."""
    import re

    def repoint(tx):
        xml = staged_file(tx, QWEN_HEAD_XML)
        text = xml.read_text()
        extents = re.findall(r'offset="(\d+)" size="(\d+)"', text)
        (o1, z1), (o2, z2) = next((a, b) for a in extents for b in extents if a != b and a[1] == b[1])
        xml.write_text(text.replace(f'offset="{o1}" size="{z1}"', f'offset="{o2}" size="{z2}"', 1))
    target = copy_target(tmp_path)
    before = snapshot(target)
    before_commit(monkeypatch, repoint)
    error = one_error(patch(target))
    assert QWEN_HEAD_XML in error, error
    assert snapshot(target) == before


@pytest.mark.parametrize("at", [1, -1], ids=["first write", "last write"])
def test_ctrl_c_inside_the_writes_of_the_tail_is_interrupted_and_nothing_changes(tmp_path, monkeypatch, at):
    """Rule: Ctrl-C while the weights are appended: `Error: interrupted`, exit 130, the target as before, no
    staging folder, the hashing thread stopped."""
    on_tail_write(monkeypatch, tmp_path, at, lambda: os.kill(os.getpid(), signal.SIGINT))
    target = copy_target(tmp_path)
    before = snapshot(target)
    result = patch(target)
    assert result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED, result.output
    assert snapshot(target) == before and not (target / STAGE_DIR).exists() and house_threads() == []


def test_a_patch_returns_with_no_thread_of_its_own_left_running(tmp_path, monkeypatch):
    """Rule: when patch returns, its work is done: no irsurgeon thread still runs and no descriptor of the target's
    files is open (here the background fsync of the .bin takes longer than the rest of the patch)."""
    from irsurgeon.ir import files
    real, release = os.fsync, threading.Event()

    def fsync(fd):
        if threading.current_thread().name.startswith("irsurgeon-sync"):
            release.wait(2)
        return real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    target = copy_target(tmp_path)
    try:
        assert patch(target).exit_code == 0
        files._KEPT.clear()  # the read-back cache of the annotated .xml (its own case above)
        left = house_threads(), fds_into(target)
    finally:
        release.set()
    assert left == ([], [])
