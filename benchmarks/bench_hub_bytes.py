"""Bytes a `patch --checkpoint REPO_ID` downloads, against the bytes of the head it needs, on three repo layouts.

    python benchmarks/bench_hub_bytes.py [--tree DIR ...] [--rounds 1] [--filler-mib 48] [--work DIR]

A seeded tiny Qwen3.5 pair (irsurgeon.synth, vocabulary 4096: a 131,840-byte `mtp.*` head) is served by a minimal
Hub look-alike on 127.0.0.1 (this file's own: HEAD and GET of /{repo}/resolve/{rev}/{file} with the headers
huggingface_hub reads, byte ranges answered 206), with a bf16 filler tensor of --filler-mib MiB beside the head:

    single      model.safetensors alone: embeddings, the rest, the filler and mtp.* in one file
    mixed       an index + 2 shards: the embeddings; the rest, the filler and mtp.* (the head beside a big tensor)
    dedicated   an index + 3 shards: the embeddings; the rest and the filler; mtp.* alone

Each --tree (an irsurgeon checkout: default this one; give /path/to/main too for a before/after in one run) patches
a fresh copy of the target in a child process with a fresh HF_HOME, then a second fresh copy with the same HF_HOME
(what a second run fetches). Trees alternate within each round. Printed per run: safetensors bytes the server sent
(and apart, config.json + index), that over the head's bytes and over what the patch needs (the head, the headers
of the files holding it or the embeddings, the identity check's 16 embedding rows), requests (range requests), and
the load average.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILLER = "model.visual.blocks.filler.weight"  # sorts right before mtp.*: the head's nearest neighbour in the file
LAYOUTS = ("single", "mixed", "dedicated")


class Served:
    """A repo per layout: {repo: {file name: path}}, one commit each; counts what it sends."""

    def __init__(self, repos: dict[str, dict[str, Path]]):
        self.repos = repos
        self.commit = {r: hashlib.sha1(r.encode()).hexdigest() for r in repos}
        self.sha = {p: hashlib.sha256(p.read_bytes()).hexdigest() for files in repos.values() for p in files.values()}
        self.bytes = self.json = self.requests = self.ranges = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        self.bytes = self.json = self.requests = self.ranges = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.answer(False)

    def do_GET(self):
        self.answer(True)

    def answer(self, body: bool) -> None:
        served: Served = self.server.served
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
        files = served.repos.get(m.group(1)) if m else None
        path = files.get(m.group(3)) if files else None
        if path is None or m.group(2) not in ("main", served.commit[m.group(1)]):
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size, sha = path.stat().st_size, served.sha[path]
        start, end, status = 0, size - 1, 200
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if rng:
            start, end, status = int(rng.group(1)), min(int(rng.group(2) or size - 1), size - 1), 206
        self.send_response(status)
        lfs = path.suffix == ".safetensors"
        headers = {"X-Repo-Commit": served.commit[m.group(1)], "Accept-Ranges": "bytes",
                   ("X-Linked-Etag" if lfs else "ETag"): f'"{sha}"', "Content-Length": str(end - start + 1)}
        if lfs:
            headers["X-Linked-Size"] = str(size)
        if rng:
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        data = b""
        if body:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start + 1)
            self.wfile.write(data)
        with served.lock:
            served.requests += 1
            served.ranges += bool(rng)
            served.bytes += len(data)
            served.json += len(data) if not lfs else 0


def layouts(work: Path, filler_mib: int) -> tuple[Path, dict[str, dict[str, Path]], int, dict[str, int]]:
    """The target, each layout's repo files, the head's bytes, and per repo what a patch needs to read: the head,
    the headers (8-byte length + JSON) of the files holding it or the embeddings, 16 embedding rows."""
    import numpy as np

    from irsurgeon.synth import synthesize
    from irsurgeon.synth.registry import default_spec
    from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

    pair = synthesize(work / "pair", "qwen35", default_spec("qwen35").with_(vocab=4096), seed=1)
    st = SafetensorsFile(pair.ckpt / "model.safetensors")
    tensors = {n: st.raw(n) for n in st.tensors}
    dtypes = {n: i.dtype for n, i in st.tensors.items()}
    st.close()
    head = sum(a.nbytes for n, a in tensors.items() if n.startswith("mtp."))
    tensors[FILLER], dtypes[FILLER] = np.zeros((filler_mib << 19,), np.uint16), "BF16"
    embed = [n for n in tensors if "embed_tokens" in n]
    mtp = [n for n in tensors if n.startswith("mtp.")]
    rest = [n for n in tensors if n not in embed and n not in mtp]
    rows = 16 * tensors[embed[0]][0].nbytes
    groups = {"single": [embed + rest + mtp], "mixed": [embed, rest + mtp], "dedicated": [embed, rest, mtp]}
    repos, needed = {}, {}
    for layout, shards in groups.items():
        folder = work / layout
        folder.mkdir()
        shutil.copy(pair.ckpt / "config.json", folder / "config.json")
        names = ["model.safetensors"] if len(shards) == 1 else [
            f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        headers = 0
        for name, members in zip(names, shards):
            write_safetensors(folder / name, {n: tensors[n] for n in members}, {n: dtypes[n] for n in members})
            if set(members) & set(embed + mtp):
                headers += 8 + int.from_bytes((folder / name).read_bytes()[:8], "little")
        if len(shards) > 1:
            index = {"metadata": {}, "weight_map": {n: name for name, ms in zip(names, shards) for n in ms}}
            (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        repos[f"bench/{layout}"] = {p.name: p for p in folder.iterdir()}
        needed[f"bench/{layout}"] = head + headers + rows
    return pair.target, repos, head, needed


def patch(tree: Path, target: Path, repo: str, endpoint: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "IRSURGEON_"))}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1",
                "PYTHONPATH": str(tree)})
    # cwd=tree: `python -m` puts the working directory before PYTHONPATH
    return subprocess.run([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint", repo],
                          env=env, cwd=tree, capture_output=True, text=True, timeout=600)


def measure(tree: Path, target: Path, repo: str, served: Served, endpoint: str, work: Path) -> list[tuple]:
    """(bytes, requests, range requests) of a first run (fresh cache) and of a second one (the same cache)."""
    home = Path(tempfile.mkdtemp(dir=work))
    out = []
    for _ in range(2):
        copy = Path(tempfile.mkdtemp(dir=work)) / "t"
        shutil.copytree(target, copy)
        served.reset()
        proc = patch(tree, copy, repo, endpoint, home)
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: patch from {repo} failed:\n{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
        out.append((served.bytes - served.json, served.json, served.requests, served.ranges))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", type=Path, help="an irsurgeon checkout (repeatable; default: this one)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--filler-mib", type=int, default=48)
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-hub-bytes-"))
    sys.path.insert(0, str(ROOT))
    target, repos, head, needed = layouts(work / "data", args.filler_mib)
    served = Served(repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.served, server.daemon_threads = served, True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    print(f"head (mtp.*): {head} bytes; filler {args.filler_mib} MiB beside it; needed = head + headers + 16 "
          f"embedding rows; bytes = safetensors bytes sent (json = config.json and index); work {work}")
    print(f"{'layout':<10} {'tree':<24} {'run 1 bytes':>12} {'json':>6} {'/head':>8} {'/needed':>8} {'req':>4} "
          f"{'rng':>4} {'run 2 bytes':>12} {'req':>4} {'rng':>4} {'load':>5}")
    for r in range(args.rounds):
        for layout in LAYOUTS:
            repo = f"bench/{layout}"
            for tree in trees if r % 2 == 0 else trees[::-1]:
                (b1, j1, q1, r1), (b2, _, q2, r2) = measure(tree, target, repo, served, endpoint, work)
                print(f"{layout:<10} {str(tree)[-24:]:<24} {b1:>12} {j1:>6} {b1 / head:>7.2f}x "
                      f"{b1 / needed[repo]:>7.2f}x {q1:>4} {r1:>4} {b2:>12} {q2:>4} {r2:>4} "
                      f"{os.getloadavg()[0]:>5.1f}", flush=True)
    server.shutdown()
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
