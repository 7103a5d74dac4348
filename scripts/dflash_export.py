"""optimum-intel's fp32 export of a DFlash draft checkpoint or of its Qwen3 target, offline, for the scripts that make
DFlash reference data (make_dflash_reference.py, make_dflash_acceptance.py); only the IR and config.json are kept.

    optimum-cli export openvino --model SRC --task text-generation-with-past --weight-format fp32 \
        --disable-convert-tokenizer [--trust-remote-code] OUT        (--trust-remote-code for a draft)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

KEPT = ("openvino_model.xml", "openvino_model.bin", "config.json")


def export(src: Path, out: Path, draft: bool, cli: Path | None = None) -> list[str]:
    """Export SRC into OUT with `cli` (default: the optimum-cli beside this Python); returns the command run."""
    cli = cli or Path(sys.executable).with_name("optimum-cli")
    cmd = [str(cli), "export", "openvino", "--model", str(src), "--task", "text-generation-with-past",
           "--weight-format", "fp32", "--disable-convert-tokenizer"]
    if draft:
        cmd.append("--trust-remote-code")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        r = subprocess.run(cmd + [tmp], capture_output=True, text=True, env=env)
        if r.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        out.mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            shutil.copy(Path(tmp) / name, out / name)
    return cmd + ["OUT"]
