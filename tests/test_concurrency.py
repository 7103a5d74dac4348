"""irsurgeon.core.concurrency.alongside: the work beside the block is always joined, the block's error comes first, the
work's lines are said in order only when the block succeeded; and so in a patch, whose target annotation is staged on
a thread beside the head (a failure of either, Ctrl-C while both run)."""
from __future__ import annotations

import errno
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from helpers.cli import one_error
from helpers.leftovers import house_threads
from helpers.staging import QWEN_HEAD_BIN, copy_target, failing_tail_write, patch
from lab.dirsnap import snapshot
from irsurgeon.commit.journal_format import STAGE_DIR, staged
from irsurgeon.core.concurrency import alongside
from helpers.cli import PATCH_INTERRUPTED


def test_the_works_lines_and_value_come_after_the_block_in_order():
    said, order = [], []

    def work(say):
        for i in range(3):
            say(f"line {i}")
        order.append("work")
        return 42

    with alongside(work) as other:
        order.append("block")
    assert other.result(said.append) == 42 and said == ["line 0", "line 1", "line 2"]


def test_a_failing_block_waits_for_the_work_and_its_error_comes_first():
    finished = threading.Event()

    def work(say):
        time.sleep(0.2)
        say("annotated")
        finished.set()
        raise RuntimeError("the work failed too")

    with pytest.raises(KeyboardInterrupt):
        with alongside(work):
            raise KeyboardInterrupt
    assert finished.is_set()  # joined before the interruption went on: nothing writes after the caller cleans up


def test_the_works_error_is_raised_by_result_with_its_lines_said_first():
    said = []

    def work(say):
        say("planned")
        raise ValueError("bad annotation")

    with alongside(work) as other:
        pass
    with pytest.raises(ValueError, match="bad annotation"):
        other.result(said.append)
    assert said == ["planned"]


# --- the target's annotation staged on a thread beside the head, in a real patch ------------------------------------
# Each patches a bundled fixture in-process (tests/helpers/staging.py) with every constant of the draft appended by
# irsurgeon (the `every_constant_appended` fixture of conftest.py); the faults wrap the product's own calls.

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


@pytest.mark.usefixtures("every_constant_appended")
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


@pytest.mark.usefixtures("every_constant_appended")
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


@pytest.mark.usefixtures("every_constant_appended")
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
    assert result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED, result.output
    assert snapshot(target) == before and not (target / STAGE_DIR).exists() and house_threads() == []


@pytest.mark.usefixtures("every_constant_appended")
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
    assert result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED, result.output
    assert finished, "patch returned while the annotation thread was still staging"
    assert snapshot(target) == before and not (target / STAGE_DIR).exists()
