"""`irsurgeon patch` for a Gemma 4 target: pair check, assistant build, target surgery, one all-or-nothing commit.

    recognise   TARGET/config.json model_type gemma4_text (or gemma4 with a text_config) and a text-only export
    pair check  assistant backbone_hidden_size = target hidden, vocab, and per layer type the head dim and KV heads
                of the target's store layer = the assistant's (it attends over exactly those K/V)
    stage       TARGET/mtp_assistant/{openvino_model.xml,.bin, config.json, generation_config.json}
                TARGET/openvino_model.xml with the five outputs (XML only; openvino_model.bin is never written)
    verify      the staged assistant read back and run one step; the staged target XML read back with the
                untouched .bin and its outputs named -> commit the assistant, then the target XML

Each directory has its own lock, staging folder and journal (irsurgeon.transaction). The target XML moves last;
when its commit fails (and is rolled back), an mtp_assistant/ folder this run created is removed again. A rebuild
(--force) whose target commit fails keeps the new assistant beside the old XML, which genai cannot pair; a rerun
completes it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon import limits
from irsurgeon.build import name_anonymous_nodes
from irsurgeon.errors import ConfigError, IRError, IRSurgeonError, OutputError
from irsurgeon.families.gemma4 import target as surgery
from irsurgeon.families.gemma4.assistant import build_assistant
from irsurgeon.families.gemma4.layout import (ASSISTANT_DIR, CONFIG, GENERATION, MODEL_BIN, MODEL_XML, TARGET_TYPES,
                                              Gemma4Target, check_pair, inspect_target, is_assistant_checkpoint,
                                              ready, target_type)
from irsurgeon.models.gemma4_assistant import AssistantConfig, Layer, load_assistant_config
from irsurgeon.transaction import STAGE_DIR, DirectoryTransaction, PatchResult, clear_interrupted, write_staged

WEIGHT_FORMATS = {"auto": "f16", "f16": "f16", "f32": "f32"}


def smoke_test(xml: Path, cfg: AssistantConfig) -> None:
    """Read the staged assistant back and run one draft step over a 3-token KV."""
    model = ov.Core().read_model(str(xml))
    feed = {"inputs_embeds": np.full((1, 1, 2 * cfg.backbone_hidden_size), 0.5, np.float32),
            "position_ids": np.array([[3]], np.int64), "attention_mask": np.ones((1, 4), np.int64)}
    for inp in model.inputs:
        name = inp.get_any_name()
        if name not in feed:
            kind = name.rsplit("_", 1)[0]
            layer = next((x for x in cfg.layers if x.kind == kind), Layer(kind, 1, 1))
            feed[name] = np.full((1, layer.kv_heads, 3, layer.head_dim), 0.25, np.float32)
    out = ov.Core().compile_model(model, "CPU").create_infer_request().infer(feed)
    logits = out["logits"]
    if logits.shape != (1, 1, cfg.vocab_size) or not np.isfinite(logits).all():
        raise IRError(f"{xml}: one draft step gave logits {logits.shape} or non-finite values")


def check_exposed(xml: Path, bin_path: Path) -> None:
    """The staged target XML reads with the untouched .bin and names all five outputs."""
    try:
        model = ov.Core().read_model(str(xml), str(bin_path))
    except RuntimeError as e:
        raise IRError(f"{xml}: the edited copy does not read back: {str(e).splitlines()[0]}") from None
    missing = set(surgery.OUTPUTS) - surgery.present_outputs(model)
    if missing:
        raise IRError(f"{xml}: the edited copy lacks {sorted(missing)}")


def generation_config(target: Path, source: Path) -> str:
    """The assistant's generation_config.json: the target's (same tokens), else the checkpoint's, else empty."""
    for where in (target / GENERATION, source / GENERATION):
        if where.is_file():  # bounded like every JSON input; handed on as the file says it
            limits.read_json(where, ConfigError)
            return limits.read_text(where, limits.CONFIG_JSON_BYTES, ConfigError, "generation config")
    return "{}\n"


def weight_format(requested: str) -> str:
    if requested not in WEIGHT_FORMATS:
        raise ConfigError(f"--weight-format {requested}: a Gemma 4 assistant is built as f16 or f32 "
                          f"(auto = f16); int4/int8 are not supported for it")
    return WEIGHT_FORMATS[requested]


def patch_gemma4(target_dir: str | Path, source: str | Path, options, echo=print):
    """The Gemma 4 flow of `irsurgeon patch` (see the module docstring)."""
    target_dir, source = Path(target_dir), Path(source)
    if target_type(target_dir) is None:
        raise IRSurgeonError(f"{target_dir / CONFIG}: not a Gemma 4 target (model_type {' or '.join(TARGET_TYPES)}"
                             f"), but {source} is a gemma4_assistant")
    if not source.is_dir():
        raise IRSurgeonError(f"{source}: a Gemma 4 assistant is read from a local checkpoint directory")
    fmt = weight_format(options.weight_format)
    asst = target_dir / ASSISTANT_DIR
    if not options.dry_run:
        for where in (target_dir, asst):
            if os.path.lexists(where / STAGE_DIR):
                clear_interrupted(where, options.wait, echo)
    target, model = inspect_target(target_dir)
    cfg = load_assistant_config(source / CONFIG)
    check_pair(target, cfg)
    result = PatchResult(target.path)
    result.run_hint = (f"run it: openvino_genai.LLMPipeline('{target.path}', 'CPU', draft_model=openvino_genai."
                       f"draft_model('{asst}', 'CPU'), ATTENTION_BACKEND='SDPA')")
    if ready(target, model) and not options.force:
        echo(f"{target.path}: already Gemma 4 MTP-ready (outputs exposed, {ASSISTANT_DIR}/ present); nothing to do "
             f"(--force rebuilds)")
        result.skipped = True
        return result
    new_xml = surgery.expose(target.xml, model, target.layer_types, target.num_kv_shared)
    model = None
    if options.dry_run:
        echo(f"would build {ASSISTANT_DIR}/ from {source} as {fmt}")
        echo(f"would add {', '.join(surgery.OUTPUTS)} to {MODEL_XML}" if new_xml else f"{MODEL_XML}: outputs present")
        result.skipped = True
        return result
    assistant, _ = build_assistant(source, fmt, warn=echo)
    result.written = commit(target, source, assistant, cfg, new_xml, options, echo)
    echo(f"{target.path}: wrote {', '.join(result.written)}")
    return result


def commit(target: Gemma4Target, source: Path, assistant: ov.Model, cfg: AssistantConfig, new_xml: bytes | None,
           options, echo) -> list[str]:
    """Stage and check both directories' files, then commit the assistant and, last, the target XML."""

    asst = target.path / ASSISTANT_DIR
    created = not os.path.lexists(asst)
    try:
        asst.mkdir(exist_ok=True)
    except OSError as e:
        raise OutputError(f"{asst}: cannot create it: {e.strerror}") from None
    try:
        with DirectoryTransaction(target.path, wait=options.wait, echo=echo) as ttx, \
                DirectoryTransaction(asst, wait=options.wait, echo=echo) as atx:
            name_anonymous_nodes(assistant)
            atx.stage(MODEL_BIN)
            write_staged(atx.stage(MODEL_XML), lambda p: ov.save_model(assistant, p, compress_to_fp16=False))
            smoke_test(atx.stage_dir / MODEL_XML, cfg)
            write_staged(atx.stage(CONFIG), lambda p: p.write_bytes((source / CONFIG).read_bytes()))
            text = generation_config(target.path, source)
            write_staged(atx.stage(GENERATION), lambda p: p.write_text(text, encoding="utf-8"))
            if new_xml is not None:
                staged = ttx.stage(MODEL_XML)
                write_staged(staged, lambda p: p.write_bytes(new_xml))
                check_exposed(staged, target.path / MODEL_BIN)
            atx.commit()
            try:
                ttx.commit()
            except BaseException:  # the target XML was rolled back: a folder this run made goes too
                if created:
                    for name in atx.names:
                        (asst / name).unlink(missing_ok=True)
                raise
            return [f"{ASSISTANT_DIR}/{n}" for n in atx.names] + list(ttx.names)
    except BaseException:
        if created and asst.is_dir() and not any(asst.iterdir()):
            asst.rmdir()
        raise
