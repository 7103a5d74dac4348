"""EAGLE-3 drafts, irsurgeon vs optimum-intel 2.2.0's export: the cost to produce one, its .bin, one draft step.

    python benchmarks/bench_eagle3.py [--sizes tiny,real] [--rounds 3] [--warmup 1] [--work DIR] [--keep]
        [--venv /tmp/eagle3-ref] [--step-rounds N] [--steps N] [--no-step]

Sizes, each one draft checkpoint and its target, the same for both tools:
    tiny  fixtures/eagle3: a draft of hidden 64 (vocabulary 256, draft vocabulary 192) and its 4-layer Llama target
    real  made under --work: the Llama-3.1-8B EAGLE-3 draft's shape (REAL_CONFIG: SpecForge's llama3-8B-eagle3 config,
          as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B spells it, dtype bf16): hidden 4096, 32 / 8 heads of 128,
          intermediate 14336, vocabulary 128256, draft vocabulary 32000; random bf16 (matrices N(0, 0.02^2), gains
          1 + 0.1 N(0, 1)), a seeded d2t / t2d; 425 M parameters, 850 MB. Its target: a Llama-3.1-8B text export of
          the real graph (32 layers, the same widths), zero f16 weights, its .bin made sparse (`fallocate
          --dig-holes`): patch reads the target's graph (width, vocabulary, tappable layers), never its weights,
          and genai's default taps of a 32-layer target are the real ones.
1. Cost, each command a fresh child process, alternating irsurgeon, optimum, irsurgeon, ... after --warmup untimed
   pairs (the libraries and the checkpoint then come from the page cache for both):
     irsurgeon  python -m irsurgeon patch COPY --checkpoint CKPT --weight-format f16  (COPY: a sparse copy of the
                target, made before the clock starts)
     optimum    optimum-cli export openvino --model CKPT --task text-generation-with-past --trust-remote-code
                --disable-convert-tokenizer --weight-format fp16 OUT   (the --venv's, offline; genai runs the draft
                with the target's tokenizer, and irsurgeon writes none)
   wall seconds around the child, user + system CPU seconds and the kernel's peak RSS of the largest process
   (/usr/bin/time -v); the previous output removed and the page cache written back (sync) before each run; the
   draft .bin bytes each writes.
2. The draft step of the last round's two IRs as openvino.genai 2026.4.1 loads them
   (eagle3_model_transforms.cpp): share_vocabulary (the draft's embedding data replaced by the target's table
   subgraph, cloned sharing its memory) and move_fc_from_draft_to_main (fc's consumers read the hidden_states
   Parameter, now H wide: the target computes fc). A round of one IR is a fresh process that compiles it alone (in
   one process the IR compiled second ran 10-30% faster, whichever it was, even the same IR twice) and runs two
   stateful rounds of the same feeds, the first untimed (kernels picked, weights repacked, the table rows the feeds
   read mapped in): reset, a CONTEXT (64) token first call, then --steps one-token calls (the KV state grows from 64),
   the latency being their median. Rounds alternate between the IRs, and so does which goes first, in two modes:
   default (the CPU plugin's defaults plus each IR's rt_info runtime_options) and f32 (INFERENCE_PRECISION_HINT f32).
   Both IRs get the same inputs; the largest difference of the last round's last logits is printed (the two compute
   one function).
Every ratio is irsurgeon / optimum, pair by pair; min / median / max over the rounds. --work is removed at the end
unless --keep.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lab.bench_runs import (Pair, arguments, cost, fixture_pair, run_irsurgeon, run_optimum, run_sizes,  # noqa: E402  (sys.path set above)
                            spread)

STEP = {"tiny": dict(rounds=9, steps=32), "real": dict(rounds=7, steps=16)}
CONTEXT = 64
MODES = {"default": {}, "f32": {"INFERENCE_PRECISION_HINT": "f32"}}
DRAFT_BIN = Path("eagle3_draft") / "openvino_model.bin"
REAL_CONFIG = {
    "architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 128000, "eos_token_id": 128001,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 2048, "model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 8,
    "num_hidden_layers": 1, "pad_token_id": 0, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 128256, "draft_vocab_size": 32000,
}
REAL_TARGET = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336, vocab=128256, layers=32,
                   partial_rotary_factor=1.0, rope_theta=500000.0, rms_norm_eps=1e-5, vlm=False)


# ---- the real-size pair ----

def write_real_checkpoint(ckpt: Path, seed: int = 0) -> None:
    """REAL_CONFIG and model.safetensors: every tensor the draft reads at its real shape (bf16), d2t, t2d."""
    from irsurgeon.families.eagle3 import model as eagle3
    from irsurgeon.weights.safetensors_io import f32_to_bf16, write_safetensors

    cfg = eagle3.parse_config(REAL_CONFIG)
    rng = np.random.default_rng(seed)
    tensors, dtypes = {}, {}
    for name, shape in eagle3.tensors(cfg).shapes().items():
        if name == eagle3.D2T:
            continue
        x = rng.standard_normal(shape, dtype=np.float32)
        x = x * np.float32(0.02) if len(shape) == 2 else 1 + np.float32(0.1) * x
        tensors[name], dtypes[name] = f32_to_bf16(x), "BF16"
        del x
    ids = np.sort(rng.choice(cfg.vocab_size, cfg.draft_vocab_size, replace=False))
    tensors["d2t"] = (ids - np.arange(cfg.draft_vocab_size)).astype(np.int64)
    t2d = np.zeros(cfg.vocab_size, bool)
    t2d[ids] = True
    tensors["t2d"] = t2d
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(REAL_CONFIG, indent=2) + "\n")
    write_safetensors(ckpt / "model.safetensors.part", tensors, dtypes)
    (ckpt / "model.safetensors.part").rename(ckpt / "model.safetensors")


def write_real_target(target: Path, layers: int = REAL_TARGET["layers"]) -> None:
    """openvino_model.xml/.bin of a Llama-3.1-8B-shaped text export (zero f16 weights, .bin sparse), config.json and
    generation_config.json: what patch reads. `layers` fewer than 32: the same widths, fewer decoder layers
    (bench_tune's real-size estimate times them)."""
    from unittest import mock

    sys.path.insert(0, str(ROOT / "scripts"))
    import irsurgeon.synth.checkpoint as ck
    from irsurgeon.ops.core import WeightFormat
    from irsurgeon.synth import configs
    from irsurgeon.synth import target as tg
    from irsurgeon.synth.registry import save, write_json
    from make_real_size import ShapeDraw, Zeros, ZeroWeights

    spec = ck.SynthSpec(**{**REAL_TARGET, "layers": layers})
    with mock.patch.object(ck, "Draw", ShapeDraw):  # shapes only: zero-stride views
        shapes = {n: t.shape for n, t in ck.lm_tensors(spec, np.random.default_rng(0), prefix="model.",
                                                         qwen=False).items()}
    target.mkdir(parents=True, exist_ok=True)
    save(tg.llama_model(spec, ZeroWeights(Zeros(shapes), WeightFormat.F16, zero_centred=False)),
         target / "openvino_model.xml")
    subprocess.run(["fallocate", "--dig-holes", str(target / "openvino_model.bin")], check=True)
    write_json(target / "config.json", configs.config_json("llama", spec, None, False))
    write_json(target / "generation_config.json", configs.generation_config())


def footprint(d: Path) -> str:
    files = [p for p in d.rglob("*") if p.is_file()]
    apparent = sum(p.stat().st_size for p in files)
    disk = sum(p.stat().st_blocks * 512 for p in files)
    return f"{d.name}: {apparent / 1e9:.2f} GB apparent, {disk / 1e9:.2f} GB on disk"


def prepare(size: str, work: Path) -> Pair:
    if size == "tiny":
        return fixture_pair("eagle3", size, work)
    made = work / size / "pair"
    t = time.perf_counter()
    if not (made / "ckpt" / "model.safetensors").is_file():
        write_real_checkpoint(made / "ckpt")
    if not (made / "target" / "config.json").is_file():
        write_real_target(made / "target")
    print(f"{size}: pair made in {time.perf_counter() - t:.0f} s; {footprint(made / 'ckpt')}; "
          f"{footprint(made / 'target')}", flush=True)
    return Pair(size, made / "target", made / "ckpt", work / size)


# ---- cost ----

def mb(n: float) -> str:
    return f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e3:.1f} KB"


def print_cost(size: str, rows: list[dict]) -> None:
    print(f"\n{size}: cost to produce the draft (f16 weights), {len(rows)} alternating rounds, loads "
          f"{[round(r['load'], 2) for r in rows]}; min / median / max")
    seconds, ratio = (lambda v: f"{v:.2f} s"), (lambda v: f"{v:.3f}")
    for key, label, fmt in (("wall", "wall", seconds), ("cpu", "user+sys", seconds), ("rss", "peak RSS", mb)):
        irs = [getattr(r["irsurgeon"], key) for r in rows]
        opt = [getattr(r["optimum"], key) for r in rows]
        print(f"  {label:>9}: irsurgeon {spread(irs, fmt)}; optimum {spread(opt, fmt)}; ratio "
              f"{spread([x / y for x, y in zip(irs, opt)], ratio)}")
    s, o = rows[-1]["irsurgeon"].bin_bytes, rows[-1]["optimum"].bin_bytes
    print(f"  draft .bin: irsurgeon {s:,} B, optimum {o:,} B (ratio {s / o:.3f}, optimum - irsurgeon {o - s:,} B)")


# ---- the draft step (in a child process) ----

class TargetTable:
    """The target's embedding table subgraph (a Constant, maybe behind decompression Converts), cloned for a draft
    as genai's share_vocabulary does: the Constant's buffer shared, so the target model is kept alive here."""

    def __init__(self, core, target_xml: Path):
        from irsurgeon.families.eagle3 import surgery

        self.target = core.read_model(str(target_xml))
        source, self.converts = surgery.embedding_gather(self.target).input_value(0).get_node(), []
        while source.get_type_name() == "Convert":  # an f16 table behind its decompression Convert
            self.converts.append(source.get_output_element_type(0))
            source = source.input_value(0).get_node()
        self.constant = source

    def clone(self):
        import openvino as ov

        out = ov.op.Constant(self.constant.get_tensor_view(), shared_memory=True).output(0)
        for element_type in reversed(self.converts):
            out = ov.opset13.convert(out, element_type).output(0)
        return out

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.constant.get_output_shape(0))


def genai_form(core, xml: Path, table: TargetTable):
    """The draft as genai 2026.4.1 runs it: the target's embedding table, fc moved out (hidden_states H wide)."""
    from irsurgeon.families.eagle3 import surgery

    model = core.read_model(str(xml))
    surgery.embedding_gather(model).input_value(0).get_node().output(0).replace(table.clone())
    fc = surgery.fc_matmul(model)
    hidden = fc.input_value(0)
    for target_input in list(fc.output(0).get_target_inputs()):
        target_input.replace_source_output(hidden)
    model.validate_nodes_and_infer_types()
    return model


def step_feeds(hidden: int, vocab: int, steps: int) -> list[dict]:
    rng, out, pos = np.random.default_rng(7), [], 0
    for s in [CONTEXT] + [1] * steps:
        out.append({"input_ids": rng.integers(0, vocab, (1, s), dtype=np.int64),
                    "position_ids": np.arange(pos, pos + s, dtype=np.int64)[None],
                    "attention_mask": np.ones((1, pos + s), np.int64),
                    "hidden_states": rng.standard_normal((1, s, hidden), dtype=np.float32),
                    "beam_idx": np.zeros(1, np.int32)})
        pos += s
    return out


def one_round(request, feeds: list[dict]) -> tuple[float, np.ndarray]:
    request.reset_state()
    request.infer(feeds[0])
    times = []
    for f in feeds[1:]:
        t = time.perf_counter()
        request.infer(f)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, request.get_tensor("logits").data.copy()


def step_child(argv: list[str]) -> None:
    """--step-child XML TARGET_XML MODE STEPS OUT.npy: one IR compiled alone, a warm-up round then a timed one; its
    median in one JSON line, the last call's logits to OUT.npy."""
    import openvino as ov

    xml, target_xml, mode, steps, out = Path(argv[0]), Path(argv[1]), argv[2], int(argv[3]), Path(argv[4])
    core = ov.Core()
    table = TargetTable(core, target_xml)
    compiled = core.compile_model(genai_form(core, xml, table), "CPU", MODES[mode])
    request = compiled.create_infer_request()
    vocab, hidden = table.shape
    feeds = step_feeds(hidden, vocab, steps)
    one_round(request, feeds)  # allocations, weight repacking, kernels, the table rows the feeds read mapped in
    ms, last = one_round(request, feeds)
    np.save(out, last)
    print(json.dumps({"ms": ms, "precision": [compiled.get_property(k).to_string() for k in
                                              ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION")]}))


def step_round(pair: Pair, name: str, xml: Path, mode: str, steps: int) -> dict:
    out = pair.work / f"step-{name}.npy"
    cmd = [sys.executable, __file__, "--step-child", xml, pair.target / "openvino_model.xml", mode, steps, out]
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode:
        raise SystemExit(f"draft step of {name} failed:\n{r.stderr[-3000:]}")
    return {**json.loads(r.stdout.strip().splitlines()[-1]), "logits": np.load(out)}


def step(pair: Pair, a) -> None:
    opts = dict(STEP[pair.size], **{k: v for k, v in (("rounds", a.step_rounds), ("steps", a.steps)) if v})
    irs = {"irsurgeon": pair.work / "irsurgeon" / "eagle3_draft" / "openvino_model.xml",
           "optimum": pair.work / "optimum" / "openvino_model.xml"}
    print(f"\n{pair.size}: one-token draft step after a {CONTEXT}-token first call, as genai loads the draft, each IR "
          f"alone in a fresh process; median of {opts['steps']} calls a round, {opts['rounds']} alternating rounds; "
          f"min / median / max", flush=True)
    ms = (lambda v: f"{v:.3f} ms")
    for mode in MODES:
        got, loads = {n: [] for n in irs}, []
        for i in range(opts["rounds"]):
            loads.append(round(os.getloadavg()[0], 2))
            for name in list(irs)[::1 if i % 2 == 0 else -1]:  # who goes first alternates too
                got[name].append(step_round(pair, name, irs[name], mode, opts["steps"]))
        s, o = ([g["ms"] for g in got[n]] for n in irs)
        diff = float(np.abs(got["irsurgeon"][-1]["logits"] - got["optimum"][-1]["logits"]).max())
        print(f"  {mode:>7} ({'/'.join(got['irsurgeon'][0]['precision'])} vs {'/'.join(got['optimum'][0]['precision'])}"
              f", loads {loads}): irsurgeon {spread(s, ms)}; optimum {spread(o, ms)}; ratio "
              f"{spread([x / y for x, y in zip(s, o)], lambda v: f'{v:.3f}')}; last logits differ by {diff:.3g}",
              flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--step-child"]:
        return step_child(sys.argv[2:])
    a = arguments(__doc__, Path("/tmp/irsurgeon-bench-eagle3"), Path("/tmp/eagle3-ref"),
                  "scripts/make_eagle3_reference.py", "one-token calls timed a round (default: 32 tiny, 16 real)",
                  "keep --work (the real pair: 0.85 GB + a sparse target)")

    def sized(pair: Pair) -> None:
        print_cost(pair.size, cost(pair, a, lambda p: run_irsurgeon(p, "f16", DRAFT_BIN),
                                   lambda p: run_optimum(p, a.venv, "fp16")))
        if not a.no_step:
            step(pair, a)

    run_sizes(a, prepare, sized)


if __name__ == "__main__":
    main()
