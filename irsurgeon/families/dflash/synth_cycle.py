"""`irsurgeon synth --kind dflash-cycle`: a hand-set Qwen3 target whose greedy continuation cycles, and a one-layer
DFlash draft that predicts the cycle by copying the token four positions back, so openvino-genai accepts its drafts.

V = H = 64 (ids 0..7 special, 8..63 bytes: irsurgeon.synth.tokenizer); u_j is the unit vector of dim j, n() RMSNorm.

Target (SPEC: 4 layers, the Qwen3 graph of synth.target_model)
    embed[i] = u_0 + u_i (embed[0] = sqrt(2) u_0): every row of one norm, dim 0 the same in all
    o_proj = down_proj = 0 in every layer: the residual stream, so every decoder layer's output, is embed[token]
    lm_head[f(i), i] = 1 (i >= 8): logits are g_i sqrt(32) at f(i), 0 elsewhere, so greedy's next token is f(last)
    f: a seeded permutation of the 56 byte ids, 16 cycles of length 3 and 2 of length 4
  after a prompt ending in t greedy decoding emits f(t), f(f(t)), ...: periodic, with the length of t's cycle.

Draft (DRAFT: 1 layer, 2 query heads on 1 KV head of D = 64, rope_theta 1e4, norm gains 1 but q_norm/k_norm)
    fc = [I | 0]: c = hidden_norm(h[2]) = n(embed[token]), as the block rows' a = input_layernorm(embed)
    q_proj, k_proj read dim 0 only, so q and k are one vector for every row, content-free (q_norm/k_norm rescale it):
        q = G n(sum_{j<8} u_j),  k = G n(sum_{j<8} cos(4 th_j) u_j + sin(4 th_j) u_{j+32}),  G = GAIN
      after RoPE (th_j = 1e4^(-2j/D)) q_m . k_n / sqrt(D) = G^2 sum_{j<8} cos(th_j (m - n - 4)): it peaks at
      m - n = 4 by G^2 x 1.07 (27 at G = 5) over every other offset in [-16, 4096] (RoPE's unit-rate pair
      separates 4 from 3 and 5; the slower ones rule out the far offsets), so each block row copies the row 4 back
    v_proj = I without dim 0, o_proj = [I | I] / 2: the row adds sqrt(32) u_t, t the token 4 positions back;
    mlp down_proj = 0; the target's lm_head then proposes f(t), the token at m when the sequence has period 3 there
  Block rows k = 1..4 (the seed at p) copy the tokens at p - 3 .. p: right once three generated tokens on a
  3-cycle precede them; rows k > 4 copy a mask row (wrong); 4-cycles are never predicted. Acceptance is therefore
  high for K <= 4 after a warm-up of a few steps, lower beyond, ~0 after a prompt whose last token is on a 4-cycle.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from irsurgeon.families.dflash.synth import (Draft, SPEC as RANDOM_SPEC, draft_config, draft_tensors, target_tensors,
                                             write_checkpoint, write_qwen3_target)
from irsurgeon.synth.registry import fresh_pair
from irsurgeon.synth.tokenizer import SPECIAL

SPEC = RANDOM_SPEC.with_(hidden=64, vocab=64)
DRAFT = Draft(layers=1, heads=2, kv_heads=1, head_dim=64, intermediate=16, target_layer_ids=(1, 3),
              mask_token_id=3)  # a vision placeholder id: never in a text prompt, never emitted
CYCLES = (3,) * 16 + (4,) * 2  # lengths, covering the 56 byte ids
OFFSET = 4   # a block row copies the token this many positions back: the period 3 plus the lm_head's one step
FREQS = 8    # the fastest RoPE pairs q and k use
GAIN = 5.0   # q_norm / k_norm gain: the attention logit margin is GAIN^2 x 1.07


def cycle_map(seed: int) -> np.ndarray:
    """f as an array over all ids: f[i] for the byte ids, i itself for the special ones (never a current token)."""
    ids = np.random.default_rng([seed, 12]).permutation(np.arange(SPECIAL, SPEC.vocab))
    f, start = np.arange(SPEC.vocab), 0
    for n in CYCLES:
        ring = ids[start:start + n]
        f[ring] = np.roll(ring, -1)
        start += n
    return f


def cycle_target(seed: int) -> dict[str, np.ndarray]:
    H, V, f = SPEC.hidden, SPEC.vocab, cycle_map(seed)
    t = target_tensors(seed, SPEC)
    embed = np.eye(V, H, dtype=np.float32)
    embed[:, 0] = 1.0
    embed[0, 0] = np.sqrt(2.0)
    lm_head = np.zeros((V, H), np.float32)
    lm_head[f[SPECIAL:], np.arange(SPECIAL, V)] = 1.0
    t.update({"model.embed_tokens.weight": embed, "lm_head.weight": lm_head})
    for name in t:
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            t[name] = np.zeros_like(t[name])
    return t


def query_key(d: Draft = DRAFT) -> tuple[np.ndarray, np.ndarray]:
    """The one query and key direction ([D] each, before q_norm / k_norm): see the module docstring."""
    D, half = d.head_dim, d.head_dim // 2
    theta = 1.0 / np.float32(d.rope_theta) ** (np.arange(0, D, 2, dtype=np.float32) / np.float32(D))
    q, k = np.zeros(D, np.float32), np.zeros(D, np.float32)
    q[:FREQS] = 1.0
    k[:FREQS], k[half:half + FREQS] = np.cos(OFFSET * theta[:FREQS]), np.sin(OFFSET * theta[:FREQS])
    return q, k


def cycle_draft(seed: int) -> dict[str, np.ndarray]:
    H, d, a = SPEC.hidden, DRAFT, "layers.0.self_attn."
    t = draft_tensors(seed, SPEC, d)
    q, k = query_key(d)
    eye = np.eye(H, d.head_dim, dtype=np.float32)
    eye[0, 0] = 0.0  # the constant dim carries no token
    t.update({"fc.weight": np.hstack([np.eye(H, dtype=np.float32), np.zeros((H, H), np.float32)])})
    t.update({name: np.ones_like(t[name]) for name in t if name.endswith("norm.weight")})
    t.update({a + "q_norm.weight": np.full(d.head_dim, GAIN, np.float32),
              a + "k_norm.weight": np.full(d.head_dim, GAIN, np.float32),
              a + "q_proj.weight": _column0(np.tile(q, d.heads), H), a + "k_proj.weight": _column0(k, H),
              a + "v_proj.weight": eye, a + "o_proj.weight": np.tile(eye.T, (1, d.heads)) / d.heads,
              "layers.0.mlp.down_proj.weight": np.zeros_like(t["layers.0.mlp.down_proj.weight"])})
    return t


def _column0(v: np.ndarray, width: int) -> np.ndarray:
    """A projection [len(v), width] that reads input dim 0 only, into v."""
    m = np.zeros((v.size, width), np.float32)
    m[:, 0] = v
    return m


def synthesize_cycle(out_dir: Path, seed: int, wait: bool) -> tuple[Path, Path]:
    with fresh_pair(out_dir, wait) as (target, ckpt):
        write_checkpoint(ckpt, draft_config(SPEC, DRAFT), cycle_draft(seed))
        write_qwen3_target(target, SPEC, cycle_target(seed))
    return target, ckpt
