"""EAGLE-3: a one-layer Llama draft fed with three target hidden states, built as TARGET/eagle3_draft/ for
openvino-genai's EAGLE-3 path, with the taps its trainer used written as hidden_layers_list.

    irsurgeon patch TARGET --checkpoint CKPT      CKPT: SafeAILab/SpecForge, AngelSlim or speculators layout
    openvino_genai.LLMPipeline(TARGET, "CPU", scheduler_config=sc, draft_model=draft_model(TARGET/eagle3_draft))
    (a VLM target, Qwen3-VL / Qwen2.5-VL with an AngelSlim VLM draft: VLMPipeline, the same arguments)

    layout.py   names: what is claimed and recognised, the files written (no openvino)
    model.py    config as the trainers read it, the taps, tensor table, the stateful draft graph (RECIPE)
    rope.py     the RoPE its configs name (default, linear, dynamic, yarn, longrope, llama3, mrope), read as each
                trainer computes it; rope_tables.py computes the tables
    target.py   the target as patch and verify see it, genai's tap rule, the pair check
    readings.py what a checkpoint leaves open (AngelSlim's taps, a RoPE base), for `irsurgeon tune`
    moe_taps.py the XML edit that makes a MoE layer's output tappable by genai 2026.4.1 (openvino.genai issue 4390)
    surgery.py  the conditions genai's load-time surgery puts on the draft IR
    patch.py    finish (compress, KV precision, provenance) and what is staged, checked where staged
    verify.py   the checks of a directory for genai's EAGLE-3 path, without genai
    genai.py    how openvino-genai runs the pair
    synth.py    a Llama target and a seeded random draft for it
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.draft.protocol import Family, Layout, Match, Pairing, Staging, refuse_sizing
from irsurgeon.families.eagle3 import layout as names

UNPROVEN = ("an EAGLE-3 checkpoint shares no tensor with its target (genai gives the draft the target's embedding "
            "table at load): only its geometry (hidden size, vocabulary, taps) was checked; `irsurgeon verify {target} "
            "--genai` measures how often its drafts are accepted")


class Eagle3(Family):
    key = "eagle3"
    title = "EAGLE-3 draft"
    runtime_overhead = 196  # MiB: benchmarks/measure_overhead.py, median of 3 alternating rounds (2026-12-05)
    describe = "EAGLE-3 draft (SafeAILab / SpecForge / AngelSlim / speculators checkpoint)"
    model_types = names.MODEL_TYPES  # claimed by their architectures (claims), never by model_type alone
    layout = Layout(writes=names.WRITES, draft_xml=f"{names.DRAFT_DIR}/{names.MODEL_XML}",
                    target_xml=names.MODEL_XML, target_alternatives=(names.VLM_XML,))
    hub_prefix = ""  # every tensor of the (small) checkpoint
    synth_kinds = {"eagle3": "a Llama text target and a random EAGLE-3 draft for it",
                   "eagle3-trained": "a 12-layer Llama target and an EAGLE-3 draft trained on it, whose drafts are "
                                     "accepted"}
    patch_options = frozenset({"hidden_layers", "kv_cache_precision"})

    def claims(self, config: dict, held=None) -> bool:
        return names.claims(config, held)

    def reading(self, config: dict, held, source: str) -> tuple[dict, list[str]]:
        return names.reading(config, held, source)

    def readings(self, config: dict, held, target) -> list:
        from irsurgeon.families.eagle3.readings import readings
        return readings(config, target)

    def claimed(self) -> str:
        return (f"architectures {' / '.join(names.ARCHITECTURES)}, or the tensors of one ({names.FC} [H, 3H], one "
                f"layer {' or '.join(p + '*' for p in names.LAYER_PREFIXES)} with hidden_norm, "
                f"{' or '.join(names.HEADS)})")

    def recognise(self, directory: Path) -> Match:
        if names.has_draft(directory):
            return Match.DRAFT
        return Match.TARGET if names.is_text_target(directory) or names.is_vlm_target(directory) else Match.NONE

    def pair(self, target, staging: Staging) -> Pairing:
        from irsurgeon.families.eagle3.target import check_pair
        staging.echo(check_pair(target, staging.cfg, staging.options.hidden_layers, edit=True))
        return Pairing(unproven=UNPROVEN.format(target=target.path))

    def plan_steps(self, target, choice) -> list[str]:
        steps = [f"build {names.DRAFT_DIR}/ as {choice.weight_format}",
                 f"tap the outputs of target layers {list(target.taps)} (rt_info hidden_layers_list)"]
        if target.edits:
            steps.append(f"make the outputs of MoE layers {list(target.edits)} tappable by genai: {names.MODEL_XML} "
                         f"gains an Add of a constant zero in each (moe_taps.py; its .bin is not written)")
        return steps

    def stale(self, directory: Path, options) -> str | None:
        """--hidden-layers other than the taps the present draft records: rebuilt (taps are the draft's input)."""
        if options.hidden_layers is None:
            return None
        from irsurgeon.core.config import peek_json
        from irsurgeon.families.eagle3.patch import recorded_taps
        from irsurgeon.families.eagle3.target import asked_taps
        draft = Path(directory) / names.DRAFT_DIR
        present = recorded_taps(draft / names.MODEL_XML)
        if present == asked_taps(options.hidden_layers, names.architecture(peek_json(draft / names.CONFIG) or {})):
            return None
        return f"its draft is fed from target layers {list(present) if present else '(unrecorded)'}; hidden layers " \
               f"{list(options.hidden_layers)} asked"

    def run_hint(self, directory: Path) -> str:
        draft = Path(directory) / names.DRAFT_DIR
        pipeline = "VLMPipeline" if names.is_vlm_target(directory) else "LLMPipeline"
        return (f"run it: import openvino_genai as g; sc = g.SchedulerConfig(); sc.enable_prefix_caching = False; "
                f"g.{pipeline}('{directory}', 'CPU', scheduler_config=sc, draft_model=g.draft_model('{draft}', "
                f"'CPU'))")

    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """A fixed tiny pair (synth.py): no option but the seed, --wait and --force applies."""
        from irsurgeon.families.eagle3.synth import synthesize_eagle3, synthesize_trained
        refuse_sizing(kind, options)
        make = synthesize_trained if kind == "eagle3-trained" else synthesize_eagle3
        target, ckpt = make(out_dir, seed, wait, options.get("force", False))
        return {"target": target, "ckpt": ckpt}


FAMILY = Eagle3()
