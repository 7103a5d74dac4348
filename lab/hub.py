"""A checkpoint laid out as the Hugging Face cache lays it out, and variants of it that only look like it; the CLI
run against a hub look-alike (lab/hub_server.py)."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from lab import forkrun

ROOT = Path(__file__).resolve().parents[1]
DEMO_CKPT = ROOT / "fixtures" / "qwen3_5" / "ckpt"


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


def cli_env(endpoint: str, home: Path, extra_env: dict | None = None) -> dict[str, str]:
    """The environment of a CLI run against the hub at `endpoint` (HF_ENDPOINT and HF_HOME are read when
    huggingface_hub is imported), with HF_HOME `home` and nothing of the caller's hub settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_ETAG_TIMEOUT",
                                                            "IRSURGEON_HUB_TIMEOUT")}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "PYTHONPATH": str(ROOT),
                "HF_HUB_DISABLE_TELEMETRY": "1", **(extra_env or {})})
    return env


def run_cli(*args, endpoint: str, home: Path, extra_env: dict | None = None, timeout: float = 120):
    """`python -m irsurgeon.cli ARGS` in a process of its own (lab.forkrun; cli_env); returns (what
    subprocess.run would, lab.forkrun.Ran, and the seconds it took); subprocess.TimeoutExpired past the timeout."""
    ran = forkrun.completed(forkrun.module("irsurgeon.cli"), args, cli_env(endpoint, home, extra_env), timeout=timeout)
    return ran, ran.seconds
