"""synth: tiny, seeded, valid models and checkpoints for tests (irsurgeon's own and its users'); imports draft/
and the folders below it.

    from irsurgeon.synth import synthesize, default_spec
    out = synthesize(tmp_path, "qwen35", default_spec("qwen35").with_(layers=3), seed=0)   # out.target, out.ckpt

The builders import openvino and numpy; they are loaded on first use (`irsurgeon.synth.checkpoint` is numpy-only,
`irsurgeon.synth.kinds` imports nothing), so the command line lists the kinds without loading either.
"""
from __future__ import annotations

_LAZY = {"synthesize", "default_spec", "validate", "make_fixture", "FIXTURES", "KINDS", "Synthesized"}
_CHECKPOINT = {"SynthSpec", "write_checkpoint"}


def __getattr__(name: str):
    if name in _LAZY:
        from irsurgeon.synth import registry
        return getattr(registry, name)
    if name in _CHECKPOINT:
        from irsurgeon.synth import checkpoint
        return getattr(checkpoint, name)
    raise AttributeError(f"module 'irsurgeon.synth' has no attribute {name!r}")
