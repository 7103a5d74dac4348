"""rt_info keys irsurgeon reads and writes, spelled once."""
from __future__ import annotations

MTP_MODE = "mtp_mode"
HIDDEN_STATES_LAYERS = "hidden_states_decoder_layers"
RUNTIME_OPTIONS = "runtime_options"
KV_CACHE_PRECISION = "KV_CACHE_PRECISION"
PROVENANCE = "irsurgeon"  # section: version, source, weight_format, ...
TUNING = "tuning"  # in PROVENANCE: what `irsurgeon tune` measured and chose on this draft, as JSON (flows/tune.py)
SOURCE_FORMAT = "source_format"  # in PROVENANCE: what the checkpoint stored the draft's weights as (weights/quant.py)
KEEP_FLOAT = "keep_float"  # in PROVENANCE: weight constants the family marks as never compressed (space-separated)
STREAMED = "irsurgeon_streamed"  # transient, never saved: a built model's handle on the weights stage_ir writes


def set_provenance(model, **fields: str) -> None:
    """Record irsurgeon's provenance fields under rt_info['irsurgeon']."""
    for key, value in fields.items():
        model.set_rt_info(str(value), [PROVENANCE, key])


def set_runtime_option(model, key: str, value: str) -> None:
    model.set_rt_info(str(value), [RUNTIME_OPTIONS, key])


def keep_float(model) -> tuple[str, ...]:
    """The weight constants the head's family marks as never compressed (set by irsurgeon.draft.build)."""
    if not model.has_rt_info([PROVENANCE, KEEP_FLOAT]):
        return ()
    return tuple(model.get_rt_info([PROVENANCE, KEEP_FLOAT]).astype(str).split())
