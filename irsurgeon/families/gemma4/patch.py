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
from irsurgeon.config import read_json
from irsurgeon.errors import ConfigError, IRError, IRSurgeonError, OutputError
from irsurgeon.families.gemma4 import target as surgery
from irsurgeon.families.gemma4.assistant import build_assistant
from irsurgeon.ir import files
from irsurgeon.models.gemma4_assistant import AssistantConfig, Layer, load_assistant_config, resolve_layers
from irsurgeon.transaction import STAGE_DIR, DirectoryTransaction, PatchResult, clear_interrupted, write_staged

TARGET_TYPES = ("gemma4_text", "gemma4")
ASSISTANT_DIR = "mtp_assistant"
MODEL_XML, MODEL_BIN = "openvino_model.xml", "openvino_model.bin"
CONFIG, GENERATION = "config.json", "generation_config.json"
WEIGHT_FORMATS = {"auto": "f16", "f16": "f16", "f32": "f32"}


def target_type(target_dir: str | Path) -> str | None:
    """The Gemma 4 model_type of TARGET/config.json, or None (not Gemma 4, or no readable config)."""
    model_type = _model_type(Path(target_dir) / CONFIG)
    return model_type if model_type in TARGET_TYPES else None


def is_assistant_checkpoint(source: str | Path) -> bool:
    """SOURCE is a local checkpoint whose config.json says gemma4_assistant."""
    return _model_type(Path(source) / CONFIG) == "gemma4_assistant"


def _model_type(cfg: Path) -> object:
    """config.json's model_type through the bounded reader, or None when it cannot be read: the dispatch only looks;
    the flow that then runs reads the same file again and reports what is wrong with it."""
    if not cfg.is_file():
        return None
    try:
        return read_json(cfg).get("model_type")
    except ConfigError:
        return None


@dataclass(frozen=True)
class Gemma4Target:
    path: Path
    hidden_size: int
    vocab_size: int
    layer_types: list[str]
    layers: tuple[Layer, ...]
    num_kv_shared: int

    @property
    def xml(self) -> Path:
        return self.path / MODEL_XML

    def store_layer(self, kind: str) -> Layer | None:
        stores = surgery.store_layers(self.layer_types, self.num_kv_shared)
        return self.layers[stores[kind]] if kind in stores else None


def inspect_target(path: str | Path) -> tuple[Gemma4Target, ov.Model]:
    path = Path(path)
    if (path / "openvino_language_model.xml").is_file():
        raise IRError(f"{path}: a VLM-layout export; openvino-genai's Gemma 4 MTP path needs a text-only export "
                      f"(optimum-cli export openvino --task text-generation-with-past)")
    if not (path / MODEL_XML).is_file():
        raise IRError(f"{path}: no {MODEL_XML} (a text-only Gemma 4 export)")
    raw = read_json(path / CONFIG)
    text = raw.get("text_config") if raw.get("model_type") == "gemma4" else raw
    if not isinstance(text, dict):
        raise ConfigError(f"{path / CONFIG}: model_type gemma4 without a text_config object")
    layers = resolve_layers(text, str(path / CONFIG))
    model = files.read_model(path / MODEL_XML)
    hidden = surgery.lm_head_input(model, str(path / MODEL_XML)).get_partial_shape()[-1]
    logits = [o for o in model.outputs if surgery.LOGITS in o.get_names()][0].get_partial_shape()[-1]
    if hidden.is_dynamic or logits.is_dynamic:
        raise IRError(f"{path / MODEL_XML}: hidden size or vocab is not static")
    shared = text.get("num_kv_shared_layers", 0) or 0
    if not isinstance(shared, int) or not 0 <= shared < len(layers):
        raise ConfigError(f"{path / CONFIG}: num_kv_shared_layers is {shared!r}, expected 0..{len(layers) - 1}")
    return Gemma4Target(path, hidden.get_length(), logits.get_length(), [x.kind for x in layers], layers,
                        shared), model


def check_pair(target: Gemma4Target, cfg: AssistantConfig) -> None:
    """The assistant must have been made for this target: widths, vocabulary and the K/V it attends over."""
    pairs = [("backbone_hidden_size", target.hidden_size, cfg.backbone_hidden_size),
             ("vocab_size", target.vocab_size, cfg.vocab_size)]
    for kind in {x.kind for x in cfg.layers}:
        store = target.store_layer(kind)
        if store is None:
            raise IRSurgeonError(f"assistant {cfg.source} does not belong to target {target.path}: it has "
                                 f"{kind} layers, the target stores no {kind} K/V")
        mine = cfg.layer_of(kind)
        pairs += [(f"{kind} head_dim", store.head_dim, mine.head_dim),
                  (f"{kind} KV heads", store.kv_heads, mine.kv_heads)]
    for key, want, got in pairs:
        if want != got:
            raise IRSurgeonError(f"assistant {cfg.source} does not belong to target {target.path}: {key} is {got}, "
                                 f"the target has {want}")


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


def ready(target: Gemma4Target, model: ov.Model) -> bool:
    asst = target.path / ASSISTANT_DIR
    return surgery.present_outputs(model) == set(surgery.OUTPUTS) and all(
        (asst / n).is_file() for n in (MODEL_XML, MODEL_BIN, CONFIG))


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
