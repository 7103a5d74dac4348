#!/usr/bin/env python3
"""irsurgeon/families/eagle3/trained/: a tiny one-layer EAGLE-3 draft (SafeAILab layout) trained with PyTorch on a seeded
12-layer synthetic Llama target, fed from the outputs of target layers [1, 5, 8] (NOT genai's default {2, 6, 9}).

    irsurgeon synth /tmp/eagle3-target --kind llama --layers 12 --seed 0        (product env: the target)
    python3 -m venv /tmp/eagle3-train
    /tmp/eagle3-train/bin/pip install torch==2.13.0+cpu --index-url https://download.pytorch.org/whl/cpu
    /tmp/eagle3-train/bin/pip install numpy openvino==2026.4.1
    /tmp/eagle3-train/bin/python scripts/train_eagle3_tiny.py --target /tmp/eagle3-target/target \
        [--out irsurgeon/families/eagle3/trained] [--seed 0]

A training environment, never the product's: torch stays out of irsurgeon. About 1 minute of data collection and
6 of training on 2 shared CPU cores (one torch thread); the same seed writes the same bytes (run twice, 2026-12-05).

Data (openvino, the target IR at INFERENCE_PRECISION_HINT f32). The target's residual Adds genai 2026.4.1 taps
(irsurgeon.families.eagle3.target.genai_taps: the first Add named `layers.{i}/` whose input 1 is MatMul(Multiply), the
output of decoder layer i) are added as outputs. SEQUENCES (8192) sequences of LENGTH (64) tokens: a random prompt
(1..24 tokens, one length per batch of 64; alternate batches uniform over the vocabulary and over the ids the
synthetic tokenizer gives printable ASCII, byte + 8), then the target's greedy continuation (stateful decoding). One
prefill of each whole sequence then gives, at every position t, the tapped outputs h_t = concat(out(layer 1),
out(layer 5), out(layer 8)) [3*64] and the target's greedy next token g_t = argmax logits_t (the token after
x_0..x_t). The outputs of layers 2, 6, 9 are kept too, only to report offline what feeding the draft genai's default
taps costs. The last HELD_OUT (256) sequences are not trained on.

Draft (the forward irsurgeon/families/eagle3/model.py's docstring states, in torch; checked against the independent
numpy reference tests/helpers/numpy_eagle3.py, stateful steps included, to 2e-6): e = the TARGET's embedding table
(read from the target IR's `model.embed_tokens.weight` constant: what genai's share_vocabulary gives the draft; frozen)
at the input ids; h = fc(hidden) [64 <- 192]; x = concat(input_layernorm(e), hidden_norm(h)); causal GQA (HEADS 8,
KV_HEADS 4, head_dim 16; Llama's default RoPE, rotate_half, theta 1e4); r1 = h + o_proj(attn); r2 = r1 +
down(silu(gate(n)) * up(n)) (INTER 512), n = post_attention_layernorm(r1); logits = lm_head(norm(r2)) over the full
vocabulary (draft_vocab_size = vocab_size = 256; d2t all zeros, t2d all true, the tensors SafeAILab's trainer saves).

The shift (SafeAILab/EAGLE eagle/traineagle3/cnets.py, Model.dataprepare and Model.forward): the target's hidden states
stay at their positions, while `target = padding(outs.logits, left=False)` and `input_ids = padding(input_ids,
left=False)` move the logits and the ids one place left; so the draft row at position t gets the target's hidden
states at t and the embedding of token t+1, and learns the target's distribution at t+1: token t+2. genai runs the
same alignment (continuous_batching/eagle3_strategy.cpp create_draft_input_ids: the draft's input_ids are the
target's shifted by one, "refer to SafeAILab/EAGLE cnets.py").

Test-time-training unroll (cnets.py Model.forward's `for idx in range(self.length)`, here STEPS = 3 instead of 7):
step k (k >= 1) is fed its own r2 of step k-1 at the same index t in place of fc(h_t), the embedding of token t+k+1
(ids shifted once more, teacher-forced) and position t+k, and learns the target's token t+k+2. Its query sees the
step-0 keys of positions 0..t and the keys of its own chain (steps 1..k at index t), which is what the draft row at
position t+k sees while drafting its k+1-th token (rows 0..t fed the target's hidden states, rows t+1..t+k its own).
SafeAILab masks one more step-0 key per step (`attention_mask[:, :, ind0, ind1] = min`: step k sees 0..t-k); this
script follows the inference instead. Loss: cross-entropy on the target's greedy token at each step, weighted 0.8**k
(eagle/traineagle3/main.py's ploss_weight). SafeAILab fits the target's soft distribution; this random target's is
nearly flat (entropy about 5.0 of ln 256 = 5.55 nats), and fitting it reached 29% held-out greedy accuracy where the
hard argmax reached 32% (step 0 alone, 6 epochs): greedy acceptance is decided by the argmax alone (LOSS "soft" and
"mix" keep the variants).
AdamW (lr 3e-3, cosine to 0, no weight decay), EPOCHS (8) passes in batches of 64.

Seeds: the target's synth seed (--seed, default 0, in the synth command above) also seeds the data (numpy
default_rng([seed, 3])) and the initialisation and batch order (torch). Writes OUT/config.json
(LlamaForCausalLMEagle3, eagle_config.eagle_aux_hidden_state_layer_ids [1, 5, 8]: SpecForge's nested key, SGLang's
meaning, the outputs of those layers), OUT/model.safetensors (f32; d2t i64, t2d bool; about 680 kB) and OUT/README.md
(the provenance and the offline accuracies).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import struct
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
TRAIN_TAPS = (1, 5, 8)          # what the draft is trained on (the outputs of these target layers)
GENAI_DEFAULT = (2, 6, 9)       # genai 2026.4.1's default for N = 12: {2, N/2, N-3}
LAYERS = 12
SEQUENCES, LENGTH, BATCH_GEN = 8192, 64, 64
PROMPT_MIN, PROMPT_MAX = 1, 24
PRINTABLE = (32 + 8, 126 + 8)   # the synthetic tokenizer's ids of printable ASCII (byte + 8)
HEADS, KV_HEADS, HEAD_DIM, INTER = 8, 4, 16, 512
STEPS, STEP_WEIGHT = 3, 0.8
LOSS = "hard"
EPOCHS, BATCH, LR = 8, 64, 3e-3
EPS, THETA = 1e-6, 10000.0
HELD_OUT = 256                  # sequences kept out of training, for the accuracies reported


# ---- data: the target IR ----

def genai_taps(model) -> dict[int, ov.Node]:
    """irsurgeon.families.eagle3.target.genai_taps, kept in step by hand (this venv has no irsurgeon): for layer i,
    the first Add (get_ordered_ops) named `layers.{i}/` whose input 1 is a MatMul fed by a Multiply."""
    found: dict[int, ov.Node] = {}
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Add" or op.get_input_size() != 2:
            continue
        mm = op.input_value(1).get_node()
        if mm.get_type_name() != "MatMul" or mm.input_value(0).get_node().get_type_name() != "Multiply":
            continue
        for i in {int(m) for m in re.findall(r"layers\.(\d+)/", op.get_friendly_name())}:
            found.setdefault(i, op)
    return found


def embedding_table(model) -> np.ndarray:
    for op in model.get_ordered_ops():
        if op.get_type_name() == "Constant" and op.get_friendly_name() == "model.embed_tokens.weight":
            return np.asarray(op.get_data(), np.float32)
    sys.exit("the target IR has no constant model.embed_tokens.weight (not an `irsurgeon synth --kind llama` f32 "
             "export)")


def collect(target: Path, rng: np.random.Generator):
    """ids [N, L], greedy [N, L] (the target's argmax after x_0..x_t), taps {layer: [N, L, H]}, embedding [V, H]."""
    cfg = json.loads((target / "config.json").read_text())
    if cfg.get("num_hidden_layers") != LAYERS:
        sys.exit(f"{target}: num_hidden_layers is {cfg.get('num_hidden_layers')}, expected {LAYERS}")
    core = ov.Core()
    model = core.read_model(target / "openvino_model.xml")
    embed = embedding_table(model)
    adds = genai_taps(model)
    wanted = sorted(set(TRAIN_TAPS) | set(GENAI_DEFAULT))
    model.add_outputs([adds[i].output(0) for i in wanted])
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    req = compiled.create_infer_request()
    V = embed.shape[0]
    ids = np.zeros((SEQUENCES, LENGTH), np.int64)
    greedy = np.zeros((SEQUENCES, LENGTH), np.int64)
    logits_all = np.zeros((SEQUENCES, LENGTH, V), np.float16)
    taps = {i: np.zeros((SEQUENCES, LENGTH, embed.shape[1]), np.float32) for i in wanted}

    def run(x: np.ndarray, past: int):
        B, S = x.shape
        req.infer({"input_ids": x, "attention_mask": np.ones((B, past + S), np.int64),
                   "position_ids": np.broadcast_to(np.arange(past, past + S), (B, S)).copy(),
                   "beam_idx": np.arange(B, dtype=np.int32)})
        return req

    for b0 in range(0, SEQUENCES, BATCH_GEN):
        B = min(BATCH_GEN, SEQUENCES - b0)
        P = int(rng.integers(PROMPT_MIN, PROMPT_MAX + 1))
        lo, hi = PRINTABLE if (b0 // BATCH_GEN) % 2 else (0, V - 1)
        seq = np.zeros((B, LENGTH), np.int64)
        seq[:, :P] = rng.integers(lo, hi + 1, (B, P))
        req.reset_state()
        logits = run(seq[:, :P], 0).get_tensor("logits").data
        for t in range(P, LENGTH):
            seq[:, t] = logits[:, -1].argmax(-1)
            if t + 1 < LENGTH:
                logits = run(seq[:, t:t + 1], t).get_tensor("logits").data
        req.reset_state()
        run(seq, 0)
        ids[b0:b0 + B] = seq
        greedy[b0:b0 + B] = req.get_tensor("logits").data.argmax(-1)
        logits_all[b0:b0 + B] = req.get_tensor("logits").data
        for j, i in enumerate(wanted):
            taps[i][b0:b0 + B] = req.get_output_tensor(1 + j).data
    return ids, greedy, logits_all, taps, embed


# ---- the draft ----

def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x [B, n, S, D], pos [S]: Llama's default RoPE, rotate_half convention (cat(freqs, freqs))."""
    D = x.shape[-1]
    inv = 1.0 / THETA ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = pos.to(torch.float32)[:, None] * inv
    emb = torch.cat([ang, ang], -1)
    rotated = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * emb.cos() + rotated * emb.sin()


class Draft(torch.nn.Module):
    """The tensors of irsurgeon/families/eagle3/synth.py's SafeAILab layout, with this script's sizes."""

    def __init__(self, embed: np.ndarray, gen: torch.Generator):
        super().__init__()
        V, H = embed.shape
        self.register_buffer("embed", torch.from_numpy(np.array(embed, np.float32)))  # the target's, frozen
        shapes = {"fc.weight": (H, 3 * H), "lm_head.weight": (V, H),
                  "midlayer.self_attn.q_proj.weight": (HEADS * HEAD_DIM, 2 * H),
                  "midlayer.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H),
                  "midlayer.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, 2 * H),
                  "midlayer.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
                  "midlayer.mlp.gate_proj.weight": (INTER, H), "midlayer.mlp.up_proj.weight": (INTER, H),
                  "midlayer.mlp.down_proj.weight": (H, INTER)}
        self.w = torch.nn.ParameterDict()
        for name, shape in shapes.items():
            self.w[name.replace(".", "__")] = torch.nn.Parameter(
                torch.randn(shape, generator=gen) / math.sqrt(shape[1]))
        for name in ("norm.weight", "midlayer.input_layernorm.weight", "midlayer.hidden_norm.weight",
                     "midlayer.post_attention_layernorm.weight"):
            self.w[name.replace(".", "__")] = torch.nn.Parameter(torch.ones(H))

    def p(self, name: str) -> torch.Tensor:
        return self.w[name.replace(".", "__")]

    def tensors(self) -> dict[str, np.ndarray]:
        return {k.replace("__", "."): v.detach().numpy().astype(np.float32) for k, v in self.w.items()}

    def qkv(self, ids: torch.Tensor, h: torch.Tensor, pos: torch.Tensor):
        """q [B, n, S, D], k/v [B, n_kv, S, D] (k roped) of rows fed embeddings of ids and hidden h."""
        B, S, _ = h.shape
        x = torch.cat([rms(self.embed[ids], self.p("midlayer.input_layernorm.weight")),
                       rms(h, self.p("midlayer.hidden_norm.weight"))], -1)
        q = (x @ self.p("midlayer.self_attn.q_proj.weight").T).view(B, S, HEADS, HEAD_DIM).transpose(1, 2)
        k = (x @ self.p("midlayer.self_attn.k_proj.weight").T).view(B, S, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = (x @ self.p("midlayer.self_attn.v_proj.weight").T).view(B, S, KV_HEADS, HEAD_DIM).transpose(1, 2)
        rep = HEADS // KV_HEADS
        return rope(q, pos), rope(k, pos).repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def rest(self, h: torch.Tensor, attn: torch.Tensor):
        """(r2, logits) from the residual h and the attention output [B, n, S, D]."""
        B, _, S, _ = attn.shape
        r1 = h + attn.transpose(1, 2).reshape(B, S, HEADS * HEAD_DIM) @ self.p("midlayer.self_attn.o_proj.weight").T
        n = rms(r1, self.p("midlayer.post_attention_layernorm.weight"))
        mlp = (F.silu(n @ self.p("midlayer.mlp.gate_proj.weight").T) * (n @ self.p("midlayer.mlp.up_proj.weight").T)) \
            @ self.p("midlayer.mlp.down_proj.weight").T
        r2 = r1 + mlp
        return r2, rms(r2, self.p("norm.weight")) @ self.p("lm_head.weight").T

    def unroll(self, hidden: torch.Tensor, ids: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Logits of step 0..steps-1 (see the module docstring). hidden [B, L, 3H] (the taps at t), ids [B, L].
        Step k's row t gets the embedding of ids[t + k + 1]; its logits [B, L - 1 - k, V] predict greedy[t + k + 1]."""
        B, L, _ = hidden.shape
        S = L - 1
        h = hidden[:, :S] @ self.p("fc.weight").T
        pos = torch.arange(S)
        q, k0, v0 = self.qkv(ids[:, 1:], h, pos)
        scale = 1.0 / math.sqrt(HEAD_DIM)
        causal = torch.ones(S, S, dtype=torch.bool).tril()
        s0 = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
        r2, logits = self.rest(h, F.softmax(s0, -1) @ v0)
        out, chain_k, chain_v = [logits], [], []
        for k in range(1, steps):
            n = S - k                                # rows t = 0..S-1-k
            h = r2[:, :n]
            q, kk, vv = self.qkv(ids[:, 1 + k:1 + k + n], h, pos[:n] + k)
            chain_k = [c[:, :, :n] for c in chain_k] + [kk]
            chain_v = [c[:, :, :n] for c in chain_v] + [vv]
            s_base = (q @ k0[:, :, :n].transpose(-1, -2) * scale).masked_fill(~causal[:n, :n], float("-inf"))
            s_chain = torch.stack([(q * c).sum(-1) * scale for c in chain_k], -1)  # [B, n_h, n, k]
            p = F.softmax(torch.cat([s_base, s_chain], -1), -1)
            attn = p[..., :n] @ v0[:, :, :n] + sum(p[..., n + j, None] * chain_v[j] for j in range(k))
            r2, logits = self.rest(h, attn)
            out.append(logits)
        return out


def accuracies(model: Draft, hidden: torch.Tensor, ids: torch.Tensor, greedy: torch.Tensor) -> list[float]:
    with torch.no_grad():
        outs = model.unroll(hidden, ids, STEPS)
    L = ids.shape[1]
    return [float((o.argmax(-1) == greedy[:, 1 + k:L]).float().mean()) for k, o in enumerate(outs)]


def step_loss(o: torch.Tensor, greedy: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """One unroll step's loss: cross-entropy on the target's greedy token (LOSS "hard"), on its distribution
    (LOSS "soft": SafeAILab's -sum p_target log q), or their mean ("mix")."""
    logq = F.log_softmax(o, -1)
    hard = F.nll_loss(logq.reshape(-1, o.shape[-1]), greedy.reshape(-1))
    if LOSS == "hard":
        return hard
    soft = -(F.softmax(target.float(), -1) * logq).sum(-1).mean()
    return soft if LOSS == "soft" else 0.5 * (hard + soft)


def train(ids, greedy, target_logits, taps, embed, seed: int):
    torch.manual_seed(seed)
    torch.set_num_threads(1)  # tiny matrices: a second OpenMP thread costs more than it gives on 2 shared cores
    gen = torch.Generator().manual_seed(seed)
    model = Draft(embed, gen)
    hidden = torch.from_numpy(np.concatenate([taps[i] for i in TRAIN_TAPS], -1))
    default = torch.from_numpy(np.concatenate([taps[i] for i in GENAI_DEFAULT], -1))
    ids_t, greedy_t, logits_t = torch.from_numpy(ids), torch.from_numpy(greedy), torch.from_numpy(target_logits)
    n_train = SEQUENCES - HELD_OUT
    opt = torch.optim.AdamW(model.w.parameters(), lr=LR, weight_decay=0.0)
    total = EPOCHS * (n_train // BATCH)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    L = ids.shape[1]
    start = time.time()
    for epoch in range(EPOCHS):
        order = torch.randperm(n_train, generator=gen)
        for b in range(n_train // BATCH):
            sel = order[b * BATCH:(b + 1) * BATCH]
            outs = model.unroll(hidden[sel], ids_t[sel], STEPS)
            loss = sum(STEP_WEIGHT ** k * step_loss(o, greedy_t[sel, 1 + k:L], logits_t[sel, 1 + k:L])
                       for k, o in enumerate(outs))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        held = slice(n_train, SEQUENCES)
        acc = accuracies(model, hidden[held], ids_t[held], greedy_t[held])
        print(f"epoch {epoch + 1}/{EPOCHS}: loss {loss.item():.3f}, held-out accuracy per step "
              f"{[round(a, 3) for a in acc]} ({time.time() - start:.0f} s)", flush=True)
    held = slice(n_train, SEQUENCES)
    report = {"train_taps": accuracies(model, hidden[held], ids_t[held], greedy_t[held]),
              "genai_default_taps": accuracies(model, default[held], ids_t[held], greedy_t[held])}
    return model, report


# ---- output ----

def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors format (an 8-byte little-endian header length, the JSON header, the data), written by hand:
    the training venv needs no safetensors package."""
    kinds = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": kinds[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def config(V: int, H: int) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "intermediate_size": INTER, "num_hidden_layers": 1, "hidden_act": "silu", "rms_norm_eps": EPS,
            "rope_theta": THETA, "max_position_embeddings": 256, "vocab_size": V, "draft_vocab_size": V,
            "target_hidden_size": H, "tie_word_embeddings": False, "torch_dtype": "float32",
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(TRAIN_TAPS)}}


README = """# irsurgeon/families/eagle3/trained: a trained EAGLE-3 draft for a seeded 12-layer synthetic Llama target

Written by `scripts/train_eagle3_tiny.py` (its docstring has the whole recipe); do not edit by hand.

- Target: `irsurgeon synth OUT --kind llama --layers 12 --seed {seed}` (OUT/target; hidden 64, vocabulary 256).
- Draft: one Llama layer in the SafeAILab layout (`LlamaForCausalLMEagle3`, `midlayer.*`, `fc.weight [64, 192]`,
  `lm_head.weight [256, 64]` over the full vocabulary, `d2t` zeros, `t2d` all true), {heads} heads / {kv} KV heads of
  {hd}, MLP {inter}, f32.
- Taps: the outputs of target layers {taps} (`eagle_config.eagle_aux_hidden_state_layer_ids`, SGLang's meaning), not
  genai 2026.4.1's default {{2, 6, 9}} for a 12-layer target.
- Data: {seqs} sequences of {length} tokens (random prompts of 1..24 tokens, then the target's greedy continuation),
  the target IR run with openvino {ov} at f32; labels are the target's greedy next tokens.
- Training: torch {torch}, seed {seed}; the draft at position t gets the target's taps at t and the (target's,
  frozen) embedding of token t+1 and learns the target's greedy token t+2 (SafeAILab/EAGLE eagle/traineagle3/cnets.py
  dataprepare/forward); a {steps}-step test-time-training unroll (its own r2 fed back), cross-entropy weighted
  0.8**step, AdamW lr {lr} cosine, {epochs} epochs of batch {batch}.
- Held-out greedy accuracy per draft step (offline, torch): with the trained taps {acc_train}; fed the outputs of
  {{2, 6, 9}} instead {acc_default}.
"""


def rounded(xs: list[float]) -> str:
    return "[" + ", ".join(f"{a:.3f}" for a in xs) + "]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, required=True, help="OUT/target of `irsurgeon synth OUT --kind llama "
                                                               "--layers 12 --seed SEED`")
    ap.add_argument("--out", type=Path, default=ROOT / "irsurgeon" / "families" / "eagle3" / "trained")
    ap.add_argument("--seed", type=int, default=0, help="the target's synth seed, and this script's")
    args = ap.parse_args()
    rng = np.random.default_rng([args.seed, 3])
    start = time.time()
    ids, greedy, target_logits, taps, embed = collect(args.target, rng)
    print(f"collected {SEQUENCES} x {LENGTH} positions from {args.target} in {time.time() - start:.0f} s "
          f"({len(np.unique(greedy))} distinct greedy tokens)", flush=True)
    model, report = train(ids, greedy, target_logits, taps, embed, args.seed)
    print(f"held-out accuracy per step: trained taps {TRAIN_TAPS}: {[round(a, 3) for a in report['train_taps']]}; "
          f"genai's default {GENAI_DEFAULT}: {[round(a, 3) for a in report['genai_default_taps']]}")
    V, H = embed.shape
    tensors = model.tensors()
    tensors["d2t"] = np.zeros(V, np.int64)
    tensors["t2d"] = np.ones(V, np.bool_)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.json").write_text(json.dumps(config(V, H), indent=2) + "\n")
    write_safetensors(args.out / "model.safetensors", tensors)
    (args.out / "README.md").write_text(README.format(
        seed=args.seed, heads=HEADS, kv=KV_HEADS, hd=HEAD_DIM, inter=INTER, taps=list(TRAIN_TAPS), seqs=SEQUENCES,
        length=LENGTH, ov=ov.get_version().split("-")[0], torch=torch.__version__, steps=STEPS, lr=LR, epochs=EPOCHS,
        batch=BATCH, acc_train=rounded(report["train_taps"]), acc_default=rounded(report["genai_default_taps"])))
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
