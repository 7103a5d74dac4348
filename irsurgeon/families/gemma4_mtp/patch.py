"""`irsurgeon patch` for a Gemma 4 target: the pair check, the assistant's finish, and what is staged.

    recognise   TARGET/config.json model_type gemma4_text (or gemma4 with a text_config) and a text-only export
    pair check  assistant backbone_hidden_size = target hidden, vocab, and per layer type the head dim and KV heads
                of the target's store layer = the assistant's (it attends over exactly those K/V); nothing else can be
                proven offline: the assistant shares no tensor with its target (verify --genai measures acceptance)
    format      --weight-format as for every family (irsurgeon.quant.precision.choose_format): auto mirrors the target's
                openvino_model.xml; int4/int8 compress the f16-built assistant with nncf (irsurgeon.quant.compress), its
                lm_head kept float (FLOAT_WEIGHTS). openvino_config.json is left alone: no entry for a Gemma 4
                assistant is known to be read (the optimum-intel fixture export has no such file at all); the
                format is in the assistant's rt_info (irsurgeon/weight_format, nncf/weight_compression)
    stage       TARGET/mtp_assistant/{openvino_model.xml,.bin, config.json, generation_config.json}
                TARGET/openvino_model.xml with the five outputs (XML only; openvino_model.bin is never written)
    check       the staged assistant read back and run one step; the staged target XML read back with the
                untouched .bin and its outputs named

All of it is one transaction of the target directory (irsurgeon.commit.transaction): the house commits every file at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

import irsurgeon
from irsurgeon.core import rtinfo
from irsurgeon.draft.save import check_call, stage_ir
from irsurgeon.draft.protocol import Target
from irsurgeon.quant.compress import compress_model
from irsurgeon.core.config import generation_config_text
from irsurgeon.core.errors import IRError
from irsurgeon.families.gemma4_mtp import target as surgery
from irsurgeon.families.gemma4_mtp.layout import ASSISTANT_DIR, CONFIG, GENERATION, MODEL_BIN, MODEL_XML
from irsurgeon.families.gemma4_mtp.model import AssistantConfig, Layer
from irsurgeon.families.gemma4_mtp.pairing import Gemma4Target, inspect_target
from irsurgeon.weights.checkpoint import config_of, home_of

# The assistant's lm_head stays float under int4/int8. Left to itself nncf 3.4.0 (compress_weights, int4_asym group
# 64, all_layers off, on the fixture assistant) stores masked_embedding.centroids and the tied model.embed_tokens
# table (a Gather constant feeding the candidate-row MatMul) as int8_sym per channel, as the "last layer" backup.
# The centroid scores choose which vocabulary buckets are candidates at all (top-k, like a MoE router) and the
# embedding rows score the candidates: rounding either changes which tokens are drafted, not just their scores.
# pre/post_projection and the decoder layers are ordinary linear layers and are compressed as nncf picks.
FLOAT_WEIGHTS = ("masked_embedding.centroids.weight", "model.embed_tokens.weight", "lm_head.weight")  # lm_head: untied


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
    check_call(xml, "logits", logits, (1, 1, cfg.vocab_size))


def check_exposed(xml: Path, bin_path: Path) -> None:
    """The staged target XML reads with the untouched .bin and names all five outputs."""
    try:
        model = ov.Core().read_model(str(xml), str(bin_path))
    except RuntimeError as e:
        raise IRError(f"{xml}: the edited copy does not read back: {str(e).splitlines()[0]}") from None
    missing = set(surgery.OUTPUTS) - surgery.present_outputs(model)
    if missing:
        raise IRError(f"{xml}: the edited copy lacks {sorted(missing)}")


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




@dataclass
class PatchTarget(Target):
    """The target as patch sees it: its description, and the new openvino_model.xml text (None: the five outputs
    are there already)."""
    info: Gemma4Target
    new_xml: bytes | None
    generation: str | None = None  # the target's generation_config.json (None: it has none)

    path = property(lambda self: self.info.path)
    warnings = ()


def inspect_for_patch(directory: Path) -> PatchTarget:
    """The target and the edit that exposes the outputs, made (and refused) before any assistant is built."""
    info, model = inspect_target(directory)
    return PatchTarget(info, surgery.expose(info.xml, model, info.layer_types, info.num_kv_shared),
                       generation_config_text(Path(directory) / GENERATION))


def finish(model: ov.Model, choice, echo, **provenance: str) -> ov.Model:
    """int4/int8: compressed by nncf with the lm_head kept float; the format and provenance recorded."""
    if choice.params:
        model, report = compress_model(model, choice.params, keep_float=float_scope(model))
        for line in report.lines():
            echo(line)
    rtinfo.set_provenance(model, version=irsurgeon.__version__, weight_format=choice.weight_format, **provenance)
    return model


def stage(tx, target: PatchTarget, model: ov.Model, cfg: AssistantConfig, root: Path) -> None:
    """The assistant's four files under mtp_assistant/ and the target's XML, each checked where it is staged."""
    xml = stage_ir(tx, f"{ASSISTANT_DIR}/{MODEL_XML}", model)
    model = None  # the staged copy is what runs next
    smoke_test(xml, cfg)
    tx.write(f"{ASSISTANT_DIR}/{CONFIG}", config_of(root).read_bytes())  # a folder's, or a single file's beside it
    # the assistant's tokens are the target's: its generation config, else the checkpoint's, else an empty one
    text = target.generation if target.generation is not None else \
        (generation_config_text(home_of(root) / GENERATION) or "{}\n")
    tx.write(f"{ASSISTANT_DIR}/{GENERATION}", text.encode("utf-8"))
    if target.new_xml is not None:
        check_exposed(tx.write(MODEL_XML, target.new_xml), target.path / MODEL_BIN)
