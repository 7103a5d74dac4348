"""`irsurgeon verify` for a DFlash directory: what openvino-genai 2026.4.1's DFlash path reads, without genai.

    target layout            a text export of layout.TARGET_TYPES (or decomposed Qwen3.5 VLM) with a logits MatMul
                             (target.inspect_target)
    draft files              dflash_draft/ openvino_model.xml/.bin and config.json
    draft pair               target.check_pair on dflash_draft/config.json (and on --checkpoint's config.json)
    draft I/O                inputs in genai's order: inputs_embeds f32 [?,?,H], hidden_states f32 [?,?,n*H],
                             position_ids i64 rank 2, attention_mask i64 rank 2, beam_idx i32 rank 1; exactly one of
                             last_hidden_state f32 [?,?,H] / logits
    draft states             two per draft layer (ReadValue and Assign), f32 rank 4
    draft rt_info            dflash_mode "True", dflash/mask_token_id and dflash/target_layer_ids as config.json has them
    hidden-state annotation  on the target IR: one entry per decoder layer, every producer an op of the graph with that
                             output, the last one the lm_head MatMul's input (post-final-norm)

Each check is a Check row; a failed check never raises. The house (irsurgeon.flows.verify) adds the interrupted-run line.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import openvino as ov

from irsurgeon.core import rtinfo
from irsurgeon.core.config import read_json
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.core.text import shown
from irsurgeon.draft.protocol import Check
from irsurgeon.families.dflash import model as dflash
from irsurgeon.families.dflash.layout import CONFIG, DRAFT_DIR, DRAFT_FILES, MODEL_XML
from irsurgeon.families.dflash.target import check_pair, inspect_target
from irsurgeon.ir import files, graph, xmlsafe
from irsurgeon.ir.hidden_states import lm_head_input, parse_annotation

Result = tuple[str, bool, str]


def verify(target: Path, checkpoint: str | Path | None = None, hub=None, echo=print) -> list[Check]:
    return [Check(*c) for c in _checks(Path(target), checkpoint)]


def _checks(target: Path, checkpoint) -> list[Result]:
    try:
        info = inspect_target(target)
    except IRSurgeonError as e:
        return [("target layout", False, str(e))]
    checks: list[Result] = [("target layout", True, f"{info.xml_name}: {info.model_type}, hidden {info.hidden_size}, "
                                                     f"vocab {info.vocab_size}, {info.num_layers} layers")]
    draft = target / DRAFT_DIR
    missing = [n for n in DRAFT_FILES if not (draft / n).is_file()]
    checks.append(("draft files", not missing, f"missing {', '.join(f'{DRAFT_DIR}/{n}' for n in missing)} "
                   f"(irsurgeon patch {target} --checkpoint DRAFT_DIR)" if missing else
                   f"{DRAFT_DIR}/ holds {', '.join(DRAFT_FILES)}"))
    checks.append(("hidden-state annotation", *annotation_check(info.xml, info.num_layers)))
    if missing:
        return checks
    try:
        cfg = dflash.parse_config(read_json(draft / CONFIG), str(draft / CONFIG))
    except IRSurgeonError as e:
        return checks + [("draft pair", False, str(e))]
    checks.append(("draft pair", *pair(info, cfg)))
    if checkpoint is not None:
        checks.append(("checkpoint pair", *checkpoint_pair(info, Path(checkpoint), cfg)))
    try:
        model = files.read_model(draft / MODEL_XML)  # byte-checked first: no DTD, .bin long enough
    except IRSurgeonError as e:
        return checks + [("draft readable", False, str(e))]
    checks.append(("draft I/O", *draft_io(model, cfg)))
    checks.append(("draft states", *draft_states(model, cfg)))
    checks.append(("draft rt_info", *draft_rt_info(model, cfg)))
    return checks


def pair(info, cfg) -> tuple[bool, str]:
    try:
        check_pair(info, cfg)
    except IRSurgeonError as e:
        return False, str(e)
    return True, (f"{cfg.source}: hidden {cfg.hidden_size}, target layers {list(cfg.target_layer_ids)} of "
                  f"{cfg.num_target_layers}, mask token {cfg.mask_token_id} < vocab {info.vocab_size}")


def checkpoint_pair(info, checkpoint: Path, built) -> tuple[bool, str]:
    """--checkpoint against the target, and against the configuration the draft in DRAFT_DIR was built from (its
    config.json, the checkpoint's as the patch copied it): a DFlash draft shares no tensor with its checkpoint's
    target, so what proves it is this checkpoint's draft is every value the build read being the same (a mask token,
    target layers or block size of another checkpoint make another draft)."""
    try:
        cfg = dflash.parse_config(read_json(checkpoint / CONFIG), str(checkpoint / CONFIG))
    except IRSurgeonError as e:
        return False, str(e)
    ok, detail = pair(info, cfg)
    differ = [f.name for f in fields(cfg) if f.compare and getattr(cfg, f.name) != getattr(built, f.name)]
    if ok and differ:
        name = differ[0]
        return False, (f"{checkpoint}: not the checkpoint {DRAFT_DIR}/ was built from: its {name} is "
                       f"{shown(repr(getattr(cfg, name)))[:60]}, the draft's {shown(repr(getattr(built, name)))[:60]}"
                       + (f" (and {len(differ) - 1} more value(s) differ)" if len(differ) > 1 else ""))
    return ok, detail


def _port(p, etype: ov.Type, rank: int, last: int | None) -> str | None:
    shape = p.get_partial_shape()
    ok = p.get_element_type() == etype and shape.rank.is_static and shape.rank.get_length() == rank
    if ok and last is not None:
        ok = shape[rank - 1].is_static and shape[rank - 1].get_length() == last
    want = f"{etype.get_type_name()} rank {rank}" + (f" [..., {last}]" if last is not None else "")
    return None if ok else f"{p.get_any_name()} is {p.get_element_type().get_type_name()} {shape}, expected {want}"


def draft_io(model: ov.Model, cfg) -> tuple[bool, str]:
    H, n = cfg.hidden_size, len(cfg.target_layer_ids)
    want = {"inputs_embeds": (ov.Type.f32, 3, H), "hidden_states": (ov.Type.f32, 3, n * H),
            "position_ids": (ov.Type.i64, 2, None), "attention_mask": (ov.Type.i64, 2, None),
            "beam_idx": (ov.Type.i32, 1, None)}
    names = [p.get_any_name() for p in model.inputs]
    problems = [] if names == list(dflash.INPUTS) else [f"inputs are {names}, expected {list(dflash.INPUTS)}"]
    by_name = {n: p for p in model.inputs for n in p.get_names()}
    problems += [p for name, spec in want.items() if name in by_name and (p := _port(by_name[name], *spec))]
    outs = {n: o for o in model.outputs for n in o.get_names()}
    heads = [n for n in (dflash.OUTPUT, graph.LOGITS) if n in outs]
    if len(heads) != 1:
        problems.append(f"outputs {sorted(outs)}: expected exactly one of {dflash.OUTPUT}, {graph.LOGITS}")
    elif heads[0] == dflash.OUTPUT and (p := _port(outs[dflash.OUTPUT], ov.Type.f32, 3, H)):
        problems.append(p)
    return not problems, "; ".join(problems) or (f"inputs {', '.join(dflash.INPUTS)} (hidden_states [?,?,{n * H}]); "
                                                 f"output {heads[0]}")


def draft_states(model: ov.Model, cfg) -> tuple[bool, str]:
    want = 2 * len(cfg.layers)
    reads = [op for op in model.get_ops() if op.get_type_name() == "ReadValue"]
    assigns = [op for op in model.get_ops() if op.get_type_name() == "Assign"]
    bad = [op.get_friendly_name() for op in reads
           if op.get_output_element_type(0) != ov.Type.f32 or op.get_output_partial_shape(0).rank.get_length() != 4]
    ok = len(reads) == len(assigns) == want and not bad
    detail = f"{len(reads)} ReadValue / {len(assigns)} Assign, expected {want} (2 per layer)"
    return ok, detail + (f"; not f32 rank 4: {bad[:3]}" if bad else "")


def draft_rt_info(model: ov.Model, cfg) -> tuple[bool, str]:
    problems = []
    for path, value in dflash.rt_info(cfg).items():
        found = str(model.get_rt_info(list(path)).value) if model.has_rt_info(list(path)) else None
        if found != value:
            problems.append(f"{'/'.join(path)} is {found!r:.40}, config.json says {value!r}")
    return not problems, "; ".join(problems) or ", ".join(f"{'/'.join(p)}={v}" for p, v in dflash.rt_info(cfg).items())


def annotation_check(xml: Path, num_layers: int) -> tuple[bool, str]:
    """The target's hidden_states_decoder_layers: one entry per layer, producers that exist, last = lm_head input."""
    try:
        value = xmlsafe.get_value(files.read_ir_bytes(xml), (rtinfo.HIDDEN_STATES_LAYERS,), str(xml))
        if value is None:
            return False, "absent (genai would fall back to name patterns: the pre-norm tensor for the last layer)"
        layers = parse_annotation(value, str(xml))
        if sorted(layers) != list(range(num_layers)):
            return False, f"layers {sorted(layers)} annotated, the target has {num_layers}"
        model = files.read_model(xml)
        ops = {op.get_friendly_name(): op for op in model.get_ops()}
        for i, (name, index) in sorted(layers.items()):
            if name not in ops or index >= ops[name].get_output_size():
                return False, f"layer {i}'s producer {name!r} output {index} is not in the graph"
        final, _ = lm_head_input(model, None, str(xml))
        last = layers[num_layers - 1]
        if (final.get_node().get_friendly_name(), final.get_index()) != last:
            return False, (f"the last layer's entry {last[0]!r} is not the lm_head MatMul's input "
                           f"{final.get_node().get_friendly_name()!r} (the post-final-norm tensor)")
    except IRSurgeonError as e:
        return False, str(e)
    return True, f"{num_layers} layers, the last the post-final-norm tensor"
