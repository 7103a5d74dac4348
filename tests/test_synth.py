"""synth: layout and I/O of each kind, numeric parity with a numpy decoder, determinism, bad input, genai end to end."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.cli import main
from irsurgeon.synth.checkpoint import FULL, LINEAR, layer_types
from irsurgeon.synth.registry import FIXTURES, default_spec, make_fixture, synthesize
from irsurgeon.synth.tokenizer import SPECIAL
from irsurgeon.weights.safetensors_io import SafetensorsFile
from helpers.tiers import default_tier
from helpers.numpy_mtp import moe, rms, rope, sigmoid, silu

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "fixtures" / "synth"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
QWEN_FILES = {"openvino_language_model.xml", "openvino_text_embeddings_model.xml", "openvino_tokenizer.xml",
              "openvino_detokenizer.xml", "openvino_vision_embeddings_model.xml",
              "openvino_vision_embeddings_pos_model.xml", "openvino_vision_embeddings_merger_model.xml",
              "config.json", "generation_config.json", "preprocessor_config.json"}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("qwen35"), "qwen35", seed=5)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return synthesize(tmp_path_factory.mktemp("llama"), "llama", seed=6, with_mtp=False)


def read(path: Path) -> ov.Model:
    return ov.Core().read_model(path)


def ports(model_ports) -> dict[str, tuple[str, str]]:
    return {p.get_any_name(): (p.get_element_type().get_type_name(), str(p.get_partial_shape())) for p in model_ports}


def stored(ckpt: Path) -> dict[str, np.ndarray]:
    st = SafetensorsFile(ckpt / "model.safetensors")
    try:
        return {n: np.array(st.get(n), dtype=np.float32) for n in st.tensors}
    finally:
        st.close()


def test_qwen35_layout_and_language_model_io(qwen):
    assert QWEN_FILES <= {p.name for p in qwen.target.iterdir()}
    lm = read(qwen.target / "openvino_language_model.xml")
    H, V = qwen.spec.hidden, qwen.spec.vocab
    assert ports(lm.inputs) == {"attention_mask": ("i64", "[?,?]"), "inputs_embeds": ("f32", f"[?,?,{H}]"),
                                "position_ids": ("i64", "[4,?,?]"), "beam_idx": ("i32", "[?]")}
    assert ports(lm.outputs) == {"logits": ("f32", f"[?,?,{V}]")}
    assert lm.outputs[0].get_node().input_value(0).get_node().get_type_name() == "MatMul"  # lm_head feeds logits
    types = layer_types(qwen.spec)
    assert types == [LINEAR, LINEAR, LINEAR, FULL]  # hybrid by default, 3:1 as Qwen3.5 ships
    counts = {FULL: types.count(FULL), LINEAR: types.count(LINEAR)}
    states = sorted(v.get_info().variable_id for v in lm.get_variables())
    assert states == sorted(f"cache_params.past.{st}.{i}cache_params.present.{st}.{i}"
                            for kind, names in ((FULL, ("key", "value")), (LINEAR, ("conv", "ssm")))
                            for st in names for i in range(counts[kind]))
    emb = read(qwen.target / "openvino_text_embeddings_model.xml")
    assert ports(emb.inputs) == {"input": ("i64", "[?,?]")}
    assert ports(emb.outputs) == {"inputs_embeds": ("f32", f"[?,?,{H}]")}


def test_optimum_names_are_there(qwen):
    names = {op.get_friendly_name() for op in read(qwen.target / "openvino_language_model.xml").get_ops()}
    m = "__module.model.model.language_model"
    for i, kind in enumerate(layer_types(qwen.spec)):
        assert f"{m}.layers.{i}/aten::add/Add_1" in names
        mixer = "self_attn.q_proj" if kind == FULL else "linear_attn.in_proj_qkv"
        assert f"{m}.layers.{i}.{mixer}/ov_ext::linear/MatMul" in names
    assert f"{m}.norm/aten::mul/Multiply_1" in names and "__module.model.lm_head/ov_ext::linear/MatMul" in names


@pytest.mark.parametrize("which", ["qwen", "llama"])
def test_paged_attention_pass_converts_every_layer(which, request):
    out = request.getfixturevalue(which)
    xml = "openvino_language_model.xml" if which == "qwen" else "openvino_model.xml"
    model = read(out.target / xml)
    contract.to_paged_attention(model)
    counts = Counter(op.get_type_name() for op in model.get_ops())
    types = layer_types(out.spec) if which == "qwen" else [FULL] * out.spec.layers
    assert counts["PagedAttentionExtension"] == types.count(FULL)
    assert counts["PagedCausalConv1D"] == counts["PagedGatedDeltaNet"] == types.count(LINEAR)
    assert counts["ReadValue"] == counts["ScaledDotProductAttention"] == counts["Loop"] == 0


def test_llama_io(llama):
    assert {p.name for p in llama.target.iterdir()} >= {"openvino_model.xml", "openvino_tokenizer.xml",
                                                         "openvino_detokenizer.xml", "config.json"}
    model = read(llama.target / "openvino_model.xml")
    assert ports(model.inputs) == {"input_ids": ("i64", "[?,?]"), "attention_mask": ("i64", "[?,?]"),
                                   "position_ids": ("i64", "[?,?]"), "beam_idx": ("i32", "[?]")}
    assert ports(model.outputs) == {"logits": ("f32", f"[?,?,{llama.spec.vocab}]")}
    assert "mtp.fc.weight" not in stored(llama.ckpt)


def reference_logits(t: dict, s, ids: np.ndarray, qwen: bool) -> np.ndarray:
    """Causal float64 decoder over ids [S] (batch 1), written from the math; returns logits [S, V]."""
    pre = "model.language_model." if qwen else "model."
    g = (lambda n: t[n]) if qwen else (lambda n: t[n] - 1.0)  # rms() applies 1 + w
    nH, nKV, D, eps, S = s.heads, s.kv_heads, s.head_dim, s.rms_norm_eps, len(ids)
    rot, pos = int(D * s.partial_rotary_factor), np.arange(S)[None]
    x = t[pre + "embed_tokens.weight"].astype(np.float64)[ids][None]
    for i in range(s.layers):
        p = f"{pre}layers.{i}."
        a = rms(x, g(p + "input_layernorm.weight"), eps)
        q = (a @ t[p + "self_attn.q_proj.weight"].T).reshape(1, S, nH, -1)
        q, gate = q[..., :D], q[..., D:].reshape(1, S, -1)
        k = (a @ t[p + "self_attn.k_proj.weight"].T).reshape(1, S, nKV, D)
        v = (a @ t[p + "self_attn.v_proj.weight"].T).reshape(1, S, nKV, D).transpose(0, 2, 1, 3)
        if qwen:
            q, k = rms(q, t[p + "self_attn.q_norm.weight"], eps), rms(k, t[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q.transpose(0, 2, 1, 3), pos, rot, s.rope_theta), rope(k.transpose(0, 2, 1, 3), pos, rot, s.rope_theta)
        k, v = np.repeat(k, nH // nKV, 1), np.repeat(v, nH // nKV, 1)
        scores = np.where(np.tril(np.ones((S, S), bool)), q @ k.transpose(0, 1, 3, 2) / np.sqrt(D), -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        att = ((probs / probs.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(1, S, nH * D)
        x = x + (att * sigmoid(gate) if qwen else att) @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        if s.num_experts:
            layer = {"layers.0.mlp." + k[len(p + "mlp."):]: v for k, v in t.items() if k.startswith(p + "mlp.")}
            x = x + moe(h, layer, {"top_k": s.top_k})
        else:
            x = x + (silu(h @ t[p + "mlp.gate_proj.weight"].T) * (h @ t[p + "mlp.up_proj.weight"].T)) \
                @ t[p + "mlp.down_proj.weight"].T
    return (rms(x, g(pre + "norm.weight"), eps) @ t["lm_head.weight"].T)[0]


def run_decoder(model: ov.Model, ids: np.ndarray, qwen: bool, embed: np.ndarray, split: int) -> np.ndarray:
    """Prefill ids[:split], then one token at a time on one request; returns every step's logits [S, V]."""
    req = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    out, start = [], 0
    for stop in [split, *range(split + 1, len(ids) + 1)]:
        chunk, positions = ids[start:stop][None], np.arange(start, stop)[None]
        feed = {"attention_mask": np.ones((1, stop), np.int64), "beam_idx": np.zeros(1, np.int32)}
        if qwen:
            feed.update(inputs_embeds=embed[chunk], position_ids=np.repeat(positions[None], 4, 0))
        else:
            feed.update(input_ids=chunk, position_ids=positions)
        out.append(req.infer(feed)["logits"][0])
        start = stop
    return np.concatenate(out)


@pytest.mark.parametrize("kind", ["qwen35", "qwen35-moe", "llama"])
def test_decoder_matches_numpy_reference_with_state(kind, tmp_path):
    """Prefill 5 tokens then 2 decode steps against a float64 numpy decoder over the checkpoint's tensors.

    f32 weights and f32 inference vs float64: accumulated rounding is ~1e-6 relative per op; 1e-4 of the logit
    scale leaves two orders of margin and is far below any wiring error (a wrong RoPE or mask moves logits ~1e-1).
    The default qwen kinds are bigram models whose attention branch is small, so they are checked with
    full-strength branches (bigram=False) as well as by the genai test. This is the full-attention-only pattern
    (`--layer-types 1`); hybrid targets are checked in test_hybrid.py.
    """
    s = default_spec(kind).with_(bigram=False)
    if kind != "llama":
        s = s.with_(layers=2, full_attention_interval=1)
    out = synthesize(tmp_path, kind, s, seed=11, with_mtp=False, weight_format="f32")
    t = {k: v.astype(np.float64) for k, v in stored(out.ckpt).items()}
    ids = np.random.default_rng(0).integers(SPECIAL, s.vocab, 7)
    qwen = kind != "llama"
    xml = out.target / ("openvino_language_model.xml" if qwen else "openvino_model.xml")
    embed = t.get("model.language_model.embed_tokens.weight", np.zeros(0)).astype(np.float32)
    got = run_decoder(read(xml), ids, qwen, embed, split=5)
    want = reference_logits(t, s, ids, qwen)
    np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max(), rtol=0)


def test_ir_weights_are_the_checkpoint_values(qwen):
    t = stored(qwen.ckpt)
    req = ov.Core().compile_model(qwen.target / "openvino_text_embeddings_model.xml", "CPU", F32)
    ids = np.arange(qwen.spec.vocab, dtype=np.int64)[None]
    np.testing.assert_array_equal(req({"input": ids})["inputs_embeds"][0], t["model.language_model.embed_tokens.weight"])
    cfg = json.loads((qwen.ckpt / "config.json").read_text())["text_config"]
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == \
        (qwen.spec.hidden, qwen.spec.heads, qwen.spec.kv_heads)
    assert t["mtp.fc.weight"].shape == (qwen.spec.hidden, 2 * qwen.spec.hidden)
    np.testing.assert_array_equal(t["mtp.norm.weight"], t["model.language_model.norm.weight"])  # bigram head


def test_vision_parts_run(qwen):
    core, n = ov.Core(), 8  # 8 patches -> 2 merged tokens
    cfg = json.loads((qwen.target / "config.json").read_text())["vision_config"]
    pixels = cfg["in_channels"] * cfg["temporal_patch_size"] * cfg["patch_size"] ** 2
    x = core.compile_model(qwen.target / "openvino_vision_embeddings_model.xml", "CPU")(
        {"hidden_states": np.ones((n, pixels), np.float32)})["last_hidden_state"]
    pos = core.compile_model(qwen.target / "openvino_vision_embeddings_pos_model.xml", "CPU")(
        {"input": np.zeros((4, n), np.int64)})["last_hidden_state"]
    assert x.shape == (n, cfg["hidden_size"]) and pos.shape == (4, n, cfg["hidden_size"])
    head = cfg["hidden_size"] // cfg["num_heads"]
    merged = core.compile_model(qwen.target / "openvino_vision_embeddings_merger_model.xml", "CPU")(
        {"hidden_states": x, "attention_mask": np.zeros((1, n, n), np.float32),
         "rotary_pos_emb": np.zeros((n, head // 2), np.float32)})["last_hidden_state"]
    assert merged.shape == (n // 4, qwen.spec.hidden) and np.isfinite(merged).all()


def test_tokenizer_pair_round_trips_ascii(qwen):
    core = ov.Core()
    tok = core.compile_model(qwen.target / "openvino_tokenizer.xml", "CPU")
    detok = core.compile_model(qwen.target / "openvino_detokenizer.xml", "CPU")
    texts = ["Hello world", "a\nb", ""]
    enc = tok({"string_input": np.array(texts)})
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert mask.sum(1).tolist() == [len(t) for t in texts]
    assert (ids[mask > 0] >= SPECIAL).all() and (ids[mask > 0] < qwen.spec.vocab).all()
    rows = [np.concatenate([[1], r[m > 0], [2]]) for r, m in zip(ids, mask)]  # specials are skipped on decode
    width = max(len(r) for r in rows)
    padded = np.stack([np.pad(r, (0, width - len(r))) for r in rows]).astype(np.int64)
    assert list(detok({"Parameter_1": padded})["string_output"]) == texts
    everything = detok({"Parameter_1": np.arange(qwen.spec.vocab, dtype=np.int64)[None]})["string_output"][0]
    assert len(everything) == qwen.spec.vocab - SPECIAL and everything.isascii()


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "MANIFEST.sha256"}


def test_same_seed_same_bytes_in_one_process(tmp_path):
    for i in range(2):
        synthesize(tmp_path / str(i), "qwen35-moe", default_spec("qwen35-moe").with_(layers=1, full_attention_interval=1), seed=9,
                   weight_format="f16")
    assert digests(tmp_path / "0") == digests(tmp_path / "1")
    synthesize(tmp_path / "other", "qwen35-moe", default_spec("qwen35-moe").with_(layers=1, full_attention_interval=1), seed=10,
               weight_format="f16")
    assert digests(tmp_path / "other")["ckpt/model.safetensors"] != digests(tmp_path / "0")["ckpt/model.safetensors"]


def test_regenerated_fixtures_match_the_committed_manifest(tmp_path):
    manifest = dict(reversed(line.split("  ", 1)) for line in
                    (FIXTURE_DIR / "MANIFEST.sha256").read_text().splitlines())
    assert digests(FIXTURE_DIR) == manifest, "committed fixtures differ from their manifest"
    for name in FIXTURES:
        make_fixture(name, tmp_path)
    assert digests(tmp_path) == manifest
    assert sum(p.stat().st_size for p in FIXTURE_DIR.rglob("*") if p.is_file()) < 3_000_000
    for xml in FIXTURE_DIR.rglob("*.xml"):
        text = xml.read_text()
        assert str(ROOT) not in text and "/tmp" not in text


@pytest.mark.parametrize("args, message", [
    (["--heads", "3"], "heads 3 does not divide hidden 64"),
    (["--kv-heads", "3"], "kv heads 3 does not divide heads 4"),
    (["--kind", "llama", "--with-mtp"], "no MTP head"),
    (["--layer-types", "full,lin"], "layer types 'full,lin'"),
    (["--layer-types", "full,linear", "--layers", "3"], "expected 3 entries"),
    (["--layer-types", "0"], "full_attention_interval 0"),
    (["--kind", "llama", "--no-mtp", "--layer-types", "2"], "full-attention layers only"),
])
def test_impossible_sizes_fail_before_writing(tmp_path, args, message):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["synth", str(out), *args])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("args", [["--layers", "0"], ["--hidden", "-8"], ["--vocab", str(1 << 30)]])
def test_a_size_out_of_range_is_a_usage_error(tmp_path, args):
    """Exit 2, click's bad option value, as for every option (was exit 1)."""
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["synth", str(out), *args])
    assert result.exit_code == 2 and f"Invalid value for '{args[0]}'" in result.output, result.output
    assert not out.exists()


def test_int4_compresses_the_language_model_and_still_converts(tmp_path):
    spec = default_spec("qwen35").with_(layers=2, layer_types=(LINEAR, FULL))
    out = synthesize(tmp_path, "qwen35", spec, seed=4, with_mtp=False, weight_format="int4")
    model = read(out.target / "openvino_language_model.xml")
    u4 = [op for op in model.get_ops() if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.u4]
    assert len(u4) >= 2 * 13  # weights and zero points of q, k, v, o, in_proj_qkv/z/a/b, out_proj, 2 x gate, up, down
    assert "KV_CACHE_PRECISION" not in model.get_rt_info()["runtime_options"]
    contract.to_paged_attention(model)
    counts = Counter(op.get_type_name() for op in model.get_ops())
    assert counts["PagedAttentionExtension"] == counts["PagedGatedDeltaNet"] == counts["PagedCausalConv1D"] == 1


def test_cli_writes_a_model(tmp_path):
    result = CliRunner().invoke(main, ["synth", str(tmp_path / "m"), "--kind", "llama", "--layers", "1",
                                       "--hidden", "32", "--heads", "2", "--kv-heads", "1", "--weight-format", "f16"])
    assert result.exit_code == 0, result.output
    cfg = json.loads((tmp_path / "m" / "ckpt" / "config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["head_dim"]) == (1, 32, 16)


@pytest.mark.genai
@pytest.mark.extended  # the demo runs synth's qwen35 pair through genai; CI's extended tier runs this too
@pytest.mark.parametrize("kind", default_tier(["qwen35", "qwen35-moe"], keep={"qwen35"}))
def test_genai_greedy_equals_mtp_speculative_after_patch(kind, tmp_path):
    """`irsurgeon patch` a synthesized (hybrid) target from its own checkpoint; MTP decoding equals plain greedy for
    3 prompts x K = 1..4 and the bigram-style head's drafts are accepted."""
    from irsurgeon.flows.genai import run_equivalence

    out = synthesize(tmp_path, kind, seed=21)
    assert LINEAR in layer_types(out.spec)
    result = CliRunner().invoke(main, ["patch", str(out.target), "--checkpoint", str(out.ckpt)])
    assert result.exit_code == 0, result.output
    report = run_equivalence(out.target, prompts=3, nats=(1, 2, 3, 4), max_new_tokens=24, echo=lambda _: None)
    assert len(report.runs) == 12 and report.identical and all(r.tokens == 24 for r in report.runs)
    assert all(r.accepted > 0 for r in report.runs)  # a bigram head drafts what the bigram model emits
