"""Running an MTP head at f32 on a sequence of calls, and against optimum-intel's golden outputs."""
from __future__ import annotations

import numpy as np
import openvino as ov

from irsurgeon.families.qwen35_mtp import contract

F32_PROPS = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
INPUT_NAMES = [p.name for p in contract.INPUTS]


def compile_f32(model: ov.Model) -> ov.InferRequest:
    return ov.Core().compile_model(model, "CPU", F32_PROPS).create_infer_request()


def rows(rng, b, s, h, scale=1.0):
    return (rng.standard_normal((b, s, h)) * scale).astype(np.float32)


def run_sequence(request, calls):
    request.reset_state()
    outs = []
    for c in calls:
        request.infer({k: c[k] for k in INPUT_NAMES})
        outs.append(request.get_tensor(contract.OUTPUT).data.copy())
    return outs


def three_calls(rng, H, batch=1, prefill=5, pos0=3):
    calls, t = [], 0
    for n in (prefill, 1, 1):
        t += n
        calls.append({"hidden_states": rows(rng, batch, n, H, 2.0), "inputs_embeds": rows(rng, batch, n, H, 0.5),
                      "attention_mask": np.ones((batch, t), np.int64),
                      "position_ids": np.tile(np.arange(pos0 + t - n, pos0 + t), (batch, 1)).astype(np.int64),
                      "beam_idx": np.arange(batch, dtype=np.int32)})
    return calls


def golden_outputs(model: ov.Model, golden_path):
    """(the model's outputs, the golden ones) for the three calls stored in a golden .npz."""
    z = np.load(golden_path)
    calls = [{k: z[f"{k}_{i}"] for k in INPUT_NAMES} for i in range(3)]
    return run_sequence(compile_f32(model), calls), [z[f"last_hidden_state_{i}"] for i in range(3)]
