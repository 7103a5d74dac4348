"""Running a built head in f32 and feeding the numpy reference the same calls (prefill + two decode steps)."""
from __future__ import annotations

import numpy as np
import openvino as ov

from irsurgeon.families.qwen35_mtp import contract
from helpers.numpy_mtp import MTPReference, cfg_dict

# f32 everywhere on the CPU plugin: the comparisons then measure the weights, not the runtime's precision
F32_PROPS = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
INPUT_NAMES = [p.name for p in contract.INPUTS]


def three_calls(H: int, seed: int = 0, prefill: int = 5, pos0: int = 3) -> list[dict[str, np.ndarray]]:
    rng, calls, t = np.random.default_rng(seed), [], 0
    for n in (prefill, 1, 1):
        t += n
        calls.append({"hidden_states": (rng.standard_normal((1, n, H)) * 2.0).astype(np.float32),
                      "inputs_embeds": (rng.standard_normal((1, n, H)) * 0.5).astype(np.float32),
                      "attention_mask": np.ones((1, t), np.int64),
                      "position_ids": np.arange(pos0 + t - n, pos0 + t)[None].astype(np.int64),
                      "beam_idx": np.zeros(1, np.int32)})
    return calls


def run_head(model: ov.Model | str, calls) -> list[np.ndarray]:
    request = ov.Core().compile_model(model, "CPU", F32_PROPS).create_infer_request()
    outs = []
    for c in calls:
        request.infer({k: c[k] for k in INPUT_NAMES})
        outs.append(request.get_tensor(contract.OUTPUT).data.copy())
    return outs


def run_reference(weights: dict[str, np.ndarray], cfg, calls) -> list[np.ndarray]:
    """The float64 numpy layer on raw (zero-centred) weights named without `mtp.`."""
    ref = MTPReference(weights, cfg_dict(cfg))
    return [ref.step(*(c[k] for k in INPUT_NAMES[:4])) for c in calls]


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def scale(outs: list[np.ndarray]) -> float:
    return max(float(np.abs(o).max()) for o in outs)
