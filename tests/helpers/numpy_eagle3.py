"""An independent float64 numpy reference of the EAGLE-3 draft, written from the trainers' PyTorch code (not from
irsurgeon's graph).

Read (the search index's snapshots): SafeAILab/EAGLE `eagle/model/cnets.py` (`Model.forward`,
`LlamaDecoderLayeremb`, `LlamaAttention`, `LlamaRMSNorm`, `LlamaRotaryEmbedding`, `rotate_half`,
`apply_rotary_pos_emb`, `repeat_kv`, `_make_causal_mask`; its `topK_genrate` for the final norm before lm_head);
sgl-project/SpecForge `specforge/modeling/draft/llama3_eagle.py` (`LlamaDecoderLayer`, `LlamaForCausalLMEagle3`,
`compute_logits`; the same layer); vllm-project/speculators (formerly neuralmagic/speculators)
`src/speculators/models/eagle3/model_definitions.py` (`Eagle3FirstLayerMixin.forward`: the same layer, plus
`norm_before_residual`) and `src/speculators/models/eagle3/core.py` (`Eagle3DraftModel.forward`: `input_norm` before
fc when `norm_before_fc`; `input_ids + d2t[input_ids]`).

Shapes: B batch, S new positions, T = cached + S, H the draft's hidden size (= the target's: genai gives the draft the
target's embedding table), H_t the target's, V the target vocabulary, V_d the draft's, n / n_kv / D attention heads,
key-value heads, head_dim. Weights are the checkpoint's (`<p>` = `midlayer.` or `layers.0.`), W x meaning x W^T:

    g   = hidden_states                                       [B, S, 3*H_t]  three target layers, concatenated
    h   = fc(g)                                               [B, S, H]      fc.weight [H, 3*H_t], no bias
          (g = RMSNorm(g, input_norm) first when `norm_before_fc`; a row already H wide is the draft's own r2,
           fed back, and skips fc: cnets.py `if hidden_states.shape[-1] != inputs_embeds.shape[-1]`)
    e   = embed[input_ids]                                    [B, S, H]      the TARGET's table (genai shares it)
    x   = concat(RMSNorm(e, <p>input_layernorm), RMSNorm(h, <p>hidden_norm))   [B, S, 2H]  embeddings first
    q   = x Wq^T -> [B, n, S, D];  k, v = x Wk^T, x Wv^T -> [B, n_kv, S, D]     (q/k/v_proj take the 2H concat)
    q,k = q cos + rotate_half(q) sin, the same for k; rotate_half(u) = concat(-u[D/2:], u[:D/2]);
          angle[p, j] = p * theta^(-2j/D) for j < D/2, repeated for both halves (cat(freqs, freqs)); theta from
          `rope_theta` (default 10000), but 10000 always for an AngelSlim text draft (`Eagle3LlamaForCausalLM`
          without mrope: its trainer's `llama_eagle3.py` `LlamaAttention._init_rope` gives `LlamaRotaryEmbedding`
          no base, whose default is 10000); p = position_ids. With rope_scaling type llama3 (the Llama 3.1 drafts)
          each theta^(-2j/D) is rescaled by its wavelength first (`llama3_inv_freq`); linear, dynamic, yarn and
          longrope come from numpy_rope.py as the layout's trainer computes them (transformers' LlamaRotaryEmbedding
          for speculators, SpecForge's classes for the SafeAILab / SpecForge layout): dynamic and longrope from the
          positions of each step, cos and sin times yarn's / longrope's attention factor (so q and k both)
    K,V = the cache (earlier calls) then k, v                 [B, n_kv, T, D];  each kv head serves n/n_kv q heads
    a   = softmax(q K^T / sqrt(D) + mask) V                   [B, n, S, D] -> [B, S, n*D]; mask: query i (the
          (T-S+i)-th cached row) sees cached rows 0..T-S+i (causal in cache order) and rows attention_mask keeps
    r1  = h + a Wo^T                                          residual = h, the fc'd hidden before hidden_norm
          (= RMSNorm(h, hidden_norm) with speculators' `norm_before_residual`)
    n2  = RMSNorm(r1, <p>post_attention_layernorm)
    r2  = r1 + down(silu(gate(n2)) * up(n2))                  [B, S, H]   last_hidden_state: what genai feeds back
    logits = lm_head(RMSNorm(r2, norm))                       [B, S, V_d]
    RMSNorm(u, w) = w * u / sqrt(mean(u^2) + eps)             (Llama's: the gain multiplies, no 1 + w)

A draft token d is the target token d + d2t[d] (`target_token`; speculators core.py, genai's sampler).
All arithmetic is float64, so that the reference is the more accurate side of every comparison.
"""
from __future__ import annotations

import numpy as np

from helpers import numpy_rope

PREFIXES = ("midlayer.", "layers.0.")  # SafeAILab / SpecForge / AngelSlim; vLLM speculators
LAYER_TENSORS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
UNSUPPORTED = ("norm_output", "fc_norm")  # variants named in docs/EAGLE3.md whose code was not read here


def rms(x, w, eps):
    x = x.astype(np.float64)
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, inv, mrope_section=None, chunked=False):
    """x [B, N, S, D], pos [B, S], inv [D/2] the inverse frequencies (`inv_freq`): Llama's rope over all D dims,
    rotate_half convention. With mrope_section, pos [3, B, S] and AngelSlim's MRotaryEmbedding
    (llama_eagle3.py apply_interleaved_mrope, as written there), or with chunked SpecForge's
    LlamaMutiRotaryEmbedding + apply_multimodal_rotary_pos_emb (llama3_eagle.py): cos and sin of each row computed
    whole, split along D by mrope_section * 2, chunk i taken from row i % 3."""
    D = x.shape[-1]
    if mrope_section is not None and chunked:
        freqs = pos[..., None].astype(np.float64) * inv  # [3, B, S, D/2]
        emb = np.concatenate([freqs, freqs], -1)  # [3, B, S, D]
        bounds = np.cumsum([0, *mrope_section, *mrope_section])
        cos = np.concatenate([np.cos(emb[i % 3, ..., a:b]) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))], -1)
        sin = np.concatenate([np.sin(emb[i % 3, ..., a:b]) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))], -1)
        rotated = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
        return x * cos[:, None] + rotated * sin[:, None]
    if mrope_section is not None:
        freqs = pos[..., None].astype(np.float64) * inv  # [3, B, S, D/2]
        freqs_t = freqs[0].copy()
        for dim, offset in enumerate((1, 2), start=1):  # H, W
            idx = slice(offset, mrope_section[dim] * 3, 3)
            freqs_t[..., idx] = freqs[dim, ..., idx]
        ang = freqs_t[:, None]  # [B, 1, S, D/2]
    else:
        ang = pos[:, None, :, None].astype(np.float64) * inv  # [B, 1, S, D/2]
    emb = np.concatenate([ang, ang], -1)
    rotated = np.concatenate([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * np.cos(emb) + rotated * np.sin(emb)


def default_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """theta^(-2j/D), j < D/2 (transformers' _compute_default_rope_parameters)."""
    return 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


KEPT, DIVIDED, MIXED = "kept", "divided", "mixed"  # the three bands of the llama3 rescaling


def llama3_bands(head_dim: int, theta: float, scaling: dict) -> np.ndarray:
    """Which band each frequency j < D/2 falls in (`llama3_inv_freq`): an array of KEPT / DIVIDED / MIXED."""
    wavelen = 2 * np.pi / default_inv_freq(head_dim, theta)
    original = scaling["original_max_position_embeddings"]
    short = wavelen < original / scaling["high_freq_factor"]  # high_freq_wavelen
    long = wavelen > original / scaling["low_freq_factor"]  # low_freq_wavelen
    return np.where(short, KEPT, np.where(long, DIVIDED, MIXED))


def llama3_inv_freq(head_dim: int, theta: float, scaling: dict) -> np.ndarray:
    """The Llama 3.1 rescaled inverse frequencies, from transformers 5.2.0 modeling_rope_utils.py
    `_compute_llama3_parameters` (the 4.x copy, taking rope_kwargs, computes the same): wavelen = 2 pi / inv_freq;
    a wavelength below original_max_position_embeddings / high_freq_factor keeps its frequency, one above
    original_max_position_embeddings / low_freq_factor is divided by factor, and one between (both bounds included)
    mixes the two: (1 - s) inv / factor + s inv with s = (original / wavelen - low_freq_factor) /
    (high_freq_factor - low_freq_factor). transformers' mix reads its already-divided array, which equals inv_freq
    in that band (no mixed wavelength exceeds the low bound). Its attention factor is 1 (cos and sin unscaled).
    transformers computes in float32; here float64, the reference's precision everywhere."""
    inv = default_inv_freq(head_dim, theta)
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelen = 2 * np.pi / inv
    smooth = (scaling["original_max_position_embeddings"] / wavelen - low) / (high - low)
    band = llama3_bands(head_dim, theta, scaling)
    return np.select([band == KEPT, band == DIVIDED], [inv, inv / factor], (1 - smooth) * inv / factor + smooth * inv)


def target_token(draft_token, d2t):
    """The target-vocabulary id of a draft-vocabulary id: d + d2t[d] (works elementwise on arrays)."""
    draft_token = np.asarray(draft_token)
    return draft_token + np.asarray(d2t)[draft_token]


def layer_prefix(tensors) -> str:
    found = [p for p in PREFIXES if any(n.startswith(p) for n in tensors)]
    if len(found) != 1:
        raise ValueError(f"expected tensors under exactly one of {PREFIXES}, found {found or 'none'}")
    return found[0]


def layer_config(config: dict) -> dict:
    """The Llama fields: the config itself (SafeAILab layout) or speculators' nested `transformer_layer_config`."""
    return config.get("transformer_layer_config") or config


ANGELSLIM = "Eagle3LlamaForCausalLM"
ANGELSLIM_BASE = 10000.0  # AngelSlim llama_eagle3.py: LlamaRotaryEmbedding(dim, max_position_embeddings, base=10000)


LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def rope_section(layer: dict) -> dict:
    """The RoPE dict: rope_scaling, when set, replaces rope_parameters (transformers 5.2.0 modeling_rope_utils.py
    RotaryEmbeddingConfigMixin.convert_rope_params_to_dict: `rope_scaling or self.rope_parameters`)."""
    return layer.get("rope_scaling") or layer.get("rope_parameters") or {}


def rope_theta(layer: dict, architectures=()) -> float:
    section = rope_section(layer)
    if "mrope_section" in section:  # AngelSlim's MRotaryEmbedding: rope_scaling.rope_theta, else rope_theta
        return float(section.get("rope_theta") or layer.get("rope_theta") or 10000.0)
    kind = rope_kind(layer)
    if ANGELSLIM in architectures:  # its text draft's LlamaRotaryEmbedding is made without a base
        if kind != "default":
            raise NotImplementedError(f"rope type {kind!r} in an AngelSlim text draft")
        return ANGELSLIM_BASE
    # convert_rope_params_to_dict: the dict's own rope_theta, else the config's, else 10000
    return float(section.get("rope_theta") or layer.get("rope_theta") or 10000.0)


def rope_kind(layer: dict) -> str:
    section = rope_section(layer)
    kind = section.get("rope_type") or section.get("type") or "default"  # "type" is the older key
    if kind not in numpy_rope.TYPES:
        raise NotImplementedError(f"rope type {kind!r}: the reference does {', '.join(numpy_rope.TYPES)}")
    return kind


def llama3_scaling(layer: dict) -> dict | None:
    """The four llama3 values as transformers 5.2.0 computes with them (numpy_rope.parameters: a top-level
    original_max_position_embeddings first, else the dict's, else max_position_embeddings), or None for another
    rope type."""
    if rope_kind(layer) != "llama3":
        return None
    params = numpy_rope.parameters(layer)
    return {k: float(params[k]) for k in LLAMA3_KEYS}


def trainer_of(config: dict) -> str:
    """Whose RoPE classes trained the draft: transformers' for the speculators layout, else SpecForge's."""
    speculators = "Eagle3Speculator" in (config.get("architectures") or ()) or bool(config.get("speculators_model_type"))
    return "transformers" if speculators else "specforge"


def inv_freq(layer: dict, head_dim: int, theta: float) -> np.ndarray:
    """[D/2] the layer's inverse frequencies: llama3-rescaled when its rope says so, else the default ones."""
    scaling = None if "mrope_section" in rope_section(layer) else llama3_scaling(layer)
    return default_inv_freq(head_dim, theta) if scaling is None else llama3_inv_freq(head_dim, theta, scaling)


class Eagle3Reference:
    """Stateful: step() appends its keys/values to the cache, so several calls are one longer sequence; reset()
    empties it.

    tensors  checkpoint name -> array (bf16 already decoded), names as stored (`midlayer.` or `layers.0.` prefix)
    config   the checkpoint's config.json object (speculators: Llama fields under `transformer_layer_config`)
    embed    [V, H] the TARGET's token-embedding table (genai replaces the draft's own, if any, by it)
    """

    def __init__(self, tensors: dict, config: dict, embed: np.ndarray):
        prefix = layer_prefix(tensors)
        self.prefix = prefix
        self.w = {(n[len(prefix):] if n.startswith(prefix) else n): np.asarray(v, dtype=np.float64)
                  for n, v in tensors.items() if n not in ("d2t", "t2d")}
        missing = [n for n in LAYER_TENSORS + ("fc.weight", "norm.weight", "lm_head.weight") if n not in self.w]
        if missing:
            raise ValueError(f"missing tensors: {missing}")
        self.d2t = np.asarray(tensors["d2t"], dtype=np.int64) if "d2t" in tensors else None
        self.t2d = np.asarray(tensors["t2d"], dtype=bool) if "t2d" in tensors else None
        bad = [k for k in UNSUPPORTED if config.get(k) or layer_config(config).get(k)]
        if bad:
            raise NotImplementedError(f"config variants {bad}")
        layer = layer_config(config)
        if int(layer.get("num_hidden_layers") or 1) != 1:  # speculators' Eagle3DraftModel may stack plain layers
            raise NotImplementedError("EAGLE-3 drafts of more than one decoder layer")
        self.hidden = int(layer["hidden_size"])
        self.heads = int(layer["num_attention_heads"])
        self.kv_heads = int(layer.get("num_key_value_heads") or self.heads)
        self.head_dim = int(layer.get("head_dim") or self.hidden // self.heads)
        self.eps = float(layer.get("rms_norm_eps", 1e-6))
        self.theta = rope_theta(layer, config.get("architectures") or ())
        self.mrope_section = (layer.get("rope_scaling") or {}).get("mrope_section")
        # SpecForge's VLM drafts (LlamaForCausalLMEagle3, mrope, no modal_type) chunk the rows; AngelSlim's interleave
        self.mrope_chunked = "LlamaForCausalLMEagle3" in (config.get("architectures") or ())
        self.inv = inv_freq(layer, self.head_dim, self.theta)  # [D/2]; a negative control may replace it
        self.table = None  # positions -> (inv_freq, attention) for the types numpy_rope computes
        if "mrope_section" not in rope_section(layer) and rope_kind(layer) not in ("default", "llama3"):
            at = numpy_rope.transformers_at if trainer_of(config) == "transformers" else numpy_rope.specforge_at
            self.table = lambda pos: at(layer, self.head_dim, pos)
        self.norm_before_residual = bool(config.get("norm_before_residual") or layer.get("norm_before_residual"))
        self.norm_before_fc = bool(config.get("norm_before_fc") or layer.get("norm_before_fc"))
        if self.norm_before_fc and "input_norm.weight" not in self.w:
            raise ValueError("norm_before_fc without input_norm.weight")
        self.embed = np.asarray(embed, dtype=np.float64)
        if self.embed.shape[1] != self.hidden:
            raise ValueError(f"embedding table {self.embed.shape} is not {self.hidden} wide (the draft's hidden)")
        self.reset()

    def reset(self) -> None:
        self.k = self.v = None  # [B, n_kv, T, D]
        self.mask = None  # [B, T] attention_mask columns seen so far

    def reorder(self, beam_idx) -> None:
        if self.k is not None:
            self.k, self.v, self.mask = self.k[beam_idx], self.v[beam_idx], self.mask[beam_idx]

    @property
    def cached(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def step(self, input_ids, hidden_states, position_ids, attention_mask=None):
        """input_ids [B, S] (target vocabulary), hidden_states [B, S, 3*H_t] (or [B, S, H]: r2 fed back),
        position_ids [B, S], attention_mask [B, S] for the new rows (default ones) ->
        (logits [B, S, V_d], last_hidden_state r2 [B, S, H]), both float64."""
        w, eps, D = self.w, self.eps, self.head_dim
        ids = np.asarray(input_ids)  # or a VLM draft's inputs_embeds [B, S, H]
        B, S = ids.shape[:2]
        g = np.asarray(hidden_states, dtype=np.float64)
        if g.shape[:2] != (B, S):
            raise ValueError(f"hidden_states {g.shape} for input_ids {ids.shape}")
        if g.shape[-1] == w["fc.weight"].shape[1]:
            if self.norm_before_fc:
                g = rms(g, w["input_norm.weight"], eps)
            h = g @ w["fc.weight"].T
        elif g.shape[-1] == self.hidden:
            h = g
        else:
            raise ValueError(f"hidden_states width {g.shape[-1]}: neither fc's input "
                             f"{w['fc.weight'].shape[1]} nor the hidden size {self.hidden}")
        e = ids.astype(np.float64) if ids.ndim == 3 else self.embed[ids]
        hn = rms(h, w["hidden_norm.weight"], eps)
        x = np.concatenate([rms(e, w["input_layernorm.weight"], eps), hn], -1)  # embeddings first
        residual = hn if self.norm_before_residual else h

        pos = np.asarray(position_ids)
        q = (x @ w["self_attn.q_proj.weight"].T).reshape(B, S, self.heads, D).transpose(0, 2, 1, 3)
        k = (x @ w["self_attn.k_proj.weight"].T).reshape(B, S, self.kv_heads, D).transpose(0, 2, 1, 3)
        if "self_attn.q_norm.weight" in w:  # speculators' Qwen3 layer: Qwen3Attention's q_norm / k_norm over D, per
            q = rms(q, w["self_attn.q_norm.weight"], eps)  # head, before RoPE (transformers modeling_qwen3.py)
            k = rms(k, w["self_attn.k_norm.weight"], eps)
        v = (x @ w["self_attn.v_proj.weight"].T).reshape(B, S, self.kv_heads, D).transpose(0, 2, 1, 3)
        inv, attention = (self.inv, 1.0) if self.table is None else self.table(pos)
        q, k = (rope(t, pos, inv, self.mrope_section, self.mrope_chunked) * attention for t in (q, k))
        new_mask = np.ones((B, S), bool) if attention_mask is None else np.asarray(attention_mask) > 0
        self.k = k if self.k is None else np.concatenate([self.k, k], 2)
        self.v = v if self.v is None else np.concatenate([self.v, v], 2)
        self.mask = new_mask if self.mask is None else np.concatenate([self.mask, new_mask], 1)
        T = self.k.shape[2]
        rep = self.heads // self.kv_heads
        kk, vv = np.repeat(self.k, rep, axis=1), np.repeat(self.v, rep, axis=1)  # = repeat_kv
        scores = q @ kk.transpose(0, 1, 3, 2) / np.sqrt(D)  # [B, n, S, T]
        visible = (np.arange(T)[None, :] <= (T - S) + np.arange(S)[:, None])[None, None] \
            & self.mask[:, None, None, :]
        scores = np.where(visible, scores, -np.inf)
        scores -= scores.max(-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(-1, keepdims=True)
        a = (p @ vv).transpose(0, 2, 1, 3).reshape(B, S, self.heads * D)
        r1 = residual + a @ w["self_attn.o_proj.weight"].T

        n2 = rms(r1, w["post_attention_layernorm.weight"], eps)
        mlp = (silu(n2 @ w["mlp.gate_proj.weight"].T) * (n2 @ w["mlp.up_proj.weight"].T)) @ w["mlp.down_proj.weight"].T
        r2 = r1 + mlp
        logits = rms(r2, w["norm.weight"], eps) @ w["lm_head.weight"].T
        return logits, r2

    def target_tokens(self, draft_tokens):
        """Draft-vocabulary ids -> target ids through the checkpoint's d2t (identity when it has none)."""
        return np.asarray(draft_tokens) if self.d2t is None else target_token(draft_tokens, self.d2t)
