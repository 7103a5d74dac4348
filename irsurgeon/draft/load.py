"""A checkpoint opened and checked for a draft's build: its config read as the family's recipe reads it, its tensors
against the recipe's table (irsurgeon.weights.spec: missing, extra, misshaped, tied copies proven equal), within the
memory a build needs (memory_need), no tensor decoded yet."""
from __future__ import annotations

import math
from pathlib import Path


from irsurgeon.core import limits
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import CheckpointError, with_hint
from irsurgeon.draft.recipe import Recipe
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import LazyWeights, load_weights


def load_with(recipe: Recipe, checkpoint: str | Path, config: str | Path | None = None,
              allow_nonfinite: bool = False, warn=print, cfg=None):
    """Open a checkpoint, read its config as `recipe` does (cfg: as the caller already read it, Family.reading), and
    check its tensors against its table (only the shards holding them are opened; no tensor is decoded yet). Returns
    (config, weights, open checkpoint)."""
    ckpt = open_checkpoint(checkpoint, config)
    try:
        if cfg is None:  # else the caller read it, and said its warnings
            cfg = recipe.parse_config(read_json(ckpt.config_path), str(ckpt.config_path))
            for line in cfg.warnings:
                warn(line)
        weights = load_tensors(ckpt, recipe, cfg, checkpoint, allow_nonfinite, warn)
    except BaseException:
        ckpt.close()
        raise
    return cfg, weights, ckpt

def open_checkpoint(checkpoint: str | Path, config: str | Path | None = None) -> Checkpoint:
    """The checkpoint's files, with its config.json (or `config`) present."""
    ckpt = Checkpoint.open(checkpoint, config)
    if not ckpt.config_path.exists():  # Checkpoint.open always names one; a FIFO or device is refused by its reader
        ckpt.close()
        raise with_hint(CheckpointError(f"{checkpoint}: no config.json beside the weights"), "--config",
                        "pass --config with the checkpoint's config.json")
    return ckpt

def load_tensors(ckpt: Checkpoint, recipe: Recipe, cfg, checkpoint: str | Path, allow_nonfinite: bool = False,
                 warn=print) -> LazyWeights:
    """The family's table for cfg, checked against the checkpoint, within the memory budget (no tensor decoded)."""
    table = recipe.tensors(cfg)
    weights = load_weights(ckpt, table, cfg.dtype, allow_nonfinite, warn)
    # the headers now match the config; no tensor is read yet, and none is if the head cannot fit
    limits.check_memory(memory_need(table.shapes()), f"{checkpoint}: building its draft", CheckpointError)
    return weights

def memory_need(shapes: dict[str, tuple[int, ...]]) -> int:
    """A lower bound of a build's peak memory: every weight kept at 2 bytes (f16 is the smallest form a head is
    built in; int4/int8 are compressed from it) and the largest one decoded to float32 at the same time."""
    sizes = [math.prod(s) for s in shapes.values()]
    return 2 * sum(sizes) + 4 * max(sizes, default=0)
