"""Make an exported target directory MTP-ready in place: check, build, compress, annotate, verify, commit.

    check target  (layout genai needs, config with a one-layer MTP head, LM `logits` fed by the lm_head MatMul)
    check source  (the checkpoint's config describes the same model: hidden, heads, head_dim, vocab)
    build head    -> compress (auto = mirror the target) -> stage openvino_mtp_model.xml/.bin
    annotate LM   -> stage openvino_language_model.xml (rt_info only; the .bin is never rewritten)
    update openvino_config.json (when the target has one) -> staged
    verify staged (read_model, contract, paged-attention conversion, one inference step) -> commit, all or nothing
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import openvino as ov

from irsurgeon import contract
from irsurgeon.config import MTPConfig, parse_config, read_json
from irsurgeon.errors import ConfigError, IRError, IRSurgeonError
from irsurgeon.transaction import DirectoryTransaction

LANGUAGE_MODEL = "openvino_language_model.xml"
REQUIRED = (LANGUAGE_MODEL, "openvino_language_model.bin", "openvino_text_embeddings_model.xml",
            "openvino_text_embeddings_model.bin", "openvino_tokenizer.xml", "openvino_detokenizer.xml",
            "config.json", "preprocessor_config.json")
LOGITS = "logits"


@dataclass
class Target:
    path: Path
    cfg: MTPConfig
    vocab_size: int
    hidden_size: int

    @property
    def lm_xml(self) -> Path:
        return self.path / LANGUAGE_MODEL

    @property
    def has_mtp(self) -> bool:
        return (self.path / contract.MTP_XML).is_file() and (self.path / contract.MTP_BIN).is_file()


@dataclass
class PatchResult:
    target: Path
    written: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: bool = False


def inspect_target(path: str | Path) -> Target:
    """Everything patch needs to know about a target directory, or an error saying why it cannot be patched."""
    path = Path(path)
    if not path.is_dir():
        raise IRError(f"{path}: not a directory")
    missing = [f for f in REQUIRED if not (path / f).is_file()]
    if missing:
        hint = " (a text-only export: re-export with --task image-text-to-text)" \
            if (path / "openvino_model.xml").is_file() else ""
        raise IRError(f"{path}: missing {', '.join(missing)}: openvino-genai MTP needs the decomposed VLM layout{hint}")
    try:
        cfg = parse_config(read_json(path / "config.json"), source=str(path / "config.json"))
    except ConfigError as e:
        raise ConfigError(f"target has no usable MTP head description: {e}") from None
    try:
        lm = ov.Core().read_model(path / LANGUAGE_MODEL)
    except RuntimeError as e:
        raise IRError(f"{path / LANGUAGE_MODEL}: not a readable OpenVINO IR: {str(e).splitlines()[0]}") from None
    logits = [o for o in lm.outputs if LOGITS in o.get_names()]
    if not logits:
        raise IRError(f"{path / LANGUAGE_MODEL}: no '{LOGITS}' output")
    producer = logits[0].get_node().input_value(0).get_node()
    if producer.get_type_name() != "MatMul":
        raise IRError(f"{path / LANGUAGE_MODEL}: '{LOGITS}' is produced by {producer.get_type_name()} "
                      f"'{producer.get_friendly_name()}', expected the lm_head MatMul (openvino-genai requires it)")
    vocab = logits[0].get_partial_shape()[-1]
    embeds = [i for i in lm.inputs if "inputs_embeds" in i.get_names()]
    if not embeds or embeds[0].get_partial_shape()[-1].is_dynamic:
        raise IRError(f"{path / LANGUAGE_MODEL}: no 'inputs_embeds' input with a static hidden size")
    return Target(path, cfg, vocab.get_length() if vocab.is_static else -1,
                  embeds[0].get_partial_shape()[-1].get_length())


def check_source_matches(target: Target, source: MTPConfig) -> None:
    """The checkpoint must describe the same model as the target, dimension by dimension."""
    pairs = [("hidden_size", target.hidden_size, source.hidden_size),
             ("hidden_size (config)", target.cfg.hidden_size, source.hidden_size),
             ("num_attention_heads", target.cfg.num_heads, source.num_heads),
             ("num_key_value_heads", target.cfg.num_kv_heads, source.num_kv_heads),
             ("head_dim", target.cfg.head_dim, source.head_dim),
             ("model_type", target.cfg.model_type.removesuffix("_text"), source.model_type.removesuffix("_text"))]
    if source.vocab_size and target.vocab_size > 0:
        pairs.append(("vocab_size (target logits)", target.vocab_size, source.vocab_size))
    for key, want, got in pairs:
        if want != got:
            raise IRSurgeonError(f"checkpoint {source.source} does not belong to target {target.path}: "
                                 f"{key} is {got}, the target has {want}")


def smoke_test(xml: Path, cfg: MTPConfig) -> None:
    """Read the staged head back, check the contract, and run one two-token step on the CPU."""
    model = ov.Core().read_model(xml)
    problems = contract.check_model(model, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim)
    if problems:
        raise IRError(f"{xml}: built head breaks the contract: {problems[0]}")
    request = ov.Core().compile_model(model, "CPU").create_infer_request()
    H = cfg.hidden_size
    feed = {"hidden_states": np.full((1, 2, H), 0.5, np.float32), "inputs_embeds": np.full((1, 2, H), 0.25, np.float32),
            "attention_mask": np.ones((1, 2), np.int64), "position_ids": np.arange(2, dtype=np.int64)[None],
            "beam_idx": np.zeros(1, np.int32)}
    out = request.infer(feed)[0]
    if out.shape != (1, 2, H) or not np.isfinite(out).all():
        raise IRError(f"{xml}: one-step inference gave {out.shape} with non-finite values")


def elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"


def stage_head(tx: DirectoryTransaction, model: ov.Model) -> None:
    xml = tx.stage(contract.MTP_XML)
    tx.stage(contract.MTP_BIN)
    ov.save_model(model, xml, compress_to_fp16=False)


Echo = Callable[[str], None]
