"""What a Gemma 4 MTP directory holds and what the family writes into it (names only: no openvino here).

    recognised by  TARGET/config.json model_type gemma4_text (or gemma4 with a text_config), the unified 12B's
                   gemma4_unified_text (or gemma4_unified with a text_config), or mtp_assistant/
    writes         TARGET/openvino_model.xml (the five mtp_* outputs; openvino_model.bin is never written) and
                   TARGET/mtp_assistant/{openvino_model.xml, .bin, config.json, generation_config.json}
    runs           LLMPipeline(TARGET, draft_model=draft_model(TARGET/mtp_assistant), ATTENTION_BACKEND="SDPA")
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import peek_json
from irsurgeon.ir.export import TEXT_ONLY_MODEL, bin_of

TARGET_TYPES = ("gemma4_text", "gemma4", "gemma4_unified_text", "gemma4_unified")
UNIFIED_TARGETS = ("gemma4_unified_text", "gemma4_unified")  # Gemma4UnifiedTextConfig / Gemma4UnifiedConfig
MODEL_TYPE = "gemma4_assistant"
UNIFIED_TYPE = "gemma4_unified_assistant"  # the Gemma 4 12B unified assistant (model.KINDS: the same graph)
ASSISTANT_DIR = "mtp_assistant"
MODEL_XML, MODEL_BIN = TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL)
CONFIG, GENERATION = "config.json", "generation_config.json"
ASSISTANT_FILES = (MODEL_XML, MODEL_BIN, CONFIG, GENERATION)
WRITES = (MODEL_XML, *(f"{ASSISTANT_DIR}/{n}" for n in ASSISTANT_FILES))


def target_type(target_dir: str | Path) -> str | None:
    """The Gemma 4 model_type of TARGET/config.json, or None (not Gemma 4, or no readable config: config.peek_json)."""
    model_type = (peek_json(Path(target_dir) / CONFIG) or {}).get("model_type")
    return model_type if model_type in TARGET_TYPES else None
