"""A target directory as patch and verify see it: its export layout and the Qwen3.5 text model its config describes.

The directory itself (file names, layout) is irsurgeon.ir.export; this adds the family's reading of its config.json
and the language model's vocabulary and width, read from the graph. For patch (plan=True), the hidden-state
annotation is planned from the same parse of the language model (irsurgeon.commit.annotate.plan_annotation), with the
identity of the files it was read from: staging uses that plan only while they are unchanged, so the 64-layer graph
is parsed once before the build and not held through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from irsurgeon.core.config import read_json
from irsurgeon.core.errors import ConfigError, IRError
from irsurgeon.draft.protocol import Target
from irsurgeon.families.qwen35_mtp.layout import has_head_files
from irsurgeon.ir import files, graph
from irsurgeon.ir.export import EMBEDS_INPUT, ExportDir, directory_problem
from irsurgeon.families.qwen35_mtp.model import MTPConfig, parse_config

if TYPE_CHECKING:  # annotate is the write side: verify, which reads targets too, must not load it
    from irsurgeon.commit.annotate import AnnotationResult


@dataclass
class QwenTarget(Target):
    """A directory patch can make MTP-ready: its files, its config, and the language model's vocab and width."""
    export: ExportDir
    cfg: MTPConfig
    vocab_size: int
    hidden_size: int

    path = property(lambda self: self.export.path)
    warnings = property(lambda self: self.cfg.warnings)  # what its config.json says that transformers reads otherwise
    lm_xml = property(lambda self: self.export.language_model)
    has_mtp = property(lambda self: has_head_files(self.export.path))
    planned: tuple[tuple, AnnotationResult] | None = None  # (file identity, plan) of the annotation, plan=True

    def annotation_plan(self, force: bool) -> AnnotationResult:
        """The annotation to stage: the plan made at inspection while the language model's files are unchanged,
        else planned now."""
        from irsurgeon.commit.annotate import plan_annotation, with_force

        xml = self.lm_xml
        if self.planned is not None and self.planned[0] == files.file_identity(xml, xml.with_suffix(".bin")):
            return with_force(self.planned[1], force)
        return plan_annotation(xml, force, self.cfg.num_hidden_layers, self.hidden_size)


def inspect_target(path: str | Path, plan: bool = False) -> QwenTarget:
    """Everything patch needs to know about a target directory, or an error saying why it cannot be patched; plan:
    also the hidden-state annotation (Target.annotation_plan)."""
    export = ExportDir(path)
    if not export.path.is_dir():
        raise IRError(directory_problem(export.path))
    missing = export.missing_for_vlm()
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
    identity = files.file_identity(xml, xml.with_suffix(".bin"))
    data = files.read_ir_bytes(xml)
    lm = files.read_model(xml, checked=True)
    matmul = graph.logits_matmul(lm, str(xml))  # openvino-genai requires it
    vocab = matmul.output(0).get_partial_shape()[-1]
    embeds = [i for i in lm.inputs if EMBEDS_INPUT in i.get_names()]
    if not embeds or embeds[0].get_partial_shape()[-1].is_dynamic:
        raise IRError(f"{xml}: no '{EMBEDS_INPUT}' input with a static hidden size")
    target = QwenTarget(export, cfg, vocab.get_length() if vocab.is_static else -1,
                    embeds[0].get_partial_shape()[-1].get_length())
    if plan:
        target.planned = early_plan(target, lm, data, identity)
    return target


def early_plan(target: Target, lm, data: bytes, identity: tuple) -> tuple[tuple, AnnotationResult] | None:
    """The annotation planned from the graph just read, with the identity of its files (None if they changed
    while being read, or if discovery refuses: staging plans again and reports it, as it did before the build)."""
    from irsurgeon.commit.annotate import plan_annotation

    xml = target.lm_xml
    try:
        planned = plan_annotation(xml, False, target.cfg.num_hidden_layers, target.hidden_size, lm, data)
    except IRError:  # not an error yet: a ready directory never needs its annotation re-planned
        return None
    return (identity, planned) if files.file_identity(xml, xml.with_suffix(".bin")) == identity else None
