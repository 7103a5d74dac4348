"""An EAGLE-3 target as patch and verify see it, genai's tap rule, and the pair check.

    inspect_target   openvino_model.xml of a text export, or openvino_language_model.xml of a VLM export
                     (qwen3_vl, qwen2_5_vl): its decoder layer count (config.json, else text_config), width and
                     vocabulary (the logits MatMul), and which layers genai can tap
    genai_taps       openvino.genai (master da1db864, the 2026.4.1 binary's strings) eagle3_model_transforms.cpp
                     transform_hidden_state / is_hidden_state_residual_node: for layer i, the first op in
                     get_ordered_ops() that is an Add whose friendly name contains "layers.{i}/" and whose input 1
                     is a MatMul whose input 0 is a Multiply (the MLP residual: the output of layer i). A layer without
                     one (a MoE block's residual: openvino.genai issue 4390) cannot be tapped by 2026.4.1 as exported;
                     patch makes its output tappable by an edit of openvino_model.xml (moe_taps.py)
    check_pair       the draft must be made for this target: width, vocabulary, modality, and taps genai can take
                     (or, for patch, taps whose MoE layer the edit makes tappable: target.edits). genai 2026.4.1 runs
                     a VLM target's EAGLE-3 draft on embeddings (continuous_batching/pipeline.cpp: an inputs embedder
                     makes the ModelDesc of Eagle3DecodingImpl; eagle3_strategy.cpp create_draft_input_embeddings
                     and add_request feed the draft inputs_embeds and the target's mrope position_ids, shifted by
                     one token): a text draft there fails at its first call ("Port for tensor name inputs_embeds was
                     not found", measured), and a VLM draft on a text target has no embeddings to take
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from pathlib import Path

from irsurgeon.core.config import read_json, text_section
from irsurgeon.core.errors import ConfigError, IRError, IRSurgeonError, with_hint
from irsurgeon.draft.protocol import Target
from irsurgeon.families.eagle3.layout import (CONFIG, MODEL_XML, MOE_TARGET_TYPES, VLM_XML, is_vlm_target,
                                              target_type_problem)
from irsurgeon.families.eagle3.model import DISTINCT, Eagle3Config, default_taps, in_trained_order, repeated
from irsurgeon.families.eagle3.moe_taps import LAYER_NAME, layer_outputs
from irsurgeon.ir import files, graph
from irsurgeon.ir.hidden_states import lm_head_input


@dataclass
class Eagle3Target(Target):
    path: Path
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    tappable: frozenset[int]            # the layers genai's rule finds a residual Add in
    untapped: dict[int, str]            # the other layers whose output Add the edit can tap (MoE): layer -> its name
    taps: tuple[int, ...] = ()          # set by check_pair: the layers the draft is fed from
    edits: tuple[int, ...] = ()         # set by check_pair: the taps patch makes tappable (moe_taps.py)
    xml_name: str = MODEL_XML           # the IR genai taps: VLM_XML for a VLM export

    @property
    def xml(self) -> Path:
        return self.path / self.xml_name

    @property
    def vlm(self) -> bool:
        return self.xml_name == VLM_XML


def genai_taps(model) -> dict[int, str]:
    """Layer index -> the friendly name of the Add genai would tap there (the first one, in genai's order)."""
    found: dict[int, str] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Add" or op.get_input_size() != 2:
            continue
        mm = op.input_value(1).get_node()
        if mm.get_type_name() != "MatMul" or mm.input_value(0).get_node().get_type_name() != "Multiply":
            continue
        for i in {int(m) for m in LAYER_NAME.findall(op.get_friendly_name())}:
            found.setdefault(i, op.get_friendly_name())
    return found


def inspect_target(directory: str | Path) -> Eagle3Target:
    path = Path(directory)
    name = VLM_XML if is_vlm_target(path) else MODEL_XML
    xml = path / name
    if not xml.is_symlink() and not xml.exists():
        raise IRError(f"{path}: no {MODEL_XML} (an EAGLE-3 target is a text export: optimum-cli export openvino "
                      f"--task text-generation-with-past; or a qwen3_vl / qwen2_5_vl export with {VLM_XML})")
    top = read_json(path / CONFIG)
    section = text_section(top)
    layers = section.get("num_hidden_layers")
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= 4096:
        raise ConfigError(f"{path / CONFIG}: num_hidden_layers must be an integer from 1 to 4096, found "
                          f"{layers!r:.40}")
    kind = (top if name == VLM_XML else section).get("model_type")
    if (problem := target_type_problem(kind, name == VLM_XML)) is not None:
        raise IRError(f"{path / CONFIG}: {problem}")
    model = files.read_model(xml)
    _, hidden = lm_head_input(model, None, str(xml))
    logits = graph.logits_matmul(model, str(xml)).output(0).get_partial_shape()
    if logits.rank.is_dynamic or logits[-1].is_dynamic:
        raise IRError(f"{xml}: the logits width (vocabulary) is not static")
    tappable = frozenset(genai_taps(model))
    # moe_taps edits openvino_model.xml only: a VLM export's untappable layer is refused, not edited
    untapped = {i: n for i, n in layer_outputs(model).items() if i not in tappable} if kind in MOE_TARGET_TYPES else {}
    return Eagle3Target(path, str(kind), layers, hidden, logits[-1].get_length(), tappable, untapped, xml_name=name)


def resolve_taps(target: Eagle3Target, cfg: Eagle3Config, override: tuple[int, ...] | None = None,
                 recorded: bool = False) -> tuple[tuple[int, ...], str]:
    """The taps the draft is fed from (genai's counting), and one line saying where they come from (recorded: the
    override is what a built draft records, verify's case)."""
    if override is not None:
        ids = asked_taps(override, cfg.architecture)
        if recorded:
            return ids, f"taps {list(ids)} (recorded in the draft)"
        return ids, f"taps {list(ids)} (as asked{', in layer order' if ids != tuple(override) else ''})"
    if cfg.taps.ids is not None:
        return cfg.taps.ids, f"taps {list(cfg.taps.ids)} from {cfg.taps.said}"
    ids = default_taps(cfg.architecture, target.num_layers)
    said = f"{cfg.taps.said} for a {target.num_layers}-layer target"
    if (twice := repeated(ids)) is not None or min(ids) < 0:
        what = f"names layer {twice} twice" if twice is not None else "names a layer before the first"
        raise with_hint(ConfigError(f"{cfg.source}: names no tap layers, and {said}, {list(ids)}, {what}: "
                                    f"{DISTINCT}"), "--hidden-layers",
                        "choose three distinct target layers with --hidden-layers I,J,K")
    return ids, f"taps {list(ids)}: {said} (layer outputs)"


def asked_taps(ids, architecture: str) -> tuple[int, ...]:
    """Taps given explicitly (the Python API's Options.hidden_layers; the CLI checks its option the same way first):
    three distinct non-negative layer indices, recorded in the order the draft's trainer fed them (model.py
    in_trained_order: layer order, or as given for an AngelSlim draft)."""
    try:
        ids = tuple(ids)
    except TypeError:
        raise ConfigError(f"hidden layers {ids!r:.40}: expected three non-negative layer indices") from None
    if len(ids) != 3 or any(isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in ids):
        raise ConfigError(f"hidden layers {list(ids)!r:.60}: expected three non-negative layer indices")
    ids = tuple(int(i) for i in ids)
    if (twice := repeated(ids)) is not None:
        raise ConfigError(f"hidden layers {list(ids)} name layer {twice} twice: {DISTINCT}")
    return in_trained_order(ids, architecture)


def check_pair(target: Eagle3Target, cfg: Eagle3Config, override: tuple[int, ...] | None = None,
               edit: bool = False, recorded: bool = False) -> str:
    """Refuses a draft not made for this target (one line naming the key); sets target.taps and, with edit (patch),
    target.edits: the taps in MoE layers genai can tap once moe_taps' edit is made. Returns the taps line."""
    def refuse(detail: str) -> None:
        raise IRSurgeonError(f"draft {cfg.source} does not belong to target {target.path}: {detail}")

    if cfg.hidden_size != target.hidden_size:
        refuse(f"hidden_size is {cfg.hidden_size}, the target's is {target.hidden_size}")
    if cfg.vocab_size != target.vocab_size:
        refuse(f"vocab_size is {cfg.vocab_size}, the target's vocabulary is {target.vocab_size}")
    if target.vlm and not cfg.vlm:
        refuse(f"the target is a {target.model_type} VLM export and the draft a text draft (no modal_type \"VLM\"): "
               f"openvino-genai 2026.4.1 feeds a VLM target's draft inputs_embeds and 3-row mrope position_ids")
    if cfg.vlm and not target.vlm:
        refuse(f"it is a VLM draft (target_model_type {cfg.target_model_type}), this is a {target.model_type} text "
               f"export ({MODEL_XML})")
    if cfg.vlm and cfg.target_model_type != target.model_type:
        refuse(f"target_model_type is {cfg.target_model_type}, the target is {target.model_type}")
    taps, said = resolve_taps(target, cfg, override, recorded)
    outside = [i for i in taps if not 0 <= i < target.num_layers]
    if outside:
        refuse(f"{said} names layer {outside[0]}, the target has {target.num_layers} decoder layers")
    missing = [i for i in taps if i not in target.tappable]
    blocked = [i for i in missing if not (edit and i in target.untapped)]
    if blocked and blocked[0] in target.untapped:
        refuse(f"{said}: target layer {blocked[0]}'s output {target.untapped[blocked[0]]!r} is not fed by "
               f"MatMul(Multiply) (a MoE layer), so genai 2026.4.1 taps nothing there (openvino.genai issue 4390) "
               f"until `irsurgeon patch` adds its tap to {MODEL_XML}")
    if blocked:
        refuse(f"{said}: target layer {blocked[0]} has no residual Add genai 2026.4.1 can tap (an Add named "
               f"'layers.{blocked[0]}/' fed by MatMul(Multiply); openvino.genai issue 4390), nor an output Add "
               f"(Add after Add in the layer) that patch could add the tap after")
    target.taps, target.edits = taps, tuple(missing)
    return said
