"""Options shared by every command that takes a checkpoint: where a Hugging Face repo id is fetched from."""
from __future__ import annotations

from pathlib import Path

import click


def hub_options(f):
    """--revision, --token, --cache-dir (turn them into HubOptions with make_hub)."""
    f = click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
                     help="Hugging Face cache directory for a repo id (default: the hub's, HF_HUB_CACHE / HF_HOME).")(f)
    f = click.option("--token", default=None,
                     help="Hugging Face token for a private or gated repo (default: HF_TOKEN or the token saved by "
                          "`hf auth login`).")(f)
    f = click.option("--revision", default=None,
                     help="Branch, tag or commit of a repo id (default: main).")(f)
    return f


def make_hub(revision: str | None, token: str | None, cache_dir: Path | None):
    from irsurgeon.weights.hub import HubOptions  # on use: it loads numpy and the checkpoint reader (~60 ms)

    return HubOptions(revision, token, cache_dir)
