"""contract.check_model against heads built from the contract's ports and ops.kv_cache: the state the cache op
declares is the one the check demands, and each kind of departure (state shape, state type, input order) is named.

The graphs here are the smallest the contract describes (the KV of `inputs_embeds` viewed as [B, nKV, S, D], summed
into the hidden state), built in milliseconds; test_build checks a real built head.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.ops import kv_cache
from irsurgeon.ops import kvcache as kvcache_module

NKV, D = 2, 4
H = NKV * D
I64 = np.int64


def tiny_head(ports=contract.INPUTS, kv_type: ov.Type = ov.Type.f32) -> ov.Model:
    """Inputs as `ports` name them, one KV pair under the contract's ids, output last_hidden_state [B, S, H]."""
    params = [ops.parameter(contract.partial_shape(p, H), p.dtype, name=p.name) for p in ports]
    for p in params:
        p.output(0).set_names({p.get_friendly_name()})
    x = {p.get_friendly_name(): p.output(0) for p in params}
    batch = ops.gather(ops.shape_of(x["inputs_embeds"], ov.Type.i64), ops.constant(np.array([0], I64)),
                       ops.constant(np.array(0, I64))).output(0)
    view = ops.reshape(x["inputs_embeds"], ops.constant(np.array([0, 0, NKV, D], I64)), special_zero=True)
    new = ops.convert(ops.transpose(view, ops.constant(np.array([0, 2, 1, 3], I64))), kv_type).output(0)
    total, sinks = x["hidden_states"], []
    for vid in contract.STATE_IDS:
        present, sink = kv_cache(new, x["beam_idx"], batch, vid, NKV, D, vid)
        summed = ops.reduce_sum(ops.convert(present, ov.Type.f32), ops.constant(np.array([1, 2, 3], I64)))
        total = ops.add(total, ops.unsqueeze(summed, ops.constant(np.array([1, 2], I64)))).output(0)
        sinks.append(sink)
    result = ops.result(total)
    result.output(0).get_tensor().set_names({contract.OUTPUT})
    return ov.Model([result], sinks, params, "tiny_mtp")


def test_the_cache_op_declares_the_contract_state():
    model = tiny_head()
    assert contract.check_model(model, H, NKV, D) == []
    infos = [v.get_info() for v in model.get_variables()]
    assert sorted(i.variable_id for i in infos) == sorted(contract.STATE_IDS)
    assert all(i.data_type == ov.Type.f32 and str(i.data_shape) == f"[?,{NKV},?,{D}]" for i in infos)


def test_a_state_of_another_shape_is_named():
    problems = contract.check_model(tiny_head(), H, NKV, D + 1)
    assert len(problems) == 2
    assert all(f"[?,{NKV},?,{D + 1}]" in p and "expected f32" in p for p in problems)
    assert {p.split()[1] for p in problems} == set(contract.STATE_IDS)


def test_a_state_of_another_type_is_named(monkeypatch):
    monkeypatch.setattr(kvcache_module, "STATE_TYPE", ov.Type.f16)
    problems = contract.check_model(tiny_head(kv_type=ov.Type.f16), H, NKV, D)
    assert len(problems) == 2 and all(p.split()[3] == "f16" and "expected f32" in p for p in problems)


def test_inputs_out_of_order_are_named():
    swapped = (contract.INPUTS[1], contract.INPUTS[0], *contract.INPUTS[2:])
    problems = contract.check_model(tiny_head(swapped), H, NKV, D)
    assert problems and problems[0].startswith("inputs are ['inputs_embeds', 'hidden_states'")


@pytest.mark.parametrize("nkv, d", [(1, 8), (3, 5)])
def test_state_shape_keeps_batch_and_tokens_dynamic(nkv, d):
    shape = contract.state_shape(nkv, d)
    assert shape.rank.get_length() == 4 and shape[0].is_dynamic and shape[2].is_dynamic
    assert (shape[1].get_length(), shape[3].get_length()) == (nkv, d)
