"""Options shared by every command that takes a checkpoint: where a Hugging Face repo id is fetched from.

--hub-timeout is not a parameter of the commands: its callback keeps the value in the click context, and make_hub
puts it into the HubOptions (so a command's signature stays revision, token, cache_dir).
"""
from __future__ import annotations

from pathlib import Path

import click

from irsurgeon.cli.options import FiniteFloat

TIMEOUT_ENV = "IRSURGEON_HUB_TIMEOUT"  # irsurgeon.weights.hub.guard.TIMEOUT_ENV (not imported: the CLI starts light)
DEFAULT_TIMEOUT = 600  # irsurgeon.weights.hub.guard.DEFAULT_TIMEOUT
_META_KEY = "irsurgeon.hub_timeout"


def _keep_timeout(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    ctx.meta[_META_KEY] = value
    return value


def hub_options(f):
    """--revision, --token, --cache-dir, --hub-timeout (turn them into HubOptions with make_hub)."""
    f = click.option("--hub-timeout", type=FiniteFloat(min=0, min_open=True, max=1e9), default=None,
                     envvar=TIMEOUT_ENV, expose_value=False, callback=_keep_timeout, metavar="SECONDS",
                     help=f"Seconds that all requests to the Hugging Face Hub of this command may take together "
                          f"(the probe, config.json, the index, the shards, the identity check's ranges), counted "
                          f"while a request runs; then it stops with one error line (default {DEFAULT_TIMEOUT}, or "
                          f"{TIMEOUT_ENV}).")(f)
    f = click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
                     help="Hugging Face cache directory for a repo id (default: the hub's, HF_HUB_CACHE / HF_HOME).")(f)
    f = click.option("--token", default=None,
                     help="Hugging Face token for a private or gated repo (default: HF_TOKEN or the token saved by "
                          "`hf auth login`).")(f)
    f = click.option("--revision", default=None,
                     help="Branch, tag or commit of a repo id (default: main); a name git would refuse (`..`, a "
                          "leading `-` or `/`, spaces, control characters, ...) is refused.")(f)
    return f


def make_hub(revision: str | None, token: str | None, cache_dir: Path | None):
    from irsurgeon.weights.hub import HubOptions  # on use: it loads numpy and the checkpoint reader (~60 ms)

    ctx = click.get_current_context(silent=True)
    timeout = ctx.meta.get(_META_KEY) if ctx is not None else None
    return HubOptions(revision, token, cache_dir, timeout)
