"""A DFlash pair whose drafts are accepted, at a target size where speculative decoding can pay on a CPU: the
`synth --kind dflash-cycle` construction (irsurgeon/families/dflash/synth_cycle.py: a target whose greedy
continuation cycles, a one-layer draft that copies the token four positions back) with a wider, deeper target.

The kind itself is one fixed tiny pair (V = H = 64, 4 layers: `synth` refuses --hidden/--layers for it), so the
target is so cheap that genai's per-step overhead, not the target, bounds the speed, and plain generation wins.
Here H and the layer count grow; V stays 64 (the synthesized byte tokenizer) and so does the draft's attention
(2 heads of D = 64 reading the token's one-hot in dims 1..63). What the construction needs of H is only H >= V:
    embed = eye(V, H) with dim 0 set: the token's identity in dims 1..63, the rest of the stream zero
    every target layer's o_proj and down_proj zero: the stream stays embed[token] (the layers still run their
        MatMuls over all of H: their cost is a real layer's, their output adds nothing)
    the draft's v_proj [D, H] = I without dim 0, its o_proj [H, heads D] the transposed copy per head / heads
so greedy decoding and the draft's proposals are those of the tiny kind (same f, same acceptance pattern), while
one target step reads layers x (4 H^2 + 3 H I) weights. Heads grow with H at head_dim 64, I = 4 H.
"""
from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np

from irsurgeon.families.dflash import synth_cycle as sc
from irsurgeon.families.dflash.synth import draft_config, final, write_checkpoint, write_qwen3_target
from irsurgeon.synth.output import output_pair


def spec(hidden: int, layers: int):
    return sc.SPEC.with_(hidden=hidden, layers=layers, heads=hidden // 64, kv_heads=max(1, hidden // 256),
                         head_dim=64, intermediate=4 * hidden)


def target_bytes(hidden: int, layers: int) -> int:
    """f32 bytes of the target's weights (layers' MatMuls, embedding and lm_head; norms left out)."""
    s = spec(hidden, layers)
    per_layer = hidden * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * hidden \
        + 3 * hidden * s.intermediate
    return 4 * (layers * per_layer + 2 * s.vocab * hidden)


def tensors(seed: int, s) -> tuple[dict, dict]:
    """(target, draft) tensors: synth_cycle's own functions run on spec `s` (they read its module-level SPEC), the
    draft's v_proj and o_proj then given their [D, H] and [H, heads D] orientation (synth_cycle writes them for
    H = D = 64, where the two coincide)."""
    with mock.patch.object(sc, "SPEC", s):
        target, draft = sc.cycle_target(seed), sc.cycle_draft(seed)
    a = "layers.0.self_attn."
    v = np.ascontiguousarray(draft[a + "v_proj.weight"].T)  # [D, H]: I without dim 0
    draft[a + "v_proj.weight"] = v
    draft[a + "o_proj.weight"] = np.tile(v.T, (1, sc.DRAFT.heads)) / sc.DRAFT.heads
    return target, draft


def synthesize(out_dir: Path, hidden: int, layers: int, seed: int = 0) -> tuple[Path, Path]:
    """out_dir/target and out_dir/ckpt (replacing earlier ones), as `synth` writes a pair."""
    s = spec(hidden, layers)
    with output_pair(out_dir, False, True) as (target, ckpt):
        target_tensors, draft_tensors = tensors(seed, s)
        write_checkpoint(ckpt, draft_config(s, sc.DRAFT), draft_tensors)
        write_qwen3_target(target, s, target_tensors)
    return final(out_dir)
