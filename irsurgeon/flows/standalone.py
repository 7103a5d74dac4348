"""A draft from a checkpoint alone, as `build-mtp` and the Python API make it (no target directory):

    family (the checkpoint's config.json model_type: families.registry) -> build (irsurgeon.draft.build, f16 when it is
    to be compressed) -> family.finish (compress, runtime options, provenance) -> save (staged, under the lock)

Only a family whose draft stands alone (Family.standalone: the Qwen3.5 MTP head) is written this way; the others
need their target's surgery too, which `patch` does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import irsurgeon
from irsurgeon.core import rtinfo
from irsurgeon.draft import save as draft_save
from irsurgeon.draft.build import build_model, float_format
from irsurgeon.draft.load import load_with
from irsurgeon.quant.compress import check_kv_cache_precision
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import ConfigError
from irsurgeon.core.text import silent
from irsurgeon.families import registry
from irsurgeon.draft.protocol import Family, Options, Staging
from irsurgeon.ops.core import WeightFormat
from irsurgeon.weights.checkpoint import config_of
from irsurgeon.weights.held import Held
from irsurgeon.quant.precision import Choice, build_format
from irsurgeon.weights.hub import fetch_weights, resolve_source

Echo = Callable[[str], None]


def family_of(checkpoint: str | Path, config: str | Path | None = None, only: Family | None = None) -> Family:
    """The family of a local checkpoint's config.json (or `config`); `only`: the one accepted here."""
    where = config_of(checkpoint, config)
    raw = read_json(where)
    found = registry.for_config(raw, str(where), Held(checkpoint))
    if only is not None and found is not only:
        raise ConfigError(f"{where}: model_type {raw.get('model_type')!r:.80} is a {found.describe}; "
                          f"expected a {only.describe} here" + ("" if found.standalone else
                                                                f" (irsurgeon patch TARGET --checkpoint {checkpoint} "
                                                                f"builds it into its target)"))
    return found


def load_mtp(checkpoint: str | Path, config: str | Path | None = None, allow_nonfinite: bool = False,
             warn=silent, family=None):
    """Open a checkpoint, read its config as its family does, and check its tensors against the family's table
    (only the shards holding them are opened; no tensor is decoded yet). family: the only Family accepted here.
    Returns (config, weights, open checkpoint)."""
    found = family_of(checkpoint, config, family)
    return load_with(found.recipe(), checkpoint, config, allow_nonfinite, warn)


def build_mtp_model(checkpoint: str | Path, *, config: str | Path | None = None,
                    weight_format: str | WeightFormat = WeightFormat.F16, allow_nonfinite: bool = False,
                    warn=silent, hub=None, moe_form: str | None = None, family=None):
    """Build the draft of a checkpoint directory, a .safetensors file with its config.json, or a Hugging Face
    repo id (only config.json, the index and the family's tensors, by byte range, are fetched; `hub`:
    weights.hub.HubOptions). moe_form: the routed experts' graph form (irsurgeon.ops.moe.FORMS; default the one
    the CPU plugin fuses). family: the only family accepted (default: any registered one, by the config's
    model_type)."""
    fmt = float_format(weight_format)
    root = resolve_source(checkpoint, warn, hub)  # a repo id: config.json and the index first
    found = family_of(root, config, family)
    root = fetch_weights(checkpoint, root, hub, found.hub_prefix, warn)  # a repo id's tensors, by byte range
    cfg, weights, ckpt = load_with(found.recipe(), root, config, allow_nonfinite, warn)
    try:
        model = build_model(cfg, weights, fmt, warn, moe_form, recipe=found.recipe())
    finally:
        ckpt.close()
    rtinfo.set_provenance(model, version=irsurgeon.__version__, source=str(checkpoint), weight_format=fmt.value,
                          model_type=cfg.model_type)
    return model


def build_head(checkpoint: str | Path, out_dir: str | Path, choice: Choice, *, config: str | Path | None = None,
               kv_cache_precision: str = "f16", allow_nonfinite: bool = False, hub=None, wait: bool = False,
               replace: bool = False, echo: Echo = silent) -> Path:
    """Build, finish and save the draft of `checkpoint` into out_dir; returns the written `.xml`.

    Only a standalone family's (the default family's MTP head) is accepted; replace=False refuses an out_dir that
    already holds a head (irsurgeon.draft.save.save_draft).
    """
    check_kv_cache_precision(kv_cache_precision)
    standalone = registry.standalone()
    model = build_mtp_model(checkpoint, config=config, weight_format=build_format(choice), allow_nonfinite=allow_nonfinite, warn=echo,
                            hub=hub, family=standalone)
    staging = Staging(Path(str(checkpoint)), str(checkpoint), None, Options(kv_cache_precision=kv_cache_precision),
                      echo, choice)
    return save_draft(standalone.finish(model, staging), out_dir, wait=wait, echo=echo, replace=replace)


def save_draft(model, out_dir: str | Path, *, wait: bool = False, echo=None, replace: bool = True) -> Path:
    """Write a standalone family's draft into out_dir as that family names it (draft.save.save_draft), recovering
    first what a killed run of any family left there."""
    return draft_save.save_draft(model, out_dir, registry.standalone().layout.draft_xml, writable=registry.writable(),
                            wait=wait, echo=echo, replace=replace)
