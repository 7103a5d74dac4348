"""What a Qwen3.5 MTP target directory holds and what the family writes into it (names only: no openvino here).

    recognised by  config.json model_type (top level) of a Qwen3.5 / Qwen3.6 model, or an openvino_mtp_model.xml
    writes         openvino_mtp_model.xml/.bin (the head), openvino_language_model.xml (the hidden-state annotation;
                   its .bin is never rewritten), openvino_config.json (the head's quantization, when the target has one)
    runs           VLMPipeline(dir, draft_model=draft_model(dir)): genai picks dir/openvino_mtp_model.xml by name
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import peek_json
from irsurgeon.ir.export import LANGUAGE_MODEL, OPENVINO_CONFIG, bin_of

DENSE_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
MODEL_TYPES = DENSE_TYPES + MOE_TYPES
MTP_XML = "openvino_mtp_model.xml"  # the head, where genai's VLMPipeline looks for it
MTP_BIN = bin_of(MTP_XML)
HEAD_FILES = (MTP_XML, MTP_BIN)
PREFIX = "mtp."  # every tensor of the head, in the checkpoint and as graph node names
WRITES = (*HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG)


def model_type(directory: Path) -> object:
    """config.json's top-level model_type, or None when there is none readable (config.peek_json)."""
    return (peek_json(Path(directory) / "config.json") or {}).get("model_type")


def has_head(directory: Path) -> bool:
    return (Path(directory) / MTP_XML).is_file()


def has_head_files(directory: Path) -> bool:
    """The head's .xml and its .bin are both there."""
    return all((Path(directory) / name).is_file() for name in HEAD_FILES)
