"""`irsurgeon patch` for a Qwen3.5 target: the pair check, the head's finish, and what is staged.

    pair     the checkpoint's config describes the same model (hidden, heads, KV heads, head_dim, vocab, model_type),
             then 16 token-embedding rows equal the target's within its storage's rounding (identity.py)
    finish   compress (auto = mirror the target; irsurgeon.quant.precision), KV-cache precision, provenance (rt_info)
    stage    openvino_mtp_model.xml/.bin; openvino_language_model.xml annotated (irsurgeon.commit.annotate's write path, the
             .bin never rewritten); openvino_config.json with the head's quantization (when the target has one)
    check    the staged head read back against the contract and run one two-token step on the CPU (smoke.py)
"""
from __future__ import annotations

from pathlib import Path

import openvino as ov

import irsurgeon
from irsurgeon.core import rtinfo
from irsurgeon.commit.annotate import Status, write_annotation
from irsurgeon.draft.save import ir_bin, stage_ir
from irsurgeon.quant.compress import compress_model, set_kv_cache_precision, updated_openvino_config
from irsurgeon.core.concurrency import alongside
from irsurgeon.core.errors import IRError, IRSurgeonError, with_hint
from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.families.qwen35_mtp.model import MTPConfig
from irsurgeon.families.qwen35_mtp.smoke import smoke_test
from irsurgeon.families.qwen35_mtp.target import QwenTarget
from irsurgeon.families.qwen35_mtp.verify import annotation_check
from irsurgeon.ir.export import LANGUAGE_MODEL, OPENVINO_CONFIG
from irsurgeon.commit.transaction import DirectoryTransaction


def check_source_matches(target: QwenTarget, source: MTPConfig) -> None:
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


def finish(model: ov.Model, staging) -> ov.Model:
    """Family.finish: the head compressed (or not), its runtime options and provenance."""
    return finish_head(model, staging.choice, staging.options.kv_cache(), staging.echo, **staging.provenance)


def stage(tx: DirectoryTransaction, target: QwenTarget, staging) -> None:
    """Family.stage: the head, the annotation and openvino_config.json's record, each checked where staged."""
    stage_head(tx, target, staging.take(), staging.cfg, staging.choice, staging.options.force, staging.echo)


def finish_head(model: ov.Model, choice, kv_cache_precision: str, echo, **provenance: str) -> ov.Model:
    """Compress (when the choice says so), set the KV-cache precision, record the format and provenance."""
    if choice.params:
        model, report = compress_model(model, choice.params)
        for line in report.lines():
            echo(line)
    set_kv_cache_precision(model, kv_cache_precision)
    rtinfo.set_provenance(model, version=irsurgeon.__version__, weight_format=choice.weight_format, **provenance)
    return model


def stage_head(tx: DirectoryTransaction, target: QwenTarget, model: ov.Model, cfg: MTPConfig, choice, force: bool,
               echo) -> None:
    """Save the head into the transaction and check it there while the annotation is staged beside it (its read-back
    by openvino on a thread: irsurgeon.core.concurrency), then openvino_config.json."""
    for name in (ir_bin(contract.MTP_XML), contract.MTP_XML):
        tx.stage(name)  # the head's names first, as the commit lists them, whichever thread stages next
    with alongside(lambda say: stage_annotation(tx, target, force, say)) as annotation:
        xml = stage_ir(tx, contract.MTP_XML, model)
        model = None  # spent by stage_ir: the one-step check compiles the staged copy
        smoke_test(xml, cfg)
    annotation.result(echo)
    stage_openvino_config(tx, target, choice.params)


def stage_annotation(tx: DirectoryTransaction, target: QwenTarget, force: bool, echo) -> None:
    """Stage the language model's .xml with the hidden-state annotation, through annotate's one write path."""
    planned = target.annotation_plan(force)
    if planned.status is Status.UNCHANGED:
        echo(f"{LANGUAGE_MODEL}: hidden-state annotation already present and identical")
        return
    if planned.status is Status.KEPT:
        ok, detail = annotation_check(target.lm_xml, target.cfg.num_hidden_layers)
        if not ok:  # kept, verify would reject the directory: refused before anything is committed
            raise with_hint(IRError(f"{target.lm_xml}: its existing hidden-state annotation is kept unless the run is "
                                    f"forced, but verify rejects it ({detail})"), "--force", "pass --force to replace it")
        echo(f"{LANGUAGE_MODEL}: keeps its existing, different hidden-state annotation (a forced run replaces it)")
        return
    write_annotation(planned, into=lambda data: stage_bytes(tx, LANGUAGE_MODEL, data))
    echo(f"{LANGUAGE_MODEL}: annotated {planned.num_layers} decoder layers")


def stage_bytes(tx: DirectoryTransaction, name: str, data: bytes) -> Path:
    """Write one file's new version into the transaction's staging folder; returns its staged path."""
    return tx.write(name, data)


def stage_openvino_config(tx: DirectoryTransaction, target: QwenTarget, params) -> None:
    data = updated_openvino_config(target.path, params)
    if data is not None:
        stage_bytes(tx, OPENVINO_CONFIG, data.encode("utf-8"))
