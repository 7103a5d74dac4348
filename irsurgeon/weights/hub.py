"""Fetch only what the MTP head needs from a Hugging Face repo: config.json, the index, and the shards with `mtp.*`.

Everything goes through huggingface_hub's cache, so `HF_HUB_OFFLINE=1` and an already-filled cache work as usual.
A repo without an index holds a single `model.safetensors`; that one file is then the only way to the head.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from irsurgeon.config import read_json
from irsurgeon.errors import CheckpointError, ConfigError
from irsurgeon.weights.checkpoint import CONFIG_FILE, INDEX_FILE, SINGLE_FILE
from irsurgeon.weights.spec import MTP_PREFIX

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_repo_id(source: str) -> bool:
    return bool(REPO_ID.match(source)) and ".." not in source


def resolve_source(source: str | Path, echo: Callable[[str], None] = print, revision: str | None = None) -> Path:
    """A local checkpoint path as is; a repo id fetched (partially) into the Hugging Face cache."""
    path = Path(source)
    if path.exists():
        return path
    if not looks_like_repo_id(str(source)):
        raise CheckpointError(f"{source}: no such checkpoint file or directory (nor a Hugging Face repo id)")
    return fetch_mtp_checkpoint(str(source), echo, revision)


def fetch_mtp_checkpoint(repo_id: str, echo: Callable[[str], None] = print, revision: str | None = None) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    def fetch(filename: str) -> Path | None:
        """The cached file, or None when the repo lacks it (offline: when the cache lacks it)."""
        try:
            return Path(hf_hub_download(repo_id, filename, revision=revision))
        except EntryNotFoundError:  # includes LocalEntryNotFoundError (offline, not cached)
            return None
        except (HfHubHTTPError, OSError, ValueError) as e:
            raise CheckpointError(f"{repo_id}: cannot fetch {filename}: {str(e).splitlines()[0]}") from None

    def need(filename: str) -> Path:
        path = fetch(filename)
        if path is None:
            raise CheckpointError(f"{repo_id}: {filename} is not in the repo (or, offline, not in the local "
                                  f"Hugging Face cache)")
        return path

    config = need(CONFIG_FILE)
    index = fetch(INDEX_FILE)
    if index is None:
        echo(f"{repo_id}: no {INDEX_FILE}; fetching the single {SINGLE_FILE}")
        need(SINGLE_FILE)
        return config.parent
    for shard in mtp_shards(index):
        echo(f"{repo_id}: fetching {shard} (holds {MTP_PREFIX}* tensors)")
        need(shard)
    return config.parent


def mtp_shards(index: Path) -> list[str]:
    try:
        weight_map = read_json(index).get("weight_map")
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: 'weight_map' is missing")
    shards = sorted({str(s) for n, s in weight_map.items() if str(n).startswith(MTP_PREFIX)})
    if not shards:
        raise CheckpointError(f"{index}: no '{MTP_PREFIX}*' tensors listed: this checkpoint carries no MTP head")
    return shards
