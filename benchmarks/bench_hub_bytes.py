"""Bytes a `patch --checkpoint REPO_ID` downloads, against the bytes of the head it needs, on three repo layouts.

    python benchmarks/bench_hub_bytes.py [--tree DIR ...] [--rounds 1] [--filler-mib 48]

A seeded tiny Qwen3.5 pair (irsurgeon.synth, vocabulary 4096: a 131,840-byte `mtp.*` head) is served by the Hub
look-alike on 127.0.0.1 (lab/hub_server.py: LFS-like metadata from the hub, bytes and ranges from a second origin),
with a bf16 filler tensor of --filler-mib MiB beside the head (lab.hub_server.split_checkpoint):

    single      model.safetensors alone: embeddings, the rest, the filler and mtp.* in one file
    mixed       an index + 2 shards: the embeddings; the rest, the filler and mtp.* (the head beside a big tensor)
    dedicated   an index + 3 shards: the embeddings; the rest and the filler; mtp.* alone

Each --tree (an irsurgeon checkout: default this one; give the main checkout too for a before/after in one run)
patches a fresh copy of the target in a child process with a fresh HF_HOME, then a second fresh copy with the same
HF_HOME (what a second run fetches). Trees alternate within each round. Printed per run: safetensors bytes sent (and
apart, config.json + index), that over the head's bytes and over what the patch needs (the head, the headers of the
files holding it or the embeddings, the identity check's 16 embedding rows), requests (range requests), and the load
average.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # irsurgeon and the lab package of this checkout
FILLER = "model.visual.blocks.filler.weight"  # sorts right before mtp.*: the head's nearest neighbour in the file
LAYOUTS = {"single": 1, "mixed": 2, "dedicated": 3}
REPO = "bench/qwen35-tiny"


def layouts(work: Path, filler_mib: int):
    """The target, each layout's repo files, the head's bytes, and per layout what a patch needs."""
    import numpy as np

    from irsurgeon.synth import synthesize
    from irsurgeon.synth.registry import default_spec
    from irsurgeon.weights.safetensors_io import SafetensorsFile
    from lab.hub_server import split_checkpoint

    pair = synthesize(work / "pair", "qwen35", default_spec("qwen35").with_(vocab=4096), seed=1)
    filler = {FILLER: (np.zeros(filler_mib << 19, np.uint16), "BF16")}
    repos, needed, head = {}, {}, 0
    for layout, shards in LAYOUTS.items():
        repos[layout] = split_checkpoint(pair.ckpt, work / layout, shards, filler)
        head = need = 0
        for path in repos[layout].values():
            if path.suffix == ".safetensors":
                f = SafetensorsFile(path)
                mtp = [i for n, i in f.tensors.items() if n.startswith("mtp.")]
                embed = [i for n, i in f.tensors.items() if "embed_tokens" in n]
                head += sum(i.end - i.begin for i in mtp)
                need += (f.data_start if mtp or embed else 0) + sum(16 * (i.end - i.begin) // i.shape[0]
                                                                   for i in embed)
                f.close()
        needed[layout] = head + need
    return pair.target, repos, head, needed


def patch(tree: Path, target: Path, endpoint: str, home: Path) -> subprocess.CompletedProcess:
    from lab.hub import cli_env

    # cwd=tree: `python -m` puts the working directory before PYTHONPATH
    return subprocess.run([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint", REPO],
                          env=cli_env(endpoint, home, {"PYTHONPATH": str(tree)}), cwd=tree, capture_output=True,
                          text=True, timeout=600)


def measure(tree: Path, target: Path, files: dict[str, Path], work: Path) -> list[tuple[int, int, int, int]]:
    """(safetensors bytes, json bytes, requests, range requests) of a first run (fresh cache) and a second one."""
    from lab.hub_server import HubServer, Revision

    home = Path(tempfile.mkdtemp(dir=work))
    out = []
    with HubServer({REPO: {"main": Revision(files)}}, lifetime=1200) as hub:
        for _ in range(2):
            copy = Path(tempfile.mkdtemp(dir=work)) / "t"
            shutil.copytree(target, copy)
            seen = len(hub.log)
            proc = patch(tree, copy, hub.url, home)
            if proc.returncode != 0:
                raise SystemExit(f"{tree}: patch failed:\n{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
            log = hub.log[seen:]
            weights = sum(e[3] for e in log if e[1].startswith("/cdn/"))
            out.append((weights, sum(e[3] for e in log) - weights, len(log), sum(1 for e in log if e[2])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, help="an irsurgeon checkout (repeatable; default: this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--filler-mib", type=int, default=48)
    ap.add_argument("--work", type=Path, help="keep the inputs and runs here (default: a temporary folder)")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-hub-bytes-"))
    target, repos, head, needed = layouts(work / "data", args.filler_mib)
    print(f"head (mtp.*): {head} bytes; filler {args.filler_mib} MiB beside it; needed = head + headers + 16 "
          f"embedding rows; bytes = safetensors bytes sent (json: config.json and index)")
    print(f"{'layout':<10} {'tree':<24} {'run 1 bytes':>12} {'json':>6} {'/head':>8} {'/needed':>8} {'req':>4} "
          f"{'rng':>4} {'run 2 bytes':>12} {'req':>4} {'rng':>4} {'load':>5}")
    for r in range(args.rounds):
        for layout in LAYOUTS:
            for tree in trees if r % 2 == 0 else trees[::-1]:
                (b1, j1, q1, r1), (b2, _, q2, r2) = measure(tree, target, repos[layout], work)
                print(f"{layout:<10} {str(tree)[-24:]:<24} {b1:>12} {j1:>6} {b1 / head:>7.2f}x "
                      f"{b1 / needed[layout]:>7.2f}x {q1:>4} {r1:>4} {b2:>12} {q2:>4} {r2:>4} "
                      f"{os.getloadavg()[0]:>5.1f}", flush=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
