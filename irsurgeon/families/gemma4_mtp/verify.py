"""`irsurgeon verify` for a Gemma 4 directory: the contract openvino-genai's Gemma 4 MTP path reads, without genai.

    target layout      a text-only gemma4_text / gemma4 export (pairing.inspect_target)
    target outputs     mtp_last_hidden_state: f32, rank 3, the lm_head MatMul's input; the four
                       mtp_{full,sliding}_attention_{key,value}: f32, rank 4 (target.py says where genai reads them)
    embedding path     the node genai builds its embedding model from, and `input_ids` (target.check_embedding_path)
    assistant files    mtp_assistant/ openvino_model.xml/.bin, config.json, generation_config.json
    assistant I/O      inputs inputs_embeds [?, ?, 2 * backbone_hidden_size] f32, position_ids and attention_mask
                       i64, {full,sliding}_attention_{key,value} f32 rank 4; outputs logits and last_hidden_state
    pair               the same check `patch` makes (pairing.check_pair), on mtp_assistant/config.json

Each check is a Check row; the house (irsurgeon.flows.verify) adds the interrupted-run line. Nothing is written.
"""
from __future__ import annotations

from pathlib import Path

import openvino as ov

from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.draft.protocol import Check
from irsurgeon.families.gemma4_mtp import target as surgery
from irsurgeon.families.gemma4_mtp.layout import ASSISTANT_DIR, ASSISTANT_FILES, CONFIG, MODEL_XML
from irsurgeon.families.gemma4_mtp.pairing import check_pair, inspect_target
from irsurgeon.ir import files
from irsurgeon.families.gemma4_mtp.model import KV_INPUTS, OUTPUTS, TYPES, load_assistant_config
from irsurgeon.weights.checkpoint import home_of

Result = tuple[str, bool, str]


def verify(target: Path, checkpoint: str | Path | None = None, hub=None, echo=print) -> list[Check]:
    """The checks of the module docstring, in that order; with `checkpoint` (a local gemma4_assistant directory)
    also the pair check against it."""
    return [Check(*c) for c in _checks(target, checkpoint)]


def _checks(target: Path, checkpoint: str | Path | None) -> list[Result]:
    try:
        info, model = inspect_target(target)
    except IRSurgeonError as e:
        return [("target layout", False, str(e))]
    kinds = ", ".join(f"{info.layer_types.count(k)} {k}" for k in TYPES if k in info.layer_types)
    checks: list[Result] = [("target layout", True, f"Gemma 4 text-only export, hidden {info.hidden_size}, vocab "
                                                     f"{info.vocab_size}, {len(info.layers)} layers ({kinds}), "
                                                     f"{info.num_kv_shared} KV-shared")]
    checks.append(("target outputs", *target_outputs(model, str(info.xml))))
    checks.append(("embedding path", *embedding_path(model, str(info.xml))))
    asst = target / ASSISTANT_DIR
    missing = [n for n in ASSISTANT_FILES if not (asst / n).is_file()]
    checks.append(("assistant files", not missing, f"missing {', '.join(f'{ASSISTANT_DIR}/{n}' for n in missing)}"
                   f" (irsurgeon patch {target} --checkpoint ASSISTANT_DIR)" if missing else
                   f"{ASSISTANT_DIR}/ holds {', '.join(ASSISTANT_FILES)}"))
    if missing:
        return checks
    checks.append(("assistant pair", *pair(info, asst / CONFIG)))
    if checkpoint is not None:
        checks.append(("checkpoint pair", *pair(info, home_of(checkpoint) / CONFIG)))
    checks.append(("assistant I/O", *assistant_io(asst / MODEL_XML, asst / CONFIG)))
    return checks


def target_outputs(model: ov.Model, where: str) -> tuple[bool, str]:
    """The five outputs genai reads, with the rank and type it expects; the hidden state behind the lm_head."""
    by_name = {n: o for o in model.outputs for n in o.get_names()}
    present = [n for n in surgery.OUTPUTS if n in by_name]
    if not present:
        return False, "none of the five mtp_* outputs (not patched)"
    problems = [f"no {n}" for n in surgery.OUTPUTS if n not in by_name]
    for name in present:
        out, rank = by_name[name], 3 if name == surgery.HIDDEN else 4
        shape = out.get_partial_shape()
        if shape.rank.is_dynamic or shape.rank.get_length() != rank or out.get_element_type() != ov.Type.f32:
            problems.append(f"{name} is {out.get_element_type().get_type_name()} {shape}, expected f32 rank {rank}")
    if surgery.HIDDEN in by_name:
        try:
            head_in = surgery.lm_head_input(model, where)
        except IRSurgeonError as e:
            return False, str(e)
        src = by_name[surgery.HIDDEN].get_node().input_value(0)
        if (src.get_node().get_friendly_name(), src.get_index()) != (head_in.get_node().get_friendly_name(),
                                                                     head_in.get_index()):
            problems.append(f"{surgery.HIDDEN} reads '{src.get_node().get_friendly_name()}', not the lm_head "
                            f"MatMul's input '{head_in.get_node().get_friendly_name()}'")
    return not problems, "; ".join(problems) or f"{', '.join(surgery.OUTPUTS)}: f32, ranks 3/4, hidden state = " \
                                                "the lm_head input"


def embedding_path(model: ov.Model, where: str) -> tuple[bool, str]:
    try:
        surgery.check_embedding_path(model, where)
    except IRSurgeonError as e:
        return False, str(e)
    return True, f"'{surgery.EMBEDDING_NAMES[0]}' node and input_ids present"


def pair(info, config: Path) -> tuple[bool, str]:
    """pairing.check_pair on the assistant config at `config`."""
    try:
        cfg = load_assistant_config(config)
        check_pair(info, cfg)
    except IRSurgeonError as e:
        return False, str(e)
    return True, (f"{config}: backbone {cfg.backbone_hidden_size}, vocab {cfg.vocab_size}, head dims and KV heads "
                  f"match the target's store layers")


def assistant_io(xml: Path, config: Path) -> tuple[bool, str]:
    """The assistant IR's ports as genai feeds and reads them (names from gemma4_mtp.model)."""
    try:
        cfg = load_assistant_config(config)
        model = files.read_model(xml)
    except IRSurgeonError as e:
        return False, str(e)
    ins = {n: i for i in model.inputs for n in i.get_names()}
    outs = {n for o in model.outputs for n in o.get_names()}
    want = {"inputs_embeds": (ov.Type.f32, 3), "position_ids": (ov.Type.i64, 2), "attention_mask": (ov.Type.i64, 2),
            **{n: (ov.Type.f32, 4) for pair in KV_INPUTS.values() for n in pair}}
    problems = [f"no input {n}" for n in want if n not in ins]
    problems += [f"no output {n}" for n in OUTPUTS if n not in outs]
    for name, (etype, rank) in want.items():
        shape = ins[name].get_partial_shape() if name in ins else None
        if shape is not None and (ins[name].get_element_type() != etype or shape.rank.is_dynamic
                                  or shape.rank.get_length() != rank):
            problems.append(f"input {name} is {ins[name].get_element_type().get_type_name()} {shape}, expected "
                            f"{etype.get_type_name()} rank {rank}")
    width = 2 * cfg.backbone_hidden_size
    embeds = ins["inputs_embeds"].get_partial_shape() if "inputs_embeds" in ins else None
    if embeds is not None and embeds.rank.is_static and embeds[-1] != ov.Dimension(width):
        problems.append(f"inputs_embeds last dimension is {embeds[-1]}, "
                        f"expected 2 * backbone_hidden_size = {width}")
    return not problems, "; ".join(f"{xml}: {p}" for p in problems) or \
        f"inputs_embeds [?,?,{width}], position_ids, attention_mask, {len(KV_INPUTS)} K/V inputs; logits, " \
        "last_hidden_state"
