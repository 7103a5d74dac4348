"""DFlash: a block-diffusion drafter of a few Qwen3-style layers conditioned on the target's hidden states, built
from z-lab's DFlashDraftModel safetensors into TARGET/dflash_draft/, with the target's hidden-state annotation.

    irsurgeon patch TARGET --checkpoint DRAFT_DIR [--weight-format auto|f16|f32|int8|int4] [--dry-run] [--force]

TARGET is a Qwen3, Qwen3-MoE or Llama text export (optimum-intel `--task text-generation-with-past`) or a
decomposed Qwen3.5 VLM export (patched for it, run with VLMPipeline): layout.TARGET_TYPES, any other model type
refused by name; DRAFT_DIR a z-lab-format checkpoint (config.json + safetensors) or a repo id
of one (every tensor fetched by byte range). Afterwards TARGET/dflash_draft/ holds the draft IR and its config.json,
and the target IR's .xml carries `hidden_states_decoder_layers` (its .bin untouched), all moved in by one
transaction:

    sc = openvino_genai.SchedulerConfig(); sc.enable_prefix_caching = False
    openvino_genai.LLMPipeline(TARGET, "CPU", scheduler_config=sc,
                               draft_model=openvino_genai.draft_model(TARGET/dflash_draft, "CPU"))

Sliding-window drafts: dflash 0.1.0 (z-lab's PyPI package, the reference followed) makes a `sliding_attention`
layer causal unless config.json sets `is_causal: false` (then its window is two-sided inside the block); optimum-intel
2.2.0 traces every layer non-causal with a one-sided window, which matches neither once a block is longer than the
window (scripts/make_dflash_reference.py measured it). model.py builds dflash 0.1.0's masks.

    layout.py  names: what is claimed and recognised, the files written (no openvino)
    model.py   config as transformers 5.2.0 / dflash 0.1.0 read it, tensor table, the stateful draft graph (RECIPE)
    rope.py    the RoPE variants its configs name (default, linear, yarn)
    target.py  the target as patch and verify see it, and the pair check
    patch.py   finish (compress, rt_info, runtime options, provenance) and what is staged, checked where staged
    verify.py  the checks of a directory for genai's DFlash path, without genai
    genai.py   how openvino-genai runs the pair (paged attention, prefix caching off, drafted-token counter)
    synth.py   tiny pairs: a Qwen3 or Llama text export or the hybrid Qwen3.5 one, and a seeded random draft for it
    synth_cycle.py  a hand-set Qwen3 pair whose drafts are accepted (`synth --kind dflash-cycle`)
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.draft.protocol import Family, Layout, Match, Pairing, Staging, refuse_sizing
from irsurgeon.families.dflash import layout as names

UNPROVEN = ("a DFlash draft shares no tensor with its target (no embedding, no lm_head): only its geometry (hidden "
            "size, target layer ids, mask token row) was checked; `irsurgeon verify {target} --genai` measures how "
            "often its drafts are accepted")


class DFlash(Family):
    key = "dflash"
    title = "DFlash draft"
    runtime_overhead = 199  # MiB: benchmarks/measure_overhead.py, median of 3 alternating rounds (2026-12-05)
    model_types = (names.DRAFT_TYPE,)  # z-lab's drafts are model_type qwen3, claimed by their architectures
    describe = "DFlash block-diffusion draft (z-lab DFlashDraftModel checkpoint)"
    layout = Layout(writes=names.WRITES, draft_xml=f"{names.DRAFT_DIR}/{names.MODEL_XML}",
                    target_xml=names.MODEL_XML, target_alternatives=(names.LANGUAGE_XML,))
    hub_prefix = ""  # every tensor of the (small) checkpoint: the table's prefix is ""
    patch_options = frozenset({"kv_cache_precision"})
    synth_kinds = {"dflash": "a Qwen3 target and a random DFlash draft",
                   "dflash-cycle": "a Qwen3 pair whose drafts are accepted",
                   "dflash-qwen35": "a hybrid Qwen3.5 target and a random DFlash draft",
                   "dflash-llama": "a Llama text target and a random DFlash draft"}

    def claims(self, config: dict, held=None) -> bool:
        return names.claims(config)

    def claimed(self) -> str:
        return f"model_type {names.DRAFT_TYPE} with architectures {names.ARCHITECTURE}"

    def recognise(self, directory: Path) -> Match:
        if names.has_draft(directory):
            return Match.DRAFT
        return Match.TARGET if names.is_text_target(directory) else Match.NONE

    def pair(self, target, staging: Staging) -> Pairing:
        from irsurgeon.families.dflash.target import check_pair
        check_pair(target, staging.cfg)
        return Pairing(unproven=UNPROVEN.format(target=target.path))

    def plan_steps(self, target, choice) -> list[str]:
        return [f"build {names.DRAFT_DIR}/ as {choice.weight_format}",
                f"annotate {target.xml_name} (hidden states of {target.num_layers} decoder layers)"]

    def run_hint(self, directory: Path) -> str:
        draft = Path(directory) / names.DRAFT_DIR
        pipeline = "VLMPipeline" if names.target_xml_name(directory) == names.LANGUAGE_XML else "LLMPipeline"
        return (f"run it: import openvino_genai as g; sc = g.SchedulerConfig(); sc.enable_prefix_caching = False; "
                f"g.{pipeline}('{directory}', 'CPU', scheduler_config=sc, draft_model=g.draft_model('{draft}', "
                f"'CPU'))")

    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """A fixed tiny pair of each kind (synth.py): no option but the seed, --wait and --force applies."""
        from irsurgeon.families.dflash import synth, synth_cycle
        refuse_sizing(kind, options)
        make = {"dflash": synth.synthesize_dflash, "dflash-cycle": synth_cycle.synthesize_cycle,
                "dflash-qwen35": synth.synthesize_hybrid, "dflash-llama": synth.synthesize_llama}[kind]
        target, ckpt = make(out_dir, seed, wait, options.get("force", False))
        return {"target": target, "ckpt": ckpt}


FAMILY = DFlash()
