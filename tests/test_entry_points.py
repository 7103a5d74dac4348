"""Every way of starting the command (`python -m irsurgeon`, `python -m irsurgeon.cli`, the console script pip writes)
goes through irsurgeon.entry.run, so a Ctrl-C ends it the same way from its first instruction to the process's last:
one line and exit 130 (docs/cli.md, docs/reliability.md), or, once the process only exits, nothing at all; never a
traceback, inside the interpreter's exit handlers too.

The signal is raised by the process itself at a chosen point (a sitecustomize module on PYTHONPATH: an audit hook for
the N-th audit event after a given module starts, an atexit hook for the exit handlers), so every run is
deterministic."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO_TARGET = ROOT / "fixtures" / "qwen3_5" / "target"

# The console script pip writes for `irsurgeon = irsurgeon.entry:run` (setup.cfg), as distlib's template has it.
CONSOLE_SCRIPT = ("import re\nimport sys\nfrom irsurgeon.entry import run\nif __name__ == '__main__':\n"
                  "    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n    sys.exit(run())\n")

# How each entry is started, and the module whose code starts the window this house answers for: the console script
# imports irsurgeon and then irsurgeon.entry, whose first statement takes Ctrl-C; `python -m` runs irsurgeon's
# package first, which takes it at once when the process is the command (docs/reliability.md: what remains before).
ENTRIES = {
    "python -m irsurgeon": (["-m", "irsurgeon"], "irsurgeon/__init__.py"),
    "python -m irsurgeon.cli": (["-m", "irsurgeon.cli"], "irsurgeon/__init__.py"),
    "console script": (["-c", CONSOLE_SCRIPT], "irsurgeon/entry.py"),
}

HOOKS = r'''
import _signal, atexit, os, sys  # not `signal`: entry imports it, an import the run must go through
AT, FROM = int(os.environ.get("CTRL_C_AT", "0")), os.environ.get("CTRL_C_FROM", "")
counted = [0]
def hook(event, args):
    if not counted[0]:
        if event == "exec" and getattr(args[0], "co_filename", "").endswith(FROM):
            counted[0] = 1  # the events after this one come after the module's first instruction
        return
    counted[0] += 1
    if counted[0] == AT + 1:
        _signal.raise_signal(_signal.SIGINT)
def at_exit():  # registered first, so run last: the process's last Python code
    _signal.raise_signal(_signal.SIGINT)
    sum(range(1000))  # Python steps after the signal: a handler would run here
if AT:
    sys.addaudithook(hook)
if os.environ.get("CTRL_C_AT_EXIT"):
    atexit.register(at_exit)
if os.environ.get("CTRL_C_COUNT"):
    atexit.register(lambda: os.write(2, f"events: {counted[0]}\n".encode()))
    sys.addaudithook(hook)
'''


def start(entry: str, args: list, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(HOOKS)
    how, module = ENTRIES[entry]
    return subprocess.run([sys.executable, *how, *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                          env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "CTRL_C_FROM": module,
                               **env})


def ended_cleanly(proc: subprocess.CompletedProcess, *, json_out: bool) -> str:
    """The rule: exit 130 and one `Error:` line (nothing else on stderr), or the command's own end; no traceback.
    Returns the error line ("" for none)."""
    err = proc.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err[-1500:]
    assert proc.returncode >= 0, (proc.returncode, err[-800:])  # never death by the signal
    errors = [line for line in err.splitlines() if line.startswith("Error")]
    if proc.returncode == 130:
        assert err.splitlines() == errors and len(errors) == 1, err
    if json_out:
        doc = json.loads(proc.stdout)  # one document, whatever the end
        assert doc["ok"] is (proc.returncode == 0) or errors == [f"Error: {AFTER}"], (doc, proc.returncode)
    return errors[0] if errors else ""


AFTER = "interrupted after the command completed: what it did is done"


@pytest.mark.parametrize("entry", ENTRIES)
def test_ctrl_c_inside_the_exit_handlers_changes_nothing(entry, tmp_path):
    """A Ctrl-C in the interpreter's last atexit handler, after a command that succeeded: its document and exit 0
    stand, and nothing is printed (`python -m irsurgeon.cli` used to print "Exception ignored in atexit callback" and
    a KeyboardInterrupt traceback: its __main__ ran the click group without irsurgeon.entry)."""
    proc = start(entry, ["show", DEMO_TARGET, "--json"], tmp_path, CTRL_C_AT_EXIT="1")
    assert ended_cleanly(proc, json_out=True) == "" and proc.returncode == 0, proc.stderr[-800:]
    assert json.loads(proc.stdout)["command"] == "show"


def points(total: int) -> list[int]:
    """The first events one by one (the imports of irsurgeon and the CLI), then doubling, then the last ones."""
    chosen, n = set(range(1, min(total, 12) + 1)), 16
    while n < total:
        chosen.add(n)
        n *= 2
    return sorted(chosen | set(range(max(1, total - 3), total + 1)))


@pytest.mark.parametrize("entry", [  # `python -m irsurgeon` takes Ctrl-C in the same lines as `-m irsurgeon.cli`
    pytest.param("python -m irsurgeon", marks=pytest.mark.slow),
    pytest.param("python -m irsurgeon.cli", marks=pytest.mark.extended),  # CI's extended tier: the console script
    "console script"])                                                    # (what a user types) in the default one
def test_ctrl_c_at_any_audit_event_from_the_first_instruction_is_one_line_and_130(entry, tmp_path):
    """Ctrl-C at the N-th audit event (an import, an open, ...) after the first instruction each entry answers for:
    the console script's irsurgeon.entry (it used to raise KeyboardInterrupt out of the script's import while entry
    imported `signal`: a traceback) and the package of `python -m irsurgeon.cli` (it used to import the whole CLI
    package, click and every command, before any handler: a traceback)."""
    args = ["show", tmp_path / "missing", "--context", "nan", "--json"]  # a usage error: no openvino, every run cheap
    counted = start(entry, args, tmp_path, CTRL_C_COUNT="1")
    total = int(counted.stderr.rsplit("events: ", 1)[1])
    assert counted.returncode == 2 and total > 50, counted.stderr[-800:]
    said = set()
    for at in points(total):
        proc = start(entry, args, tmp_path, CTRL_C_AT=str(at))
        line = ended_cleanly(proc, json_out=True)
        assert proc.returncode in (2, 130), (at, proc.returncode, proc.stderr)
        said.add(line if proc.returncode == 130 else "the command's own end")
    assert "Error: interrupted" in said, said  # the early points were interrupted, not run past
