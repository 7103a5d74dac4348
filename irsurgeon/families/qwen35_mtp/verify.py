"""`irsurgeon verify` for a Qwen3.5 directory: the MTP contract without running genai (files, head I/O, states,
paged-attention conversion, hidden-state annotation) and, with a checkpoint, its identity.

    target layout               the decomposed VLM export genai's MTP path loads (target.inspect_target)
    checkpoint identity         with --checkpoint: 16 token-embedding rows against the target's (identity.py)
    MTP head present / readable openvino_mtp_model.xml/.bin, byte-checked before OpenVINO reads it
    MTP head contract           inputs, output and the two KV states as contract.py states them
    paged-attention conversion  the pass genai runs on the draft leaves one PagedAttention and no state
    hidden-state annotation     one entry per decoder layer on the language model

Each check is a Check row; a failed check never raises. The house (irsurgeon.flows.verify) adds the interrupted-run line.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import openvino as ov

from irsurgeon.core import rtinfo
from irsurgeon.core.errors import IRError, IRSurgeonError, cause
from irsurgeon.draft.protocol import Check
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.families.qwen35_mtp.identity import check_identity
from irsurgeon.families.qwen35_mtp.target import inspect_target
from irsurgeon.ir import files, xmlsafe
from irsurgeon.ir.hidden_states import parse_annotation
from irsurgeon.weights.hub import resolve_source


def paged_attention_converts(model: ov.Model) -> tuple[bool, str]:
    """Run the pass openvino-genai runs on the draft model, on a copy; it must leave one PagedAttention, no state."""
    try:
        copy = contract.to_paged_attention(model.clone())
    except RuntimeError as e:
        return False, f"SDPAToPagedAttention failed: {cause(e)}"
    ops = Counter(op.get_type_name() for op in copy.get_ops())
    ok = ops["PagedAttentionExtension"] == 1 and ops["ReadValue"] == 0 and ops["Assign"] == 0
    return ok, f"{ops['PagedAttentionExtension']} PagedAttention, {ops['ReadValue']} ReadValue left"


def verify(target: Path, checkpoint: str | Path | None = None, hub=None, echo=print) -> list[Check]:
    """The contract checks; with `checkpoint` (a path or repo id; `hub`: weights.hub.HubOptions) also its identity."""
    checks: list[Check] = []
    try:
        info = inspect_target(target)
    except IRSurgeonError as e:
        return [Check("target layout", False, str(e))]
    if checkpoint is not None:
        checks.append(identity_check(target, checkpoint, hub, echo))
    cfg = info.cfg
    checks.insert(0, Check("target layout", True, f"{cfg.model_type}, hidden {info.hidden_size}, "
                                                  f"vocab {info.vocab_size}"))
    if not info.has_mtp:
        return checks + [Check("MTP head present", False, f"no {contract.MTP_XML}/.bin")]
    try:
        head = files.read_model(target / contract.MTP_XML)  # byte-checked first: no DTD, .bin long enough
    except IRSurgeonError as e:
        return checks + [Check("MTP head readable", False, str(e))]
    problems = contract.check_model(head, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim)
    checks.append(Check("MTP head contract", not problems, "; ".join(problems) or
                        "inputs, output, 2 KV states as specified"))
    checks.append(Check("paged-attention conversion", *paged_attention_converts(head)))
    checks.append(Check("hidden-state annotation", *annotation_check(info.lm_xml, cfg.num_hidden_layers)))
    return checks


def annotation_check(xml: Path, num_layers: int | None) -> tuple[bool, str]:
    """Whether the language model carries a readable hidden-state annotation with one entry per layer.

    Read from the .xml's rt_info text: the graph was already read (and checked) by inspect_target.
    """
    value = xmlsafe.get_value(files.read_ir_bytes(xml), (rtinfo.HIDDEN_STATES_LAYERS,), str(xml))
    if value is None:
        return False, "absent"
    try:
        layers = parse_annotation(value, str(xml))
    except IRError as e:
        return False, str(e)
    if num_layers and len(layers) != num_layers:
        return False, f"{len(layers)} layers annotated, config has {num_layers}"
    return True, f"{len(layers)} layers"


def identity_check(target: Path, checkpoint: str | Path, hub, echo) -> Check:
    """Whether the checkpoint is the one the target was exported from (qwen35_mtp.identity)."""
    try:
        root = resolve_source(checkpoint, echo, hub)
        result = check_identity(target, checkpoint, root, hub)
    except IRSurgeonError as e:
        return Check("checkpoint identity", False, str(e))
    return Check("checkpoint identity", bool(result.ok), result.detail)
