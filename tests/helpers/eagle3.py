"""EAGLE-3 test data: the fixture checkpoint read for tests/helpers/numpy_eagle3.py, the target's embedding table
genai hands the draft, and the same draft re-stored in vLLM speculators' layout.

    load_checkpoint(ckpt)            (name -> decoded array (bf16 -> float32, d2t int64, t2d bool), config dict)
    target_embed(target)             the target IR's token-embedding table (what genai gives the draft) as float32
    reference(ckpt, embed=None)      an Eagle3Reference of the checkpoint (embed: the fixture target's by default)
    speculators_variant(src, dst)    src (SafeAILab layout) rewritten as an `Eagle3Speculator` checkpoint in dst
    with_target_table(model, table)  the draft IR with its embedding Gather reading `table` (genai's share_vocabulary)
    run_calls(model, calls)          several stateful f32 calls of a draft IR: (logits of each, the feeds used)
    variant(where, source, **change) source's tensors under its config.json changed (a None value removes the key)
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from helpers.numpy_eagle3 import Eagle3Reference, layer_config
from irsurgeon.families.eagle3 import surgery
from irsurgeon.weights.safetensors_io import SafetensorsFile, f32_to_bf16, write_safetensors

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "fixtures" / "eagle3" / "target"  # `irsurgeon synth --kind eagle3 --seed 0`
EMBED_NAME = "model.embed_tokens.weight"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}  # the plugin's default KV cache is u8
# the Llama fields speculators' converter carries into transformer_layer_config
# (src/speculators/convert/converters/eagle3.py, Eagle3SpeculatorConverter._pretrained_config)
LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "hidden_act", "max_position_embeddings", "initializer_range", "rms_norm_eps", "attention_bias",
                "rope_theta", "mlp_bias", "torch_dtype")


def load_checkpoint(ckpt: Path) -> tuple[dict[str, np.ndarray], dict]:
    f = SafetensorsFile(Path(ckpt) / "model.safetensors")
    try:
        tensors = {n: f.get(n) for n in f.tensors}
    finally:
        f.close()
    return tensors, json.loads((Path(ckpt) / "config.json").read_text())


def target_embed(target: Path = TARGET) -> np.ndarray:
    """The constant the target IR's embedding Gather reads (the table genai's share_vocabulary gives the draft)."""
    import openvino as ov

    model = ov.Core().read_model(str(Path(target) / "openvino_model.xml"))
    found = [op for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
             and op.get_friendly_name() == EMBED_NAME]
    assert len(found) == 1, f"{target}: no constant {EMBED_NAME}"
    return found[0].get_data().astype(np.float32)


def reference(ckpt: Path, embed: np.ndarray | None = None) -> Eagle3Reference:
    tensors, config = load_checkpoint(ckpt)
    return Eagle3Reference(tensors, config, target_embed() if embed is None else embed)


def speculators_variant(src_ckpt: Path, dst: Path, embed: np.ndarray | None = None) -> Path:
    """The same tensors in vLLM speculators' layout, as its converter writes them (vllm-project/speculators, formerly
    neuralmagic/speculators, `src/speculators/convert/converters/eagle3.py`: `midlayer.` -> `layers.0.`; d2t, t2d,
    fc., lm_head., norm. kept; `embed_tokens.weight` copied from the verifier when the checkpoint has none; the
    config an `Eagle3SpeculatorConfig` (`src/speculators/models/eagle3/config.py`) whose transformer_layer_config
    is a LlamaConfig with num_hidden_layers 1 and vocab_size = len(t2d)).

    `embed` [V, H] is the table stored as embed_tokens.weight (default: the fixture target's, as the converter copies
    the verifier's); every float tensor is stored BF16. `speculators_version` is left out (the config class's
    default fills it); the verifier's name_or_path is null (core.py resolves layer ids only when it is set)."""
    src_ckpt, dst = Path(src_ckpt), Path(dst)
    f = SafetensorsFile(src_ckpt / "model.safetensors")
    try:
        stored = {n: (f.raw(n), f.tensors[n].dtype) for n in f.tensors}
    finally:
        f.close()
    out = {("layers.0." + n[len("midlayer."):] if n.startswith("midlayer.") else n): t for n, t in stored.items()}
    table = target_embed() if embed is None else np.asarray(embed, np.float32)
    out["embed_tokens.weight"] = (f32_to_bf16(table), "BF16")

    src = json.loads((src_ckpt / "config.json").read_text())
    layer = layer_config(src)
    vocab = int(stored["t2d"][0].shape[0]) if "t2d" in stored else int(layer["vocab_size"])
    transformer = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
                   "num_hidden_layers": 1, "use_cache": True, "tie_word_embeddings": False,
                   **{k: layer[k] for k in LAYER_FIELDS if k in layer}}
    # the same taps in the speculators' meaning: their runtime (vLLM) captures the input of layer id, SGLang's nested
    # ids name layer outputs (irsurgeon.families.eagle3.model.read_taps), so a nested id k is the speculators' k + 1
    nested = (src.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    aux = [k + 1 for k in nested] if nested else src.get("eagle_aux_hidden_state_layer_ids")
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5, "verifier_accept_k": 1,
                                  "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": None, "architectures": ["Qwen3ForCausalLM"]},
        },
        "draft_vocab_size": int(src["draft_vocab_size"]),
        "norm_before_residual": bool(src.get("norm_before_residual", False)),
        "target_hidden_size": int(src.get("target_hidden_size") or layer["hidden_size"]),
        "eagle_aux_hidden_state_layer_ids": aux,
        "transformer_layer_config": transformer,
        "torch_dtype": layer.get("torch_dtype", "bfloat16"),
    }
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_safetensors(dst / "model.safetensors", {n: r for n, (r, _) in out.items()},
                      {n: dt for n, (_, dt) in out.items()})
    return dst


def with_target_table(model, table: np.ndarray):
    """What genai's share_vocabulary does: the draft's embedding Gather reads the target's table."""
    gather = surgery.embedding_gather(model)
    import openvino as ov

    gather.input(0).replace_source_output(ov.opset13.constant(table).output(0))
    model.validate_nodes_and_infer_types()
    return model


def run_calls(model, calls: list[int], seed: int = 0) -> tuple[list[np.ndarray], list]:
    """Several stateful calls of the IR (the KV state carried), with the feeds used."""
    import openvino as ov

    request = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    rng, pos, outs, feeds = np.random.default_rng(seed), 0, [], []
    H3 = 3 * surgery.fc_matmul(model).input_value(1).get_partial_shape()[0].get_length()  # fc: [H, 3 H_t]
    for s in calls:
        feed = {"input_ids": rng.integers(0, 200, (1, s)), "position_ids": np.arange(pos, pos + s)[None],
                "attention_mask": np.ones((1, pos + s), np.int64),
                "hidden_states": rng.standard_normal((1, s, H3)).astype(np.float32) * 0.5,
                "beam_idx": np.zeros(1, np.int32)}
        outs.append(request.infer(feed)["logits"].copy())
        feeds.append(feed)
        pos += s
    return outs, feeds


def variant(where: Path, source: Path, **change) -> Path:
    """A checkpoint in `where`: source's model.safetensors under its config.json with `change` (None removes a key)."""
    import shutil

    where.mkdir(parents=True)
    shutil.copy(source / "model.safetensors", where / "model.safetensors")
    config = json.loads((source / "config.json").read_text())
    for key, value in change.items():
        config.pop(key, None) if value is None else config.__setitem__(key, value)
    (where / "config.json").write_text(json.dumps(config, indent=2))
    return where
