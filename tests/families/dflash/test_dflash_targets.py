"""DFlash on Gemma 4 and gpt-oss text targets, as optimum-intel 2.2.0 exports them (tests/data/dflash/{gemma4,gpt_oss},
scripts/make_dflash_targets.py): patched with a draft shaped as z-lab's Gemma 4 releases (sliding + full layers,
final_logit_softcapping 30, mask token 4), then run by openvino-genai 2026.4.1 in a subprocess.

The golden is transformers' own greedy continuation of the prompt ids (greedy.json, eager f32), so the run is checked
against the model, not against genai's plain pipeline alone: a paged-attention conversion that lost the sliding
window (16 / 8, shorter than the 60-token sequence) or gpt-oss's attention sinks would change both. One K per target
kind runs in the default tier; every K = 1..4 and the plain paged and stateful pipelines are slow.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import invoke
from lab.families import FIXTURE_PAIRS
from irsurgeon.families.dflash.synth import Draft, draft_config, draft_tensors, write_checkpoint
from irsurgeon.flows.verify import verify_directory
from irsurgeon.synth.checkpoint import SynthSpec

DATA = Path(__file__).resolve().parents[2] / "data" / "dflash"
KINDS = ("gemma4", "gpt_oss")
TOKENIZER = ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml", "openvino_detokenizer.bin")
# genai in a child process (as flows.genai runs it): tokens of the paged pipeline with the DFlash draft for each K, and
# optionally of the plain paged and stateful (SDPA) pipelines, for the prompt ids of greedy.json
RUNNER = r"""
import json, sys
import numpy as np, openvino as ov, openvino_genai as g
target, ks, plain = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
golden = json.load(open(target + "/greedy.json"))
ids = ov.Tensor(np.array([golden["prompt"]], dtype=np.int64))
props = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
def config(k=None):
    c = g.GenerationConfig(max_new_tokens=len(golden["greedy"]), do_sample=False, ignore_eos=True)
    if k:
        c.num_assistant_tokens = k
    return c
def scheduler():
    s = g.SchedulerConfig(); s.enable_prefix_caching = False; s.cache_size = 1; s.max_num_seqs = 1
    return s
out = {}
if plain:
    out["stateful"] = list(g.LLMPipeline(target, "CPU", ATTENTION_BACKEND="SDPA", **props).generate(ids, config()).tokens[0])
    out["paged"] = list(g.LLMPipeline(target, "CPU", scheduler_config=scheduler(), **props).generate(ids, config()).tokens[0])
if ks:
    pipe = g.LLMPipeline(target, "CPU", scheduler_config=scheduler(),
                         draft_model=g.draft_model(target + "/dflash_draft", "CPU", **props), **props)
    for k in ks:
        out[str(k)] = list(pipe.generate(ids, config(k)).tokens[0])
print(json.dumps(out))
"""


def patched(kind: str, tmp: Path) -> Path:
    """The export with the fixture tokenizer beside it, patched with a random draft of z-lab's Gemma 4 shape."""
    target, ckpt = tmp / kind, tmp / f"{kind}_ckpt"
    shutil.copytree(DATA / kind, target)
    for name in TOKENIZER:
        shutil.copy(FIXTURE_PAIRS["gemma4"][0] / name, target / name)
    cfg = json.loads((target / "config.json").read_text())
    spec = SynthSpec(hidden=cfg["hidden_size"], vocab=cfg["vocab_size"], layers=cfg["num_hidden_layers"],
                     rms_norm_eps=1e-6)
    draft = Draft(layers=2, heads=4, kv_heads=2, head_dim=16, intermediate=64, target_layer_ids=(0, 2),
                  mask_token_id=4, rope_theta=1e6)
    config = draft_config(spec, draft)
    config.update(layer_types=["sliding_attention", "full_attention"], sliding_window=8, use_sliding_window=True,
                  max_window_layers=2, final_logit_softcapping=30.0, tie_word_embeddings=True)
    ckpt.mkdir()
    write_checkpoint(ckpt, config, draft_tensors(0, spec, draft))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0 and "annotated 4 decoder layers" in result.output, result.output
    return target


def genai_tokens(target: Path, ks: list[int], plain: bool = False) -> dict[str, list[int]]:
    run = subprocess.run([sys.executable, "-c", RUNNER, str(target), json.dumps(ks), "1" if plain else "0"],
                         capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_patch_annotates_the_export_and_verify_passes(kind, tmp_path):
    """The annotation's last entry is the lm_head MatMul's input, found through Gemma's logit softcap (MatMul ->
    Divide -> Tanh -> Multiply, as genai's find_llm_matmul follows it); every offline check passes."""
    target = patched(kind, tmp_path)
    checks = {c.name: c for c in verify_directory(target, None)}
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert "post-final-norm" in checks["hidden-state annotation"].detail


@pytest.mark.genai
@pytest.mark.parametrize("kind", KINDS)
def test_dflash_on_the_export_is_transformers_greedy(kind, tmp_path):
    target = patched(kind, tmp_path)
    golden = json.loads((target / "greedy.json").read_text())["greedy"]
    assert len(set(golden)) > 10  # a continuation, not one token repeated
    assert genai_tokens(target, [3]) == {"3": golden}


@pytest.mark.genai
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_every_k_from_1_to_4_and_the_plain_pipelines_are_transformers_greedy(kind, tmp_path):
    target = patched(kind, tmp_path)
    golden = json.loads((target / "greedy.json").read_text())["greedy"]
    tokens = genai_tokens(target, [1, 2, 3, 4], plain=True)
    assert tokens == {name: golden for name in ("stateful", "paged", "1", "2", "3", "4")}
