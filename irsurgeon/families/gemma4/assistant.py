"""Build the Gemma 4 assistant IR from its checkpoint: strict tensor checks, then the graph, then the model.

Gemma 4 norms are plain gains: the Qwen3.5 `1 + w` fold of irsurgeon.weights.spec.TRANSFORMS is never applied
here (tensors are read as stored, cast to float32).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

from irsurgeon.errors import CheckpointError
from irsurgeon.models.gemma4_assistant import (INTEGER_TENSORS, TYPES, AssistantConfig, Inputs, assistant,
                                               load_assistant_config, scale_check, tensor_table)
from irsurgeon.ops.core import WeightFormat, weight
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import WEIGHT_DTYPES

OUTPUTS = ("logits", "last_hidden_state")


def check_tensors(ckpt: Checkpoint, cfg: AssistantConfig, warn=print) -> dict[str, tuple[int, ...]]:
    """Every tensor of the table present with its shape and a usable dtype; extras refused, except the tied
    lm_head and, with use_ordered_embeddings off, masked_embedding.* (transformers then builds no masked embedder
    and drops them as unexpected keys: modeling_gemma4_assistant.py, 5.24.0)."""
    table, present = tensor_table(cfg), set(ckpt.names())
    missing = sorted(set(table) - present)
    if missing:
        raise CheckpointError(f"{ckpt.root}: missing tensor {missing[0]} (expected shape {list(table[missing[0]])} "
                              f"from {cfg.source})" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
    extra = sorted(present - set(table) - {"lm_head.weight"})
    unused = [n for n in extra if n.startswith("masked_embedding.") and not cfg.ordered]
    if unused:
        warn(f"note: {ckpt.root}: use_ordered_embeddings is off; {', '.join(unused)} not used")
        extra = sorted(set(extra) - set(unused))
    if extra:
        raise CheckpointError(f"{ckpt.root}: unexpected tensor {extra[0]}: not part of a gemma4_assistant with "
                              f"this config ({cfg.source})")
    for name, shape in table.items():
        info = ckpt.info(name)
        if tuple(info.shape) != shape:
            raise CheckpointError(f"tensor {name}: expected shape {list(shape)} from the config, found "
                                  f"{list(info.shape)}")
        ok = info.dtype in ("I64", "I32") if name in INTEGER_TENSORS else info.dtype in WEIGHT_DTYPES
        if not ok:
            raise CheckpointError(f"tensor {name}: stored as {info.dtype}, which this tensor cannot be")
    return table


def read_float(ckpt: Checkpoint, name: str) -> np.ndarray:
    data = np.asarray(ckpt.get(name), dtype=np.float32)
    if not np.isfinite(data).all():
        raise CheckpointError(f"tensor {name}: holds NaN or Inf values")
    return data


def read_ordering(ckpt: Checkpoint, cfg: AssistantConfig) -> np.ndarray | None:
    """token_ordering must be a permutation of the vocabulary (each id in exactly one centroid's bucket)."""
    if not cfg.ordered:
        return None
    name = "masked_embedding.token_ordering"
    ordering = np.asarray(ckpt.get(name), dtype=np.int64)
    if not np.array_equal(np.sort(ordering), np.arange(cfg.vocab_size)):
        raise CheckpointError(f"tensor {name}: expected a permutation of 0..{cfg.vocab_size - 1}")
    return ordering


def parameters(cfg: AssistantConfig) -> tuple[list[ov.Node], Inputs]:
    """inputs_embeds, position_ids, attention_mask and the K/V of each layer type present (names as genai's)."""
    def param(name: str, shape: list[int], dtype=ov.Type.f32) -> ov.Node:
        p = ops.parameter(ov.PartialShape(shape), dtype, name=name)
        p.output(0).set_names({name})
        return p

    params = [param("inputs_embeds", [-1, -1, 2 * cfg.backbone_hidden_size]),
              param("position_ids", [-1, -1], ov.Type.i64), param("attention_mask", [-1, -1], ov.Type.i64)]
    kv = {}
    for kind in TYPES:  # genai feeds all four; a type without layers still gets its inputs (unused)
        layer = next((x for x in cfg.layers if x.kind == kind), None)
        shape = [-1, layer.kv_heads, -1, layer.head_dim] if layer else [-1, -1, -1, -1]
        pair = [param(f"{kind}_{kv_name}", shape) for kv_name in ("key", "value")]
        params += pair
        kv[kind] = tuple(p.output(0) for p in pair)
    return params, Inputs(params[0].output(0), params[1].output(0), params[2].output(0), kv)


def build_assistant(checkpoint: str | Path, weight_format: str | WeightFormat = WeightFormat.F16,
                    warn=print, config: AssistantConfig | None = None, adjust=None) -> tuple[ov.Model, AssistantConfig]:
    """The assistant as an ov.Model (inputs/outputs as openvino-genai's Gemma 4 MTP path names them).

    config replaces the checkpoint's parsed config and adjust(name, array) -> array edits a weight: both exist for
    the negative controls of the fidelity tests.
    """
    ckpt = Checkpoint.open(checkpoint)
    if ckpt.config_path is None or not ckpt.config_path.is_file():
        raise CheckpointError(f"{checkpoint}: no config.json beside the weights")
    try:
        cfg = config or load_assistant_config(ckpt.config_path)
        scale_check(cfg)
        check_tensors(ckpt, cfg, warn)
        fmt = WeightFormat(weight_format)
        params, inputs = parameters(cfg)
        made: dict[str, ov.Output] = {}

        def w(name: str) -> ov.Output:
            if name not in made:  # the embedding table is read once even when two paths use it
                data = read_float(ckpt, name)
                made[name] = weight(adjust(name, data) if adjust else data, name, fmt, warn)
            return made[name]

        logits, hidden = assistant(inputs, w, cfg, read_ordering(ckpt, cfg))
    finally:
        ckpt.close()
    results = []
    for name, out in zip(OUTPUTS, (logits, hidden)):
        r = ops.result(out)
        r.set_friendly_name(name)
        r.output(0).get_tensor().set_names({name})
        results.append(r)
    return ov.Model(results, params, "gemma4_assistant"), cfg
