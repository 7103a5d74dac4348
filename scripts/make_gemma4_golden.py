"""Golden outputs of transformers' Gemma 4 assistant (eager, float32) for tests/families/gemma4/test_gemma4_assistant.py.

Run in a separate venv, never the product's (transformers 5.24.0 is the first release after 5.8.0 that builds
`Gemma4AssistantForCausalLM` here; 5.23.0 fails with a `kv_sharing_modes` ValueError):

    python3 -m venv /tmp/gemma-tf524
    /tmp/gemma-tf524/bin/pip install torch==2.13.0+cpu transformers==5.24.0 safetensors numpy
    /tmp/gemma-tf524/bin/python scripts/make_gemma4_golden.py tests/data/gemma4 [CASE ...]

Without CASE names every case is written; with names, only those. Four seeded tiny configs:

- ordered: ordered embeddings, tied lm_head (2 layers sliding/full, k = v on full layers, one global kv head).
- plain: no ordered embeddings, tied lm_head (3 layers full/sliding/full, separate v).
- untied: like plain with other sizes, `tie_word_embeddings: false` at the top level of config.json and a stored
  `lm_head.weight` drawn independently of `model.embed_tokens.weight`, so logits scored with the embedding table
  instead are far off.
- untied_ordered: like ordered with other sizes, untied as above: the masked embedder scores its candidates with
  `lm_head.weight` rows, not `model.embed_tokens.weight` rows.
- unified: `Gemma4UnifiedAssistantForCausalLM` (model_type gemma4_unified_assistant, a gemma4_unified_text decoder;
  transformers >= 5.10.0, written with 5.25.0 in a venv of its own) with the unified text config's default
  use_bidirectional_attention, 4 layers (3 sliding, 1 full with k = v and one global KV head), ordered embeddings:
  `... tests/data/gemma4 unified` under transformers 5.25.0.

Together they differ in everything a builder could hard-code (layer count and sliding/full pattern, heads, kv heads
per layer type, head dims, sliding window, thetas, partial rotary factor, eps, centroids and top-k, ordered embeddings
on/off, tied/untied head, vocab, backbone width). For each: the checkpoint (model.safetensors + config.json;
transformers' generation_config.json is not kept) and golden.npz with, per call c, the inputs genai feeds
(`c{c}_inputs_embeds`, `c{c}_position_ids`, `c{c}_attention_mask`, the four KV tensors) and transformers'
`c{c}_logits`, `c{c}_last_hidden_state`. The calls use KV lengths shorter than, equal to and longer than the sliding
window, and one with a padded first position.

After writing a case the script reads it back: the stored tensors (a tied head is stored once, as
model.embed_tokens.weight; an untied one as both tensors, with different values), a
`Gemma4AssistantForCausalLM.from_pretrained` reload whose head is tied or not as configured and whose outputs equal
golden.npz exactly, and, for an untied head, the max |logits - golden| of the same model scoring with the embedding
table in place of lm_head.weight (what a builder ignoring the untied head would produce).

The committed ordered and plain goldens are not reproduced bit for bit by this environment (torch 2.13.0+cpu, MKL,
AVX512, 1 or 2 threads): their checkpoints and inputs come out byte-identical, but logits and hidden states differ by
up to 2e-5 in float32 rounding. They were kept as committed; untied and untied_ordered were written with
`... tests/data/gemma4 untied untied_ordered`.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import torch

CONFIGS = {
    "ordered": dict(
        assistant=dict(backbone_hidden_size=48, use_ordered_embeddings=True, num_centroids=8,
                       centroid_intermediate_top_k=3),
        text=dict(vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                  layer_types=["sliding_attention", "full_attention"], num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
                  attention_k_eq_v=True, sliding_window=6, rms_norm_eps=1e-6,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1_000_000.0}})),
    "plain": dict(
        assistant=dict(backbone_hidden_size=40, use_ordered_embeddings=False, num_centroids=4,
                       centroid_intermediate_top_k=2),
        text=dict(vocab_size=96, hidden_size=24, intermediate_size=56, num_hidden_layers=3,
                  layer_types=["full_attention", "sliding_attention", "full_attention"], num_attention_heads=2,
                  num_key_value_heads=2, head_dim=16, global_head_dim=32, num_global_key_value_heads=None,
                  attention_k_eq_v=False, sliding_window=4, rms_norm_eps=1e-5,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                                      "rope_theta": 200_000.0}})),
    "untied": dict(
        assistant=dict(backbone_hidden_size=36, use_ordered_embeddings=False, num_centroids=4,
                       centroid_intermediate_top_k=2, tie_word_embeddings=False),
        text=dict(vocab_size=80, hidden_size=28, intermediate_size=44, num_hidden_layers=3,
                  layer_types=["full_attention", "sliding_attention", "full_attention"], num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=None,
                  attention_k_eq_v=False, sliding_window=5, rms_norm_eps=1e-5,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 5_000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                                      "rope_theta": 200_000.0}})),
    "untied_ordered": dict(
        assistant=dict(backbone_hidden_size=44, use_ordered_embeddings=True, num_centroids=6,
                       centroid_intermediate_top_k=2, tie_word_embeddings=False),
        text=dict(vocab_size=60, hidden_size=36, intermediate_size=32, num_hidden_layers=2,
                  layer_types=["sliding_attention", "full_attention"], num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
                  attention_k_eq_v=True, sliding_window=6, rms_norm_eps=1e-6,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1_000_000.0}})),
    # Gemma4UnifiedAssistantForCausalLM over a Gemma4UnifiedTextConfig (transformers >= 5.10.0; written with 5.25.0):
    # use_bidirectional_attention left to the unified default ("vision"), no per-layer-input or MoE keys (the unified
    # text config has none); k = v full layers with one global KV head.
    "unified": dict(
        unified=True,
        assistant=dict(backbone_hidden_size=52, use_ordered_embeddings=True, num_centroids=4,
                       centroid_intermediate_top_k=2),
        text=dict(vocab_size=68, hidden_size=40, intermediate_size=36, num_hidden_layers=4,
                  layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, global_head_dim=16,
                  num_global_key_value_heads=1, attention_k_eq_v=True, sliding_window=7, rms_norm_eps=1e-6,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                   "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1_000_000.0}})),
}
UNIFIED_TEXT = dict(hidden_activation="gelu_pytorch_tanh", max_position_embeddings=4096, use_double_wide_mlp=False)
COMMON_TEXT = dict(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, enable_moe_block=False,
                   use_double_wide_mlp=False, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=256)
KV_LENGTHS = (3, "window", "window+1", "window+5", "2*window+3")


def classes(spec: dict):
    """(text config, assistant config, model) classes: the unified assistant's for a unified case."""
    import transformers

    names = (("Gemma4UnifiedTextConfig", "Gemma4UnifiedAssistantConfig", "Gemma4UnifiedAssistantForCausalLM")
             if spec.get("unified") else ("Gemma4TextConfig", "Gemma4AssistantConfig", "Gemma4AssistantForCausalLM"))
    return tuple(getattr(transformers, n) for n in names)


def make_model(spec: dict, seed: int):
    text_class, config_class, model_class = classes(spec)
    text = text_class(**(UNIFIED_TEXT if spec.get("unified") else COMMON_TEXT), **spec["text"])
    cfg = config_class(text_config=text, **spec["assistant"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = model_class(cfg).eval()
    randomize(model, cfg, seed)
    return model, cfg


def randomize(model, cfg, seed: int) -> None:
    """Weights with unit-ish activations, norms around 1, distinct layer scalars, a shuffled token ordering."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
        for i, layer in enumerate(model.model.layers):
            layer.layer_scalar.fill_(0.6 + 0.3 * i)
        if model.masked_embedding is not None:
            model.masked_embedding.token_ordering.copy_(torch.randperm(cfg.text_config.vocab_size, generator=g))


def kv_length(spec, window: int) -> int:
    return spec if isinstance(spec, int) else eval(spec, {"window": window})


def calls(cfg, seed: int):
    """genai's inputs for one draft step per KV length: position = S, attention_mask one longer than the KV."""
    text, g = cfg.text_config, torch.Generator().manual_seed(seed + 1)
    full, slide = (text.per_layer_config[t] for t in ("full_attention", "sliding_attention"))
    for c, spec in enumerate(KV_LENGTHS + ("padded",)):
        s = kv_length(spec if spec != "padded" else "window+2", text.sliding_window)
        mask = torch.ones(1, s + 1, dtype=torch.long)
        if spec == "padded":
            mask[0, :2] = 0
        yield c, {
            "inputs_embeds": torch.randn(1, 1, 2 * cfg.backbone_hidden_size, generator=g),
            "position_ids": torch.tensor([[s]], dtype=torch.long),
            "attention_mask": mask,
            "full_attention_key": torch.randn(1, full.num_key_value_heads, s, full.head_dim, generator=g),
            "full_attention_value": torch.randn(1, full.num_key_value_heads, s, full.head_dim, generator=g),
            "sliding_attention_key": torch.randn(1, slide.num_key_value_heads, s, slide.head_dim, generator=g),
            "sliding_attention_value": torch.randn(1, slide.num_key_value_heads, s, slide.head_dim, generator=g),
        }


def run(model, feed: dict) -> dict:
    with torch.no_grad():
        out = model(inputs_embeds=feed["inputs_embeds"], position_ids=feed["position_ids"],
                    attention_mask=feed["attention_mask"],
                    shared_kv_states={t: (feed[f"{t}_key"], feed[f"{t}_value"])
                                      for t in ("full_attention", "sliding_attention")})
    return {"logits": out.logits.numpy(), "last_hidden_state": out.last_hidden_state.numpy()}


def embedding_head_logits(model, feed: dict) -> np.ndarray:
    """The logits a builder would get by scoring with model.embed_tokens.weight in place of lm_head.weight."""
    swapped = copy.deepcopy(model)
    with torch.no_grad():
        swapped.lm_head.weight = torch.nn.Parameter(swapped.model.embed_tokens.weight.detach().clone())
    return run(swapped, feed)["logits"]


def check(out: Path, cfg, seed: int, spec: dict) -> None:
    """Read the written case back: stored tensors, a from_pretrained reload reproducing the golden logits, and for an
    untied head the distance of embedding-table logits from the golden ones (what the data discriminates)."""
    from safetensors.numpy import load_file

    stored, golden = load_file(out / "model.safetensors"), np.load(out / "golden.npz")
    model = classes(spec)[2].from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    assert tied == cfg.tie_word_embeddings, (out, tied)
    assert ("lm_head.weight" in stored) == (not tied), sorted(stored)
    if not tied:
        head, table = stored["lm_head.weight"], stored["model.embed_tokens.weight"]
        assert head.shape == table.shape and not np.array_equal(head, table)
        assert np.array_equal(model.lm_head.weight.detach().numpy(), head)
        assert np.array_equal(model.model.embed_tokens.weight.detach().numpy(), table)
    worst = reload = 0.0
    for c, feed in calls(cfg, seed):
        got = run(model, feed)
        for k in ("logits", "last_hidden_state"):  # a reload may round differently (5.25.0: up to ~5e-6)
            reload = max(reload, float(np.abs(got[k] - golden[f"c{c}_{k}"]).max()))
            assert reload <= 1e-5, (out, c, k, reload)
        if not tied:
            worst = max(worst, float(np.abs(embedding_head_logits(model, feed) - golden[f"c{c}_logits"]).max()))
    print(f"{out}: stored {', '.join(f'{k} {list(v.shape)}' for k, v in stored.items() if 'embed' in k or 'lm_head' in k)}")
    note = f", embedding table as head: max |logits - golden| = {worst:.4g}" if not tied else ""
    print(f"{out}: reloaded, {'tied' if tied else 'untied'} lm_head, golden reproduced to {reload:.3g}{note}")


def main(out_root: Path, names: list[str]) -> None:
    import transformers

    unknown = set(names) - set(CONFIGS)
    if unknown:
        sys.exit(f"unknown case(s) {sorted(unknown)}; cases: {list(CONFIGS)}")
    for seed, (name, spec) in enumerate(CONFIGS.items(), start=7):
        if names and name not in names:
            continue
        model, cfg = make_model(spec, seed)
        assert (model.lm_head.weight is model.model.embed_tokens.weight) == cfg.tie_word_embeddings
        out = out_root / name
        model.save_pretrained(out, safe_serialization=True)
        (out / "generation_config.json").unlink(missing_ok=True)  # sampling defaults; no builder reads them
        arrays = {}
        for c, feed in calls(cfg, seed):
            arrays.update({f"c{c}_{k}": v.numpy() for k, v in feed.items()})
            arrays.update({f"c{c}_{k}": v for k, v in run(model, feed).items()})
        np.savez_compressed(out / "golden.npz", **arrays)
        print(f"{out}: transformers {transformers.__version__}, torch {torch.__version__}, {len(KV_LENGTHS) + 1} calls")
        check(out, cfg, seed, spec)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/gemma4"), sys.argv[2:])
