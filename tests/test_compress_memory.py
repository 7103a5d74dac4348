"""Peak memory of `build-mtp` at int4/int8 follows the head's bytes (slow: writes and compresses heads of 150-200 MB).

Each build runs in a fresh process; its peak RSS (VmHWM) above the import baseline of `python -c "import
openvino, nncf"` must stay within 1.5x the head's bf16 bytes. Before compression ran in blocks with early release,
these builds took 2.3-2.9x (benchmarks/bench_build.py: dense int4 2.29x, int8 2.44x, MoE 2.64x / 2.94x): nncf 3.4
quantized each weight in one inference over all of it and kept every f16 constant until the end.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from irsurgeon.synth.checkpoint import SynthSpec, checkpoint_config, mtp_tensors
from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors
from lab.procs import env

BUDGET = 1.5
DENSE = SynthSpec(hidden=2048, heads=16, kv_heads=2, head_dim=256, intermediate=6144, vocab=1024, layers=2)
MOE = SynthSpec(hidden=1024, heads=8, kv_heads=2, head_dim=128, vocab=1024, layers=2, num_experts=64, top_k=8,
                expert_size=512, shared_expert_size=512)


def head_checkpoint(root, spec: SynthSpec) -> int:
    """config.json + one safetensors file of the `mtp.*` tensors (bf16); returns their bytes."""
    root.mkdir()
    (root / "config.json").write_text(json.dumps(checkpoint_config(spec)))
    bits = {k: f32_to_bf16(v) for k, v in mtp_tensors(spec, np.random.default_rng(0)).items()}
    write_safetensors(root / "model.safetensors", bits, {k: "BF16" for k in bits})
    return sum(v.nbytes for v in bits.values())


# Runs argv[2:] as the irsurgeon CLI (or nothing) and writes the process's VmHWM to argv[1] as it exits: ru_maxrss
# from wait4 would include the memory of the test process the child was forked from, VmHWM covers only its own image.
CHILD = """
import atexit, sys
def dump(path=sys.argv[1]):
    with open("/proc/self/status") as status, open(path, "w") as out:
        out.write(next(l for l in status if l.startswith("VmHWM")).split()[1])
atexit.register(dump)
import openvino, nncf
if len(sys.argv) > 2:
    sys.argv = ["irsurgeon"] + sys.argv[2:]
    from irsurgeon.cli import main
    main()
"""


def peak_rss(tmp_path, args: list[str]) -> int:
    """Peak RSS in bytes of a fresh process running `irsurgeon args` (no args: the imports alone)."""
    report = tmp_path / f"hwm-{len(args)}"
    run = subprocess.run([sys.executable, "-c", CHILD, str(report), *args], env=env(), capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return int(report.read_text()) * 1024


@pytest.mark.slow
@pytest.mark.parametrize("spec", [DENSE, MOE], ids=["dense-2048", "moe-64x512"])
@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_build_peak_rss_follows_the_head(spec, fmt, tmp_path):
    head = head_checkpoint(tmp_path / "ckpt", spec)
    base = peak_rss(tmp_path, [])
    peak = peak_rss(tmp_path, ["build-mtp", str(tmp_path / "ckpt"), "-o", str(tmp_path / "out"),
                               "--weight-format", fmt])
    assert (tmp_path / "out" / "openvino_mtp_model.bin").stat().st_size < head
    assert (peak - base) / head <= BUDGET, f"peak {peak / 1e6:.0f} MB, baseline {base / 1e6:.0f} MB, " \
                                           f"head {head / 1e6:.0f} MB"
