"""What a DFlash directory holds and what the family writes into it (names only: no openvino here).

    claims         a checkpoint config.json whose `architectures` name DFlashDraftModel, or with a `dflash_config`
                   object (its model_type is "qwen3", like a plain Qwen3 target's, which is never claimed)
    recognised by  DRAFT: TARGET/dflash_draft/ exists; TARGET: a Qwen3 text export (config.json model_type qwen3,
                   openvino_model.xml); Qwen3.5 VLM targets are the MTP family's until a draft is there
    writes         TARGET/dflash_draft/{openvino_model.xml, .bin, config.json} (the draft, its checkpoint config) and
                   the target IR's .xml with the hidden-state annotation: openvino_model.xml (Qwen3 text) or
                   openvino_language_model.xml (decomposed Qwen3.5 VLM); a target .bin is never written
    runs           LLMPipeline(TARGET, scheduler_config=sc, draft_model=draft_model(TARGET/dflash_draft))
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import peek_json
from irsurgeon.ir.export import LANGUAGE_MODEL, TEXT_ONLY_MODEL, bin_of

ARCHITECTURE = "DFlashDraftModel"
TARGET_TYPE = "qwen3"
DRAFT_DIR = "dflash_draft"
MODEL_XML, MODEL_BIN = TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL)
LANGUAGE_XML = LANGUAGE_MODEL
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
