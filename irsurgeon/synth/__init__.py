"""Tiny, seeded, valid models and checkpoints for tests (irsurgeon's own and its users').

    from irsurgeon.synth import synthesize, default_spec
    out = synthesize(tmp_path, "qwen35", default_spec("qwen35").with_(layers=3), seed=0)   # out.target, out.ckpt

The builders import openvino; they are loaded on first use so that `irsurgeon.synth.checkpoint` stays numpy-only.
"""
from __future__ import annotations

_LAZY = {"synthesize", "default_spec", "validate", "make_fixture", "FIXTURES", "KINDS", "Synthesized"}

from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint  # noqa: E402,F401


def __getattr__(name: str):
    if name in _LAZY:
        from irsurgeon.synth import registry
        return getattr(registry, name)
    raise AttributeError(f"module 'irsurgeon.synth' has no attribute {name!r}")
