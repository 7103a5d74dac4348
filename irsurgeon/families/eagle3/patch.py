"""`irsurgeon patch` for an EAGLE-3 pair: the draft's finish, what is staged, and the checks where it is staged.

    finish   compress (auto = mirror the target; irsurgeon.quant), KV cache precision, provenance
    stage    TARGET/eagle3_draft/openvino_model.xml/.bin with rt_info eagle3_mode and hidden_layers_list (the taps the
             pair check resolved), checked where staged: genai's surgery conditions (surgery.problems) and one call
             (2 tokens, finite logits [1, 2, Vd], d2t as built); config.json (the checkpoint's, for verify's pair
             check), generation_config.json (the target's: genai reads the draft folder's). The target's
             openvino_model.xml only when a tap is in a MoE layer genai cannot tap as exported (moe_taps.py: an XML
             edit, its .bin never opened for writing), read back with its .bin and checked by genai's own rule
             (target.genai_taps) where staged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

import irsurgeon
from irsurgeon.core import rtinfo
from irsurgeon.core.config import generation_config_text
from irsurgeon.core.errors import ConfigError, IRError
from irsurgeon.draft.save import check_call, stage_ir
from irsurgeon.families.eagle3 import moe_taps, surgery
from irsurgeon.families.eagle3.layout import CONFIG, DRAFT_DIR, GENERATION, MODEL_BIN, MODEL_XML
from irsurgeon.families.eagle3.model import EMBED, HIDDEN_LAYERS, Eagle3Config
from irsurgeon.families.eagle3.target import Eagle3Target, genai_taps
from irsurgeon.ir import files, xmlsafe
from irsurgeon.ir.narrow import narrow_feed_forward, narrow_rows
from irsurgeon.quant.compress import compress_model, marked_consumers, set_kv_cache_precision

TOKENS = 2  # the smoke test's call


def finish(model: ov.Model, staging) -> ov.Model:
    choice = staging.choice
    if choice.params:  # the one-row embedding placeholder stays as built: genai replaces it with the target's table
        model, report = compress_model(model, choice.params, keep_float=(*marked_consumers(model), EMBED))
        for line in report.lines():
            staging.echo(line)
    set_kv_cache_precision(model, staging.options.kv_cache())
    rtinfo.set_provenance(model, version=irsurgeon.__version__, weight_format=choice.weight_format,
                          **staging.provenance)
    return model


def smoke_test(xml: Path, cfg: Eagle3Config) -> None:
    """Read the staged draft back: genai's surgery conditions, then one call of TOKENS tokens as the draft stands."""
    model = ov.Core().read_model(str(xml))
    found = surgery.problems(model, cfg.hidden_size, cfg.target_hidden_size, vlm=cfg.vlm)
    if found:
        raise IRError(f"{xml}: {found[0]}")
    narrow_feed_forward(model)  # every op and connection runs; the MLP's matrices are not repacked whole (ir.narrow)
    rows = narrow_rows(model, "lm_head.weight")  # nor the vocabulary's rows: the check needs finite logits, not all
    positions = np.arange(TOKENS, dtype=np.int64)[None]
    tokens = ({"inputs_embeds": np.full((1, TOKENS, cfg.hidden_size), 0.5, np.float32),
               "position_ids": np.stack([positions] * 3)} if cfg.vlm else
              {"input_ids": np.zeros((1, TOKENS), np.int64), "position_ids": positions})
    feed = {**tokens, "attention_mask": np.ones((1, TOKENS), np.int64),
            "hidden_states": np.full((1, TOKENS, 3 * cfg.target_hidden_size), 0.5, np.float32),
            "beam_idx": np.zeros(1, np.int32)}
    out = ov.Core().compile_model(model, "CPU").create_infer_request().infer(feed)
    logits = next(v for k, v in out.items() if "logits" in k.get_names())
    check_call(xml, f"logits (the first {rows} of {cfg.draft_vocab_size} vocabulary rows)", logits, (1, TOKENS, rows))


def stage(tx, target: Eagle3Target, staging) -> None:
    """The draft's files under eagle3_draft/, each checked where it is staged."""
    cfg, model = staging.cfg, staging.take()
    model.set_rt_info(list(target.taps), [HIDDEN_LAYERS])  # saved as "i j k": what genai reads as 3 ints
    for name in (f"{DRAFT_DIR}/{MODEL_BIN}", f"{DRAFT_DIR}/{MODEL_XML}", f"{DRAFT_DIR}/{CONFIG}",
                 f"{DRAFT_DIR}/{GENERATION}", *([MODEL_XML] if target.edits else [])):
        tx.stage(name)
    xml = stage_ir(tx, f"{DRAFT_DIR}/{MODEL_XML}", model)
    model = None  # spent by stage_ir: the staged copy is what runs next
    smoke_test(xml, cfg)
    tx.write(f"{DRAFT_DIR}/{CONFIG}", staging.config_file())
    tx.write(f"{DRAFT_DIR}/{GENERATION}", generation_config(target.path))
    if target.edits:
        stage_taps(tx, target)


def stage_taps(tx, target: Eagle3Target) -> None:
    """The target's openvino_model.xml with moe_taps' edit in each of target.edits, read back with the target's
    .bin: genai's rule must then find every tap, each edited one at the added Add."""
    taps = [moe_taps.Tap(i, target.untapped[i]) for i in target.edits]
    data = moe_taps.edit_xml(files.read_ir_bytes(target.xml), taps, str(target.xml))

    def check(model) -> None:
        found = genai_taps(model)
        for i in target.taps:
            want = moe_taps.tap_name(target.untapped[i], i) if i in target.edits else found.get(i)
            if found.get(i) is None or found[i] != want:
                raise IRError(f"{target.xml}: after the MoE tap edit genai's rule finds {found.get(i)!r} in layer "
                              f"{i}, expected {want!r}; original kept")
    files.read_back(tx.write(MODEL_XML, data), target.xml, check)


def generation_config(target: Path) -> bytes:
    """The target's generation_config.json as it is (core.config.generation_config_text), for the draft folder;
    refused when the target has none (genai's draft pipeline would have no stop tokens)."""
    text = generation_config_text(target / GENERATION)
    if text is None:
        raise ConfigError(f"{target}: no {GENERATION}: openvino-genai's EAGLE-3 draft pipeline reads its stop tokens "
                          f"from one in {DRAFT_DIR}/, copied from the target's")
    return text.encode("utf-8")


def recorded_taps(xml: Path) -> tuple[int, ...] | None:
    """The taps a built draft records (rt_info hidden_layers_list, "i j k"), None when absent or unreadable."""
    value = xmlsafe.get_value(files.read_ir_bytes(xml), (HIDDEN_LAYERS,), str(xml))
    parts = str(value).split() if value is not None else []
    return tuple(int(p) for p in parts) if parts and all(p.isascii() and p.isdigit() for p in parts) else None
