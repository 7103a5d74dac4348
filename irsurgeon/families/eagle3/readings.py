"""What an EAGLE-3 checkpoint leaves open for its target (Family.readings), which `irsurgeon tune` settles by the
drafts genai accepts (EAGLE3.md, "Readings a checkpoint does not state"). Each alternative is a set of config edits;
the first sets nothing and is what `patch` builds.

    AngelSlim text draft (Eagle3LlamaForCausalLM, no modal_type VLM)
        taps, when its config names no ids: its trainer's default changed between versions (model.default_taps):
            [1, N//2 - 1, N - 4] (built)  or  [1, (N+1)//2 - 1, N - 3]  (aux_hidden_states_layer_ids set)
        RoPE base, when rope_theta is not 10000: its trainer builds at 10000 (built, rope.read_angelslim); its
            inference code, optimum-intel, SGLang and vLLM at rope_theta  (rope.BASE_KEY set to it)
    SafeAILab / SpecForge layout (LlamaForCausalLMEagle3) with a default RoPE whose rope_theta is not 10000
        RoPE base: rope_theta (built: SpecForge since PR 270, SafeAILab's serving cnets.py)  or  10000 (SafeAILab's
            training copy traineagle3/cnets.py and SpecForge before PR 270 pass no base)  (rope.BASE_KEY 10000)
    anything else (a VLM draft, the speculators', a config that names its base in rope.BASE_KEY): nothing open
"""
from __future__ import annotations

from irsurgeon.draft.protocol import Reading
from irsurgeon.families.eagle3 import layout, rope
from irsurgeon.families.eagle3.model import ANGELSLIM_TAPS, default_taps, parse_config, repeated
from irsurgeon.families.eagle3.target import Eagle3Target

TRAINER_BASE = rope.ANGELSLIM_THETA  # 10000: LlamaRotaryEmbedding's base when the trainer passes none


def readings(config: dict, target: Eagle3Target) -> list[Reading]:
    """The readings this checkpoint config (as the family reads it) leaves open for `target`."""
    cfg = parse_config(config)
    if cfg.vlm or cfg.architecture == layout.SPECULATORS or rope.BASE_KEY in config:
        return []
    if cfg.architecture == layout.ANGELSLIM:
        taps = [] if cfg.taps.ids is not None else [angelslim_taps(target)]
        theta = rope.angelslim_theta(config, float(config.get("rope_theta", TRAINER_BASE)), "config.json")
        base = [] if theta == TRAINER_BASE else [Reading(
            "RoPE base", f"an AngelSlim draft's RoPE base: its trainer used {TRAINER_BASE:.12g}, its inference code "
                         f"and the runtimes rope_theta {theta:.12g}",
            ((f"base {TRAINER_BASE:.12g} (AngelSlim's trainer)", {}),
             (f"base {theta:.12g} (rope_theta: AngelSlim's inference code, SGLang, vLLM)", {rope.BASE_KEY: theta})))]
        return [r for r in (*taps, *base) if r is not None]
    if cfg.rope.kind != "default" or cfg.rope.theta == TRAINER_BASE:
        return []
    theta = cfg.rope.theta
    return [Reading("RoPE base", f"a {cfg.architecture} draft's RoPE base: rope_theta {theta:.12g} in SpecForge and "
                                 f"SafeAILab's serving code, {TRAINER_BASE:.12g} in SafeAILab's training copy",
                    ((f"base {theta:.12g} (rope_theta: SpecForge, SafeAILab's serving code)", {}),
                     (f"base {TRAINER_BASE:.12g} (SafeAILab's training copy)", {rope.BASE_KEY: TRAINER_BASE})))]


def angelslim_taps(target: Eagle3Target) -> Reading | None:
    """AngelSlim's two default taps for this target, when the older one names three layers genai can tap here."""
    n = target.num_layers
    newer, older = default_taps(layout.ANGELSLIM, n), (1, (n + 1) // 2 - 1, n - 3)
    if older == newer or repeated(older) is not None or not all(i in target.tappable for i in older):
        return None
    return Reading("taps", "an AngelSlim draft that names no taps: its trainer's default changed between versions",
                   ((f"taps {list(newer)} (AngelSlim's default since f3cad9f)", {}),
                    (f"taps {list(older)} (AngelSlim's first trainer)", {ANGELSLIM_TAPS: list(older)})))
