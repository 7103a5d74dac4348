"""What a Qwen3.5 MTP target directory holds and what the family writes into it (names only: no openvino here).

    recognised by  config.json model_type (top level) of a Qwen3.5 / Qwen3.6 model, or an openvino_mtp_model.xml
    writes         openvino_mtp_model.xml/.bin (the head), openvino_language_model.xml (the hidden-state annotation;
                   its .bin is never rewritten), openvino_config.json (the head's quantization, when the target has one)
    runs           VLMPipeline(dir, draft_model=draft_model(dir)): genai picks dir/openvino_mtp_model.xml by name
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.config import read_json
from irsurgeon.errors import ConfigError
from irsurgeon.ir.export import HEAD_FILES, LANGUAGE_MODEL, MTP_XML, OPENVINO_CONFIG

DENSE_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
MODEL_TYPES = DENSE_TYPES + MOE_TYPES
PREFIX = "mtp."  # every tensor of the head, in the checkpoint and as graph node names
WRITES = (*HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG)


def model_type(directory: Path) -> object:
    """config.json's top-level model_type through the bounded reader, or None when it cannot be read: recognition
    only looks; the flow that then runs reads the file again and reports what is wrong with it."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    try:
        return read_json(path).get("model_type")
    except ConfigError:
        return None


def has_head(directory: Path) -> bool:
    return (Path(directory) / MTP_XML).is_file()
