"""Build the Gemma 4 assistant IR from its checkpoint through the generic build (irsurgeon.draft.build): the family
module (irsurgeon.families.gemma4_mtp.model) gives its config, tensor table and graph.

Gemma 4 norms are plain gains: its table has no transform (the Qwen3.5 `1 + w` fold is that family's own row).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon.draft.build import build_model

from irsurgeon.draft.load import load_tensors, open_checkpoint
from irsurgeon.families.gemma4_mtp.model import RECIPE, OUTPUTS, AssistantConfig, load_assistant_config, scale_check
from irsurgeon.ops.core import WeightFormat

__all__ = ["OUTPUTS", "build_assistant"]


class Adjusted(Mapping):
    """Weights with adjust(name, array) applied (negative controls of the fidelity tests); always the f32 path."""

    def __init__(self, weights, adjust):
        self.weights, self.adjust = weights, adjust
        self.table, self.warn = weights.table, weights.warn

    def __getitem__(self, role: str) -> np.ndarray:
        return self.adjust(role, self.weights[role])

    def __contains__(self, role: object) -> bool:
        return role in self.weights

    def __iter__(self):
        return iter(self.weights)

    def __len__(self) -> int:
        return len(self.weights)


def build_assistant(checkpoint: str | Path, weight_format: str | WeightFormat = WeightFormat.F16,
                    warn=print, config: AssistantConfig | None = None, adjust=None,
                    allow_nonfinite: bool = False) -> tuple[ov.Model, AssistantConfig]:
    """The assistant as an ov.Model (inputs/outputs as openvino-genai's Gemma 4 MTP path names them).

    config replaces the checkpoint's parsed config and adjust(name, array) -> array edits a weight: both exist for
    the negative controls of the fidelity tests.
    """
    ckpt = open_checkpoint(checkpoint)
    try:
        cfg = config or load_assistant_config(ckpt.config_path)
        scale_check(cfg)
        weights = load_tensors(ckpt, RECIPE, cfg, checkpoint, allow_nonfinite, warn)
        model = build_model(cfg, Adjusted(weights, adjust) if adjust else weights, weight_format, warn,
                            recipe=RECIPE)
    finally:
        ckpt.close()
    return model, cfg
