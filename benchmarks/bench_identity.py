"""Cost of the checkpoint-identity check at a real size: a Qwen3.5-2B-like token-embedding table (248320 x 2048, bf16
in the checkpoint, f16 in the target's text-embeddings IR: ~1 GB each), checked from disk and through a local Hub
look-alike (lab/hub_server.py).

    python benchmarks/bench_identity.py [--work /tmp/bench-identity] [--vocab 248320] [--hidden 2048]

Disk: both files are evicted from the page cache first (posix_fadvise DONTNEED), then a fresh process runs the
check; bytes read are the process's read_bytes (/proc/self/io: what reached the disk). Hub: bytes the server sent.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]  # irsurgeon and the lab package of this checkout
EMBED = "model.language_model.embed_tokens.weight"


def make(work: Path, vocab: int, hidden: int) -> tuple[Path, Path]:
    """ckpt/ (config, index, the embedding shard) and target/ (openvino_text_embeddings_model.xml/.bin)."""
    import openvino as ov
    import openvino.opset13 as ops

    from irsurgeon.weights.safetensors_io import write_safetensors

    ckpt, target = work / "ckpt", work / "target"
    if (target / "openvino_text_embeddings_model.bin").is_file():
        return ckpt, target
    ckpt.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    bits = (0x3C00 + rng.integers(0, 0x0400, (vocab, hidden), dtype=np.uint16)) | (
        rng.integers(0, 2, (vocab, hidden), dtype=np.uint16) << 15)  # bf16 in +-[2^-7, 2^-6): finite, f16-exact
    write_safetensors(ckpt / "model-00001-of-00002.safetensors", {EMBED: bits}, {EMBED: "BF16"})
    index = {"metadata": {}, "weight_map": {EMBED: "model-00001-of-00002.safetensors"}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    (ckpt / "config.json").write_text("{}")
    table = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float16)
    del bits
    ids = ops.parameter([-1, -1], ov.Type.i64, name="input")
    gather = ops.gather(ops.convert(ops.constant(table), ov.Type.f32), ids, np.int64(0))
    model = ov.Model([ops.result(gather)], [ids], "text_embeddings")
    ov.save_model(model, target / "openvino_text_embeddings_model.xml", compress_to_fp16=False)
    return ckpt, target


def evict(*paths: Path) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


CHILD = """
import sys, time, json
sys.path[:0] = {paths!r}
def io():
    return int(dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())['read_bytes'])
from irsurgeon.families.qwen35_mtp.identity import check_identity
from irsurgeon.weights.hub import resolve_source
import openvino
before, start = io(), time.perf_counter()
root = resolve_source({source!r}, echo=lambda s: None)
r = check_identity({target!r}, {source!r}, root)
print(json.dumps({{"ok": r.ok, "seconds": time.perf_counter() - start, "read_bytes": io() - before,
                   "detail": r.detail}}))
"""


def child(source: str, target: Path, env: dict | None = None) -> dict:
    code = CHILD.format(paths=[str(ROOT)], source=source, target=str(target))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-identity"))
    ap.add_argument("--vocab", type=int, default=248320)
    ap.add_argument("--hidden", type=int, default=2048)
    a = ap.parse_args()
    ckpt, target = make(a.work, a.vocab, a.hidden)
    shard = ckpt / "model-00001-of-00002.safetensors"
    evict(shard, target / "openvino_text_embeddings_model.bin")
    disk = child(str(ckpt), target)
    print(f"disk: {disk['ok']} in {disk['seconds'] * 1e3:.0f} ms, {disk['read_bytes'] / 1024:.0f} KiB read from disk "
          f"(shard {shard.stat().st_size / 1e9:.2f} GB, target table "
          f"{(target / 'openvino_text_embeddings_model.bin').stat().st_size / 1e9:.2f} GB)")
    from lab.hub_server import HubServer, Revision
    files = {p.name: p for p in ckpt.iterdir()}
    with HubServer({"acme/bench": {"main": Revision(files)}}) as hub:
        for path in files.values():
            hub.sha256(path)  # the server's ETags: computed before the clock starts, as a real hub has them stored
        home = a.work / "hf-home"
        shutil.rmtree(home, ignore_errors=True)
        remote = child("acme/bench", target, {"HF_ENDPOINT": hub.url, "HF_HOME": str(home)})
    requests, sent = hub.served(shard.name)
    print(f"hub:  {remote['ok']} in {remote['seconds'] * 1e3:.0f} ms (config, index, rows); embedding shard: "
          f"{sent} bytes of {shard.stat().st_size} in {requests} requests (redirect hops included); "
          f"all: {len(hub.log)} requests, {sum(e[3] for e in hub.log)} bytes")
    print(remote["detail"])


if __name__ == "__main__":
    main()
