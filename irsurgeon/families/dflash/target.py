"""A DFlash target directory as patch and verify see it, and the pair check of a draft against it.

    inspect_target  the target IR (openvino_model.xml of a Qwen3, Qwen3-MoE or Llama text export, or
                    openvino_language_model.xml of a decomposed Qwen3.5 VLM export; layout.TARGET_TYPES, by
                    config.json's model_type, any other refused by name): decoder layers (config.json), hidden width
                    (the lm_head MatMul's input), vocabulary (the logits width: the rows genai's grafted lm_head
                    scores)
    check_pair      what the draft's config says of its target, against it: target_layer_ids within the target's
                    layers and unique, hidden_size, num_target_layers, mask_token_id a vocabulary row. Nothing proves
                    identity offline: the draft holds no tensor of its target (no embedding, no lm_head)

Nothing here writes.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from irsurgeon.core.config import read_json, text_section
from irsurgeon.core.errors import ConfigError, IRError, IRSurgeonError
from irsurgeon.draft.protocol import Target
from irsurgeon.families.dflash.layout import CONFIG, TARGET_TYPES, target_xml_name
from irsurgeon.ir import files, graph
from irsurgeon.ir.hidden_states import lm_head_input


@dataclass(frozen=True)
class DFlashTarget(Target):
    path: Path
    xml_name: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    warnings = ()

    @property
    def xml(self) -> Path:
        return self.path / self.xml_name


def inspect_target(directory: str | Path) -> DFlashTarget:
    path = Path(directory)
    name = target_xml_name(path)
    xml = path / name
    if not xml.is_symlink() and not xml.exists():  # else read_model says what it is
        raise IRError(f"{path}: no {name} (a text export: optimum-cli export openvino --task "
                      f"text-generation-with-past)")
    config = read_json(path / CONFIG)
    check_target_type(config, path / CONFIG, name)
    section = text_section(config)
    layers = section.get("num_hidden_layers")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ConfigError(f"{path / CONFIG}: num_hidden_layers must be a positive integer, found {layers!r:.40}")
    model = files.read_model(xml)
    _, hidden = lm_head_input(model, None, str(xml))
    logits = graph.logits_matmul(model, str(xml)).output(0).get_partial_shape()
    if logits.rank.is_dynamic or logits[-1].is_dynamic:
        raise IRError(f"{xml}: the logits width (vocabulary) is not static")
    return DFlashTarget(path, name, str(section.get("model_type", "")), layers, hidden, logits[-1].get_length())


def check_target_type(config: dict, source: Path, xml_name: str) -> None:
    """config.json's model_type must be one of layout.TARGET_TYPES, exported as the IR that type is patched in."""
    model_type = config.get("model_type")
    want = TARGET_TYPES.get(model_type) if isinstance(model_type, str) else None
    if want is None:
        raise ConfigError(f"{source}: model_type {model_type!r:.60} is not a DFlash target irsurgeon patches (it takes "
                          f"{', '.join(TARGET_TYPES)}: the types z-lab publishes drafts for that ran token-identical "
                          f"through openvino-genai 2026.4.1's DFlash path)")
    if want != xml_name:
        raise ConfigError(f"{source}: model_type {model_type} is a DFlash target as {want}, this directory's IR is "
                          f"{xml_name}")


def check_pair(target: DFlashTarget, cfg) -> None:
    """The draft must have been made for a target of this geometry (the module docstring); one line naming the key."""
    def refuse(detail: str) -> None:
        raise IRSurgeonError(f"draft {cfg.source} does not belong to target {target.path}: {detail}")

    ids = list(cfg.target_layer_ids)
    outside = [i for i in ids if not 0 <= i < target.num_layers]
    if outside:
        refuse(f"dflash_config.target_layer_ids {ids} name layer {outside[0]}, the target has {target.num_layers} "
               f"decoder layers")
    if len(set(ids)) != len(ids):
        refuse(f"dflash_config.target_layer_ids {ids} repeat a layer")
    pairs = [("hidden_size", target.hidden_size, cfg.hidden_size),
             ("num_target_layers", target.num_layers, cfg.num_target_layers)]
    for key, want, got in pairs:
        if want != got:
            refuse(f"{key} is {got}, the target has {want}")
    if not 0 <= cfg.mask_token_id < target.vocab_size:
        refuse(f"dflash_config.mask_token_id {cfg.mask_token_id} is not a row of the target's vocabulary of "
               f"{target.vocab_size}")
