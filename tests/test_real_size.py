"""scripts/make_real_size.py: a published config's real-shaped checkpoint and target cost only the head on disk, and
patch builds the head from them (slow: writes and digs holes in a few hundred MB)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def on_disk(path: Path) -> int:
    return path.stat().st_blocks * 512


@pytest.mark.slow
def test_real_sized_inputs_are_sparse_and_patch(reference, tmp_path):
    config = reference / "real-configs" / "qwen3.5-0.8B" / "config.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_real_size.py"), str(tmp_path), "--config",
                           str(config), "--patch", "f16"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    ckpt, target = tmp_path / "ckpt", tmp_path / "target"
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    main = {ckpt / f for n, f in index.items() if not n.startswith("mtp.")}
    assert index["model.language_model.embed_tokens.weight"] != "mtp.safetensors"
    assert sum(f.stat().st_size for f in main) > 1.5e9  # 0.8B parameters in bf16, apparent size
    assert sum(on_disk(f) for f in main) < 1e6  # holes: only the headers take space
    assert sum(on_disk(f) for f in target.glob("*.bin")) < 50e6
    patched = tmp_path / "patched-f16"
    assert (patched / "openvino_mtp_model.xml").is_file() and "patch f16: wall" in done.stdout
