"""lab.forkrun stands in for a fresh interpreter in the labs that run hundreds of short commands (hostile inputs, the
hub, kill sweeps). Each check here runs the same thing both ways, as a new `python -c` (forkrun.fresh, which is
subprocess.run) and forked from the server (forkrun.run), and compares what a caller sees."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from lab import forkrun
from lab.demo import DEMO_CKPT, DEMO_TARGET
from lab.dirsnap import digest
from lab.hostile import CLI, env


def both(code: str, args=(), run_env: dict | None = None, **kwargs) -> tuple[forkrun.Ran, forkrun.Ran]:
    run_env = run_env or env()
    return forkrun.fresh(code, args, run_env, **kwargs), forkrun.run(code, args, run_env, **kwargs)


def seen(ran: forkrun.Ran) -> tuple:
    return ran.returncode, ran.stdout, ran.stderr


@pytest.mark.parametrize("args", [
    ["show", str(DEMO_TARGET)],
    pytest.param(["--json", "show", str(DEMO_TARGET)], marks=pytest.mark.extended),  # CI's extended tier
    ["show", "/nonexistent/target"],  # refused: exit 1, one line
    ["patch", str(DEMO_TARGET), "--num-assistant-tokens", "x"],  # a usage error: exit 2
    ["pach"],
], ids=["show", "json", "refused", "usage", "unknown-command"])
def test_a_command_says_the_same_forked_or_fresh(args):
    fresh, forked = both(CLI, args)
    assert seen(forked) == seen(fresh)
    assert fresh.returncode in (0, 1, 2)


def test_a_patch_forked_writes_what_a_fresh_one_writes(tmp_path):
    a, b = shutil.copytree(DEMO_TARGET, tmp_path / "a"), shutil.copytree(DEMO_TARGET, tmp_path / "b")
    fresh = forkrun.fresh(CLI, ["patch", a, "--checkpoint", DEMO_CKPT], env())
    forked = forkrun.run(CLI, ["patch", b, "--checkpoint", DEMO_CKPT], env())
    def said(ran, target) -> tuple:  # the report, its target's name and its duration aside
        return ran.returncode, re.sub(r" in \d+\.\d+ s\b", " in N s", ran.stdout.replace(str(target), "T"))
    assert said(forked, b) == said(fresh, a)
    assert fresh.returncode == 0 and digest(a) == digest(b)


def test_the_run_gets_its_own_environment_directory_arguments_and_empty_stdin(tmp_path):
    code = ("import os, sys; print(os.getcwd(), os.environ.get('FORKRUN_PROBE'), 'HOME' in os.environ, sys.argv, "
            "repr(sys.stdin.read()))")
    run_env = {**{k: v for k, v in env().items() if k != "HOME"}, "FORKRUN_PROBE": "é ü"}
    fresh, forked = both(code, ["a b", "-x"], run_env, cwd=tmp_path)
    assert seen(forked) == seen(fresh)
    assert fresh.stdout == f"{tmp_path} é ü False ['-c', 'a b', '-x'] ''\n"


def test_huggingface_hub_reads_each_runs_endpoint_when_it_is_imported():
    code = "import huggingface_hub.constants as c; print(c.ENDPOINT, c.HF_HUB_OFFLINE)"
    for endpoint, offline in (("http://127.0.0.1:1", "1"), ("http://127.0.0.1:2", "0")):
        fresh, forked = both(code, (), {**env(), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": offline})
        assert seen(forked) == seen(fresh) == (0, f"{endpoint} {offline == '1'}\n", "")


@pytest.mark.parametrize("code, expected", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ("import os, signal; os.kill(os.getpid(), signal.SIGINT)", -signal.SIGINT),  # Python's own handler: no irsurgeon's
    ("import sys; sys.exit(3)", 3),
    ("import atexit; atexit.register(print, 'at exit'); print('body', end=' ')", 0),
], ids=["sigkill", "sigint", "exit-3", "atexit"])
def test_the_run_ends_as_an_interpreter_ends(code, expected):
    fresh, forked = both(code)
    assert forked.returncode == fresh.returncode == expected
    assert forked.stdout == fresh.stdout
    if expected == 0:
        assert fresh.stdout == "body at exit\n"


def gone(pid: int) -> bool:
    """The process has ended (no longer there, or a zombie waiting for its reaper)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def test_a_run_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    pid_file = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    forked = forkrun.run(code, (), env(), timeout=3)
    assert forked.returncode is None and forked.hwm > 0
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(grandchild)
    with pytest.raises(subprocess.TimeoutExpired):
        forkrun.completed("import time; time.sleep(60)", (), env(), timeout=1)


@pytest.mark.extended  # the shell's server serves test_docs alone: CI's `make test-extended`
def test_a_shells_command_forked_says_and_ends_as_a_fresh_one(tmp_path):
    """lab.forkrun's shell server (test_docs' `irsurgeon`): a script's output, pipes and exit codes are a fresh
    `python -m irsurgeon`'s."""
    script = (f"irsurgeon show {DEMO_TARGET} | wc -l\n"
              "irsurgeon show /nonexistent/target || echo \"exit $?\"\n"
              "echo piped | irsurgeon --json show /nonexistent/target | python3 -c 'import json, sys; "
              "print(json.load(sys.stdin)[\"ok\"])' || true\n"
              "irsurgeon pach 2>&1 | head -c 60; echo\n")
    forked_bin, fresh_bin = tmp_path / "forked", tmp_path / "fresh"
    forked_bin.mkdir()
    fresh_bin.mkdir()
    shell = forkrun.shell_server()
    shell.command(forked_bin, "irsurgeon", forkrun.module("irsurgeon"), argv0="-m")
    (fresh_bin / "irsurgeon").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m irsurgeon "$@"\n')
    (fresh_bin / "irsurgeon").chmod(0o755)
    said = []
    for folder in (fresh_bin, forked_bin):
        run_env = {**env(), **shell.env(), "PATH": f"{folder}:{os.environ['PATH']}"}
        said.append(subprocess.run(["bash", "-c", script], env=run_env, capture_output=True, text=True, timeout=120))
    assert (said[1].returncode, said[1].stdout, said[1].stderr) == (said[0].returncode, said[0].stdout, said[0].stderr)
    assert "exit 1" in said[0].stdout and "False" in said[0].stdout


def test_a_shells_command_killed_by_a_signal_ends_the_client_by_it(tmp_path):
    shell = forkrun.shell_server()
    shell.command(tmp_path, "die", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    ran = subprocess.run([str(tmp_path / "die")], env={**env(), **shell.env()}, timeout=60)
    assert ran.returncode == -signal.SIGTERM


def test_a_shell_client_killed_mid_run_leaves_the_server_serving(tmp_path):
    shell = forkrun.shell_server()
    shell.command(tmp_path, "slow", "import time; time.sleep(1.5)")
    shell.command(tmp_path, "quick", "print('served')")
    client = subprocess.Popen([str(tmp_path / "slow")], env={**env(), **shell.env()})
    time.sleep(0.5)
    client.kill()  # the run goes on in the server's child; its answer has nobody to go to
    client.wait(10)
    time.sleep(1.5)
    ran = subprocess.run([str(tmp_path / "quick")], env={**env(), **shell.env()}, capture_output=True, text=True,
                         timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "served\n") and shell.proc.poll() is None
