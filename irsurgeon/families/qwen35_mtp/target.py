"""A target directory as patch and verify see it: its export layout and the Qwen3.5 text model its config describes.

The directory itself (file names, layout) is irsurgeon.ir.export; this adds the family's reading of its config.json
and the language model's vocabulary and width, read from the graph.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from irsurgeon.config import read_json
from irsurgeon.errors import ConfigError, IRError
from irsurgeon.ir import files, graph
from irsurgeon.ir.export import EMBEDS_INPUT, ExportDir
from irsurgeon.families.qwen35_mtp.model import MTPConfig, parse_config


@dataclass
class Target:
    """A directory patch can make MTP-ready: its files, its config, and the language model's vocab and width."""
    export: ExportDir
    cfg: MTPConfig
    vocab_size: int
    hidden_size: int

    path = property(lambda self: self.export.path)
    warnings = property(lambda self: self.cfg.warnings)  # what its config.json says that transformers reads otherwise
    lm_xml = property(lambda self: self.export.language_model)
    has_mtp = property(lambda self: self.export.has_mtp)


def inspect_target(path: str | Path) -> Target:
    """Everything patch needs to know about a target directory, or an error saying why it cannot be patched."""
    export = ExportDir(path)
    if not export.path.is_dir():
        raise IRError(f"{export.path}: not a directory")
    missing = export.missing_for_mtp()
    if missing:
        hint = " (a text-only export: re-export it with `optimum-cli export openvino --task image-text-to-text`)" \
            if export.text_only_model.is_file() else ""
        raise IRError(f"{export.path}: missing {', '.join(missing)}: openvino-genai MTP needs the decomposed VLM "
                      f"layout{hint}")
    try:
        cfg = parse_config(read_json(export.config), source=str(export.config))
    except ConfigError as e:
        raise ConfigError(f"target has no usable MTP head description: {e}") from None
    xml = export.language_model
    lm = files.read_model(xml)
    matmul = graph.logits_matmul(lm, str(xml))  # openvino-genai requires it
    vocab = matmul.output(0).get_partial_shape()[-1]
    embeds = [i for i in lm.inputs if EMBEDS_INPUT in i.get_names()]
    if not embeds or embeds[0].get_partial_shape()[-1].is_dynamic:
        raise IRError(f"{xml}: no '{EMBEDS_INPUT}' input with a static hidden size")
    return Target(export, cfg, vocab.get_length() if vocab.is_static else -1,
                  embeds[0].get_partial_shape()[-1].get_length())
