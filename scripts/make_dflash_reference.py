"""Reference data for DFlash drafts: seeded tiny Qwen3 targets, z-lab-format draft checkpoints, goldens from z-lab's
PyTorch model, and optimum-intel's fp32 export of one draft and its target (tests/data/dflash/).

Run in a separate venv, never the product's:

    python3 -m venv /tmp/dflash-ref
    /tmp/dflash-ref/bin/pip install torch==2.13.0+cpu transformers==5.2.0 optimum==2.3.0 einops diffusers==0.37.1 \
        safetensors numpy
    /tmp/dflash-ref/bin/pip install --no-deps optimum-intel==2.2.0 dflash==0.1.0
    /tmp/dflash-ref/bin/pip install openvino==2026.4.1 openvino-tokenizers==2026.4.1.0 nncf==3.4.0 \
        "huggingface-hub>=0.23.2,<1.22"
    /tmp/dflash-ref/bin/python scripts/make_dflash_reference.py tests/data/dflash [--repo-model PATH]

(pip resolves huggingface-hub 1.21.0, numpy 2.4.6, safetensors 0.8.0, einops 0.8.2; optimum-intel 2.2.0 asks for
huggingface-hub<1.22 and torchvision, which the export does not import.) `dflash` 0.1.0 is z-lab's PyPI package; its
`local` extra pins transformers 5.15.0, but optimum-intel 2.2.0 needs transformers<5.6, and the draft model imports
nothing that 5.2.0 lacks. `--repo-model` names z-lab/dflash's `dflash/model.py` at commit 44947fb (2026-04-26, the
repository snapshot): when given, every golden call is replayed through it too (eager attention) and the distance is
printed (the snapshot ignores `sliding_window` outside flash attention, so only the sliding case differs).

The reference is `dflash.model.DFlashDraftModel` of dflash 0.1.0, float32, CPU. Its attention always calls
transformers' "sdpa" function (the `_attn_implementation` is not read), so that is what the goldens come from. Its
masks (`_attention_mask`): full-attention layers see every key (no mask); a `sliding_attention` layer is causal unless
the config sets `is_causal` (Qwen3DFlashAttention: `is_causal = layer_type == "sliding_attention" if
config.is_causal is None`), and sees keys with q_pos - k_pos < sliding_window (plus k_pos - q_pos < sliding_window
when not causal). Qwen3Config keeps `sliding_window` only with `use_sliding_window: true`.

Three cases (seeds 11, 12, 13), each a target/ (Qwen3ForCausalLM: config.json + model.safetensors), a draft/
(config.json as z-lab releases spell it: architectures DFlashDraftModel, model_type qwen3, block_size,
num_target_layers, dflash_config {mask_token_id, target_layer_ids}; model.safetensors without a `model.` prefix) and
golden.npz. They differ in draft layers (2 / 1 / 3), target layers and target_layer_ids (each includes the target's
last layer), hidden size, heads / kv heads / head_dim (GQA 2, GQA 3, MHA), eps, RoPE (legacy top-level rope_theta;
yarn through the legacy rope_scaling; rope_parameters), attention_bias (on in one), mask token, K, and layer types
(one case has sliding_attention layers, a window shorter than the prefill).

golden.npz, per call c (genai's feed of a stateful draft, state carried between calls, reset only before call 0):
  c{c}_inputs_embeds  [1, K+1, H]        target embedding of [seed, MASK x K]
  c{c}_hidden_states  [1, delta, n*H]    the new target rows: concat(h[l + 1] for l in target_layer_ids)
  c{c}_position_ids   [1, delta+K+1]     iota(committed, committed + delta + K + 1)
  c{c}_attention_mask [1, committed+delta+K+1]  ones
  c{c}_last_hidden_state [1, K, H]       the draft's final norm output without the seed row
plus `tokens` (the token sequence the calls walk) and `deltas`. Between calls the draft's cache keeps only the
context rows (the block is cropped, as dflash_generate's `_crop_to` does), exactly what genai's state holds.
`h` is transformers' output_hidden_states of the target (h[L] is the post-norm output), checked here against hooks
on the decoder layers.

For case `base` the script also writes optimum/draft and optimum/target: optimum-intel 2.2.0's fp32 exports
(openvino_model.xml/.bin, config.json; the junk tokenizer files and generation_config.json are not kept), and replays
every golden call through the exported draft (openvino CPU, f32 inference precision), printing the worst difference.
The sliding case is exported to a temporary directory and replayed the same way (printed, not kept); its
golden_is_causal_false.npz holds the same calls' outputs with `is_causal: false` set on the config (two-sided window).

Measured with the versions above (2 cores, one torch thread; a rerun writes every checkpoint and golden byte for byte
again): the repository snapshot (eager) vs dflash 0.1.0 is 1.1e-6 (base) and 7.2e-7 (bias_yarn) and 3.5 on sliding
(the snapshot ignores the window on CPU); optimum-intel's fp32 base draft vs the goldens is 1.7e-6 over the four
calls, its fp32 target vs transformers' logits 3.1e-6. On the sliding case optimum-intel's draft is 2.4 away from
the goldens and 0.36 from the is_causal=false outputs: it traces every layer non-causal with a one-sided window
(`_dflash_attention_mask`: masked iff q_pos - k_pos >= window), which equals neither dflash 0.1.0 default (causal
sliding layers) nor its is_causal=false form (two-sided) once the block is longer than the window.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from dflash_export import export

CASES = {
    "base": dict(
        seed=11, K=3, deltas=(9, 1, 4, 2),
        target=dict(vocab_size=64, hidden_size=32, intermediate_size=16, num_hidden_layers=4,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6,
                    rope_theta=10_000.0),
        draft=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   intermediate_size=64, rms_norm_eps=1e-6, rope_theta=10_000.0, attention_bias=False,
                   mask_token_id=63, target_layer_ids=[1, 3]),
    ),
    "bias_yarn": dict(
        seed=12, K=4, deltas=(7, 5, 1, 3),
        target=dict(vocab_size=80, hidden_size=48, intermediate_size=16, num_hidden_layers=5,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5,
                    rope_theta=10_000.0),
        draft=dict(num_hidden_layers=1, num_attention_heads=3, num_key_value_heads=1, head_dim=24,
                   intermediate_size=56, rms_norm_eps=1e-5, rope_theta=50_000.0, attention_bias=True,
                   rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
                   max_position_embeddings=32, mask_token_id=5, target_layer_ids=[0, 2, 4]),
    ),
    "sliding": dict(
        seed=13, K=3, deltas=(9, 2, 4, 1),
        target=dict(vocab_size=72, hidden_size=40, intermediate_size=16, num_hidden_layers=6,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-6,
                    rope_theta=10_000.0),
        draft=dict(num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, head_dim=20,
                   intermediate_size=48, rms_norm_eps=1e-6, attention_bias=False,
                   rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                   use_sliding_window=True, sliding_window=3, max_window_layers=0,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   mask_token_id=0, target_layer_ids=[2, 5]),
    ),
}
EXPORT_CASE, PROBE_EXPORT = "base", ("sliding",)


def target_config(spec: dict) -> dict:
    return dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
                max_position_embeddings=64, attention_bias=False, attention_dropout=0.0, tie_word_embeddings=False,
                use_cache=True, torch_dtype="float32", **spec)


def draft_config(case: dict) -> dict:
    """A draft config.json as z-lab's releases spell it (keys of a transformers 4.57 Qwen3Config + DFlash's own)."""
    d, t = dict(case["draft"]), case["target"]
    dflash = {"mask_token_id": d.pop("mask_token_id"), "target_layer_ids": d.pop("target_layer_ids")}
    cfg = dict(architectures=["DFlashDraftModel"], auto_map={"AutoModel": "dflash.DFlashDraftModel"},
               model_type="qwen3", hidden_size=t["hidden_size"], vocab_size=t["vocab_size"], hidden_act="silu",
               max_position_embeddings=d.pop("max_position_embeddings", 64), attention_dropout=0.0,
               tie_word_embeddings=False, use_cache=True, torch_dtype="float32", block_size=case["K"] + 1,
               num_target_layers=t["num_hidden_layers"], dflash_config=dflash)
    cfg.update(d)
    return cfg


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Unit-ish activations: matrices randn / sqrt(fan_in), norm gains 1 + 0.3 randn, biases 0.2 randn."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))


def save_checkpoint(model: torch.nn.Module, config: dict, out: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})


def make_target(case: dict, out: Path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = target_config(case["target"])
    model = Qwen3ForCausalLM(Qwen3Config(**cfg)).eval()
    randomize(model, case["seed"])
    save_checkpoint(model, cfg, out)
    return Qwen3ForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()


def make_draft(case: dict, out: Path):
    from transformers import Qwen3Config

    from dflash.model import DFlashDraftModel

    cfg = draft_config(case)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    model = DFlashDraftModel(Qwen3Config.from_pretrained(out)).eval()  # the config as from_pretrained reads it
    randomize(model, case["seed"] + 100)
    save_checkpoint(model, cfg, out)
    return load_draft(DFlashDraftModel, out)


def load_draft(cls, out: Path, **config_changes):
    from transformers import Qwen3Config

    config = Qwen3Config.from_pretrained(out)
    for key, value in config_changes.items():  # from_pretrained would hand unknown keys back unused
        setattr(config, key, value)
    config._attn_implementation = "eager"
    return cls.from_pretrained(out, config=config, dtype=torch.float32).eval()


def target_features(target, tokens: torch.Tensor, layer_ids: list[int]) -> torch.Tensor:
    """concat(h[l + 1] for l in layer_ids) over the whole sequence [1, T, n*H] (causal: row i sees tokens <= i)."""
    seen = {}
    hooks = [layer.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o[0] if isinstance(o, tuple) else o))
             for i, layer in enumerate(target.model.layers)]
    with torch.no_grad():
        out = target(tokens, output_hidden_states=True)
    for h in hooks:
        h.remove()
    L = len(target.model.layers)
    for i in range(L - 1):  # hidden_states[i + 1] is decoder layer i's output; the last one is post-norm
        assert torch.equal(out.hidden_states[i + 1], seen[i]), i
    assert torch.allclose(out.hidden_states[L], target.model.norm(seen[L - 1]), atol=0, rtol=0)
    return torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)


def calls(target, case: dict, cfg: dict):
    """genai's feed, call by call: (inputs, committed) for each delta of the case."""
    g = torch.Generator().manual_seed(case["seed"] + 200)
    K, deltas = case["K"], case["deltas"]
    n = sum(deltas) + 1
    tokens = torch.randint(0, cfg["vocab_size"], (1, n), generator=g)
    feats = target_features(target, tokens, cfg["dflash_config"]["target_layer_ids"])
    mask_id = cfg["dflash_config"]["mask_token_id"]
    committed = 0
    for delta in deltas:
        seed = tokens[:, committed + delta]
        block = torch.cat([seed[:, None], torch.full((1, K), mask_id)], dim=1)
        with torch.no_grad():
            embeds = target.model.embed_tokens(block)
        yield {
            "inputs_embeds": embeds,
            "hidden_states": feats[:, committed:committed + delta],
            "position_ids": torch.arange(committed, committed + delta + K + 1)[None],
            "attention_mask": torch.ones(1, committed + delta + K + 1, dtype=torch.long),
        }
        committed += delta
    yield tokens


def run_draft(draft, feeds: list[dict]) -> list[np.ndarray]:
    """Every call in order with one cache, cropped to the context rows after each call; the seed row dropped."""
    from transformers import DynamicCache

    cache, outs = DynamicCache(), []
    for f in feeds:
        with torch.no_grad():
            h = draft(position_ids=f["position_ids"], noise_embedding=f["inputs_embeds"],
                      target_hidden=f["hidden_states"], past_key_values=cache, use_cache=True)
        outs.append(h[:, 1:, :].numpy())
        cache.crop(int(f["position_ids"][0, 0]) + f["hidden_states"].shape[1])
    return outs


def worst(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def replay_ir(xml: Path, feeds: list[dict]) -> list[np.ndarray]:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(xml)
    req = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    req.reset_state()
    outs = []
    for f in feeds:
        feed = {k: v.numpy() for k, v in f.items()}
        feed["beam_idx"] = np.zeros(1, np.int32)
        req.infer(feed)
        outs.append(req.get_tensor("last_hidden_state").data.copy())
    return outs


def target_logits_distance(target, tokens: torch.Tensor, xml: Path) -> float:
    import openvino as ov

    core = ov.Core()
    req = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    n = tokens.shape[1]
    req.reset_state()
    names = {p.get_any_name() for p in req.model_inputs}
    feed = {"input_ids": tokens.numpy(), "attention_mask": np.ones((1, n), np.int64)}
    if "position_ids" in names:
        feed["position_ids"] = np.arange(n, dtype=np.int64)[None]
    feed["beam_idx"] = np.zeros(1, np.int32)
    req.infer(feed)
    with torch.no_grad():
        ref = target(tokens).logits.numpy()
    return float(np.abs(req.get_tensor("logits").data - ref).max())


def load_repo_model(path: Path):
    spec = importlib.util.spec_from_file_location("dflash_repo_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # transformers looks the class's module up there
    spec.loader.exec_module(module)
    return module.DFlashDraftModel


def main() -> None:
    import dflash
    import optimum.intel  # noqa: F401  (fail early without the exporter)
    import transformers
    from importlib.metadata import version

    from dflash.model import DFlashDraftModel

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path, nargs="?", default=Path("tests/data/dflash"))
    ap.add_argument("--repo-model", type=Path, help="z-lab/dflash dflash/model.py at 44947fb (cross-check)")
    ap.add_argument("--no-export", action="store_true")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, dflash {version('dflash')}, "
          f"optimum {version('optimum')}, optimum-intel {version('optimum-intel')}, openvino {version('openvino')}")
    del dflash
    transformers.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    repo_cls = load_repo_model(args.repo_model) if args.repo_model else None
    for name, case in CASES.items():
        out = args.out / name
        shutil.rmtree(out, ignore_errors=True)
        target = make_target(case, out / "target")
        draft = make_draft(case, out / "draft")
        cfg = json.loads((out / "draft" / "config.json").read_text())
        *feeds, tokens = list(calls(target, case, cfg))
        golden = run_draft(draft, feeds)
        again = run_draft(load_draft(DFlashDraftModel, out / "draft"), feeds)
        assert all(np.array_equal(a, b) for a, b in zip(golden, again)), f"{name}: reload changed the outputs"
        arrays = {"tokens": tokens.numpy(), "deltas": np.asarray(case["deltas"], np.int64)}
        for c, (f, g) in enumerate(zip(feeds, golden)):
            arrays.update({f"c{c}_{k}": v.numpy() for k, v in f.items()})
            arrays[f"c{c}_last_hidden_state"] = g
        np.savez_compressed(out / "golden.npz", **arrays)
        print(f"{name}: {len(feeds)} calls, deltas {case['deltas']}, K {case['K']}, "
              f"|golden| max {max(float(np.abs(g).max()) for g in golden):.3g}")
        bidir = None
        if "sliding_attention" in cfg.get("layer_types", []):
            bidir = run_draft(load_draft(DFlashDraftModel, out / "draft", is_causal=False), feeds)
            np.savez_compressed(out / "golden_is_causal_false.npz",
                                **{f"c{c}_last_hidden_state": g for c, g in enumerate(bidir)})
            print(f"{name}: with is_causal=false (two-sided window) the outputs move by {worst(golden, bidir):.3g}")
        if repo_cls is not None:
            print(f"{name}: z-lab repository snapshot (eager) vs dflash 0.1.0: "
                  f"{worst(golden, run_draft(load_draft(repo_cls, out / 'draft'), feeds)):.3g}")
        if args.no_export or name not in (EXPORT_CASE, *PROBE_EXPORT):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            where = out / "optimum" if name == EXPORT_CASE else Path(tmp)
            export(out / "draft", where / "draft", draft=True)
            exported = replay_ir(where / "draft" / "openvino_model.xml", feeds)
            print(f"{name}: optimum-intel fp32 draft vs dflash 0.1.0, worst over calls: {worst(golden, exported):.3g}")
            if bidir is not None:
                print(f"{name}: optimum-intel fp32 draft vs dflash 0.1.0 with is_causal=false: "
                      f"{worst(bidir, exported):.3g}")
            if name == EXPORT_CASE:
                export(out / "target", where / "target", draft=False)
                print(f"{name}: optimum-intel fp32 target vs transformers logits: "
                      f"{target_logits_distance(target, tokens, where / 'target' / 'openvino_model.xml'):.3g}")


if __name__ == "__main__":
    main()
