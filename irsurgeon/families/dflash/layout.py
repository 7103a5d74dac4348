"""What a DFlash directory holds and what the family writes into it (names only: no openvino here).

    claims         a checkpoint config.json whose `architectures` name DFlashDraftModel, or with a `dflash_config`
                   object (its model_type is "qwen3", like a plain Qwen3 target's, which is never claimed)
    recognised by  DRAFT: TARGET/dflash_draft/ exists; TARGET: a Qwen3 text export (config.json model_type qwen3,
                   openvino_model.xml); Qwen3.5 VLM targets are the MTP family's, and Llama / Qwen3-MoE text exports
                   EAGLE-3's, until a draft is there (a DFlash checkpoint still patches them: TARGET_TYPES)
    targets        TARGET_TYPES: the model types patch accepts, each with the IR it carries the annotation in
    writes         TARGET/dflash_draft/{openvino_model.xml, .bin, config.json} (the draft, its checkpoint config) and
                   the target IR's .xml with the hidden-state annotation: openvino_model.xml (a text export) or
                   openvino_language_model.xml (decomposed Qwen3.5 VLM); a target .bin is never written
    runs           LLMPipeline(TARGET, scheduler_config=sc, draft_model=draft_model(TARGET/dflash_draft))
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import peek_json
from irsurgeon.ir.export import LANGUAGE_MODEL, TEXT_ONLY_MODEL, bin_of

ARCHITECTURE = "DFlashDraftModel"
DRAFT_TYPE = "qwen3"  # z-lab's drafts' own model_type, whatever their target
TARGET_TYPE = "qwen3"  # the bare text export `show` takes for a DFlash target
DRAFT_DIR = "dflash_draft"
MODEL_XML, MODEL_BIN = TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL)
LANGUAGE_XML = LANGUAGE_MODEL
# Targets by config.json's top-level model_type, and the IR each is patched in. z-lab publishes drafts for Qwen3
# (dense and Coder-30B-A3B MoE), Qwen3.5 / 3.6 (dense and MoE), LLaMA-3.1-8B-Instruct, Gemma 4 (31B-it, 26B-A4B-it)
# and gpt-oss (20b, 120b) (z-lab/dflash README.md); dflash/model.py reads a target only through its input embedding
# table, its lm_head and `hidden_states[layer + 1]` (dflash_generate). openvino.genai's DFlash path (da1db864d, the
# 2026.4.1 build: dflash_model_transforms.cpp, continuous_batching/dflash_strategy.cpp) names no model type: it reads
# the annotation, the lm_head MatMul (utils.cpp find_llm_matmul, through a Gemma logit softcap) and the embedding
# Gather, and converts the target to paged attention (sliding windows and gpt-oss's attention sinks included). Each
# type here ran token-identical to plain greedy in openvino-genai 2026.4.1 at f32 (docs/families.md,
# tests/families/dflash/test_dflash_genai.py, test_dflash_targets.py: gemma4_text and gpt_oss as optimum-intel 2.2.0
# exports them, equal to transformers' greedy tokens); any other type has not, and is refused by name. A Gemma 4
# VLM export (model_type gemma4) is among them: genai's VLM DFlash path embeds the draft's block through the VLM's
# text embeddings model (dflash_strategy.cpp DFlashCBDraftRunner::infer, InputsEmbedder::get_embedding_model), not
# the unscaled table z-lab's drafts are fed, and no such pair was run.
TARGET_TYPES = {"qwen3": MODEL_XML, "qwen3_moe": MODEL_XML, "llama": MODEL_XML,
                "qwen3_5": LANGUAGE_XML, "qwen3_5_moe": LANGUAGE_XML, "gemma4_text": MODEL_XML, "gpt_oss": MODEL_XML}
CONFIG = "config.json"
DRAFT_FILES = (MODEL_XML, MODEL_BIN, CONFIG)
WRITES = (*(f"{DRAFT_DIR}/{n}" for n in DRAFT_FILES), MODEL_XML, LANGUAGE_XML)


def claims(config: dict) -> bool:
    archs = config.get("architectures")
    named = isinstance(archs, list) and ARCHITECTURE in archs
    return named or isinstance(config.get("dflash_config"), dict)


def has_draft(directory: str | Path) -> bool:
    return (Path(directory) / DRAFT_DIR).is_dir()


def is_text_target(directory: str | Path) -> bool:
    """A Qwen3 text export: config.json model_type qwen3 (not a DFlash draft's config) and openvino_model.xml."""
    directory = Path(directory)
    config = peek_json(directory / CONFIG) or {}
    return (config.get("model_type") == TARGET_TYPE and not claims(config)
            and (directory / MODEL_XML).is_file())


def target_xml_name(directory: str | Path) -> str:
    """The target IR that carries the annotation: the VLM language model when there is one, else the text export."""
    return LANGUAGE_XML if (Path(directory) / LANGUAGE_XML).is_file() else MODEL_XML
