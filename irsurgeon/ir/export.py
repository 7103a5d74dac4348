"""An exported model directory, described once: its file names, and its layout (each family's view of a target is
its own: Family.inspect).

Layouts (optimum-intel exports):
    decomposed VLM   openvino_language_model.xml/.bin + openvino_text_embeddings_model.xml/.bin (+ vision,
                     tokenizers, preprocessor_config.json): what openvino-genai's VLMPipeline loads
    text-only        openvino_model.xml/.bin
Either has config.json; an optimum-intel export may have openvino_config.json (its quantization record). A draft's
files are its family's (draft.protocol.Layout). The language model's `logits` output must be
made by the lm_head MatMul (ir.graph.logits_matmul). The directory lock and the staging folder belong to the write
side (irsurgeon.commit.transaction, irsurgeon.commit.journal): nothing here writes.

Nothing here imports openvino at module level: the CLI reads these names while it starts.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from irsurgeon.core.errors import IRError

LANGUAGE_MODEL = "openvino_language_model.xml"
TEXT_EMBEDDINGS = "openvino_text_embeddings_model.xml"
TEXT_ONLY_MODEL = "openvino_model.xml"
VISION_EMBEDDINGS = "openvino_vision_embeddings_model.xml"
VISION_POS = "openvino_vision_embeddings_pos_model.xml"
VISION_MERGER = "openvino_vision_embeddings_merger_model.xml"
VISION_MODELS = (VISION_EMBEDDINGS, VISION_POS, VISION_MERGER)
TOKENIZER = "openvino_tokenizer.xml"
DETOKENIZER = "openvino_detokenizer.xml"
CONFIG = "config.json"
PREPROCESSOR_CONFIG = "preprocessor_config.json"
GENERATION_CONFIG = "generation_config.json"
OPENVINO_CONFIG = "openvino_config.json"
LANGUAGE_MODELS = (LANGUAGE_MODEL, TEXT_ONLY_MODEL)  # in the order a directory's language model is looked up
TARGET_MODELS = (LANGUAGE_MODEL, TEXT_EMBEDDINGS, TEXT_ONLY_MODEL)  # the target's own weights (not the draft's)


def bin_of(xml_name: str) -> str:
    """The weights file beside an IR `.xml` name."""
    return xml_name.removesuffix(".xml") + ".bin"


VLM_FILES = (LANGUAGE_MODEL, bin_of(LANGUAGE_MODEL), TEXT_EMBEDDINGS, bin_of(TEXT_EMBEDDINGS), TOKENIZER, DETOKENIZER,
             CONFIG, PREPROCESSOR_CONFIG)
EMBEDS_INPUT = "inputs_embeds"


class Layout(str, Enum):
    VLM = "vlm"                         # decomposed: what genai's VLMPipeline loads
    VLM_INCOMPLETE = "vlm-incomplete"   # a language model without its text embeddings model
    TEXT_ONLY = "text-only"
    NONE = "none"


@dataclass(frozen=True)
class ExportDir:
    """The files of one export directory, by role."""
    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    language_model = property(lambda self: self.path / LANGUAGE_MODEL)
    text_embeddings = property(lambda self: self.path / TEXT_EMBEDDINGS)
    text_only_model = property(lambda self: self.path / TEXT_ONLY_MODEL)
    config = property(lambda self: self.path / CONFIG)
    openvino_config = property(lambda self: self.path / OPENVINO_CONFIG)

    def layout(self) -> Layout:
        if self.language_model.is_file():
            return Layout.VLM if self.text_embeddings.is_file() else Layout.VLM_INCOMPLETE
        return Layout.TEXT_ONLY if self.text_only_model.is_file() else Layout.NONE

    def lm_xml(self) -> Path:
        """The language model of either layout; IRError when there is none."""
        for name in LANGUAGE_MODELS:
            if (self.path / name).exists():  # not is_file(): a FIFO or device there is refused by name when read
                return self.path / name
        raise IRError(f"{self.path}: no language model found (expected {' or '.join(LANGUAGE_MODELS)})")

    def missing_for_vlm(self) -> list[str]:
        """The files of the decomposed VLM layout this directory lacks."""
        return [f for f in VLM_FILES if not (self.path / f).is_file()]


def directory_problem(path: str | Path) -> str | None:
    """Why `path` is not an existing directory, in the words every command uses (None: it is one)."""
    path = Path(path)
    if path.is_dir():
        return None
    return f"{path}: no such file or directory" if not path.exists() else f"{path}: not a directory"


def language_model_xml(target: str | Path) -> Path:
    """The language-model `.xml` of a target directory, or the target itself when it is an `.xml`."""
    target = Path(target)
    if target.is_dir():
        return ExportDir(target).lm_xml()
    if not target.exists():
        raise IRError(f"{target}: no such file or directory")
    if target.suffix != ".xml":
        raise IRError(f"{target}: expected an OpenVINO IR .xml file or an exported model directory")
    return target
