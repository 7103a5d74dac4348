"""Make an exported target directory MTP-ready in place: check, build, compress, annotate, verify, commit.

    check target  (irsurgeon.ir.export: the layout genai needs, config with a one-layer MTP head, the LM's `logits`
                   fed by the lm_head MatMul)
    check source  (16 token-embedding rows equal the target's, within its storage's rounding: irsurgeon.identity;
                   the checkpoint's config describes the same model: hidden, heads, head_dim, vocab)
    build head    -> compress (auto = mirror the target; irsurgeon.head) -> stage openvino_mtp_model.xml/.bin
    annotate LM   -> stage openvino_language_model.xml (irsurgeon.annotate's write path; the .bin is never rewritten)
    update openvino_config.json (when the target has one) -> staged
    verify staged (read_model, contract, paged-attention conversion, one inference step) -> commit, all or nothing
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import openvino as ov

from irsurgeon import contract, rtinfo
from irsurgeon.annotate import Status, plan_annotation, write_annotation
from irsurgeon.build import build_model, load_mtp, name_anonymous_nodes
from irsurgeon.compress import updated_openvino_config
from irsurgeon.errors import IRError, IRSurgeonError
from irsurgeon.head import build_format, finish_head
from irsurgeon.identity import require_identity
from irsurgeon.ir import files, xmlsafe
from irsurgeon.ir.export import LANGUAGE_MODEL, OPENVINO_CONFIG
from irsurgeon.models import qwen35_mtp
from irsurgeon.models.qwen35_mtp import PREFIX, MTPConfig
from irsurgeon.families.gemma4 import layout as gemma4_layout
from irsurgeon.families.gemma4.patch import patch_gemma4
from irsurgeon.precision import choose_format
from irsurgeon.show import weight_precision, weights
from irsurgeon.target import Target, inspect_target
from irsurgeon.transaction import (STAGE_DIR, DirectoryTransaction, PatchResult, clear_interrupted,  # noqa: F401
                                   shown, write_staged)
from irsurgeon.verify import verify_directory
from irsurgeon.weights.hub import HubOptions, fetch_weights, resolve_source


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


FEED_FORWARD = re.compile(r"mlp\.(?:shared_expert\.|experts\.)?(gate_proj|up_proj|down_proj)\.weight$")
SMOKE_WIDTH = 8  # feed-forward rows kept for the one-step check


def narrow_feed_forward(model: ov.Model, width: int = SMOKE_WIDTH) -> int:
    """Narrow every float feed-forward matrix (dense MLP, shared expert, routed experts) to `width` along the
    intermediate axis, filled with its first staged values, in place; returns how many were cut. The intermediate width appears in no other constant of
    the head (reshapes use -1), so the graph keeps every op, connection and other shape; the cut matrices are most of
    a head's bytes, and without them the CPU plugin's f32 repack of f16 weights stays small."""
    cut = 0
    for op in model.get_ops():
        match = FEED_FORWARD.search(op.get_friendly_name())
        if op.get_type_name() != "Constant" or not match or not op.get_element_type().is_real():
            continue
        data = op.get_data()
        shape = list(data.shape)
        axis = len(shape) - (1 if match.group(1) == "down_proj" else 2)
        if shape[axis] <= width:
            continue
        shape[axis] = width  # the matrix's first values in the narrow shape: only those pages of the .bin are read
        narrow = ov.op.Constant(data.reshape(-1)[:int(np.prod(shape))].reshape(shape).copy())
        narrow.set_friendly_name(op.get_friendly_name())
        op.output(0).replace(narrow.output(0))
        cut += 1
    model.validate_nodes_and_infer_types()
    return cut


def smoke_test(xml: Path, cfg: MTPConfig) -> None:
    """Read the staged head back, check the contract, and run one two-token step on the CPU.

    The step runs the staged graph with its float feed-forward matrices cut to SMOKE_WIDTH intermediate rows
    (narrow_feed_forward): it proves the staged files parse, the head meets the contract, and every op, connection
    and shape but the feed-forward width compiles and runs on the CPU plugin into finite [1, 2, H] values from the
    staged weights (attention, fc, norms, router whole; feed-forward rows beyond the cut are not executed; their
    values were checked finite when read). Peak memory stays near the head's own bytes, not its f32 repack.
    """
    model = ov.Core().read_model(xml)
    problems = contract.check_model(model, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim)
    if problems:
        raise IRError(f"{xml}: built head breaks the contract: {problems[0]}")
    narrow_feed_forward(model)
    request = ov.Core().compile_model(model, "CPU").create_infer_request()
    H = cfg.hidden_size
    # hidden_states, inputs_embeds, attention_mask, position_ids, beam_idx: each in the contract's dtype
    values = (np.full((1, 2, H), 0.5), np.full((1, 2, H), 0.25), np.ones((1, 2)), np.arange(2)[None], np.zeros(1))
    feed = {port.name: v.astype(port.dtype.to_dtype()) for port, v in zip(contract.INPUTS, values)}
    out = request.infer(feed)[0]
    if out.shape != (1, 2, H) or not np.isfinite(out).all():
        raise IRError(f"{xml}: one-step inference gave {out.shape} with non-finite values")


def elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"


Echo = Callable[[str], None]


@dataclass
class Options:
    weight_format: str = "auto"
    kv_cache_precision: str = "f16"
    force: bool = False
    dry_run: bool = False
    wait: bool = False
    allow_nonfinite: bool = False
    allow_foreign_checkpoint: bool = False
    hub: HubOptions | None = None  # revision, token, cache dir for a repo id


def already_patched(target: Target) -> str | None:
    """Why the target needs nothing (None when it needs patching): a conforming head and an annotation."""
    checks = verify_directory(target.path)
    failed = [c for c in checks if not c.ok]
    if failed:
        return None
    return "; ".join(f"{c.name}: {c.detail}" for c in checks)


def patch(target_dir: str | Path, source: str | Path, options: Options = Options(), echo: Echo = print) -> PatchResult:
    """The whole in-place flow (see the module docstring); returns what was written."""
    if gemma4_layout.target_type(target_dir) or gemma4_layout.is_assistant_checkpoint(source):  # the second family:
        return patch_gemma4(target_dir, source, options, echo)  # an assistant and the target's MTP outputs
    start = time.perf_counter()
    if not options.dry_run and os.path.lexists(Path(target_dir) / STAGE_DIR):  # a half-done commit mixes versions:
        clear_interrupted(target_dir, options.wait, echo)                     # undo it before judging the target
    target = inspect_target(target_dir)
    for line in target.cfg.warnings:  # here, not in inspect_target: verify re-inspects the target
        echo(line)
    result = PatchResult(target.path)
    if is_done(target, options, echo):
        result.skipped = True
        return result
    root = resolve_source(source, echo, options.hub)  # a repo id: config.json and the index only
    if gemma4_layout.is_assistant_checkpoint(root):  # a gemma4_assistant repo id, known from the config.json just
        return patch_gemma4(target_dir, source, options, echo)  # fetched: refused there in one line (not Gemma 4)
    identity = require_identity(target.path, source, root, options.hub, options.allow_foreign_checkpoint, echo)
    choice = plan(target, source, options, echo)  # after the source is checked: no plan for a wrong one
    if choice is None:
        result.skipped = True
        return result
    root = fetch_weights(source, root, options.hub, PREFIX, echo)
    cfg, weights, ckpt = load_mtp(root, allow_nonfinite=options.allow_nonfinite, warn=echo,
                                  family=qwen35_mtp.FAMILY)
    try:
        check_source_matches(target, cfg)
        result.written = stage_and_commit(target, cfg, weights, ckpt, choice, options, source, echo, identity)
    finally:
        ckpt.close()
    echo(f"{target.path}: wrote {', '.join(result.written)} in {elapsed(start)}")
    return result


def is_done(target: Target, options: Options, echo: Echo) -> bool:
    """True (said so) when the target is MTP-ready with a head in the format asked for; --force: never.

    An explicit --weight-format other than the present head's rebuilds it: the user asked for that format, as a
    re-export with another format would give it. `auto` keeps any conforming head.
    """
    if not target.has_mtp or options.force:
        return False
    done = already_patched(target)
    if not done:
        echo(f"{target.path}: has {contract.MTP_XML} but does not pass verify; rebuilding it")
        return False
    present = head_format(target.path / contract.MTP_XML)
    asked = options.weight_format.lower()
    if asked != "auto" and present != asked:
        echo(f"{target.path}: its MTP head is {present or 'of unknown format'}; --weight-format {asked}: rebuilding it")
        return False
    echo(f"{target.path}: already MTP-ready ({done}); nothing to do (--force rebuilds)")
    return True


def head_format(xml: Path) -> str | None:
    """The head's weight format: its provenance (rt_info irsurgeon/weight_format), else read from its weights."""
    recorded = xmlsafe.get_value(files.read_ir_bytes(xml), (rtinfo.PROVENANCE, "weight_format"), str(xml))
    if recorded:
        return recorded
    found = weight_precision(weights(files.read_model(xml, checked=True)))
    return "f16" if found == "bf16" else found


def plan(target: Target, source, options: Options, echo: Echo):
    """The format choice for the head, or None when there is nothing to write (--dry-run)."""
    interrupted = os.path.lexists(target.path / STAGE_DIR)  # only a dry run gets here with leftovers
    choice = choose_format(options.weight_format, target.path if options.weight_format == "auto" else None)
    if choice.note:
        echo(choice.note)
    if not options.dry_run:
        return choice
    steps = [f"build the MTP head from {source} as {choice.weight_format}", f"annotate {LANGUAGE_MODEL}"]
    if choice.params and target.export.openvino_config.is_file():
        steps.append(f"record the head's quantization in {OPENVINO_CONFIG}")
    if interrupted:
        steps.insert(0, f"roll back or clear what an interrupted run left in {STAGE_DIR}")
    for step in steps:
        echo(f"would {step}")
    return None


def stage_and_commit(target: Target, cfg: MTPConfig, weights, ckpt, choice, options: Options, source,
                     echo: Echo, identity: str = "") -> list[str]:
    """Build, stage and check every new file inside the target, then move them in at once; returns their names."""
    with DirectoryTransaction(target.path, wait=options.wait, echo=echo) as tx:
        model = build_model(cfg, weights, build_format(choice))
        ckpt.close()  # the model owns its weights now: release the mapped shards before the next steps
        model = finish_head(model, choice, options.kv_cache_precision, echo, **provenance(options, source, identity))
        name_anonymous_nodes(model)
        tx.stage(contract.MTP_BIN)
        write_staged(tx.stage(contract.MTP_XML), lambda xml, m=model: ov.save_model(m, xml, compress_to_fp16=False))
        model = None  # free the weights before the one-step check compiles the staged copy
        smoke_test(tx.stage_dir / contract.MTP_XML, cfg)
        stage_annotation(tx, target, options.force, echo)
        stage_openvino_config(tx, target, choice.params)
        tx.commit()
        return list(tx.names)


def provenance(options: Options, source, identity: str) -> dict[str, str]:
    """What the head records of where it came from (rt_info irsurgeon/...)."""
    fields = {"source": str(source), "checkpoint_identity": identity}
    if options.hub and options.hub.revision:
        fields["revision"] = options.hub.revision
    return fields


def stage_annotation(tx: DirectoryTransaction, target: Target, force: bool, echo: Echo) -> None:
    """Stage the language model's .xml with the hidden-state annotation, through annotate's one write path."""
    planned = plan_annotation(target.lm_xml, force, target.cfg.num_hidden_layers, target.hidden_size)
    if planned.status is Status.UNCHANGED:
        echo(f"{LANGUAGE_MODEL}: hidden-state annotation already present and identical")
        return
    if planned.status is Status.KEPT:
        echo(f"{LANGUAGE_MODEL}: keeps its existing, different hidden-state annotation (--force replaces it)")
        return
    write_annotation(planned, into=lambda data: stage_bytes(tx, LANGUAGE_MODEL, data))
    echo(f"{LANGUAGE_MODEL}: annotated {planned.num_layers} decoder layers")


def stage_bytes(tx: DirectoryTransaction, name: str, data: bytes) -> Path:
    """Write one file's new version into the transaction's staging folder; returns its staged path."""
    staged = tx.stage(name)
    write_staged(staged, lambda path: path.write_bytes(data))
    return staged


def stage_openvino_config(tx: DirectoryTransaction, target: Target, params) -> None:
    data = updated_openvino_config(target.path, params)
    if data is not None:
        stage_bytes(tx, OPENVINO_CONFIG, data.encode("utf-8"))
