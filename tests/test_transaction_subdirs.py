"""One DirectoryTransaction for the files of a target and of one subdirectory level (a Gemma 4 target's
openvino_model.xml with its mtp_assistant/ files): subdirectories made, kept or refused, journals bound to the
staging folder and the files of the run that wrote them, a fault at every call of a commit that changes the disk,
a kill before every such call of a commit and of the recovery after it, and Ctrl-C held until the commit is done.

Layouts: "fresh" (no mtp_assistant/ yet: the commit makes it), "existing" (mtp_assistant/ holds older versions),
"identical" (a forced rebuild whose staged files are byte-identical to the ones in place) and "empty" (a commit
of no files at all).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from contextlib import nullcontext
from pathlib import Path

import pytest

from lab.families import WRITABLE
from lab.dirsnap import Faults, snapshot
from lab.procs import Sweeper
from irsurgeon.commit import journal
from irsurgeon.core.errors import OutputError
from irsurgeon.commit.transaction import (COMMITTED, JOURNAL, STAGE_DIR, DirectoryTransaction, ForeignLeftovers,
                                   clear_interrupted, leftover_state, recover)

TOP = "openvino_model.xml"
SUB = "mtp_assistant"
ASSISTANT = tuple(f"{SUB}/{n}" for n in ("openvino_model.xml", "openvino_model.bin", "config.json",
                                         "generation_config.json"))


def build(root: Path, layout: str, name: str = "target") -> Path:
    """A Gemma 4-like target; for "existing" and "identical" with an mtp_assistant/ of older files."""
    target = root / name
    target.mkdir(parents=True)
    (target / TOP).write_text("<net version='old'/>")
    (target / TOP).chmod(0o600)  # a replaced file keeps its mode
    (target / "openvino_model.bin").write_bytes(bytes(range(256)) * 8)
    (target / "config.json").write_text('{"model_type": "gemma4_text"}')
    (target / "generation_config.json").write_text('{"eos_token_id": 1}')
    if layout in ("existing", "identical"):
        (target / SUB).mkdir()
        for n in ASSISTANT:
            (target / n).write_bytes(f"old {n}".encode())
        (target / ASSISTANT[2]).chmod(0o640)
    return target


def files_for(target: Path, layout: str) -> dict[str, bytes]:
    if layout == "empty":
        return {}
    if layout == "identical":
        return {n: (target / n).read_bytes() for n in (TOP, *ASSISTANT)}
    return {TOP: b"<net version='new'/>", **{n: f"new {n}".encode() * 3 for n in ASSISTANT}}


def commit_with(target: Path, files: dict[str, bytes], faults: Faults | None = None, **kwargs) -> None:
    with DirectoryTransaction(target, **{"writable": WRITABLE, **kwargs}) as tx:
        for name, data in files.items():
            tx.stage(name).write_bytes(data)
        with faults.armed() if faults else nullcontext():
            tx.commit()


def completed(root: Path, layout: str) -> dict[str, str]:
    """The snapshot of the layout's tree after its commit."""
    target = build(root, layout, "completed")
    commit_with(target, files_for(target, layout))
    return snapshot(target, modes=True)


def commit_calls(layout: str) -> list[str]:
    """The numbered calls of a fault-free commit of the layout (what Faults and the kill sweeps number)."""
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        target = build(Path(tmp), layout)
        faults = Faults(mp)
        commit_with(target, files_for(target, layout), faults)
        return faults.names


CALLS = {layout: commit_calls(layout) for layout in ("fresh", "existing", "identical", "empty")}


@pytest.fixture
def outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("not irsurgeon's")
    return d


@pytest.fixture(scope="module")
def sweeper():
    s = Sweeper()
    yield s
    s.close()


def without_stage(state: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in state.items() if not k.startswith(STAGE_DIR)}


# --- one transaction, one subdirectory level ------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["fresh", "existing"])
def test_one_commit_writes_the_target_file_and_the_subdirectory_files(tmp_path, layout):
    target = build(tmp_path, layout)
    kept = os.stat(target / SUB) if layout == "existing" else None
    files = files_for(target, layout)
    commit_with(target, files)
    assert all((target / n).read_bytes() == data for n, data in files.items())
    assert not (target / STAGE_DIR).exists()
    assert (target / TOP).stat().st_mode & 0o777 == 0o600
    if kept is not None:  # the very folder that was there, not a new one
        assert os.path.samestat(kept, os.stat(target / SUB))
        assert (target / ASSISTANT[2]).stat().st_mode & 0o777 == 0o640


def test_staged_files_of_a_subdirectory_sit_flat_in_the_staging_folder(tmp_path):
    target = build(tmp_path, "fresh")
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        staged = tx.stage(ASSISTANT[0])
        assert staged.parent == tx.stage_dir and "/" not in staged.name and staged.name != ASSISTANT[0]
        assert tx.names == [ASSISTANT[0]]
        assert not (target / SUB).exists()  # nothing in the target before the commit


def test_a_missing_subdirectory_is_made_after_the_journal_and_recorded_with_its_identity(tmp_path, monkeypatch):
    import irsurgeon.commit.transaction as transaction

    target, seen = build(tmp_path, "fresh"), []
    real = transaction.rename_noreplace

    def rename_noreplace(*args, **kwargs):  # the folder made in the staging folder moves into the target
        seen.append(json.loads((target / STAGE_DIR / JOURNAL).read_text()))
        assert not (target / SUB).exists()
        return real(*args, **kwargs)
    monkeypatch.setattr(transaction, "rename_noreplace", rename_noreplace)
    commit_with(target, files_for(target, "fresh"))
    st = os.stat(target / SUB)
    assert len(seen) == 1 and seen[0]["format"] == journal.FORMAT
    assert seen[0]["dirs"] == [{"name": SUB, "made": True, "dev": st.st_dev, "ino": st.st_ino}]


def test_names_outside_the_writable_set_are_refused_and_the_set_can_be_given(tmp_path):
    target = build(tmp_path, "fresh")
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        with pytest.raises(ValueError, match="mtp_assistant/notes.txt"):
            tx.stage(f"{SUB}/notes.txt")
    mine = frozenset({"sub/a.txt", "b.txt"})
    with DirectoryTransaction(target, writable=mine) as tx:
        with pytest.raises(ValueError, match=TOP):
            tx.stage(TOP)
        tx.stage("sub/a.txt").write_text("a")
        tx.stage("b.txt").write_text("b")
        tx.commit()
    assert (target / "sub" / "a.txt").read_text() == "a" and (target / "b.txt").read_text() == "b"


@pytest.mark.parametrize("names", [["a/b/c"], ["../x"], ["/abs"], ["a/../b"], ["a%2Fb"], [""], ["a/"], ["./a"],
                                   [f"{STAGE_DIR}/x"], ["a", "a/b"]])
def test_a_writable_set_of_names_a_transaction_cannot_keep_apart_is_refused(tmp_path, names):
    with pytest.raises(ValueError):
        DirectoryTransaction(tmp_path, writable=frozenset(names))


def test_a_commit_of_no_files_writes_no_journal(tmp_path, monkeypatch):
    target = build(tmp_path, "existing")
    before = snapshot(target, modes=True)
    faults = Faults(monkeypatch)
    commit_with(target, {}, faults)
    assert not any(n.startswith(("write", "replace")) for n in faults.names), faults.names
    assert snapshot(target, modes=True) == before


def test_recovery_takes_the_writable_set_of_the_interrupted_run(tmp_path, monkeypatch, outside):
    """A commit of names outside WRITABLE whose rollback failed too: only its own set recovers it."""
    target, mine = build(tmp_path, "fresh"), frozenset({"sub/a.txt", "b.txt"})
    before = snapshot(target, modes=True)
    at = commit_calls_of(tmp_path / "probe", mine).index(f"replace {COMMITTED}") + 1
    faults = Faults(monkeypatch, at, errno.EIO, "persistent")  # from the commit mark's rename on
    with pytest.raises(OutputError, match="next irsurgeon run"):
        commit_with(target, {"sub/a.txt": b"a", "b.txt": b"b"}, faults, writable=mine)
    monkeypatch.undo()
    refused_untouched(target, outside, "not a journal irsurgeon wrote")
    assert recover(target, writable=mine) and snapshot(target, modes=True) == before


def commit_calls_of(root: Path, writable: frozenset[str]) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        target = build(root, "fresh")
        faults = Faults(mp)
        commit_with(target, {n: b"x" for n in writable}, faults, writable=writable)
        return faults.names


@pytest.mark.parametrize("entry", ["made-folder-holding-a-file", "unknown-name-in-a-subdirectory", "real-subfolder",
                                   "made-folder-that-is-a-link"])
def test_staging_folder_entries_for_subdirectories_that_irsurgeon_never_leaves_are_refused(tmp_path, outside, entry):
    target = build(tmp_path, "fresh")
    stage = target / STAGE_DIR
    stage.mkdir()
    made = stage / (SUB + "%2F")
    if entry == "made-folder-holding-a-file":
        made.mkdir()
        (made / "openvino_model.xml").write_text("x")
    elif entry == "unknown-name-in-a-subdirectory":
        (stage / (SUB + "%2Fnotes.txt")).write_text("x")
    elif entry == "real-subfolder":
        (stage / SUB).mkdir()
    else:
        made.symlink_to(outside)
    refused_untouched(target, outside, "not a file irsurgeon writes there")


def test_a_link_appearing_where_a_subdirectory_was_missing_is_refused_at_commit(tmp_path, outside):
    target = build(tmp_path, "fresh")
    with pytest.raises(OutputError, match="a link or a file") as raised:
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            for name, data in files_for(target, "fresh").items():
                tx.stage(name).write_bytes(data)
            (target / SUB).symlink_to(outside)
            before = without_stage(snapshot(target, modes=True))
            tx.commit()
    assert "\n" not in str(raised.value) and str(target / SUB) in str(raised.value)
    assert snapshot(target, modes=True) == before and list(outside.iterdir()) == [outside / "precious.txt"]


# --- subdirectories that are not folders, or are swapped ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["link-to-a-folder-outside", "link-to-nothing", "link-to-a-folder-inside", "file",
                                  "fifo"])
def test_a_subdirectory_that_is_not_a_folder_is_refused_before_anything_is_written(tmp_path, outside, kind):
    target = build(tmp_path, "fresh")
    where = target / SUB
    if kind == "link-to-a-folder-outside":
        where.symlink_to(outside)
    elif kind == "link-to-nothing":
        where.symlink_to(outside / "nowhere")
    elif kind == "link-to-a-folder-inside":
        (target / "real").mkdir()
        where.symlink_to("real")
    elif kind == "file":
        where.write_text("a file")
    else:
        os.mkfifo(where)
    before, around = snapshot(target, modes=True), snapshot(outside, modes=True)
    with pytest.raises(OutputError) as raised:
        commit_with(target, files_for(target, "fresh"))
    message = str(raised.value)
    assert "\n" not in message and str(where) in message, message
    assert snapshot(target, modes=True) == before and snapshot(outside, modes=True) == around


def test_a_subdirectory_swapped_for_a_link_before_the_commit_is_refused(tmp_path, outside):
    target = build(tmp_path, "existing")
    around = snapshot(outside)
    with pytest.raises(OutputError, match="mtp_assistant") as raised:
        with DirectoryTransaction(target, writable=WRITABLE) as tx:
            for name, data in files_for(target, "existing").items():
                tx.stage(name).write_bytes(data)
            os.replace(target / SUB, target / "moved")
            (target / SUB).symlink_to(outside)
            before = without_stage(snapshot(target, modes=True))
            tx.commit()
    assert "\n" not in str(raised.value)
    assert snapshot(target, modes=True) == before and snapshot(outside) == around


@pytest.mark.parametrize("layout", ["fresh", "existing"])
def test_a_subdirectory_swapped_for_a_link_during_the_commit_redirects_nothing(tmp_path, outside, monkeypatch,
                                                                               layout):
    target, around = build(tmp_path, layout), snapshot(outside)
    real = os.replace

    def replace(src, dst, **dir_fds):  # just before the first assistant file moves in
        if isinstance(src, str) and src.startswith(SUB) and not (target / "moved").exists():
            real(target / SUB, target / "moved")
            os.symlink(outside, target / SUB)
        return real(src, dst, **dir_fds)
    monkeypatch.setattr(os, "replace", replace)
    files = files_for(target, layout)
    commit_with(target, files)
    monkeypatch.undo()
    assert snapshot(outside) == around and (target / SUB).is_symlink()
    assert all((target / "moved" / n.split("/")[1]).read_bytes() == files[n] for n in ASSISTANT)


def test_a_subdirectory_swapped_for_a_link_in_a_commit_that_then_fails_is_not_followed_by_the_rollback(
        tmp_path, outside, monkeypatch):
    target, around = build(tmp_path, "existing"), snapshot(outside)
    real, calls = os.replace, []

    def replace(src, dst, **dir_fds):
        calls.append(dst)
        if dst == COMMITTED:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if isinstance(src, str) and src.startswith(SUB) and not (target / "moved").exists():
            real(target / SUB, target / "moved")
            os.symlink(outside, target / SUB)
        return real(src, dst, **dir_fds)
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OutputError) as raised:
        commit_with(target, files_for(target, "existing"))
    monkeypatch.undo()
    message = str(raised.value)
    assert "rolled back" not in message and "by hand" in message and "\n" not in message, message
    assert snapshot(outside) == around and (target / SUB).is_symlink()


# --- a made subdirectory is removed by a rollback only when empty and still the same -----------------------------

def killed_before(sweeper: Sweeper, target: Path, layout: str, label: str) -> None:
    at = CALLS[layout].index(label) + 1
    assert sweeper.commit(target, files_for(target, layout), at)["status"] == -9


def test_rollback_keeps_a_made_subdirectory_holding_a_file_it_did_not_write(tmp_path, sweeper):
    target = build(tmp_path, "fresh")
    before = snapshot(target, modes=True)
    killed_before(sweeper, target, "fresh", f"replace {COMMITTED}")  # every file moved in
    (target / SUB / "notes.txt").write_text("the user's")
    notes = recover(target, writable=WRITABLE)
    assert any(SUB in n and "kept" in n for n in notes), notes
    state = snapshot(target, modes=True)
    assert without_stage(state) == {**before, SUB: state[SUB], f"{SUB}/notes.txt": state[f"{SUB}/notes.txt"]}


def test_a_made_subdirectory_replaced_by_a_copy_stops_the_rollback(tmp_path, sweeper, outside):
    target = build(tmp_path, "fresh")
    killed_before(sweeper, target, "fresh", f"replace {COMMITTED}")
    shutil.copytree(target / SUB, target / "copy")
    shutil.rmtree(target / SUB)
    os.replace(target / "copy", target / SUB)  # the same bytes, not the folder the run made
    refused_untouched(target, outside, SUB)


def test_a_made_subdirectory_swapped_for_a_link_after_a_kill_stops_the_rollback(tmp_path, sweeper, outside):
    target = build(tmp_path, "fresh")
    killed_before(sweeper, target, "fresh", f"replace {COMMITTED}")
    os.replace(target / SUB, outside / "assistant")
    (target / SUB).symlink_to(outside / "assistant")
    refused_untouched(target, outside, SUB)


# --- journals bound to the staging folder and the files of their run ---------------------------------------------

def refused_untouched(target: Path, outside: Path, match: str) -> None:
    """recover, clear_interrupted, a new transaction and verify's check all refuse; neither folder changes."""
    before, around = snapshot(target, modes=True), snapshot(outside, modes=True)
    with pytest.raises(ForeignLeftovers, match=match) as raised:
        recover(target, writable=WRITABLE)
    assert "\n" not in str(raised.value) and "nothing was touched" in str(raised.value)
    with pytest.raises(ForeignLeftovers):
        clear_interrupted(target, writable=WRITABLE)
    with pytest.raises(ForeignLeftovers):
        with DirectoryTransaction(target, writable=WRITABLE):
            pass
    ok, detail = leftover_state(target, WRITABLE)
    assert not ok and "by hand" in detail
    assert snapshot(target, modes=True) == before and snapshot(outside, modes=True) == around


def content(path: Path) -> dict:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def format_2(files: list[dict]) -> bytes:
    """A journal of the previous format (no staging folder, no inodes of the files moved in), checksum right."""
    body = {"format": "irsurgeon-journal/2", "run": "x",
            "files": [{"name": f["name"], "new": content_of(f), "old": None} for f in files]}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({**body, "checksum": hashlib.sha256(canonical).hexdigest()}).encode()


def content_of(entry: dict) -> dict:
    return {"size": entry["new"]["size"], "sha256": entry["new"]["sha256"]}


@pytest.mark.parametrize("forgery", ["format-2", "another-staging-folder", "other-inodes"])
def test_a_crafted_journal_claiming_the_real_files_as_new_is_refused(tmp_path, outside, forgery):
    """A checksummed journal saying the run added openvino_model.xml and openvino_config.json (names a patch writes;
    `old: null`, `new` their real hashes): recovery would delete them."""
    target = build(tmp_path, "existing")
    (target / "openvino_config.json").write_text("{}")
    stage = target / STAGE_DIR
    stage.mkdir()
    victims = [TOP, "openvino_config.json"]
    files = [{"name": n, "old": None, "new": {**content(target / n), "dev": os.stat(target / n).st_dev,
                                             "ino": os.stat(target / n).st_ino}} for n in victims]
    here = {"dev": os.stat(stage).st_dev, "ino": os.stat(stage).st_ino}
    if forgery == "format-2":
        data = format_2(files)
    elif forgery == "another-staging-folder":  # the files' real inodes, but written in some other folder
        data = journal.encode("x", files, {**here, "ino": here["ino"] + 1})
    else:  # forged here, naming the files by inodes of the machine it came from
        data = journal.encode("x", [{**f, "new": {**f["new"], "ino": f["new"]["ino"] + 7}} for f in files], here)
    (stage / JOURNAL).write_bytes(data)
    match = {"format-2": "not a journal irsurgeon wrote", "another-staging-folder": "another staging folder",
             "other-inodes": "matches neither"}[forgery]
    refused_untouched(target, outside, match)
    assert all((target / n).exists() for n in victims)


@pytest.mark.parametrize("copy", ["cp-a", "copytree"])
def test_a_real_journal_copied_with_its_directory_is_refused_there_and_recovers_at_home(tmp_path, sweeper, outside,
                                                                                        copy):
    """Killed before every call that leaves a journal (or the commit mark) in directory A; A copied to B."""
    layout, copied = "existing", 0
    before, after = snapshot(build(tmp_path, layout, "pristine"), modes=True), completed(tmp_path, layout)
    for at in range(1, len(CALLS[layout]) + 1):
        home = build(tmp_path / str(at), layout, "A")
        assert sweeper.commit(home, files_for(home, layout), at)["status"] == -9
        if not any((home / STAGE_DIR / n).exists() for n in (JOURNAL, COMMITTED)):
            continue
        away = home.parent / "B"
        if copy == "cp-a":
            subprocess.run(["cp", "-a", str(home), str(away)], check=True)
        else:
            shutil.copytree(home, away, symlinks=True)
        refused_untouched(away, outside, "another staging folder")
        recover(home, writable=WRITABLE)
        assert snapshot(home, modes=True) in (before, after), at
        copied += 1
    assert copied >= 10


# --- a fault at every call of a commit that changes the disk ------------------------------------------------------

FAULTS = [("before", errno.ENOSPC), ("before", errno.EIO), ("after", errno.EIO), ("persistent", errno.ENOSPC)]
FAULT_CASES = [pytest.param(layout, mode, err, at, id=f"{layout}-{mode}-{errno.errorcode[err]}-{at}",
                            marks=() if at % 3 == 1 or at == len(CALLS[layout]) else pytest.mark.slow)
               for layout in ("fresh", "existing", "identical") for mode, err in FAULTS
               if layout != "identical" or mode == "before"
               for at in range(1, len(CALLS[layout]) + 1)]  # the default run: every third call and the last


@pytest.mark.parametrize("layout,mode,err,at", FAULT_CASES)
def test_a_fault_at_any_call_of_a_commit_leaves_the_tree_as_it_was(tmp_path, monkeypatch, layout, mode, err, at):
    target = build(tmp_path, layout)
    before, after = snapshot(target, modes=True), completed(tmp_path, layout)
    faults = Faults(monkeypatch, at, err, mode)
    message = None
    try:
        commit_with(target, files_for(target, layout), faults)
    except OutputError as e:
        message = str(e)
    monkeypatch.undo()
    where = CALLS[layout][at - 1]
    assert faults.hit and faults.names[at - 1] == where
    if message is None:  # the fault came once the commit was complete
        assert without_stage(snapshot(target, modes=True)) == after, where
    elif mode == "persistent":  # the rollback could not finish either: the message says so, the next run does it
        assert "rolled back" not in message and "next" in message, (where, message)
    else:
        assert "rolled back" in message and snapshot(target, modes=True) == before, (where, message)
    if message is not None:
        assert "\n" not in message and str(target) in message and os.strerror(err) in message, message
    recover(target, writable=WRITABLE)
    assert snapshot(target, modes=True) == (after if message is None else before), where
    assert recover(target, writable=WRITABLE) == []


def test_the_fault_sweeps_cover_every_kind_of_call():
    kinds = {n.split()[0] for n in CALLS["fresh"] + CALLS["existing"]}
    assert {"replace", "rename_noreplace", "link", "unlink", "mkdir", "rmdir", "fchmod", "fsync", "write"} <= kinds


# --- kills before every such call, of a commit and of the recovery after it ---------------------------------------

class Tree:
    """A pristine target of one layout copied afresh for every kill, with its snapshots before and after."""

    def __init__(self, root: Path, layout: str):
        self.root, self.template = root, build(root, layout, "template")
        self.files, self.before = files_for(self.template, layout), snapshot(self.template, modes=True)
        self.after = completed(root, layout)

    def fresh(self) -> Path:
        target = self.root / "t"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.template, target, symlinks=True)
        return target

    def settled(self, sweeper: Sweeper, target: Path, where: str) -> None:
        """recover() in a new process ends in before or after; one more is a no-op."""
        first = sweeper.recover(target)
        assert first["status"] == 0 and first["error"] is None, (where, first)
        state = snapshot(target, modes=True)
        assert state in (self.before, self.after), (where, first, state)
        assert sweeper.recover(target) == {"status": 0, "calls": 0, "notes": [], "error": None}, where
        assert snapshot(target, modes=True) == state, where


@pytest.mark.parametrize("layout", ["fresh", "existing", "identical", "empty"])
def test_a_commit_killed_before_any_call_is_recovered_to_before_or_after(tmp_path, sweeper, layout):
    tree = Tree(tmp_path, layout)
    calls = CALLS[layout]
    assert sweeper.commit(tree.fresh(), tree.files) == {"status": 0, "calls": len(calls), "notes": [], "error": None}
    for at in range(1, len(calls) + 1):
        target = tree.fresh()
        killed = sweeper.commit(target, tree.files, at)
        assert killed["status"] == -9 and killed["calls"] == at, (at, killed)
        tree.settled(sweeper, target, f"killed before {calls[at - 1]} ({at})")


@pytest.mark.parametrize("layout, stride", [pytest.param("fresh", 3, id="fresh-every-3rd"),
                                            pytest.param("fresh", 1, id="fresh", marks=pytest.mark.slow),
                                            pytest.param("existing", 1, id="existing", marks=pytest.mark.slow),
                                            pytest.param("identical", 1, id="identical", marks=pytest.mark.slow)])
def test_a_recovery_killed_before_any_call_is_finished_by_the_next(tmp_path, sweeper, layout, stride):
    """A commit killed before call `at`, then its recovery killed before each of its calls: the next run finishes
    it (the default run takes every third commit call, and the last; make test-all every one)."""
    tree, calls, kills = Tree(tmp_path, layout), CALLS[layout], 0
    for at in sorted({*range(1, len(calls) + 1, stride), len(calls)}):
        target = tree.fresh()
        sweeper.commit(target, tree.files, at)
        steps = sweeper.recover(target)["calls"]
        for step in range(1, steps + 1):
            target = tree.fresh()
            sweeper.commit(target, tree.files, at)
            killed = sweeper.recover(target, step)
            assert killed["status"] == -9 and killed["calls"] == step, (at, step, killed)
            tree.settled(sweeper, target, f"commit killed before {calls[at - 1]} ({at}), recovery before {step}")
            kills += 1
    assert kills > len(calls) // stride


# --- Ctrl-C --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("at", range(1, len(CALLS["fresh"]) + 1))
def test_ctrl_c_during_a_commit_is_held_until_it_is_done(tmp_path, monkeypatch, at):
    target = build(tmp_path, "fresh")
    after = completed(tmp_path, "fresh")
    with pytest.raises(KeyboardInterrupt):
        commit_with(target, files_for(target, "fresh"), Faults(monkeypatch, at, mode="sigint"))
    monkeypatch.undo()
    assert snapshot(target, modes=True) == after, CALLS["fresh"][at - 1]


def test_ctrl_c_during_a_rollback_is_held_until_it_is_done(tmp_path, monkeypatch):
    target = build(tmp_path, "existing")
    before = snapshot(target, modes=True)
    at = CALLS["existing"].index(f"replace {COMMITTED}") + 1
    faults = Faults(monkeypatch, at, errno.EIO, sigint_at=at + 1)
    with pytest.raises((KeyboardInterrupt, OutputError)):
        commit_with(target, files_for(target, "existing"), faults)
    monkeypatch.undo()
    assert faults.count > at + 1 and snapshot(target, modes=True) == before
