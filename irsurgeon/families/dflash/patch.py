"""`irsurgeon patch` for a DFlash pair: the draft's finish, what is staged, and the checks where it is staged.

    finish   compress (auto = mirror the target; irsurgeon.quant.precision / irsurgeon.quant.compress), the rt_info genai reads
             (model.annotate: dflash_mode, dflash/mask_token_id, dflash/target_layer_ids), runtime_options as
             optimum-intel 2.2.0 writes them (KV_CACHE_PRECISION f16, ACTIVATIONS_SCALE_FACTOR 8.0), provenance
    stage    TARGET/dflash_draft/openvino_model.xml/.bin (checked: read back, one call with a 2-row context and a
             K = 3 block, MLPs narrowed, finite [1, 3, H]) and config.json (the checkpoint's, for verify's pair
             check);
             the target IR's .xml with the hidden-state annotation (irsurgeon.commit.annotate's write path, its .bin never
             rewritten), whose last layer must be the lm_head MatMul's input (the post-final-norm tensor)

All of it is one transaction of the target directory (irsurgeon.commit.transaction): the house commits every file at once.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov

import irsurgeon
from irsurgeon.core import rtinfo
from irsurgeon.commit.annotate import Status, plan_annotation, write_annotation
from irsurgeon.draft.save import check_call, stage_ir
from irsurgeon.quant.compress import compress_model, set_kv_cache_precision
from irsurgeon.core.concurrency import alongside
from irsurgeon.core.errors import IRError, with_hint
from irsurgeon.families.dflash import model as dflash
from irsurgeon.families.dflash.layout import CONFIG, DRAFT_DIR, MODEL_BIN, MODEL_XML
from irsurgeon.families.dflash.target import DFlashTarget
from irsurgeon.ir.narrow import narrow_feed_forward

ACTIVATIONS_SCALE_FACTOR = "8.0"  # optimum-intel 2.2.0's runtime_options of a DFlash draft
CONTEXT_ROWS, BLOCK = 2, 3  # the smoke test's call: 2 new target rows, a block of [seed, MASK x 3]


def finish(model: ov.Model, staging) -> ov.Model:
    choice, cfg = staging.choice, staging.cfg
    if choice.params:
        model, report = compress_model(model, choice.params)
        for line in report.lines():
            staging.echo(line)
    dflash.annotate(model, cfg)
    set_kv_cache_precision(model, staging.options.kv_cache())
    rtinfo.set_runtime_option(model, "ACTIVATIONS_SCALE_FACTOR", ACTIVATIONS_SCALE_FACTOR)
    rtinfo.set_provenance(model, version=irsurgeon.__version__, weight_format=choice.weight_format,
                          **staging.provenance)
    return model


def smoke_test(xml: Path, cfg: dflash.DFlashConfig) -> None:
    """Read the staged draft back and run one call: a 2-row context and a K = 3 block, as genai feeds it.

    The call runs the staged graph with its MLP matrices cut to ir.narrow.SMOKE_WIDTH intermediate rows
    (narrow_feed_forward): every op, connection and other shape, fc, attention and norms whole, from the staged
    weights. The MLPs are 77 % of a Qwen3.5-27B-sized draft's bytes; whole, the CPU plugin's bf16 repack of the f32
    weights made the check's peak 1.5x the draft's f32 bytes, more than the build's own.
    """
    model = ov.Core().read_model(str(xml))
    narrow_feed_forward(model)
    H, n, Q = cfg.hidden_size, len(cfg.target_layer_ids), BLOCK + 1
    feed = {"inputs_embeds": np.full((1, Q, H), 0.25, np.float32),
            "hidden_states": np.full((1, CONTEXT_ROWS, n * H), 0.5, np.float32),
            "position_ids": np.arange(CONTEXT_ROWS + Q, dtype=np.int64)[None],
            "attention_mask": np.ones((1, CONTEXT_ROWS + Q), np.int64),
            "beam_idx": np.zeros(1, np.int32)}
    out = ov.Core().compile_model(model, "CPU").create_infer_request().infer(feed)[0]
    check_call(xml, "outputs", out, (1, BLOCK, H))


def stage(tx, target: DFlashTarget, staging) -> None:
    """The draft's files under dflash_draft/ and the target's annotated .xml, each checked where it is staged."""
    cfg, model = staging.cfg, staging.take()
    for name in (f"{DRAFT_DIR}/{MODEL_BIN}", f"{DRAFT_DIR}/{MODEL_XML}", f"{DRAFT_DIR}/{CONFIG}"):
        tx.stage(name)  # the draft's names first, as the commit lists them, whichever thread stages next
    with alongside(lambda say: stage_annotation(tx, target, staging.options.force, say)) as annotation:
        xml = stage_ir(tx, f"{DRAFT_DIR}/{MODEL_XML}", model)
        model = None  # spent by stage_ir: the staged copy is what runs next
        smoke_test(xml, cfg)
        data = staging.config_file()
        tx.write(f"{DRAFT_DIR}/{CONFIG}", data)
    annotation.result(staging.echo)


def stage_annotation(tx, target: DFlashTarget, force: bool, echo) -> None:
    """The target IR's .xml with the hidden-state annotation, through annotate's one write path."""
    from irsurgeon.families.dflash.verify import annotation_check

    planned = plan_annotation(target.xml, force, target.num_layers, target.hidden_size)
    if planned.status is Status.UNCHANGED:
        echo(f"{target.xml_name}: hidden-state annotation already present and identical")
        return
    if planned.status is Status.KEPT:
        ok, detail = annotation_check(target.xml, target.num_layers)
        if not ok:  # kept, verify would reject the directory: refused before anything is committed
            raise with_hint(IRError(f"{target.xml}: its existing hidden-state annotation is kept unless the run is "
                                    f"forced, but verify rejects it ({detail})"), "--force", "pass --force to replace it")
        echo(f"{target.xml_name}: keeps its existing, different hidden-state annotation (a forced run replaces it)")
        return

    def into(data: bytes) -> Path:
        return tx.write(target.xml_name, data)

    write_annotation(planned, into=into)
    echo(f"{target.xml_name}: annotated {planned.num_layers} decoder layers")
