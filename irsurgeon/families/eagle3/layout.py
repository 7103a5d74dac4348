"""What an EAGLE-3 directory holds and what the family writes into it (names only: no openvino here).

    claims         a checkpoint config.json whose `architectures` name one of ARCHITECTURES (SafeAILab/SpecForge's
                   LlamaForCausalLMEagle3, AngelSlim's Eagle3LlamaForCausalLM, the speculators' Eagle3Speculator) or
                   with `speculators_model_type` "eagle3"; or, whatever its labels, a checkpoint holding one EAGLE-3
                   draft layer (held_draft), read as held (reading)
    recognised by  DRAFT: TARGET/eagle3_draft/ exists; TARGET: a text export (openvino_model.xml) of a model type an
                   EAGLE-3 draft is published for, or a VLM export (openvino_language_model.xml) of a VLM type
                   AngelSlim publishes VLM drafts for (VLM_TARGET_TYPES)
    writes         TARGET/eagle3_draft/{openvino_model.xml, .bin, config.json, generation_config.json}; genai taps the
                   target at load, from the draft's rt_info hidden_layers_list, so its openvino_model.xml is written
                   only where a tap is in a MoE layer genai cannot tap as exported (moe_taps.py; the .bin never).
                   genai 2026.4.1 reads the draft folder's generation config: without one its stop tokens are -1 and generate fails
                   ("'stop_token_ids' must be non-negative"), so the target's is copied there
    runs           LLMPipeline(TARGET, scheduler_config=sc, draft_model=draft_model(TARGET/eagle3_draft)); a VLM
                   target: VLMPipeline, the same arguments
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import brief, peek_json
from irsurgeon.ir.export import GENERATION_CONFIG, LANGUAGE_MODEL, TEXT_ONLY_MODEL, bin_of

SAFEAILAB, ANGELSLIM, SPECULATORS = "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "Eagle3Speculator"
ARCHITECTURES = (SAFEAILAB, ANGELSLIM, SPECULATORS)
MODEL_TYPES = ("llama",)  # the draft layer's config model_type (speculators: "speculators" at the top level)
TARGET_TYPES = ("llama", "qwen3", "qwen2", "mistral", "qwen3_moe")  # text targets EAGLE-3 drafts are published for
VLM_TARGET_TYPES = ("qwen3_vl", "qwen2_5_vl")  # VLM targets of AngelSlim's VLM drafts that genai 2026.4.1 runs
DRAFT_DIR = "eagle3_draft"
MODEL_XML, MODEL_BIN = TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL)
VLM_XML = LANGUAGE_MODEL  # a VLM target's language model (genai's VLMPipeline reads it by this name)
CONFIG = "config.json"
GENERATION = GENERATION_CONFIG
DRAFT_FILES = (MODEL_XML, MODEL_BIN, CONFIG, GENERATION)
WRITES = (*(f"{DRAFT_DIR}/{n}" for n in DRAFT_FILES), MODEL_XML)


def architecture(config: dict) -> str | None:
    """The EAGLE-3 layout a config.json names, or None."""
    archs = config.get("architectures")
    named = [a for a in archs if a in ARCHITECTURES] if isinstance(archs, list) else []
    if named:
        return named[0]
    return SPECULATORS if config.get("speculators_model_type") == "eagle3" else None


# What an EAGLE-3 draft holds, whatever its config's labels say (SafeAILab uploads its drafts as LlamaForCausalLM, and
# vLLM and SGLang take them by these tensors: vLLM's speculative config maps LlamaForCausalLM to its EAGLE-3 class):
# fc over the three concatenated target states, one decoder layer with EAGLE-3's hidden_norm under either stored
# prefix, and a draft head (d2t, or a full-vocabulary lm_head); never a base model's stack of layers.
LAYER_PREFIXES = ("midlayer.", "layers.0.")
FC = "fc.weight"
HEADS = ("d2t", "lm_head.weight")
BASE_LAYERS = ("model.layers.", "layers.1.")  # a plain causal LM's layers; a second draft layer
QK_NORM = "self_attn.q_norm.weight"  # speculators' Qwen3 draft layer


def held_draft(held) -> str | None:
    """What makes the tensors of `held` (weights.held.Held) one EAGLE-3 draft layer, in words, or None."""
    names = held.names
    prefix = next((p for p in LAYER_PREFIXES if {f"{p}hidden_norm.weight", f"{p}self_attn.q_proj.weight"} <= names),
                  None)
    heads = [n for n in HEADS if n in names]
    if FC not in names or prefix is None or not heads or any(n.startswith(BASE_LAYERS) for n in names):
        return None
    fc, norm = held.shape(FC), held.shape(f"{prefix}hidden_norm.weight")
    if fc is not None and (len(fc) != 2 or fc[1] % 3 or (norm is not None and norm != fc[:1])):
        return None  # not [H, 3 * H_t] over a layer of width H
    return f"{FC}{' ' + str(list(fc)) if fc else ''}, one layer {prefix}* with hidden_norm, {' and '.join(heads)}"


# keys only AngelSlim's trainer writes (its DraftModelConfig keeps them: compressor/speculative/train): a config that
# names no layout but carries one is AngelSlim's, whose text drafts train at base 10000 and whose mrope interleaves
ANGELSLIM_MARKS = ("modal_type", "aux_hidden_states_layer_ids")


def angelslim_marked(config: dict) -> bool:
    rope = config.get("rope_scaling")
    return any(k in config for k in ANGELSLIM_MARKS) or (isinstance(rope, dict) and "mrope_interleaved" in rope)


def claims(config: dict, held=None) -> bool:
    return architecture(config) is not None or (held is not None and held.known and held_draft(held) is not None)


def reading(config: dict, held, source: str) -> tuple[dict, list[str]]:
    """The config as an EAGLE-3 draft of these tensors is read: `architectures` naming no EAGLE-3 layout read as
    SafeAILab's (a flat Llama config: what SafeAILab's uploads are), and a `num_hidden_layers` copied from the base
    model set to the one layer held; one line saying so (empty when nothing was set aside)."""
    evidence = held_draft(held) if held is not None and held.known else None
    if evidence is None:
        return config, []
    read, aside = dict(config), []
    if architecture(config) is None:
        read["architectures"] = [ANGELSLIM if angelslim_marked(config) else SAFEAILAB]
        aside = [f"architectures {brief(config.get('architectures'), 60)}"]
    nested = architecture(read) == SPECULATORS and isinstance(read.get("transformer_layer_config"), dict)
    section = dict(read["transformer_layer_config"]) if nested else read
    if nested and "model_type" not in section:  # speculators reads it as Qwen3 since PR #620 (03ba008b), Llama before
        section["model_type"] = "qwen3" if any(n.endswith(QK_NORM) for n in held.names) else "llama"
        aside.append(f"a transformer_layer_config without model_type (read as {section['model_type']}: "
                     f"{'with' if section['model_type'] == 'qwen3' else 'no'} q_norm / k_norm)")
    if section.get("num_hidden_layers", 1) != 1:
        aside.append(f"{'transformer_layer_config.' if nested else ''}num_hidden_layers "
                     f"{brief(section['num_hidden_layers'], 20)}")
        section["num_hidden_layers"] = 1
    if nested:
        read["transformer_layer_config"] = section  # the copy edited above
    if not aside:
        return config, []
    as_what = f"{architecture(read)}'s layout" if architecture(config) is None else "one layer"
    held_in = f" ({', '.join(held.files[:2])}{', ...' if len(held.files) > 2 else ''})" if held.files else ""
    return read, [f"{source}: {' and '.join(aside)} set aside: read as an EAGLE-3 draft ({as_what}) by what the "
                  f"checkpoint holds{held_in}: {evidence}"]


def has_draft(directory: str | Path) -> bool:
    return (Path(directory) / DRAFT_DIR).is_dir()


# moe_taps.py edits only these: a MoE layer's output Add reads the experts' sum (openvino.genai issue 4390); any other
# layer genai's rule does not find is not a layer this edit was measured on
MOE_TARGET_TYPES = ("qwen3_moe",)


def target_type_problem(model_type: object, vlm: bool) -> str | None:
    """Why an export of this model type is not an EAGLE-3 target, or None: the one rule show (recognise), patch and
    verify (target.inspect_target) apply."""
    allowed = VLM_TARGET_TYPES if vlm else TARGET_TYPES
    if model_type in allowed:
        return None
    return (f"model_type {model_type!r:.40} is not an EAGLE-3 {'VLM ' if vlm else ''}target: expected one of "
            f"{', '.join(allowed)} (the {'VLM' if vlm else 'text'} targets EAGLE-3 drafts are published for whose "
            f"export openvino-genai 2026.4.1 runs with one)")


def is_text_target(directory: str | Path) -> bool:
    directory = Path(directory)
    config = peek_json(directory / CONFIG) or {}
    return (target_type_problem(config.get("model_type"), vlm=False) is None and not claims(config)
            and (directory / MODEL_XML).is_file())


def is_vlm_target(directory: str | Path) -> bool:
    directory = Path(directory)
    config = peek_json(directory / CONFIG) or {}
    return target_type_problem(config.get("model_type"), vlm=True) is None and (directory / VLM_XML).is_file()


def target_xml(directory: str | Path) -> str:
    """The IR genai taps: a VLM export's language model, else the text export's model."""
    return VLM_XML if is_vlm_target(directory) else MODEL_XML
