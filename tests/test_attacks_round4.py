"""Attacks on the draft's weight-writing path (irsurgeon.draft.build.save_appended, irsurgeon.ir.streamed.Tail, the
journal's digest taken from the write: DirectoryTransaction.written) and on the target's annotation staged on a
thread beside the head (irsurgeon.core.concurrency.alongside), each stating a rule of docs/reliability.md or of the
docstrings of those modules.

Most cases patch a bundled fixture in-process with `build.DETACH_BYTES = 1`, so every constant of the draft takes
the appended path; the faults are made by wrapping the product's own calls (Tail's writes, its fsync thread, the
commit), the kills by a child process.
"""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import threading
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke, one_error
from irsurgeon.flows.standalone import save_draft
from lab.families import WRITABLE
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft import build
from irsurgeon.commit import transaction
from irsurgeon.ir import streamed
from irsurgeon.commit.journal_format import STAGE_DIR, staged

QWEN_HEAD_BIN = "openvino_mtp_model.bin"
QWEN_HEAD_XML = "openvino_mtp_model.xml"


@pytest.fixture(autouse=True)
def every_constant_appended(monkeypatch):
    monkeypatch.setattr(build, "DETACH_BYTES", 1)


def copy_target(tmp_path: Path, key: str = "qwen3_5") -> Path:
    target = tmp_path / f"{key}-target"
    shutil.copytree(FIXTURE_PAIRS[key][0], target)
    return target


def patch(target: Path, key: str = "qwen3_5", *extra):
    return invoke("patch", target, "--checkpoint", FIXTURE_PAIRS[key][1], *extra)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_fds() -> set[str]:
    return {f"{n} -> {os.readlink(f'/proc/self/fd/{n}')}" for n in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{n}")}


def hint_ended(seconds: float = 10) -> None:
    """Wait for the read-ahead hint's thread (irsurgeon.weights.prefetch: a daemon patch starts and never joins, by
    design) to end on its own; one still running after `seconds` is then listed by house_threads."""
    for t in threading.enumerate():
        if t.name == "irsurgeon-prefetch":
            t.join(seconds)


def house_threads() -> list[str]:
    """irsurgeon's threads still running, but the background fsync's (never joined: its own case below), once the
    read-ahead hint had its time to end (it may still be closing the checkpoint when a patch returns)."""
    hint_ended()
    return [t.name for t in threading.enumerate() if t.name.startswith("irsurgeon")
            and not t.name.startswith("irsurgeon-sync")]


def before_commit(monkeypatch, act) -> None:
    """Run act(tx) just before the transaction's commit (after every file was staged and checked)."""
    real = transaction.DirectoryTransaction.commit

    def commit(tx):
        act(tx)
        return real(tx)
    monkeypatch.setattr(transaction.DirectoryTransaction, "commit", commit)


def journaled(monkeypatch) -> list[dict]:
    """The entries of every journal written from now on."""
    entries: list[dict] = []
    real = transaction.DirectoryTransaction._write_journal

    def write(tx, found):
        entries.extend(found)
        return real(tx, found)
    monkeypatch.setattr(transaction.DirectoryTransaction, "_write_journal", write)
    return entries


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
    real = build.save_appended

    def save_then_rewrite(model, xml, stream=None, spend=False):
        saved = real(model, xml, stream, spend)
        flip_in_place(xml.with_suffix(".bin"), keep_times=True)  # no pause: the same clock tick, most likely
        return saved
    monkeypatch.setattr(build, "save_appended", save_then_rewrite)
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


def on_tail_write(monkeypatch, tmp_path, at: int, act) -> None:
    """act() at Tail's `at`-th write (-1: its last, counted on a probe patch), before the write."""
    real, calls = streamed.Tail._write, []
    monkeypatch.setattr(streamed.Tail, "_write", lambda self, piece: calls.append(1) or real(self, piece))
    assert patch(copy_target(tmp_path / "probe")).exit_code == 0
    n, count = (len(calls) if at == -1 else at), []

    def write(self, piece):
        count.append(1)
        if len(count) == n:
            act()
        return real(self, piece)
    monkeypatch.setattr(streamed.Tail, "_write", write)


def failing_tail_write(monkeypatch, tmp_path, at: int) -> None:
    """Tail's `at`-th write (-1: its last) fails with ENOSPC."""
    def no_space():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    on_tail_write(monkeypatch, tmp_path, at, no_space)


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


# --- the annotation staged on a thread beside the head ----------------------------------------------------------

# family key -> (the draft's .bin, the target .xml the annotation stages, the module holding stage_annotation)
ALONGSIDE = {"qwen3_5": (QWEN_HEAD_BIN, "openvino_language_model.xml", "irsurgeon.families.qwen35_mtp.patch"),
             "dflash": ("dflash_draft/openvino_model.bin", "openvino_model.xml", "irsurgeon.families.dflash.patch")}


def failing_annotation_write(monkeypatch, xml_name: str) -> None:
    """The staged copy of the target's .xml (the annotation's one write) fails with ENOSPC; the draft's own .xml
    (a staged name with a folder, or another name) is written."""
    real = Path.write_bytes

    def write_bytes(self, data):
        if self.name == xml_name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)
    monkeypatch.setattr(Path, "write_bytes", write_bytes)


@pytest.mark.parametrize("key", list(ALONGSIDE))
def test_an_annotation_that_fails_beside_a_head_that_succeeds_is_its_own_one_line(tmp_path, monkeypatch, key):
    """Rule: the annotation's failure is the patch's: one line naming the target's .xml, exit 1, nothing changed,
    and no line saying the target was annotated."""
    _, lm_xml, _ = ALONGSIDE[key]
    target = copy_target(tmp_path, key)
    failing_annotation_write(monkeypatch, lm_xml)
    before = snapshot(target)
    result = patch(target, key)
    error = one_error(result)
    assert f"{STAGE_DIR}/{lm_xml}: cannot write it: No space left on device" in error, error
    assert "annotated" not in result.stdout and snapshot(target) == before
    assert not (target / STAGE_DIR).exists() and house_threads() == []


@pytest.mark.parametrize("key", list(ALONGSIDE))
@pytest.mark.parametrize("annotation_fails", [pytest.param(False, marks=pytest.mark.slow), True],
                         ids=["annotation ok", "annotation fails too"])
def test_a_head_that_fails_beside_the_annotation_is_the_one_line_said(tmp_path, monkeypatch, key,
                                                                       annotation_fails):
    """Rule (irsurgeon.core.concurrency): the head's error comes first; the annotation's lines are said only when the
    head's block succeeded, so no line claims an annotation that was rolled back; nothing changed."""
    head_bin, lm_xml, _ = ALONGSIDE[key]
    target = copy_target(tmp_path, key)
    failing_tail_write(monkeypatch, tmp_path, 1)
    if annotation_fails:
        failing_annotation_write(monkeypatch, lm_xml)
    before = snapshot(target)
    result = patch(target, key)
    error = one_error(result)
    meant = f" (the new {head_bin})" if "/" in head_bin else ""  # a subfolder's file is named as the user knows it
    assert f"{STAGE_DIR}/{staged(head_bin)}{meant}: cannot write it: No space left" in error, error  # the failing file
    assert "annotated" not in result.stdout and snapshot(target) == before
    assert not (target / STAGE_DIR).exists() and house_threads() == []


def annotation_sending(monkeypatch, key: str, before_work) -> None:
    """The family's stage_annotation runs before_work() on its thread first."""
    import importlib
    module = importlib.import_module(ALONGSIDE[key][2])
    real = module.stage_annotation

    def stage_annotation(*args, **kwargs):
        before_work()
        return real(*args, **kwargs)
    monkeypatch.setattr(module, "stage_annotation", stage_annotation)


def module_of(key: str):
    import importlib
    return importlib.import_module(ALONGSIDE[key][2])


def wrapped(monkeypatch, module, name: str, before=None, after=None, ended=None) -> None:
    """module.name runs before() first, after() once it returned, and sets the event `ended` however it ends."""
    real = getattr(module, name)

    def call(*args, **kwargs):
        try:
            if before:
                before()
            value = real(*args, **kwargs)
            if after:
                after()
            return value
        finally:
            if ended is not None:
                ended.set()
    monkeypatch.setattr(module, name, call)


@pytest.mark.parametrize("key", list(ALONGSIDE))
def test_ctrl_c_during_the_heads_save_waits_for_the_annotation_and_nothing_changes(tmp_path, monkeypatch, key):
    """Rule: Ctrl-C sent while the head is being saved and the annotation is being staged ends the patch with
    `Error: interrupted`, exit 130, the target as before, no staging folder and no thread left."""
    target = copy_target(tmp_path, key)
    saving, sent = threading.Event(), threading.Event()

    def ctrl_c():
        saving.wait(10)
        os.kill(os.getpid(), signal.SIGINT)
        sent.set()
    wrapped(monkeypatch, module_of(key), "stage_ir", before=lambda: (saving.set(), sent.wait(10)))
    wrapped(monkeypatch, module_of(key), "stage_annotation", before=ctrl_c)
    before = snapshot(target)
    result = patch(target, key)
    assert result.exit_code == 130 and result.stderr.strip() == "Error: interrupted", result.output
    assert snapshot(target) == before and not (target / STAGE_DIR).exists() and house_threads() == []




@pytest.mark.parametrize("key", [k if k == "qwen3_5" else pytest.param(k, marks=pytest.mark.slow) for k in ALONGSIDE])
def test_ctrl_c_while_the_head_waits_for_the_annotation_still_waits_for_it(tmp_path, monkeypatch, key):
    """Rule (irsurgeon.core.concurrency): leaving the block waits for the thread whatever happens, since it may be
    writing into the staging folder the block's error is about to remove. Ctrl-C once the head is saved and
    checked, while the annotation is still being staged: the thread is done when patch ends, nothing changed."""
    target = copy_target(tmp_path, key)
    checked, done, ended = threading.Event(), threading.Event(), threading.Event()

    def ctrl_c_then_work():
        checked.wait(10)
        threading.Event().wait(0.2)  # the main thread reaches the join
        os.kill(os.getpid(), signal.SIGINT)
        threading.Event().wait(0.5)  # the annotation goes on after it

    wrapped(monkeypatch, module_of(key), "smoke_test", after=checked.set)
    wrapped(monkeypatch, module_of(key), "stage_annotation", before=ctrl_c_then_work, after=done.set, ended=ended)
    before = snapshot(target)
    result = patch(target, key)
    finished = ended.is_set()
    ended.wait(10)  # (Thread.join cannot wait for it: the interrupted join marked the running thread stopped)
    assert result.exit_code == 130 and result.stderr.strip() == "Error: interrupted", result.output
    assert finished, "patch returned while the annotation thread was still staging"
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()


# --- save_appended on models a user builds: names, collisions, shared buffers, the model afterwards -------------


def graph(model: ov.Model) -> dict:
    """Every op by name: type, outputs (type, shape), inputs (producer name and port), a constant's bytes."""
    return {op.get_friendly_name(): (
        op.get_type_name(), [(str(o.get_element_type()), str(o.get_partial_shape())) for o in op.outputs()],
        [(i.get_source_output().get_node().get_friendly_name(), i.get_source_output().get_index())
         for i in op.inputs()],
        op.get_data().tobytes() if op.get_type_name() == "Constant" else None) for op in model.get_ops()}


def chain_model(names: list[str], seed: int = 0, input_name: str = "x", output_name: str = "y") -> ov.Model:
    """x [1, 8] -> MatMul by one [8, 8] constant per name, in order -> y."""
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name=input_name)
    x.output(0).get_tensor().set_names({input_name})
    rng, out = np.random.default_rng(seed), x.output(0)
    for name in names:
        c = ov.opset13.constant(rng.standard_normal((8, 8)).astype(np.float32))
        c.set_friendly_name(name)
        out = ov.opset13.matmul(out, c, False, False).output(0)
    result = ov.opset13.result(out)
    result.set_friendly_name(output_name)
    result.output(0).get_tensor().set_names({output_name})
    return ov.Model([result], [x], "chain")


def theirs_and_ours(model: ov.Model, tmp_path: Path) -> tuple[ov.Model, ov.Model]:
    build.name_anonymous_nodes(model)  # as save_draft does first
    ov.save_model(model, tmp_path / "saved.xml", compress_to_fp16=False)
    xml = save_draft(model, tmp_path / "out")
    return ov.Core().read_model(tmp_path / "saved.xml"), ov.Core().read_model(xml)


SPECIAL = {"quote": 'w"q', "amp": "a&b", "lt-gt": "<w>", "apos": "it's", "tab": "a\tb", "newline": "a\nb",
           "cr": "a\rb", "non-ascii": "poids.ß.重み", "cdata end": "x]]>y", "spaces": " a  b ",
           "entity-like": "&amp;", "regex-like": 'w" type="Parameter'}


def appended_names(monkeypatch) -> list[str]:
    names, real = [], streamed.Tail.append
    monkeypatch.setattr(streamed.Tail, "append", lambda self, name, *a: names.append(name) or real(self, name, *a))
    return names


@pytest.mark.parametrize("name", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_weight_named_with_xml_special_characters_is_written_as_openvino_writes_it(tmp_path, monkeypatch, name):
    """Rule: save_draft saves any model openvino saves, as openvino would (the placeholder's layer is found
    by its name as the serializer escaped it): the same graph read back, the same bytes in each constant."""
    model = chain_model([name, "plain"])
    appended = appended_names(monkeypatch)
    theirs, ours = theirs_and_ours(model, tmp_path)
    assert graph(ours) == graph(theirs) and sorted(appended) == sorted([name, "plain"])
    assert (tmp_path / "out" / QWEN_HEAD_XML).read_text().count('type="Parameter"') == 1  # the input alone


@pytest.mark.parametrize("clash", ["input", "output", "both"])
def test_a_weight_named_as_a_graph_input_or_output_is_written_as_openvino_writes_it(tmp_path, clash):
    """Rule: a constant whose name is also the name of the model's input or output (a name a placeholder would
    share) is left to openvino's serializer; the model reads back with the same inputs and graph."""
    names = {"input": ["x", "w"], "output": ["y", "w"], "both": ["x", "y"]}[clash]
    model = chain_model(names)
    theirs, ours = theirs_and_ours(model, tmp_path)
    assert graph(ours) == graph(theirs)
    assert [p.get_friendly_name() for p in ours.get_parameters()] == ["x"]


def infer(model: ov.Model) -> np.ndarray:
    x = np.random.default_rng(9).standard_normal((1, 8)).astype(np.float32)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled.create_infer_request().infer({"x": x})[0]


def test_save_mtp_model_leaves_the_model_whole_for_a_second_save_and_for_inference(tmp_path):
    """Rule (save_draft): the model stays whole: the same graph and outputs afterwards, and saving it again
    writes byte-identical files."""
    model = chain_model(["a", "b", "c"])
    build.name_anonymous_nodes(model)
    before, y = graph(model), infer(model)
    first = save_draft(model, tmp_path / "one")
    second = save_draft(model, tmp_path / "two")
    assert graph(model) == before and np.array_equal(infer(model), y)
    assert [p.read_bytes() for p in (first, first.with_suffix(".bin"))] == \
        [p.read_bytes() for p in (second, second.with_suffix(".bin"))]


def test_a_failed_save_mtp_model_leaves_the_model_whole_and_the_next_save_as_the_first(tmp_path, monkeypatch):
    """Rule: a save that fails in the middle of the appended weights (ENOSPC) raises one OutputError, creates no
    output folder, and the model is as it was: it infers the same and the next save writes what a clean one does."""
    from irsurgeon.core.errors import OutputError
    model = chain_model(["a", "b", "c"])
    build.name_anonymous_nodes(model)
    clean = save_draft(model, tmp_path / "clean")
    before, y = graph(model), infer(model)
    real, count = streamed.Tail._write, []

    def write(self, piece):
        count.append(1)
        if len(count) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, piece)
    monkeypatch.setattr(streamed.Tail, "_write", write)
    with pytest.raises(OutputError, match="No space left on device"):
        save_draft(model, tmp_path / "failed")
    monkeypatch.setattr(streamed.Tail, "_write", real)
    assert not (tmp_path / "failed").exists() and graph(model) == before and np.array_equal(infer(model), y)
    again = save_draft(model, tmp_path / "again")
    assert again.read_bytes() == clean.read_bytes() and again.with_suffix(".bin").read_bytes() == \
        clean.with_suffix(".bin").read_bytes()


# --- stage_ir's spent model: each constant freed as written, the digest still the file's ------------------------


def shared_chain(arrays: list[np.ndarray]) -> ov.Model:
    """x [1, 8] -> MatMul by a constant over each array's own memory (no copy) -> y."""
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    out = x.output(0)
    for i, a in enumerate(arrays):
        c = ov.op.Constant(a, shared_memory=True)
        c.set_friendly_name(f"w{i}")
        out = ov.opset13.matmul(out, c, False, False).output(0)
    result = ov.opset13.result(out)
    result.output(0).get_tensor().set_names({"y"})
    return ov.Model([result], [x], "shared")


def staged_into(directory: Path, model: ov.Model) -> Path:
    """stage_ir of the model as openvino_mtp_model.xml into a transaction on directory, committed."""
    directory.mkdir(exist_ok=True)
    with transaction.DirectoryTransaction(directory, writable=WRITABLE) as tx:
        build.stage_ir(tx, QWEN_HEAD_XML, model)
        tx.commit()
    return directory / QWEN_HEAD_XML


def test_each_constant_is_freed_as_soon_as_it_is_written(tmp_path):
    """Rule (save_appended's spend): a constant's buffer is released once it is written and hashed: when the k-th
    constant is appended, every one appended before it but the AHEAD pieces (and their padding) the hash may lag
    behind is gone from memory, and all are once the save is done."""
    import weakref
    n = 12
    freed: set[int] = set()
    arrays = [np.full((8, 8), i, np.float32) for i in range(n)]
    for i in range(n):
        weakref.finalize(arrays[i], freed.add, i)
    model = shared_chain(arrays)
    del arrays
    order, seen = [], []
    real = streamed.Tail.append

    def append(self, name, *args):
        order.append(int(name[1:]))
        seen.append(set(freed))
        return real(self, name, *args)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(streamed.Tail, "append", append)
        xml = staged_into(tmp_path / "d", model)
    assert sorted(order) == list(range(n))
    late = {k: sorted(set(order[:max(0, k - streamed.AHEAD - 1)]) - seen[k]) for k in range(n)}
    assert all(not v for v in late.values()), late
    assert freed == set(range(n))
    got = {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
           if op.get_type_name() == "Constant"}
    assert all(np.array_equal(got[f"w{i}"], np.full((8, 8), i, np.float32)) for i in range(n))


def test_the_journaled_digest_of_a_spent_model_written_in_tiny_pieces_is_the_files(tmp_path, monkeypatch):
    """Rule: with every constant released as soon as it is written, the hashing thread (lagging AHEAD pieces) still
    hashes the bytes written, not freed memory: the journal's sha256 is the committed .bin's."""
    monkeypatch.setattr(streamed, "PIECE", 24)  # several pieces per constant, many in flight
    rng = np.random.default_rng(4)
    model = shared_chain([rng.standard_normal((8, 8)).astype(np.float32) for _ in range(10)])
    entries = journaled(monkeypatch)
    xml = staged_into(tmp_path / "d", model)
    entry = next(e for e in entries if e["name"] == QWEN_HEAD_BIN)
    assert entry["new"]["sha256"] == sha(xml.with_suffix(".bin"))


@pytest.mark.parametrize("layout", ["one buffer twice", "a view into another", "one buffer reshaped"])
def test_constants_sharing_memory_are_each_staged_with_their_own_values(tmp_path, layout):
    """Rule: constants over one buffer (written once), over part of another's buffer, or over one buffer in two
    shapes each read back with their own values when the model is spent as it is written (the first one freed
    before the next is looked up)."""
    base = np.random.default_rng(6).standard_normal((16, 8)).astype(np.float32)
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    if layout == "one buffer twice":
        parts = [base[:8], base[:8]]
    elif layout == "a view into another":
        parts = [base[:8], base[4:12]]
    else:
        parts = [base[:8], base[:8].reshape(4, 16)]
    consts = [ov.op.Constant(np.ascontiguousarray(p), shared_memory=True) for p in parts]
    out = ov.opset13.matmul(x, consts[0], False, False)
    other = consts[1] if consts[1].get_shape() == consts[0].get_shape() else ov.opset13.reshape(
        consts[1], ov.opset13.constant(np.array([8, 8], np.int64)), False)
    out = ov.opset13.matmul(out, other, False, True)
    for i, c in enumerate(consts):
        c.set_friendly_name(f"w{i}")
    result = ov.opset13.result(out)
    result.output(0).get_tensor().set_names({"y"})
    model = ov.Model([result], [x], "m")
    want = {f"w{i}": np.array(p) for i, p in enumerate(parts)}
    del consts, other, out
    xml = staged_into(tmp_path / "d", model)
    got = {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
           if op.get_type_name() == "Constant" and op.get_friendly_name() in want}
    assert sorted(got) == sorted(want) and all(np.array_equal(got[n], want[n]) for n in want)


# --- whole patches with every constant appended: f16 fallbacks, compressed heads, every family ------------------


def head_constants(xml: Path) -> dict[str, np.ndarray]:
    return {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
            if op.get_type_name() == "Constant"}


def test_a_weight_kept_f32_in_an_f16_head_is_appended_with_its_exact_values(tmp_path):
    """Rule: a weight whose values overflow f16 stays f32 in an f16 head (and is said); appended, it reads back
    as an f32 constant holding the checkpoint's values exactly, beside f16 neighbours."""
    from helpers.checkpoints import read_tensors, write_variant
    from irsurgeon.weights.safetensors_io import bf16_to_f32, f32_to_bf16
    tensors = read_tensors(FIXTURE_PAIRS["qwen3_5"][1])
    raw, dtype = tensors["mtp.fc.weight"]
    values = bf16_to_f32(raw).copy()
    values[0, :4] = [1.0e5, -3.0e6, 7.0e4, 1.5e9]  # beyond f16's 65504
    tensors["mtp.fc.weight"] = (f32_to_bf16(values), dtype)
    ckpt = write_variant(FIXTURE_PAIRS["qwen3_5"][1], tmp_path / "ckpt", tensors)
    target = copy_target(tmp_path)
    result = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert "mtp.fc.weight" in result.output  # said
    got = head_constants(target / QWEN_HEAD_XML)
    assert got["mtp.fc.weight"].dtype == np.float32
    assert np.array_equal(got["mtp.fc.weight"], bf16_to_f32(f32_to_bf16(values)))
    assert got["mtp.layers.0.self_attn.q_proj.weight"].dtype == np.float16


KEEP = {("qwen3_5", "f16"), ("gemma4", "int4"), ("dflash", "f32")}  # in the default tier; make test-all runs all


@pytest.mark.parametrize("key, fmt", [pytest.param(k, f, marks=() if (k, f) in KEEP else pytest.mark.slow)
                                      for k, f in [("qwen3_5", "f16"), ("qwen3_5", "int8"), ("gemma4", "int4"),
                                                   ("gemma4", "f16"), ("dflash", "int8"), ("dflash", "f32")]])
def test_a_patch_with_every_constant_appended_is_the_patch_openvino_would_have_written(tmp_path, monkeypatch, key,
                                                                                       fmt):
    """Rule: appending the weights changes where bytes sit in the .bin, never the head: a patch with every constant
    appended (DETACH_BYTES = 1) passes its verify and holds the graph and constants of one with none appended."""
    ours, theirs = copy_target(tmp_path / "ours", key), copy_target(tmp_path / "theirs", key)
    assert patch(ours, key, "--weight-format", fmt).exit_code == 0
    monkeypatch.setattr(build, "DETACH_BYTES", 1 << 62)
    assert patch(theirs, key, "--weight-format", fmt).exit_code == 0
    pristine, patched = snapshot(FIXTURE_PAIRS[key][0]), snapshot(theirs)
    drafts = [rel for rel, h in patched.items() if rel.endswith(".xml") and pristine.get(rel) != h]
    assert drafts
    for rel in drafts:
        assert graph(ov.Core().read_model(ours / rel)) == graph(ov.Core().read_model(theirs / rel)), rel
    assert invoke("verify", ours).exit_code == 0


# --- memory of a real-sized head, and kills, in child processes (slow) --------------------------------------------

# Runs argv[3:] as the irsurgeon CLI and writes to argv[1] the resident set just before and after the head's save
# (stage_ir, as the Qwen3.5 flow calls it) and the peak (VmHWM: the child's own pages, not the forking parent's).
RSS_CHILD = """
import atexit, sys
def status(key):
    with open("/proc/self/status") as s:
        return int(next(l for l in s if l.startswith(key)).split()[1]) * 1024
out = open(sys.argv[1], "w")
atexit.register(lambda: out.write(f"peak {status('VmHWM')}\\n") or out.close())
import openvino, nncf
if sys.argv[2] == "patch":
    from irsurgeon.families.qwen35_mtp import patch as p
    stage = p.stage_ir
    def stage_ir(*a):
        before = status("VmRSS")
        xml = stage(*a)
        out.write(f"save {before} {status('VmRSS')}\\n")
        return xml
    p.stage_ir = stage_ir
    sys.argv = ["irsurgeon"] + sys.argv[3:]
    from irsurgeon.cli import main
    main()
"""


@pytest.mark.slow
def test_a_real_sized_heads_matrices_are_never_held_whole(tmp_path):
    """Rule (build.Stream: an uncompressed patch streams the draft's matrices into the staged .bin block by block):
    patching a 172 MB f16 head, the resident set before the save holds none of the head (a model of placeholders),
    across the save it grows by far less than the head's bytes (the blocks in flight and what the allocator keeps),
    and the patch's peak above the imports (the one-step check's compile of the staged copy) stays within 1.5x the
    head, as before the matrices were streamed."""
    import subprocess
    import sys
    from lab.procs import env
    from irsurgeon.synth import synthesize
    from irsurgeon.synth.registry import default_spec
    spec = default_spec("qwen35").with_(hidden=2048, heads=16, kv_heads=2, head_dim=256, intermediate=8192,
                                        vocab=1024, layers=1, full_attention_interval=1, vlm=False, bigram=False)
    pair = synthesize(tmp_path / "big", "qwen35", spec, seed=0)

    def child(*args) -> dict[str, list[int]]:
        report = tmp_path / f"rss-{args[0] if args else 'base'}"
        run = subprocess.run([sys.executable, "-c", RSS_CHILD, str(report), *args], env=env(), capture_output=True,
                             text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        return {k: [int(v) for v in rest] for k, *rest in (ln.split() for ln in report.read_text().splitlines())}
    base = child("none")["peak"][0]
    got = child("patch", "patch", str(pair.target), "--checkpoint", str(pair.ckpt), "--weight-format", "f16")
    head = (pair.target / QWEN_HEAD_BIN).stat().st_size
    before, after = got["save"]
    shown = f"{before / 1e6:.0f} MB -> {after / 1e6:.0f} MB, peak {got['peak'][0] / 1e6:.0f} MB, base " \
            f"{base / 1e6:.0f} MB, head {head / 1e6:.0f} MB"
    assert before - base < 0.25 * head and after - before < 0.25 * head, shown
    assert (got["peak"][0] - base) / head <= 1.5, shown


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


# --- more of the same attacks: the head's .xml, Ctrl-C inside the writes, the fsync thread after a patch ----------


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
    assert result.exit_code == 130 and result.stderr.strip() == "Error: interrupted", result.output
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
