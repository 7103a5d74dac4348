"""The Qwen3.5 MoE head's routed experts as the streaming tests see them: their tensor names, the names draft.stream.Stream is
given placeholders for, and the head the build holding every weight makes, saved by openvino and read back. The
synthesized MoE pair itself is the `moe_pair` fixture of tests/families/qwen3_5/conftest.py."""
from __future__ import annotations

from pathlib import Path

import openvino as ov

from irsurgeon.draft import build as draft_build, load as draft_load, save as draft_save, stream as draft_stream
from irsurgeon.families.qwen35_mtp import FAMILY

MLP = "mtp.layers.0.mlp."
EXPERTS = MLP + "experts."
MTP_XML = "openvino_mtp_model.xml"


def saved_build(ckpt: Path, fmt: str, path: Path, allow_nonfinite: bool = False) -> ov.Model:
    """The head of ckpt built holding every weight (no stream), saved by openvino and read back."""
    family = FAMILY.recipe()
    cfg, weights, opened = draft_load.load_with(family, ckpt, allow_nonfinite=allow_nonfinite, warn=lambda _: None)
    model = draft_build.build_model(cfg, weights, fmt, recipe=family, warn=lambda _: None)
    opened.close()
    draft_save.name_anonymous_nodes(model)
    ov.save_model(model, path, compress_to_fp16=False)
    return ov.Core().read_model(path)


def weight_data(model: ov.Model) -> dict:
    return {op.get_friendly_name(): (str(op.get_element_type()), tuple(op.get_shape()), op.get_data().tobytes())
            for op in model.get_ops()
            if op.get_type_name() == "Constant" and op.get_friendly_name().endswith(".weight")}


def streamed_names(monkeypatch) -> list[str]:
    """The names draft.stream.Stream is given placeholders for, as the patch builds (f16 and f32 alike)."""
    names = []
    for kind in ("placeholder", "half_placeholder"):
        real = getattr(draft_stream.Stream, kind)
        monkeypatch.setattr(draft_stream.Stream, kind, lambda self, name, *a, _real=real, **k:
                            names.append(name) or _real(self, name, *a, **k))
    return names
