"""DFlash pairs through openvino-genai 2026.4.1: a pair whose drafts are accepted (`synth --kind dflash-cycle`) and the
counts of optimum-intel's export of its draft, the same pair with a Llama target, K = 1..7 through `verify --genai`,
a hybrid Qwen3.5 target at K = 7, and a sliding-window draft over a context longer than its window.

tests/data/dflash/cycle/acceptance.json (scripts/make_dflash_acceptance.py): accepted / drafted per prompt and K of
optimum-intel 2.2.0's fp32 export of the dflash-cycle draft (seed 0) on the same target, at INFERENCE_PRECISION_HINT
f32; the counts are integers of a deterministic greedy run, so they are compared exactly. One genai test runs in the
default tier (the golden); the rest are marked slow.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import openvino as ov
import pytest

from helpers.checkpoints import read_tensors
from helpers.cli import invoke
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.core import rtinfo
from irsurgeon.families.dflash import FAMILY, genai, synth_cycle
from irsurgeon.families.dflash.synth import write_qwen3_target
from irsurgeon.ir.hidden_states import parse_annotation
from irsurgeon.families.dflash.synth import RANDOM, draft_config, draft_tensors, write_checkpoint
from irsurgeon.synth.checkpoint import SynthSpec
from irsurgeon.synth.registry import checkpoint_tensors, default_spec, write_target

DATA = Path(__file__).resolve().parents[2] / "data" / "dflash"
GOLDEN = DATA / "cycle" / "acceptance.json"
ALL_K = "1,2,3,4,5,6,7"
RUN = re.compile(r"prompt (\d) num_assistant_tokens (\d): (\S+) \(\d+ tokens, accepted (\d+)/(\d+) drafts\)")


def synth(kind: str, out: Path, seed: int = 0) -> tuple[Path, Path]:
    parts = FAMILY.synth(kind, out, seed, False)
    return parts["target"], parts["ckpt"]


def patched(kind: str, tmp: Path, seed: int = 0) -> Path:
    target, ckpt = synth(kind, tmp / kind, seed)
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    return target


def test_cycle_pair_is_a_function_of_its_seed(tmp_path):
    one, again = synth("dflash-cycle", tmp_path / "a"), synth("dflash-cycle", tmp_path / "b")
    assert snapshot(one[0].parent) == snapshot(again[0].parent)
    assert not np.array_equal(synth_cycle.cycle_map(0), synth_cycle.cycle_map(1))
    f = synth_cycle.cycle_map(0)
    lengths = []
    for t in range(8, 64):
        n, x = 1, f[t]
        while x != t:
            n, x = n + 1, f[x]
        lengths.append(n)
    assert sorted(lengths) == [3] * 48 + [4] * 8


def compiled(model: ov.Model):
    return ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()


def target_run(target: Path, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(greedy next token at each position, the draft's hidden_states feed [1, T, 2H]) of the patched target IR,
    its annotated producers of target layers 1 and 3 added as outputs."""
    model = ov.Core().read_model(str(target / "openvino_model.xml"))
    layers = parse_annotation(str(model.get_rt_info([rtinfo.HIDDEN_STATES_LAYERS]).value))
    ops = {op.get_friendly_name(): op for op in model.get_ops()}
    extra = model.add_outputs([ops[layers[i][0]].output(layers[i][1]) for i in (1, 3)])
    req, n = compiled(model), len(tokens)
    req.reset_state()
    req.infer({"input_ids": np.array([tokens]), "attention_mask": np.ones((1, n), np.int64),
               "position_ids": np.arange(n)[None], "beam_idx": np.zeros(1, np.int32)})
    feats = np.concatenate([req.get_tensor(o).data for o in extra], axis=-1)
    return req.get_tensor("logits").data[0].argmax(-1), feats


def test_cycle_pair_follows_its_rule(tmp_path):
    """The module docstring's claims, without genai: the target's greedy next token is f(last); a block after a
    3-periodic context is proposed right in rows 1..4 (they copy 4 positions back) and wrong in rows 5 and 6."""
    target = patched("dflash-cycle", tmp_path)
    f, t = synth_cycle.cycle_map(0), synth_cycle.cycle_target(0)
    start = next(i for i in range(8, 64) if f[f[f[i]]] == i)
    seq = [start]
    for _ in range(15):
        seq.append(int(f[seq[-1]]))
    nxt, feats = target_run(target, seq)
    assert list(nxt) == [int(f[x]) for x in seq]
    p, K, mask = 9, 6, synth_cycle.DRAFT.mask_token_id
    req = compiled(ov.Core().read_model(str(target / "dflash_draft" / "openvino_model.xml")))
    req.reset_state()
    embed = t["model.embed_tokens.weight"]
    req.infer({"inputs_embeds": embed[[seq[p]] + [mask] * K][None], "hidden_states": feats[:, :p],
               "position_ids": np.arange(p + K + 1)[None], "attention_mask": np.ones((1, p + K + 1), np.int64),
               "beam_idx": np.zeros(1, np.int32)})
    proposed = (req.get_tensor("last_hidden_state").data[0] @ t["lm_head.weight"].T).argmax(-1)
    right = [int(a) == b for a, b in zip(proposed, seq[p + 1:p + 1 + K])]
    assert right == [True] * 4 + [False] * 2, (list(proposed), seq[p + 1:p + 1 + K])


def test_linear_attention_blocks_follow_k_on_a_hybrid_target_only(tmp_path):
    """genai needs K + 2 linear-attention blocks for one sequence (genai.linear_attention_blocks); a target without
    linear attention must not get the setting (genai refuses it)."""
    hybrid, _ = synth("dflash-qwen35", tmp_path / "h")
    text = FIXTURE_PAIRS["dflash"][0]
    g = SimpleNamespace(SchedulerConfig=SimpleNamespace)
    sc = genai.scheduler_config(g, hybrid, 7)
    assert sc.num_linear_attention_blocks == 9 and sc.max_num_seqs == 1 and not sc.enable_prefix_caching
    assert genai.scheduler_config(g, hybrid, 3).num_linear_attention_blocks == 7  # genai's own floor: K 5
    assert not hasattr(genai.scheduler_config(g, hybrid, 0), "num_linear_attention_blocks")
    assert not hasattr(genai.scheduler_config(g, text, 7), "num_linear_attention_blocks")


def golden_runs(report) -> list[dict]:
    return [{"prompt": r.prompt, "num_assistant_tokens": r.num_assistant_tokens, "accepted": r.accepted,
             "drafted": r.draft_tokens, "tokens": r.tokens} for r in report.runs]


def equivalence(target: Path, golden: dict):
    from irsurgeon.flows.genai import run_equivalence

    nats = tuple(dict.fromkeys(r["num_assistant_tokens"] for r in golden["runs"]))
    return run_equivalence(target, golden["prompts"], nats, golden["max_new_tokens"], echo=lambda line: None)


@pytest.mark.genai
def test_cycle_drafts_are_accepted_as_optimums_export_of_the_same_checkpoint(tmp_path):
    """irsurgeon's draft of the dflash-cycle checkpoint: token-identical to plain greedy, and accepted / drafted
    exactly as optimum-intel's export of it, for every prompt and K = 1..7; high but not total acceptance."""
    golden = json.loads(GOLDEN.read_text())
    report = equivalence(patched("dflash-cycle", tmp_path, golden["provenance"]["seed"]), golden)
    assert report.identical
    assert golden_runs(report) == golden["runs"]
    short = [r for r in report.runs if r.num_assistant_tokens <= 4 and r.prompt < 3]  # last tokens on 3-cycles
    assert 0.8 < sum(r.accepted for r in short) / sum(r.draft_tokens for r in short) < 1.0
    assert all(r.accepted == 0 < r.draft_tokens for r in report.runs if r.prompt == 3)  # on a 4-cycle


def restart_positions(xml: Path) -> None:
    """Rewrite the draft IR so every call's RoPE positions start at 0 (position_ids - min(position_ids)): the keys
    its state holds from earlier calls then sit at the wrong distance from the new queries."""
    import openvino.opset13 as ops

    model = ov.Core().read_model(str(xml))
    pos = next(p for p in model.get_parameters() if p.get_friendly_name() == "position_ids").output(0)
    users = list(pos.get_target_inputs())
    start = ops.reduce_min(pos, np.array([1], np.int64), keep_dims=True)
    relative = ops.subtract(pos, start).output(0)
    for user in users:
        user.replace_source_output(relative)
    new = xml.with_name("restarted.xml")  # not over the .bin the read model maps
    ov.save_model(model, str(new), compress_to_fp16=False)
    del model
    new.replace(xml)
    new.with_suffix(".bin").replace(xml.with_suffix(".bin"))


def llama_cycle(tmp: Path, seed: int) -> Path:
    """The dflash-cycle pair with its target written as a Llama text export (synth.registry's llama graph: no q/k
    norms, model_type llama), patched. Its o_proj and down_proj are 0, so every layer's output is embed[token], as
    in the Qwen3 target: what genai taps, embeds and scores must give the Qwen3 pair's counts."""
    tensors = {n: t for n, t in synth_cycle.cycle_target(seed).items() if not n.endswith(("q_norm.weight",
                                                                                          "k_norm.weight"))}
    target, ckpt = tmp / "target", tmp / "ckpt"
    target.mkdir()
    ckpt.mkdir()
    assert write_target("llama", synth_cycle.SPEC, tensors, False, "f32", target)["model_type"] == "llama"
    write_checkpoint(ckpt, draft_config(synth_cycle.SPEC, synth_cycle.DRAFT), synth_cycle.cycle_draft(seed))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    return target


@pytest.mark.extended  # more of what the default tier runs once: CI's `make test-extended`
@pytest.mark.genai
def test_a_llama_target_runs_token_identical_and_accepts_as_the_qwen3_one(tmp_path):
    """A Llama text target is a DFlash target on purpose (layout.TARGET_TYPES): the cycle pair on a Llama export is
    token-identical to plain greedy and accepted / drafted exactly as the golden's Qwen3 target, every prompt and
    K = 1..7 (its drafts are accepted only when the context rows genai feeds are the target's, at their positions)."""
    golden = json.loads(GOLDEN.read_text())
    report = equivalence(llama_cycle(tmp_path, golden["provenance"]["seed"]), golden)
    assert report.identical
    assert golden_runs(report) == golden["runs"]
    assert sum(r.accepted for r in report.runs) > 0


@pytest.mark.genai
@pytest.mark.slow
def test_the_golden_tells_a_draft_with_per_call_positions_apart(tmp_path):
    """The counts are sensitive to how the draft places its state: the same draft with positions restarting at
    every call stays token-identical (the target checks every draft) but is accepted differently."""
    golden = json.loads(GOLDEN.read_text())
    target = patched("dflash-cycle", tmp_path)
    restart_positions(target / "dflash_draft" / "openvino_model.xml")
    report = equivalence(target, golden)
    assert report.identical
    ours, theirs = golden_runs(report), golden["runs"]
    assert sum(r["accepted"] for r in ours) < sum(r["accepted"] for r in theirs) / 2, ours


def verify_all_k(target: Path, *options: str) -> list[tuple]:
    result = invoke("verify", target, "--genai", "--sweep", ALL_K, "--prompts", "2", "--rounds", "1",
                    "--max-new-tokens", "24", *options)
    assert result.exit_code == 0, result.output
    runs = RUN.findall(result.output)
    assert sorted({int(k) for _, k, *_ in runs}) == list(range(1, 8)) and len(runs) == 14, result.output
    return runs


@pytest.mark.genai
@pytest.mark.slow
@pytest.mark.parametrize("pair", ["bundled", "dflash-cycle", "dflash-llama"])
def test_verify_genai_is_token_identical_for_every_k_from_1_to_7(pair, tmp_path):
    """`verify --genai --sweep 1,...,7` on one DFlash pipeline for every K. The bundled pair's and the Llama pair's
    drafts are random (~0 % accepted: --min-acceptance 0); the cycle pair's drafts are accepted, so the default floor
    holds."""
    if pair == "bundled":
        target = tmp_path / "t"
        shutil.copytree(FIXTURE_PAIRS["dflash"][0], target)
        assert invoke("patch", target, "--checkpoint", FIXTURE_PAIRS["dflash"][1]).exit_code == 0
        runs = verify_all_k(target, "--min-acceptance", "0")
    elif pair == "dflash-llama":
        runs = verify_all_k(patched(pair, tmp_path), "--min-acceptance", "0")
    else:
        runs = verify_all_k(patched(pair, tmp_path))
        assert sum(int(a) for *_, a, _ in runs) > 0
    assert all(verdict == "identical" and int(drafted) > 0 for _, _, verdict, _, drafted in runs), runs


def moe_pair(tmp: Path, model_type: str) -> Path:
    """A MoE target of layout.TARGET_TYPES and a random draft of its geometry (taps [1, 3] of 4 layers), patched:
    qwen3_moe is optimum-intel 2.2.0's export in tests/data/eagle3_moe/target (scripts/make_eagle3_moe_target.py),
    qwen3_5_moe the qwen35-moe synth kind's decomposed VLM export."""
    target, ckpt = tmp / "target", tmp / "ckpt"
    if model_type == "qwen3_moe":
        shutil.copytree(DATA.parent / "eagle3_moe" / "target", target)
        spec = SynthSpec(hidden=64, vocab=256, layers=4)
    else:
        spec = default_spec("qwen35-moe")
        target.mkdir()
        write_target("qwen35-moe", spec, checkpoint_tensors("qwen35-moe", spec, 0, False), False, "f32", target)
    assert json.loads((target / "config.json").read_text())["model_type"] == model_type
    draft = replace(RANDOM, target_layer_ids=(1, 3), mask_token_id=spec.vocab - 1)
    ckpt.mkdir()
    write_checkpoint(ckpt, draft_config(spec, draft), draft_tensors(0, spec, draft))
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert result.exit_code == 0, result.output
    return target


@pytest.mark.genai
@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen3_moe", "qwen3_5_moe"])
def test_moe_targets_run_every_k_to_7_token_identical(model_type, tmp_path):
    """The MoE types of layout.TARGET_TYPES (z-lab's Qwen3-Coder-30B-A3B and Qwen3.5/3.6-35B-A3B drafts' targets)."""
    runs = verify_all_k(moe_pair(tmp_path, model_type), "--min-acceptance", "0")
    assert all(verdict == "identical" and int(drafted) > 0 for _, _, verdict, _, drafted in runs), runs


@pytest.mark.genai
@pytest.mark.slow
def test_a_hybrid_qwen35_target_runs_every_k_to_7_token_identical(tmp_path):
    """A decomposed Qwen3.5 VLM target with Gated DeltaNet layers and a DFlash draft (VLMPipeline): genai's own pool
    of K + 2 linear-attention blocks is sized from its default K 5, so at K 6 and 7 the scheduler must bring more;
    without it genai refuses the generate."""
    target = patched("dflash-qwen35", tmp_path)
    runs = verify_all_k(target, "--min-acceptance", "0")
    assert all(verdict == "identical" for _, _, verdict, _, _ in runs), runs
    from irsurgeon.core.errors import IRSurgeonError
    from irsurgeon.flows.genai import _config, generate, genai_module

    g = genai_module()
    pipe = genai.pipeline(g, target, "CPU", genai.equivalence_properties(target), True, max_assistant_tokens=0)
    with pytest.raises(IRSurgeonError, match="num_linear_attention_blocks"):
        generate(pipe, ["Hello"], _config(g, 8, 7))


def sliding_pair(tmp: Path) -> Path:
    """tests/data/dflash/sliding's Qwen3 target as a text export (synth's graph, its own tensors), patched with its
    draft (window 3; layers sliding, full, sliding; sliding layers causal: dflash 0.1.0's default)."""
    config = json.loads((DATA / "sliding" / "target" / "config.json").read_text())
    spec = SynthSpec(hidden=config["hidden_size"], heads=config["num_attention_heads"],
                     kv_heads=config["num_key_value_heads"], head_dim=config["head_dim"],
                     intermediate=config["intermediate_size"], vocab=config["vocab_size"],
                     layers=config["num_hidden_layers"], partial_rotary_factor=1.0, rope_theta=config["rope_theta"],
                     rms_norm_eps=config["rms_norm_eps"], vlm=False)
    tensors = {n: raw.astype(np.float32) for n, (raw, dtype) in read_tensors(DATA / "sliding" / "target").items()}
    target = tmp / "target"
    target.mkdir()
    write_qwen3_target(target, spec, tensors)
    assert invoke("patch", target, "--checkpoint", DATA / "sliding" / "draft").exit_code == 0
    return target


@pytest.mark.genai
@pytest.mark.slow
def test_a_sliding_window_draft_over_a_context_longer_than_its_window(tmp_path):
    """Prompts of 18 and 30 tokens (byte-level tokenizer: one per character) against a window of 3, blocks of up to
    8 rows: token-identical to plain greedy at every K."""
    from irsurgeon.flows.genai import run_equivalence

    target = sliding_pair(tmp_path)
    draft = json.loads((target / "dflash_draft" / "config.json").read_text())
    prompts = ["def main(): print(", "What is the capital of France?"]
    assert draft["sliding_window"] == 3 and min(map(len, prompts)) > 3 * draft["sliding_window"]
    report = run_equivalence(target, prompts, tuple(range(1, 8)), 24, echo=lambda line: None)
    assert report.identical and len(report.runs) == 14 and all(r.draft_tokens > 0 for r in report.runs)
