"""The I/O contract of `openvino_mtp_model.xml`, as data: what the build emits and what checks read.

Inputs, in order (H = hidden size, all batch and sequence dims dynamic):
    hidden_states  f32 [?, ?, H]   target model's last hidden state
    inputs_embeds  f32 [?, ?, H]   embedding of the next token
    attention_mask i64 [?, ?]
    position_ids   i64 [?, ?]      plain 1-D positions
    beam_idx       i32 [?]
Output: last_hidden_state f32 [?, ?, H] (after mtp.norm; genai applies the target's lm_head itself).
State: one KV pair, f32 [?, nKV, ?, D], ids as MakeStateful names them.
"""
from __future__ import annotations

from dataclasses import dataclass

import openvino as ov
from openvino._offline_transformations import paged_attention_transformation

from irsurgeon.families.qwen35_mtp.layout import MTP_BIN, MTP_XML  # the head's file names, beside its I/O
from irsurgeon.ops.kvcache import STATE_TYPE, state_shape  # the state form every KV cache is built in

__all__ = ["INPUTS", "KEY_STATE", "MTP_BIN", "MTP_XML", "OUTPUT", "OUTPUTS", "STATE_IDS", "STATE_TYPE", "VALUE_STATE",
           "Port", "check_model", "partial_shape", "state_shape", "to_paged_attention"]

OUTPUT = "last_hidden_state"
KEY_STATE = "past_key_values.0.keypresent_key_values.0.key"
VALUE_STATE = "past_key_values.0.valuepresent_key_values.0.value"
STATE_IDS = (KEY_STATE, VALUE_STATE)


@dataclass(frozen=True)
class Port:
    name: str
    dtype: ov.Type
    rank: int
    width: bool = False  # last dim is the hidden size


INPUTS = (
    Port("hidden_states", ov.Type.f32, 3, width=True),
    Port("inputs_embeds", ov.Type.f32, 3, width=True),
    Port("attention_mask", ov.Type.i64, 2),
    Port("position_ids", ov.Type.i64, 2),
    Port("beam_idx", ov.Type.i32, 1),
)
OUTPUTS = (Port(OUTPUT, ov.Type.f32, 3, width=True),)


def partial_shape(port: Port, hidden_size: int) -> ov.PartialShape:
    dims = [-1] * port.rank
    if port.width:
        dims[-1] = hidden_size
    return ov.PartialShape(dims)


def check_model(model: ov.Model, hidden_size: int, num_kv_heads: int, head_dim: int) -> list[str]:
    """Every way `model` departs from the contract, as readable lines (empty when it conforms)."""
    problems = []
    names = [p.get_any_name() if p.get_names() else "" for p in model.inputs]
    if names != [p.name for p in INPUTS]:
        problems.append(f"inputs are {names}, expected {[p.name for p in INPUTS]} in this order")
    for port, inp in zip(INPUTS, model.inputs):
        want = partial_shape(port, hidden_size)
        if inp.get_element_type() != port.dtype or not inp.get_partial_shape().same_scheme(want):
            problems.append(f"input {port.name} is {inp.get_element_type().get_type_name()} "
                            f"{inp.get_partial_shape()}, expected {port.dtype.get_type_name()} {want}")
    outs = [sorted(o.get_names()) for o in model.outputs]
    if len(outs) != 1 or OUTPUT not in outs[0]:
        problems.append(f"outputs are {outs}, expected exactly one named {OUTPUT}")
    else:
        out, port = model.outputs[0], OUTPUTS[0]
        want = partial_shape(port, hidden_size)
        if out.get_element_type() != port.dtype or not out.get_partial_shape().same_scheme(want):
            problems.append(f"output {OUTPUT} is {out.get_element_type().get_type_name()} {out.get_partial_shape()}, "
                            f"expected {port.dtype.get_type_name()} {want}")
    states = {v.get_info().variable_id: v.get_info() for v in model.get_variables()}
    if sorted(states) != sorted(STATE_IDS):
        problems.append(f"state variables are {sorted(states)}, expected {sorted(STATE_IDS)}")
    want_state = state_shape(num_kv_heads, head_dim)
    for vid, info in states.items():
        if vid in STATE_IDS and (info.data_type != STATE_TYPE or not info.data_shape.same_scheme(want_state)):
            problems.append(f"state {vid} is {info.data_type.get_type_name()} {info.data_shape}, "
                            f"expected {STATE_TYPE.get_type_name()} {want_state}")
    return problems


def to_paged_attention(model: ov.Model) -> ov.Model:
    """Apply, in place, the SDPA -> PagedAttention conversion openvino-genai applies to a draft model; returns model.

    Every option off: openvino.genai's apply_paged_attention_transformations (src/cpp/src/continuous_batching/
    paged_attention_transformations.cpp) defaults per_layer_cache_control, allow_cache_rotation and
    allow_xattention to false, which leaves every option of openvino 2026.4's pass (the keywords below) off.
    Raises RuntimeError when the pass fails.
    """
    paged_attention_transformation(model, use_block_indices_inputs=False, use_score_outputs=False,
                                   allow_score_aggregation=False, allow_cache_rotation=False, allow_xattention=False,
                                   allow_adaptive_rkv=False, allow_qq_bias=False)
    return model

