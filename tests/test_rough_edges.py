"""What a person typing the command expects, where it used to surprise: each case once typed, once answered badly."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.cli import invoke
from lab.demo import DEMO_CKPT, DEMO_TARGET
from lab.procs import env, lock_held

ROOT = Path(__file__).resolve().parents[1]


def test_python_m_irsurgeon_is_the_command_and_names_both_families():
    out = subprocess.run([sys.executable, "-m", "irsurgeon", "--help"], capture_output=True, text=True, env=env(),
                         timeout=60)
    assert out.returncode == 0 and "Qwen3.5" in out.stdout and "Gemma 4" in out.stdout, out.stderr


def test_a_failing_command_with_json_prints_its_document_too(tmp_path):
    result = invoke("patch", tmp_path / "missing", "--checkpoint", DEMO_CKPT, "--json")
    document = json.loads(result.stdout)
    assert result.exit_code == 1 and document["ok"] is False and "missing" in document["error"]
    assert document["exit_code"] == 1 and result.stderr.startswith("Error: ")


def test_a_mistyped_local_path_says_so_before_the_hub(tmp_path):
    (tmp_path / "models").mkdir()
    proc = subprocess.run([sys.executable, "-m", "irsurgeon", "patch", str(DEMO_TARGET), "--checkpoint",
                           "models/ckptt"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env(), "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"})
    assert proc.returncode == 1 and proc.stderr.startswith("Error: models/ckptt: no such local checkpoint in models; "
                                                           "as a Hugging Face repo id:"), proc.stderr


def test_synth_refuses_a_hybrid_without_a_full_attention_layer(tmp_path):
    result = invoke("synth", tmp_path / "s", "--layers", "3")
    assert result.exit_code == 1 and "no full_attention layer" in result.stderr and not (tmp_path / "s").exists()


def test_an_unknown_weight_format_is_refused_before_any_note():
    from irsurgeon import Options, patch_directory
    from irsurgeon.core.errors import CompressionError

    said = []
    try:
        patch_directory(DEMO_TARGET, DEMO_CKPT, Options(weight_format="int3"), echo=said.append)
    except CompressionError as e:
        assert "int3" in str(e)
    else:
        raise AssertionError("int3 accepted")
    assert said == []


def test_wait_says_it_waits(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(DEMO_TARGET, target)
    with lock_held(target, tmp_path / "gate") as release:
        proc = subprocess.Popen([sys.executable, "-m", "irsurgeon", "patch", str(target), "--checkpoint",
                                 str(DEMO_CKPT), "--wait"], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        seen = []
        while not any("waiting for it to finish" in line for line in seen):
            line = proc.stdout.readline()  # the run blocks on the lock right after this line
            assert line, (seen, proc.stderr.read())
            seen.append(line)
        release()
    out, err = proc.communicate(timeout=120)
    assert "another irsurgeon run holds this directory; waiting for it to finish" in seen[-1]
    assert proc.returncode == 0 and "wrote openvino_mtp_model" in out, err
