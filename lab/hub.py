"""A checkpoint laid out as the Hugging Face cache lays it out, and variants of it that only look like it."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_CKPT = ROOT / "fixtures" / "demo" / "ckpt"


def hub_snapshot(tmp_path: Path, blobs_elsewhere: Path | None = None, shared_store: bool = False) -> Path:
    """The demo checkpoint as a Hugging Face cache snapshot: snapshots/<rev>/<file> -> ../../blobs/<sha256>.
    blobs_elsewhere: the repo's `blobs` is a link to that folder; shared_store: each blob is itself a link into
    the cache-wide store <cache>/blobs/<xx>/<hash> (marked as huggingface_hub marks it)."""
    repo = tmp_path / "hub" / "models--acme--tiny"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    blobs = repo / "blobs"
    if blobs_elsewhere is not None:
        blobs_elsewhere.mkdir(parents=True, exist_ok=True)
        blobs.symlink_to(blobs_elsewhere)
    else:
        blobs.mkdir()
    store = tmp_path / "hub" / "blobs"
    if shared_store:
        store.mkdir()
        (store / ".huggingface-shared-blobs").write_text("1\n")
    for f in DEMO_CKPT.iterdir():
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        if shared_store:
            (store / digest[:2]).mkdir(exist_ok=True)
            shutil.copy(f, store / digest[:2] / digest)
            (blobs / digest).symlink_to(Path("..", "..", "blobs", digest[:2], digest))
        else:
            shutil.copy(f, blobs / digest)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", digest))
    return snap
