#!/usr/bin/env python3
"""Parse real and crafted Qwen3.5 config.json files with transformers and with irsurgeon, and print where they differ.

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install transformers==5.23.0   # no torch needed
    PYTHONPATH=. /tmp/tfvenv/bin/python scripts/check_config_semantics.py [--reference DIR]

Not a test dependency: transformers stays out of the product. For each case both readings are reduced to the
numbers the MTP head uses. `same` = equal; `refused` = transformers builds a config but irsurgeon refuses it (a head
it cannot build, or a key it requires); `DIFF` = both accept and disagree. `same*` = same but for dtype:
transformers' is the top-level one (`_get_dtype`; None: the weights' dtype); irsurgeon falls back to
text_config.dtype as the declaration its stored-dtype check uses.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
from pathlib import Path

FIELDS = ("model_type", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "rms_norm_eps", "rope_theta",
          "partial_rotary_factor", "rope_type", "intermediate_size", "vocab_size", "num_hidden_layers", "moe", "dtype")


def by_transformers(cfg: dict) -> dict | str:
    """The head's numbers as transformers' config classes give them, or the error they raise."""
    from transformers import AutoConfig

    try:
        c = AutoConfig.for_model(**copy.deepcopy(cfg))
    except Exception as e:  # any refusal is a result to print, not a failure of the script
        return f"error: {type(e).__name__}: {str(e).splitlines()[0][:100]}"
    t = c if type(c).model_type.endswith("_text") else c.text_config
    text_type = type(t).model_type  # the class decides; a text_config.model_type key only sets an attribute
    rope = t.rope_parameters or {}
    moe = None
    if text_type == "qwen3_5_moe_text":  # Qwen3_5MoeTopKRouter always renormalises: norm_topk_prob is True
        moe = (t.num_experts, t.num_experts_per_tok, t.moe_intermediate_size, t.shared_expert_intermediate_size, True)
    return dict(model_type=text_type, hidden_size=t.hidden_size, num_heads=t.num_attention_heads,
                num_kv_heads=t.num_key_value_heads, head_dim=t.head_dim, rms_norm_eps=t.rms_norm_eps,
                rope_theta=rope.get("rope_theta"), partial_rotary_factor=rope.get("partial_rotary_factor", 1.0),
                rope_type=rope.get("rope_type"), intermediate_size=getattr(t, "intermediate_size", None)
                if moe is None else None, vocab_size=t.vocab_size, num_hidden_layers=t.num_hidden_layers, moe=moe,
                dtype=str(c.dtype).removeprefix("torch.") if c.dtype is not None else None)


def by_irsurgeon(cfg: dict) -> tuple[dict | str, tuple[str, ...]]:
    from irsurgeon.families.qwen35_mtp.model import parse_config
    from irsurgeon.core.errors import ConfigError

    try:
        m = parse_config(copy.deepcopy(cfg), source="config.json")
    except ConfigError as e:
        return f"refused: {e}", ()
    moe = m.moe and (m.moe.num_experts, m.moe.top_k, m.moe.expert_size, m.moe.shared_expert_size, m.moe.norm_topk_prob)
    values = {f: getattr(m, f) for f in FIELDS if f not in ("moe", "rope_type")}
    return values | {"moe": moe or None, "rope_type": "default"}, m.warnings


def variants(real: dict[str, dict]) -> dict[str, dict]:
    """Crafted edits of the published 0.8B (dense) and 35B-A3B (MoE) configs, one question each."""
    dense, moe = real["qwen3.5-0.8B"], real["qwen3.6-35B-A3B"]

    def tc(base, drop=(), rope=None, **kw):
        c = copy.deepcopy(base)
        for k in drop:
            c["text_config"].pop(k, None)
        c["text_config"].update(kw)
        if rope is not None:
            c["text_config"]["rope_parameters"] = rope
        return c
    rp = dense["text_config"]["rope_parameters"]
    no_rope_keys = {k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")}
    return {
        "stale partial_rotary_factor": tc(dense, partial_rotary_factor=0.5),
        "stale rope_theta": tc(dense, rope_theta=1e6),
        "legacy rope keys only": tc(dense, rope=no_rope_keys, rope_theta=1e6, partial_rotary_factor=0.5),
        "no rope_parameters": tc(dense, drop=("rope_parameters",)),
        "rope_parameters null": tc(dense, rope_parameters=None),
        "partial_rotary_factor null": tc(dense, rope=no_rope_keys, partial_rotary_factor=None),
        "rope_scaling set": tc(dense, rope_scaling={"rope_type": "default", "rope_theta": 5e5}),
        "legacy type yarn": tc(dense, rope={"type": "yarn", "factor": 2.0, "rope_theta": 1e7,
                                            "original_max_position_embeddings": 32768}),
        "rope_type default + type yarn": tc(dense, rope=rp | {"type": "yarn"}),
        "rope_type linear": tc(dense, rope=rp | {"rope_type": "linear", "factor": 2.0}),
        "nested rope per layer type": tc(dense, rope={"full_attention": {"rope_type": "default", "rope_theta": 1e6}}),
        "no head_dim/kv/eps/vocab/layers/heads/inter": tc(dense, drop=(  # layer_types must match the layer count
            "head_dim", "num_key_value_heads", "rms_norm_eps", "vocab_size", "num_hidden_layers", "layer_types",
            "num_attention_heads", "intermediate_size")),
        "no hidden_size": tc(dense, drop=("hidden_size",)),
        "head_dim null": tc(dense, head_dim=None),
        "hidden_size float": tc(dense, hidden_size=1024.0),
        "text_config absent": {k: v for k, v in dense.items() if k != "text_config"},
        "text_config.model_type moe under qwen3_5": tc(dense, model_type="qwen3_5_moe_text"),
        "top-level dtype float16": dense | {"dtype": "float16"},
        "top-level torch_dtype + dtype": dense | {"torch_dtype": "float16", "dtype": "float32"},
        "text-only layout": dict(dense["text_config"]),
        "text-only + stray text_config": dict(dense["text_config"]) | {"text_config": {"hidden_size": 8}},
        "moe without moe keys": tc(moe, drop=("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                              "shared_expert_intermediate_size", "num_key_value_heads")),
        "moe norm_topk_prob false": tc(moe, norm_topk_prob=False),
        "attention_bias true": tc(dense, attention_bias=True),
        "hidden_act gelu": tc(dense, hidden_act="gelu"),
    }


def compare(name: str, cfg: dict) -> str:
    tf = by_transformers(cfg)
    ours, warnings = by_irsurgeon(cfg)
    if isinstance(tf, str) or isinstance(ours, str):
        verdict = "same" if isinstance(tf, str) and isinstance(ours, str) else \
            "refused" if isinstance(ours, str) else "DIFF"
        lines = [f"{verdict:8s} {name}", f"         transformers: {tf if isinstance(tf, str) else 'accepts'}",
                 f"         irsurgeon:    {ours if isinstance(ours, str) else 'accepts'}"]
    else:
        diffs = [f"{f}: transformers {tf[f]!r}, irsurgeon {ours[f]!r}" for f in FIELDS if tf[f] != ours[f]]
        known = diffs == [f"dtype: transformers None, irsurgeon {ours['dtype']!r}"]  # the text_config.dtype fallback
        lines = [f"{'same*' if known else 'DIFF' if diffs else 'same':8s} {name}"]
        lines += [] if known else [f"         {d}" for d in diffs]
    return "\n".join(lines + [f"         {w}" for w in warnings])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path,
                        default=Path(__file__).resolve().parents[1] / "tests" / "data" / "reference")
    args = parser.parse_args()
    import transformers
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    real = {p.parent.name: json.loads(p.read_text())
            for p in sorted((args.reference / "real-configs").glob("*/config.json"))}
    cases = {f"real {k}": v for k, v in real.items()} | variants(real)
    print(f"transformers {transformers.__version__}: {len(cases)} configs")
    reports = [compare(name, cfg) for name, cfg in cases.items()]
    print("\n".join(reports))
    counts = {v: sum(r.split(" ", 1)[0] == v for r in reports) for v in ("same", "same*", "refused", "DIFF")}
    print(", ".join(f"{n} {v}" for v, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
