"""The one-step check of a staged Qwen3.5 head: read back, the contract, one two-token step on the CPU plugin, with
its feed-forward MLPs narrowed (irsurgeon.ir.narrow: what is cut and why).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon.core.errors import IRError
from irsurgeon.draft.save import check_call
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.families.qwen35_mtp.model import MTPConfig
from irsurgeon.ir.narrow import narrow_feed_forward


def smoke_test(xml: Path, cfg: MTPConfig) -> None:
    """Read the staged head back, check the contract, and run one two-token step on the CPU.

    The step runs the staged graph with its feed-forward MLPs narrowed (module docstring): it proves the staged files
    parse, the head meets the contract, and every op, connection and shape but the feed-forward width compiles and
    runs on the CPU plugin into finite [1, 2, H] values from the staged weights (attention, fc, norms, router whole;
    feed-forward rows beyond the cut are not executed; their values were checked finite when read). Peak memory
    stays near the head's own bytes, not the plugin's copy of them.
    """
    model = ov.Core().read_model(xml)
    problems = contract.check_model(model, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim)
    if problems:
        raise IRError(f"{xml}: built head breaks the contract: {problems[0]}")
    narrow_feed_forward(model)
    request = ov.Core().compile_model(model, "CPU").create_infer_request()
    H = cfg.hidden_size
    # hidden_states, inputs_embeds, attention_mask, position_ids, beam_idx: each in the contract's dtype
    values = (np.full((1, 2, H), 0.5), np.full((1, 2, H), 0.25), np.ones((1, 2)), np.arange(2)[None], np.zeros(1))
    feed = {port.name: v.astype(port.dtype.to_dtype()) for port, v in zip(contract.INPUTS, values)}
    out = request.infer(feed)[0]
    check_call(xml, "outputs", out, (1, 2, H))
