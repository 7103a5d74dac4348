"""A Gemma 4 target directory as the read-only side sees it: recognised from config.json, described, paired.

    target_type     TARGET/config.json model_type gemma4_text / gemma4_unified_text (or gemma4 / gemma4_unified with a
                    text_config), else None
    inspect_target  the text-only export: widths, vocabulary, layer types, KV-shared layers, and its ov.Model
    check_pair      the assistant's config against the target (what patch refuses and verify reports)
    ready           the five outputs exposed and TARGET/mtp_assistant/ holding the assistant

Nothing here writes: `patch` (gemma4_mtp.patch) and `verify` / `show` (gemma4_mtp.verify) share it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import openvino as ov

from irsurgeon.core.config import read_json, show
from irsurgeon.core.errors import ConfigError, IRError, IRSurgeonError
from irsurgeon.families.gemma4_mtp import target as surgery
from irsurgeon.families.gemma4_mtp.layout import CONFIG, MODEL_XML, UNIFIED_TARGETS, UNIFIED_TYPE
from irsurgeon.families.gemma4_mtp.model import AssistantConfig, Layer, k_eq_v, resolve_layers
from irsurgeon.ir import files
from irsurgeon.ir.export import LANGUAGE_MODEL


@dataclass(frozen=True)
class Gemma4Target:
    path: Path
    hidden_size: int
    vocab_size: int
    layer_types: list[str]
    layers: tuple[Layer, ...]
    num_kv_shared: int
    k_eq_v: bool = False  # attention_k_eq_v: its full-attention layers store their keys as values
    model_type: str = "gemma4_text"  # config.json's: a gemma4_unified(_text) target takes the unified assistant

    @property
    def xml(self) -> Path:
        return self.path / MODEL_XML

    def store_layer(self, kind: str) -> Layer | None:
        stores = surgery.store_layers(self.layer_types, self.num_kv_shared)
        return self.layers[stores[kind]] if kind in stores else None


def inspect_target(path: str | Path) -> tuple[Gemma4Target, ov.Model]:
    path = Path(path)
    if (path / LANGUAGE_MODEL).is_file():
        raise IRError(f"{path}: a VLM-layout export; openvino-genai's Gemma 4 MTP path needs a text-only export "
                      f"(optimum-cli export openvino --task text-generation-with-past)")
    if not (path / MODEL_XML).is_symlink() and not (path / MODEL_XML).exists():  # else read_model says what it is
        raise IRError(f"{path}: no {MODEL_XML} (a text-only Gemma 4 export)")
    raw = read_json(path / CONFIG)
    model_type = raw.get("model_type")
    text = raw.get("text_config") if model_type in ("gemma4", "gemma4_unified") else raw
    if not isinstance(text, dict):
        raise ConfigError(f"{path / CONFIG}: model_type {model_type} without a text_config object")
    layers = resolve_layers(text, str(path / CONFIG), "text_config." if text is not raw else "")
    model = files.read_model(path / MODEL_XML)
    hidden = surgery.lm_head_input(model, str(path / MODEL_XML)).get_partial_shape()[-1]
    logits = [o for o in model.outputs if surgery.LOGITS in o.get_names()][0].get_partial_shape()[-1]
    if hidden.is_dynamic or logits.is_dynamic:
        raise IRError(f"{path / MODEL_XML}: hidden size or vocab is not static")
    shared = text.get("num_kv_shared_layers", 0) or 0
    if not isinstance(shared, int) or not 0 <= shared < len(layers):
        raise ConfigError(f"{path / CONFIG}: num_kv_shared_layers is {shared!r}, expected 0..{len(layers) - 1}")
    return Gemma4Target(path, hidden.get_length(), logits.get_length(), [x.kind for x in layers], layers,
                        shared, k_eq_v(text, str(path / CONFIG), "text_config." if text is not raw else ""),
                        model_type), model


def check_pair(target: Gemma4Target, cfg: AssistantConfig) -> None:
    """The assistant must have been made for this target: its kind (a unified assistant for a unified target),
    widths, vocabulary and the K/V it attends over."""
    unified_target = target.model_type in UNIFIED_TARGETS
    if (cfg.model_type == UNIFIED_TYPE) != unified_target:
        made_for = "a gemma4_unified" if cfg.model_type == UNIFIED_TYPE else "a gemma4 (not unified)"
        raise IRSurgeonError(f"assistant {cfg.source} does not belong to target {target.path}: model_type "
                             f"{cfg.model_type} is made for {made_for} target, the target is {target.model_type}")
    pairs = [("backbone_hidden_size", target.hidden_size, cfg.backbone_hidden_size),
             ("vocab_size", target.vocab_size, cfg.vocab_size)]
    for kind in {x.kind for x in cfg.layers}:
        store = target.store_layer(kind)
        if store is None:
            raise IRSurgeonError(f"assistant {cfg.source} does not belong to target {target.path}: it has "
                                 f"{kind} layers, the target stores no {kind} K/V")
        mine = cfg.layer_of(kind)
        pairs += [(f"{kind} head_dim", store.head_dim, mine.head_dim),
                  (f"{kind} KV heads", store.kv_heads, mine.kv_heads)]
    if "full_attention" in {x.kind for x in cfg.layers}:
        # the full-attention K/V the assistant attends over: with attention_k_eq_v the target's values are its keys
        # (transformers 5.24.0 Gemma4TextAttention), a different tensor from a v_proj's even at equal KV heads
        pairs.append(("text_config.attention_k_eq_v", target.k_eq_v, cfg.k_eq_v))
    for key, want, got in pairs:
        if want != got:
            raise IRSurgeonError(f"assistant {cfg.source} does not belong to target {target.path}: {key} is "
                                 f"{show(got)}, the target has {show(want)}")
