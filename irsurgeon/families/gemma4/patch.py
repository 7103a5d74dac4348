"""`irsurgeon patch` for a Gemma 4 target: pair check, assistant build, target surgery, one all-or-nothing commit.

    recognise   TARGET/config.json model_type gemma4_text (or gemma4 with a text_config) and a text-only export
    pair check  assistant backbone_hidden_size = target hidden, vocab, and per layer type the head dim and KV heads
                of the target's store layer = the assistant's (it attends over exactly those K/V)
    format      --weight-format as for a Qwen head (irsurgeon.precision.choose_format): auto mirrors the target's
                openvino_model.xml; int4/int8 compress the f16-built assistant with nncf (irsurgeon.compress), its
                lm_head kept float (FLOAT_WEIGHTS). openvino_config.json is left alone: no entry for a Gemma 4
                assistant is known to be read (the optimum-intel fixture export has no such file at all); the
                format is in the assistant's rt_info (irsurgeon/weight_format, nncf/weight_compression)
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
from pathlib import Path

import numpy as np
import openvino as ov

from irsurgeon import limits
from irsurgeon.build import name_anonymous_nodes
from irsurgeon.compress import compress_model
from irsurgeon.config import read_json
from irsurgeon.errors import ConfigError, IRError, IRSurgeonError, OutputError
from irsurgeon.families.gemma4 import target as surgery
from irsurgeon.families.gemma4.assistant import build_assistant
from irsurgeon.families.gemma4.layout import (ASSISTANT_DIR, CONFIG, GENERATION, MODEL_BIN, MODEL_XML, TARGET_TYPES,
                                              Gemma4Target, check_pair, inspect_target, ready, target_type)
from irsurgeon.head import build_format
from irsurgeon.models.gemma4_assistant import AssistantConfig, Layer, load_assistant_config
from irsurgeon.precision import Choice, choose_format
from irsurgeon.transaction import STAGE_DIR, DirectoryTransaction, PatchResult, clear_interrupted, write_staged
from irsurgeon.weights.hub import HubOptions, fetch_whole, fetch_whole_weights, is_repo_id

# The assistant's lm_head stays float under int4/int8. Left to itself nncf 3.4.0 (compress_weights, int4_asym group
# 64, all_layers off, on the fixture assistant) stores masked_embedding.centroids and the tied model.embed_tokens
# table (a Gather constant feeding the candidate-row MatMul) as int8_sym per channel, as the "last layer" backup.
# The centroid scores choose which vocabulary buckets are candidates at all (top-k, like a MoE router) and the
# embedding rows score the candidates: rounding either changes which tokens are drafted, not just their scores.
# pre/post_projection and the decoder layers are ordinary linear layers and are compressed as nncf picks.
FLOAT_WEIGHTS = ("masked_embedding.centroids.weight", "model.embed_tokens.weight")


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
        if where.is_file():  # read once, bounded and checked like every JSON input; handed on as the file says it
            text = limits.read_text(where, limits.CONFIG_JSON_BYTES, ConfigError, "generation config")
            limits.parse_json(text, str(where), ConfigError)
            return text
    return "{}\n"


def weight_choice(requested: str, target_dir: Path) -> Choice:
    """--weight-format as for a Qwen head: auto mirrors the target's openvino_model.xml (irsurgeon.precision)."""
    return choose_format(requested, target_dir if requested == "auto" else None)


def float_scope(model: ov.Model) -> tuple[str, ...]:
    """The MatMul / Gather nodes whose weight input is one of FLOAT_WEIGHTS (through its f16 decompression)."""
    names = []
    for op in model.get_ops():
        if op.get_type_name() not in ("MatMul", "Gather"):
            continue
        for port in op.inputs():
            src = port.get_source_output().get_node()
            if src.get_type_name() == "Convert":
                src = src.input_value(0).get_node()
            if src.get_type_name() == "Constant" and src.get_friendly_name() in FLOAT_WEIGHTS:
                names.append(op.get_friendly_name())
    return tuple(names)


def build_compressed(source: Path, choice: Choice, echo, allow_nonfinite: bool = False) -> ov.Model:
    """The assistant in the chosen format: built as f16 and compressed by nncf for int4/int8, else built as is."""
    assistant, _ = build_assistant(source, build_format(choice), warn=echo, allow_nonfinite=allow_nonfinite)
    if choice.params:
        assistant, report = compress_model(assistant, choice.params, keep_float=float_scope(assistant))
        for line in report.lines():
            echo(line)
    return assistant


def assistant_source(target: Gemma4Target, source: Path, options, echo) -> tuple[Path, AssistantConfig]:
    """The local checkpoint directory (for a repo id the hub cache snapshot holding its config.json, pair-checked
    here; the weights follow in patch_gemma4 once something is to be built) and its checked config."""
    def paired(config: Path) -> AssistantConfig:
        cfg = load_assistant_config(config)
        check_pair(target, cfg)
        return cfg

    if source.is_dir():
        return source, paired(source / CONFIG)
    root = fetch_whole(str(source), options.hub or HubOptions(), paired, echo, weights=False)
    return root, load_assistant_config(root / CONFIG)


def patch_gemma4(target_dir: str | Path, source: str | Path, options, echo=print):
    """The Gemma 4 flow of `irsurgeon patch` (see the module docstring)."""
    target_dir, source = Path(target_dir), Path(source)
    if target_type(target_dir) is None:
        if os.path.lexists(target_dir / CONFIG):  # one there but unreadable is reported as what is wrong with it
            read_json(target_dir / CONFIG)
        raise IRSurgeonError(f"{target_dir / CONFIG}: not a Gemma 4 target (model_type {' or '.join(TARGET_TYPES)}"
                             f"), but {source} is a gemma4_assistant")
    if not source.is_dir() and not is_repo_id(source):
        raise IRSurgeonError(f"{source}: a Gemma 4 assistant is read from a local checkpoint directory or a "
                             f"Hugging Face repo id")
    asst = target_dir / ASSISTANT_DIR
    if not options.dry_run:
        for where in (target_dir, asst):
            if os.path.lexists(where / STAGE_DIR):
                clear_interrupted(where, options.wait, echo)
    target, model = inspect_target(target_dir)
    repo = None if source.is_dir() else str(source)
    source, cfg = assistant_source(target, source, options, echo)
    choice = weight_choice(options.weight_format, target_dir)  # read from the text-only export inspect_target checked
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
    if choice.note:  # once the target is known good: nothing is said about a pair that is refused
        echo(choice.note)
    if options.dry_run:
        echo(f"would build {ASSISTANT_DIR}/ from {source} as {choice.weight_format}")
        echo(f"would add {', '.join(surgery.OUTPUTS)} to {MODEL_XML}" if new_xml else f"{MODEL_XML}: outputs present")
        result.skipped = True
        return result
    if repo:
        fetch_whole_weights(repo, source, options.hub or HubOptions(), echo)
    assistant = build_compressed(source, choice, echo, options.allow_nonfinite)
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
