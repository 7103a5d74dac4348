"""Qwen3.5 / Qwen3.6 MTP: the one-layer `mtp.*` head of the checkpoint, built as openvino_mtp_model.xml beside a
decomposed VLM export, whose language model gets the hidden-state annotation.

    irsurgeon patch TARGET --checkpoint CKPT      CKPT: a local checkpoint or a repo id (only the mtp.* shards)
    openvino_genai.VLMPipeline(TARGET, "CPU", scheduler_config=..., draft_model=openvino_genai.draft_model(TARGET))

    layout.py    names: model types, the files written, recognition (no openvino)
    model.py     config as transformers reads it, tensor table, the head's graph (RECIPE)
    contract.py  the head's I/O contract as data
    target.py    the target directory as patch and verify see it
    identity.py  16 token-embedding rows against the target's: the checkpoint is the one it was exported from
    patch.py     pair check, finish (compress, KV precision, provenance), what is staged
    smoke.py     the one-step check of the staged head, its feed-forward narrowed (float and nncf-compressed)
    verify.py    the contract checks of a directory
    genai.py     how openvino-genai runs it (VLMPipeline, paged attention, scheduler sized from the directory)
The contract the head keeps, and how genai runs it: docs/families.md (Qwen3.5 / Qwen3.6 MTP head).
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import present
from irsurgeon.draft.protocol import Family, Layout, Match, Pairing, Staging
from irsurgeon.families.qwen35_mtp import layout as names
from irsurgeon.families.qwen35_mtp.layout import MTP_XML
from irsurgeon.ir.export import LANGUAGE_MODEL, OPENVINO_CONFIG
from irsurgeon.synth.kinds import QWEN_KINDS


class Qwen35MTP(Family):
    key = "qwen3_5"
    title = "Qwen3.5 / Qwen3.6 MTP head"
    runtime_overhead = 178  # MiB: benchmarks/measure_overhead.py, median of 3 alternating rounds (2026-12-05)
    model_types = names.MODEL_TYPES
    describe = "Qwen3.5 / Qwen3.6 MTP head (mtp.* tensors)"
    layout = Layout(writes=names.WRITES, draft_xml=MTP_XML, target_xml=LANGUAGE_MODEL)
    hub_prefix = names.PREFIX
    standalone = True
    patch_options = frozenset({"kv_cache_precision"})
    synth_kinds = {QWEN_KINDS[0]: "a Qwen3.5 VLM export in the layout openvino-genai loads, and its checkpoint",
                   QWEN_KINDS[1]: "the same with a MoE language model",
                   QWEN_KINDS[2]: "a text-only Llama export (openvino_model.xml) and its checkpoint, no mtp.*"}

    def recognise(self, directory: Path) -> Match:
        if names.has_head(directory):
            return Match.DRAFT
        return Match.TARGET if names.model_type(directory) in self.model_types else Match.NONE

    def inspect(self, directory: Path):
        from irsurgeon.families.qwen35_mtp.target import inspect_target
        return inspect_target(directory, plan=True)

    def pair(self, target, staging: Staging) -> Pairing:
        from irsurgeon.families.qwen35_mtp.identity import require_identity
        from irsurgeon.families.qwen35_mtp.patch import check_source_matches

        check_source_matches(target, staging.cfg)  # geometry first: --allow-foreign-checkpoint cannot help a mismatch
        options = staging.options
        return Pairing(require_identity(target.path, staging.source, staging.root, options.hub,
                                        options.allow_foreign_checkpoint, staging.echo))

    def plan_steps(self, target, choice) -> list[str]:
        steps = [f"build the MTP head as {choice.weight_format}", f"annotate {LANGUAGE_MODEL}"]
        if choice.params and present(target.export.openvino_config):
            steps.append(f"record the head's quantization in {OPENVINO_CONFIG}")
        return steps

    def run_hint(self, directory: Path) -> str:
        return (f"run it: import openvino_genai as g; sc = g.SchedulerConfig(); sc.enable_prefix_caching = False; "
                f"g.VLMPipeline('{directory}', 'CPU', scheduler_config=sc, draft_model=g.draft_model('{directory}', "
                f"'CPU'))")

    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """sizes ({name: value}), layer_types (the --layer-types text), with_mtp (None: with for qwen35 kinds),
        weight_format, force: as `irsurgeon synth` takes them (irsurgeon.synth.registry)."""
        from irsurgeon.synth.registry import spec_from_options, synthesize
        spec = spec_from_options(kind, options.get("sizes") or {}, options.get("layer_types"))
        with_mtp = kind != "llama" if options.get("with_mtp") is None else options["with_mtp"]
        out = synthesize(out_dir, kind, spec, seed=seed, with_mtp=with_mtp,
                         weight_format=options.get("weight_format", "f32"), wait=wait, force=options.get("force", False))
        return {"target": out.target, "ckpt": out.ckpt}


FAMILY = Qwen35MTP()
