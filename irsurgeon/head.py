"""The MTP head from checkpoint to files, as `build-mtp` and `patch` both make it:

    build (irsurgeon.build, f16 when it is to be compressed) -> compress (irsurgeon.compress, int4/int8 only)
    -> KV-cache precision (runtime option) -> provenance (rt_info irsurgeon/...) -> save (staged, under the lock)

`patch` saves into its own transaction (it stages more than the head); both run finish_head.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import openvino as ov

import irsurgeon
from irsurgeon import rtinfo
from irsurgeon.build import build_mtp_model, save_mtp_model
from irsurgeon.compress import check_kv_cache_precision, compress_model, set_kv_cache_precision
from irsurgeon.models import qwen35_mtp
from irsurgeon.precision import Choice

Echo = Callable[[str], None]


def build_format(choice: Choice) -> str:
    """The float format the graph is built in: f16 when nncf compresses it afterwards, else the chosen one."""
    return "f16" if choice.params else choice.weight_format


def finish_head(model: ov.Model, choice: Choice, kv_cache_precision: str, echo: Echo, **provenance: str) -> ov.Model:
    """Compress (when the choice says so), set the KV-cache precision, record the format and provenance."""
    if choice.params:
        model, report = compress_model(model, choice.params)
        for line in report.lines():
            echo(line)
    set_kv_cache_precision(model, kv_cache_precision)
    rtinfo.set_provenance(model, version=irsurgeon.__version__, weight_format=choice.weight_format, **provenance)
    return model


def build_head(checkpoint: str | Path, out_dir: str | Path, choice: Choice, *, config: str | Path | None = None,
               kv_cache_precision: str = "f16", allow_nonfinite: bool = False, hub=None, wait: bool = False,
               replace: bool = False, echo: Echo = print) -> Path:
    """Build, compress and save the head of `checkpoint` into out_dir; returns the written `.xml`.

    replace=False refuses an out_dir that already holds a head (irsurgeon.build.save_mtp_model).
    """
    check_kv_cache_precision(kv_cache_precision)
    model = build_mtp_model(checkpoint, config, build_format(choice), allow_nonfinite=allow_nonfinite, warn=echo,
                            hub=hub, family=qwen35_mtp.FAMILY)  # a Gemma 4 assistant goes into its target by patch
    model = finish_head(model, choice, kv_cache_precision, echo)
    return save_mtp_model(model, out_dir, wait=wait, echo=echo, replace=replace)
