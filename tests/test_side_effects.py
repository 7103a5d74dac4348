"""Nothing is written outside the target, the output directory and the hub cache: not by irsurgeon, and not by the
libraries it imports (openvino's and nncf's import-time telemetry writes $HOME/intel/ and forks reporters)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.demo import DEMO_CKPT, DEMO_TARGET
from helpers.tiers import every_nth

ROOT = Path(__file__).resolve().parents[1]
CLI = "import sys; from irsurgeon.entry import run; sys.argv[0] = 'irsurgeon'; run()"


def run_in(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "HF_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("CI", None)  # openvino's telemetry stays quiet under CI=true: the test must see it where users run
    return subprocess.run([sys.executable, "-c", CLI, *args], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("command", every_nth(["patch", "show", "verify-genai", "verify", "build-mtp"], 2, ids=str))
def test_commands_write_nothing_under_home(tmp_path, command):
    home, target = tmp_path / "home", tmp_path / "target"
    home.mkdir()
    shutil.copytree(DEMO_TARGET, target)
    args = {"show": ["show", str(target)], "verify": ["verify", str(target)],
            "patch": ["patch", str(target), "--checkpoint", str(DEMO_CKPT)],
            "build-mtp": ["build-mtp", str(DEMO_CKPT), "-o", str(tmp_path / "out")],
            "verify-genai": ["verify", str(DEMO_TARGET), "--genai", "--prompts", "1", "--rounds", "1",
                             "--num-assistant-tokens", "2", "--max-new-tokens", "8"]}[command]
    proc = run_in(home, *args)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []


def test_the_library_blocks_telemetry_before_openvino_is_imported():
    code = ("import sys, irsurgeon, openvino\n"
            "from openvino.tools.ovc import telemetry_utils as t\n"
            "print(sys.modules['openvino_telemetry'] is None, t.tm.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()
    assert out == ["True", "openvino.tools.ovc.telemetry_stub"]
