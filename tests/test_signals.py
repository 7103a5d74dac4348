"""Ctrl-C is a KeyboardInterrupt even when a library left the main thread a stale alternate signal stack (as
openvino-genai 2026.4.1 does once a VLMPipeline has run): irsurgeon.core.signals keeps SIGINT off that stack. A Ctrl-C
during a native call stops it at its next check; during a patch, before its commit it is a plain interruption, and
once the commit is done the patch says it is complete."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers.cli import invoke
from lab.demo import DEMO_CKPT, DEMO_TARGET, writable_copy
from lab.dirsnap import snapshot
from lab.families import FAMILIES as FAMILY_PARAMS
from helpers.cli import PATCH_INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]

STALE_STACK = r'''
import ctypes, mmap, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
class stack_t(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
size = 1 << 16
region = libc.mmap(None, size, 3, 0x22, -1, 0)            # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
st = stack_t(region, 0, size)
assert libc.sigaltstack(ctypes.byref(st), None) == 0
libc.munmap(ctypes.c_void_p(region), ctypes.c_size_t(size))  # the alternate stack is gone, still registered
mode = sys.argv[1]
if mode == "transaction":
    from irsurgeon.commit.transaction import _deferred_sigint
    try:
        with _deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
elif mode == "cli":
    from irsurgeon.cli import _watch_sigint
    _watch_sigint()
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
'''


def run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STALE_STACK, mode], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_ctrl_c_in_a_commit_survives_a_stale_alternate_stack():
    proc = run("transaction")
    assert proc.returncode == 0 and proc.stdout.strip() == "KeyboardInterrupt", (proc.returncode, proc.stderr)


def test_ctrl_c_under_the_cli_survives_a_stale_alternate_stack():
    proc = run("cli")
    assert proc.returncode == 0 and proc.stdout.strip() == "KeyboardInterrupt", (proc.returncode, proc.stderr)


def test_the_cli_and_the_commit_keep_sigint_off_the_alternate_stack():
    from irsurgeon.core import signals
    from irsurgeon.cli import _watch_sigint
    from irsurgeon.commit.transaction import _deferred_sigint

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert signals.flags() & signals.SA_ONSTACK  # CPython's own registration
        with _deferred_sigint():
            assert not signals.flags() & signals.SA_ONSTACK
        assert not signals.flags() & signals.SA_ONSTACK
        _watch_sigint()
        assert not signals.flags() & signals.SA_ONSTACK
    finally:
        signal.signal(signal.SIGINT, previous)


# --- Ctrl-C while a C++ call holds the main thread (signals.NativeCalls) --------------------------------------------

NATIVE = r'''
import signal, sys, threading, time
from irsurgeon.core.signals import NativeCalls, interrupted
seconds, kills = float(sys.argv[1]), int(sys.argv[2])
start = time.monotonic()
try:
    with NativeCalls():
        for _ in range(kills):  # Ctrl-C from another thread while the main thread waits, as in a C++ call
            threading.Timer(0.3 * (_ + 1), signal.raise_signal, (signal.SIGINT,)).start()
        while time.monotonic() - start < seconds and not interrupted():  # the streamer's view: cancel at once
            time.sleep(0.05)
        time.sleep(seconds if kills > 1 else 0)  # a call that does not look at interrupted()
    print("finished")
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {time.monotonic() - start:.1f} s")
'''


def native(seconds: float, kills: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NATIVE, str(seconds), str(kills)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_ctrl_c_during_a_native_call_stops_it_at_its_next_check_without_a_notice():
    proc = native(20, 1)
    assert proc.returncode == 0 and proc.stdout.startswith("KeyboardInterrupt after"), (proc.stdout, proc.stderr)
    assert float(proc.stdout.split()[2]) < 10 and proc.stderr == ""  # left at once: no notice needed


def test_a_second_ctrl_c_during_a_long_native_call_exits_at_once_with_130_after_the_notice():
    proc = native(30, 2)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 130 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert lines == ["Error: interrupted"] or lines == [signals_notice(), "Error: interrupted"], lines


def test_two_ctrl_c_read_by_the_watcher_at_once_exit_with_130(monkeypatch):
    """Broke (fixed): the watcher counted one Ctrl-C per read of the wakeup pipe, so two pressed before it ran
    (a loaded machine, or the main thread holding the GIL in a C++ call) were one, and the second did not exit."""
    from irsurgeon.core.signals import NativeCalls

    def exit_(code):
        raise SystemExit(code)
    monkeypatch.setattr(os, "_exit", exit_)
    calls = NativeCalls()
    calls._read, write = os.pipe()
    calls._left = threading.Event()
    calls._left.set()  # the block already left: no notice to wait for
    os.write(write, bytes([signal.SIGINT, signal.SIGINT]))
    os.close(write)  # then the pipe ends: a watcher that did not exit returns
    try:
        with pytest.raises(SystemExit) as done:
            calls._watch()
    finally:
        os.close(calls._read)
    assert done.value.code == 130 and calls.count == 2


def signals_notice() -> str:
    from irsurgeon.core.signals import NativeCalls
    return NativeCalls.FIRST


def test_the_block_restores_the_sigint_handler_and_wakeup_fd():
    from irsurgeon.core.signals import NativeCalls
    before = signal.getsignal(signal.SIGINT)
    with NativeCalls():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before
    assert signal.set_wakeup_fd(-1) == -1  # none left behind


@pytest.mark.slow
@pytest.mark.genai
def test_ctrl_c_during_genai_generation_ends_the_command_at_once_with_130(tmp_path):
    import time

    from lab.demo import patch_demo

    target = patch_demo(tmp_path / "demo")
    proc = subprocess.Popen([sys.executable, "-m", "irsurgeon", "verify", str(target), "--genai", "--prompts", "3",
                             "--max-new-tokens", "1500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen = []
    for line in proc.stdout:  # the pipelines load, then the first generation of 1500 tokens runs
        seen.append(line)
        if line.startswith("equivalence: loading"):
            break
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    runs = [ln for ln in seen + out.splitlines() if ln.startswith("prompt ")]
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "Error: interrupted", (proc.returncode, err)
    assert "Traceback" not in err and len(runs) < 12, runs  # stopped in the equivalence run, not after it


# --- Ctrl-C during a patch: once the commit is done, the patch is complete and said so -----------------------------

def interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.usefixtures("no_hang")
def test_ctrl_c_during_the_check_after_the_commit_says_the_patch_is_complete(tmp_path, monkeypatch):
    import irsurgeon.flows.patch as flow

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    monkeypatch.setattr(flow, "confirm", interrupt)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 130 and lines == [
        f"Error: interrupted: {target}: the patch is complete (committed openvino_mtp_model.bin, "
        f"openvino_mtp_model.xml, openvino_language_model.xml); the check of it after the commit was interrupted: "
        f"irsurgeon verify {target} runs it"], result.output
    monkeypatch.undo()
    assert invoke("verify", target).exit_code == 0


@pytest.mark.usefixtures("no_hang")
def test_ctrl_c_held_through_the_commit_says_the_patch_is_complete(tmp_path, monkeypatch):
    from irsurgeon.commit.transaction import DirectoryTransaction

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    commit = DirectoryTransaction.commit

    def commit_then_ctrl_c(self):  # as _deferred_sigint re-delivers a Ctrl-C held while the commit ran
        commit(self)
        raise KeyboardInterrupt
    monkeypatch.setattr(DirectoryTransaction, "commit", commit_then_ctrl_c)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    assert result.exit_code == 130 and "the patch is complete (committed " in result.stderr, result.output


@pytest.mark.usefixtures("no_hang")
def test_ctrl_c_before_the_commit_is_a_plain_interruption(tmp_path, monkeypatch):
    from irsurgeon.commit.transaction import DirectoryTransaction

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    before = snapshot(target)
    monkeypatch.setattr(DirectoryTransaction, "commit", interrupt)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    assert result.exit_code == 130 and result.stderr.strip() == PATCH_INTERRUPTED and snapshot(target) == before


# --- Ctrl-C from the first instruction to the last (lab.interrupts) -------------------------------------------------

def judged(run, before: str, complete: str, json_out: bool = False) -> str:
    """The rule of every end under Ctrl-C: exit 130 with one `Error:` line and the target as it was or complete,
    or (a Ctrl-C once the process only exits) exit 0, no error, the target complete; never a traceback; with
    --json, stdout is one document."""
    err = run.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err[-800:]
    errors = [line for line in err.splitlines() if line.startswith("Error")]
    state = snapshot_of(run.target)
    if run.returncode == 130:
        assert len(errors) == 1 and state in (before, complete), (errors, state == before)
        if errors[0].startswith("Error: interrupted after the command completed") or "patch is complete" in errors[0]:
            assert state == complete
    else:
        assert run.returncode == 0 and not errors and state == complete, (run.returncode, err[-400:])
    if json_out:
        import json
        json.loads(run.stdout)  # one document, whatever the end
    return errors[0] if errors else ""


def snapshot_of(path: Path) -> str:
    from lab.dirsnap import digest
    return digest(path)


def interrupt_patch(family, tmp_path, where: str, points, json_out: bool = False) -> list[str]:
    from lab.families import FIXTURE_PAIRS
    from lab.interrupts import count_events, interrupted_run, sample
    import shutil
    source, ckpt = FIXTURE_PAIRS[family.key]
    target = tmp_path / where.lower() / "t"  # a folder of its own: a test may interrupt at the start and at the end
    target.parent.mkdir(exist_ok=True)
    args = ["patch", target, "--checkpoint", ckpt, *(["--json"] if json_out else [])]
    shutil.copytree(source, target)
    before = snapshot_of(target)
    total, run = count_events(args, where)
    assert run.returncode == 0, run.stderr
    complete = snapshot_of(target)
    said = []
    for at in points(total, sample):
        shutil.rmtree(target)
        shutil.copytree(source, target)
        run = interrupted_run(args, at, where)
        run.target = target
        said.append(judged(run, before, complete, json_out))
    return said


@pytest.mark.parametrize("family", [f for f in FAMILY_PARAMS if f.id == "dflash"])
def test_ctrl_c_at_any_moment_from_the_first_instruction_is_one_line_and_130(family, tmp_path):
    said = interrupt_patch(family, tmp_path, "AT", lambda total, sample: sample(total, 3, factor=4))  # the slow
    # tier below: every family, twice as dense
    assert said[0].startswith("Error: interrupted") and any("patch is complete" in s for s in said), said


@pytest.mark.parametrize("family", [f for f in FAMILY_PARAMS if f.id == "qwen3_5"])
def test_ctrl_c_while_the_command_ends_says_it_completed_and_json_stays_one_document(family, tmp_path):
    said = interrupt_patch(family, tmp_path, "END", lambda total, sample: sample(total, 2, factor=4), json_out=True)
    assert said[0] == "Error: interrupted after the command completed: what it did is done", said


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILY_PARAMS)
def test_ctrl_c_at_any_moment_of_every_familys_patch(family, tmp_path):
    interrupt_patch(family, tmp_path, "AT", lambda total, sample: sample(total, 12))
    interrupt_patch(family, tmp_path, "END", lambda total, sample: range(1, total + 1, 3))


HELD = r'''
import os, signal, sys, time
from irsurgeon.core.signals import NativeCalls, deferred_sigint
try:
    with NativeCalls(raising=True):
        with deferred_sigint():  # a commit: two Ctrl-C inside it end nothing before it is done
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.5)  # the watcher has read both presses by now
            print("commit done", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt after the commit")
'''


def test_a_second_ctrl_c_never_exits_at_once_inside_a_held_commit():
    proc = subprocess.run([sys.executable, "-c", HELD], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.splitlines() == ["commit done", "KeyboardInterrupt after the commit"], proc.stdout


RAISING = r'''
import os, signal, threading, time
from irsurgeon.core.signals import NativeCalls
start = time.monotonic()
try:
    with NativeCalls(raising=True):
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        while time.monotonic() - start < 20:  # Python steps between C++ calls, as nncf's compression loop
            sum(range(10000))
    print("finished")
except KeyboardInterrupt:
    print(f"KeyboardInterrupt after {time.monotonic() - start:.1f} s")
'''


def test_a_raising_block_stops_at_the_next_python_step_not_when_it_is_left():
    proc = subprocess.run([sys.executable, "-c", RAISING], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout.startswith("KeyboardInterrupt after"), (proc.stdout, proc.stderr)
    assert float(proc.stdout.split()[2]) < 10


FLAG_SETTER = r'''
import ctypes, sys
def hook(event, args):
    if event == "open" and str(args[0]).endswith("config.json") and not getattr(hook, "done", False):
        hook.done = True  # a library's PyRun_* call a Ctrl-C left, its KeyboardInterrupt handled: CPython's flag is set
        ctypes.pythonapi.PyRun_SimpleString(b"raise KeyboardInterrupt")
sys.addaudithook(hook)
'''


def test_a_handled_interrupt_inside_a_library_never_turns_the_exit_into_death_by_sigint(tmp_path):
    """CPython 3.11 kills a `python -m` run with SIGINT at exit once any PyRun_* code let a KeyboardInterrupt out
    (_Py_UnhandledKeyboardInterrupt), however the program went on: the command's own exit code must stand."""
    (tmp_path / "sitecustomize.py").write_text(FLAG_SETTER)
    proc = subprocess.run([sys.executable, "-m", "irsurgeon", "show", str(DEMO_TARGET), "--json"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert "KeyboardInterrupt" in proc.stderr  # the library's own report of it: the flag was set
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-300:])


def test_ctrl_c_while_the_cli_imports_with_json_still_prints_its_document(tmp_path):
    from lab.interrupts import interrupted_run
    run = interrupted_run(["show", DEMO_TARGET, "--json"], 3)  # the 3rd audit event after irsurgeon.entry's import
    assert run.returncode == 130 and run.stderr.strip() == "Error: interrupted", run.stderr
    import json
    assert json.loads(run.stdout) == {"ok": False, "command": "show", "result": None, "error": "interrupted",
                                      "exit_code": 130}


def test_a_ctrl_c_a_native_call_turned_into_its_own_error_is_still_an_interruption(tmp_path, monkeypatch):
    """pybind11 turns a KeyboardInterrupt raised while a C++ call (openvino's save_model, read_model) runs Python code
    into a RuntimeError ("Unable to cast Python instance ..."), which irsurgeon reports as its own error on the staged
    file: after a Ctrl-C that is `Error: interrupted` and 130, not exit 1 naming a file."""
    import time
    import irsurgeon.flows.patch as flow
    from irsurgeon.core.errors import IRError

    def converted(family, staging):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        except KeyboardInterrupt:
            raise IRError("t/.irsurgeon-staging/x.xml: the IR written does not read back: Unable to cast") from None
        raise AssertionError("no SIGINT arrived")
    monkeypatch.setattr(flow, "build", converted)
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", DEMO_CKPT, "--json")
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert result.exit_code == 130 and errors == [PATCH_INTERRUPTED], result.stderr
    assert snapshot(target) == before


IGNORED = r'''
import os, signal, time
from irsurgeon.core.signals import NativeCalls
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as `nohup` or a shell's `&` starts a process
with NativeCalls(raising=True):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.5)
print("went on", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
'''


def test_a_process_started_with_ctrl_c_ignored_keeps_ignoring_it_in_a_native_block():
    proc = subprocess.run([sys.executable, "-c", IGNORED], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout.strip() == "went on True", (proc.returncode, proc.stdout, proc.stderr)
