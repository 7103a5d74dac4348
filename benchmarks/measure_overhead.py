"""The runtime overhead `show` adds to each family's footprint: peak RSS of a process that runs openvino-genai's
plain and speculative pipelines on the family's bundled pair (fixtures/<key>), where weights and KV are negligible.

    python benchmarks/measure_overhead.py [--rounds 3]

Each round runs every family once, in a fresh process, in rotated order (the machine is shared: alternating rounds
spread its noise over the families alike); printed: each family's VmHWM per round, median and range, next to a
process that only imports openvino_genai. The median is what the family's `runtime_overhead` says
(draft.protocol.Family.runtime_overhead).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irsurgeon.families import registry  # noqa: E402  (after the path: run as a script from a checkout)
from irsurgeon.flows.patch import Options, patch  # noqa: E402  (after the path, as above)
from lab.families import FIXTURE_PAIRS  # noqa: E402  (after the path, as above)

PEAK = "import re; print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"
RUN = ("import sys; from irsurgeon.flows.genai import run_equivalence; "
       "run_equivalence(sys.argv[1], prompts=1, nats=(2,), max_new_tokens=16, echo=lambda _l: None); " + PEAK)
BASELINE = "import openvino_genai; " + PEAK


def peak_kib(code: str, *args: str) -> int:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    return int(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets = {}
        for family in registry.FAMILIES:
            target, ckpt = FIXTURE_PAIRS[family.key]
            targets[family.key] = shutil.copytree(target, Path(tmp) / family.key)
            patch(targets[family.key], ckpt, options=Options())
        keys = [*targets, "import only"]
        peaks: dict[str, list[int]] = {k: [] for k in keys}
        for r in range(args.rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                kib = peak_kib(BASELINE) if key == "import only" else peak_kib(RUN, str(targets[key]))
                peaks[key].append(kib)
                print(f"round {r + 1} {key}: {kib / 1024:.0f} MiB", flush=True)
    for key, values in peaks.items():
        print(f"{key:12} median {statistics.median(values) / 1024:.0f} MiB "
              f"(range {min(values) / 1024:.0f}-{max(values) / 1024:.0f} MiB over {len(values)} rounds)")


if __name__ == "__main__":
    main()
