"""EAGLE-3 at the Llama-3.1-8B EAGLE-3 draft's size: irsurgeon's draft against optimum-intel 2.2.0's fp32 export of
the same seeded checkpoint, numerically (logits and the fed-back hidden state over stateful calls).

    python benchmarks/eagle3_real_size_parity.py [--work DIR] [--venv /tmp/eagle3-ref] [--seed 0] [--context 16]
        [--steps 4] [--keep] [--no-torch]

1. The checkpoint: bench_eagle3.py's real size (REAL_CONFIG, SafeAILab layout `LlamaForCausalLMEagle3`, `midlayer.*`,
   d2t / t2d; hidden 4096, 32 / 8 heads of 128, intermediate 14336, vocabulary 128256, draft vocabulary 32000; random
   bf16, --seed), written under --work unless there.
2. optimum: `optimum-cli export openvino --model CKPT --task text-generation-with-past --trust-remote-code
   --disable-convert-tokenizer --weight-format fp32 OUT` in the --venv (optimum-intel 2.2.0's environment,
   scripts/make_eagle3_reference.py), offline, unless OUT is there.
   irsurgeon: the family's recipe built at f32 in the child that runs it (`draft.load.load_with(eagle3.RECIPE, CKPT)`
   then `build_model(..., "f32", recipe=eagle3.RECIPE)`, as tests/families/eagle3/test_eagle3_optimum.py does; what
   `patch --weight-format f32` stages, without a real-size target).
3. Both IRs get what openvino.genai 2026.4.1 gives a draft at load (eagle3_model_transforms.cpp): share_vocabulary
   (the data of the embedding Gather replaced by one table: a seeded f32 [vocab, hidden] N(0, 0.02^2), written once
   under --work and shared by both; optimum's own random table and irsurgeon's one-row placeholder are both dropped)
   and transform_hidden_state (the MLP residual Add named `midlayer`, `eagle3.surgery.fed_back_add`, as an extra
   output: the hidden state genai feeds back). Each IR runs in its own child process (openvino CPU,
   INFERENCE_PRECISION_HINT f32, KV_CACHE_PRECISION f32), in two forms, the state reset before the first call only:
     exported  the IR as written: a --context token call then --steps one-token calls, every call fed the same seeded
               input_ids, positions, attention mask and hidden_states [1, S, 3*4096] N(0, 1).
     genai     fc moved out as genai's move_fc_from_draft_to_main does (fc's consumers read hidden_states, now 4096
               wide); the first call is fed fc(g) (g the exported form's first hidden_states, fc.weight from the
               checkpoint, in numpy), each later one-token call the IR's *own* fed-back hidden state of the previous
               call's last position, as genai drafts: errors carried through the loop show here.
4. Unless --no-torch, the same calls of both forms through optimum-intel 2.2.0's own PyTorch module of the draft
   (model_patcher.LlamaEagle3ForCausalLM, what its export traces, the same table copied in; in the --venv, f32, one
   DynamicCache a form): how far optimum's IR is from the function it was traced from gives the scale of f32
   op-order noise at this size.
Printed per form and call, for irsurgeon against optimum (then optimum and irsurgeon against the PyTorch module):
max |d| and max |d| / max |reference| of the logits and of the fed-back hidden state, ||d|| / ||reference||, top-1
agreement of the logits; and whether d2t is equal.
--work (the checkpoint 0.85 GB, optimum's export 3.8 GB, the table 2.1 GB) is removed at the end unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}  # the plugin's default KV cache is not f32
FEEDS = ("input_ids", "position_ids", "attention_mask", "hidden_states", "beam_idx")
FED_BACK = "last_hidden_state"  # genai's name for the output transform_hidden_state adds
FORMS = ("exported", "genai")
TABLE_STD = 0.02
HIDDEN_STD = 1.0


# ---- inputs (parent) ----

def write_table(path: Path, vocab: int, hidden: int, seed: int) -> None:
    """A seeded f32 [vocab, hidden] table, written in row blocks (never all of it in memory twice)."""
    rng = np.random.default_rng(seed + 1)
    part = path.with_suffix(".part.npy")
    out = np.lib.format.open_memmap(part, mode="w+", dtype=np.float32, shape=(vocab, hidden))
    for start in range(0, vocab, 8192):
        stop = min(vocab, start + 8192)
        out[start:stop] = np.float32(TABLE_STD) * rng.standard_normal((stop - start, hidden), dtype=np.float32)
    out.flush()
    del out
    part.rename(path)


def checkpoint_matrix(ckpt: Path, name: str) -> np.ndarray:
    from irsurgeon.weights.safetensors_io import SafetensorsFile

    f = SafetensorsFile(ckpt / "model.safetensors")
    try:
        return np.asarray(f.get(name), np.float32)
    finally:
        f.close()


def make_feeds(ckpt: Path, cfg: dict, context: int, steps: int, seed: int) -> dict[str, np.ndarray]:
    """The exported form's calls (c{i}_<input>) and the genai form's first fc(g) and per-call input_ids."""
    rng, pos, out = np.random.default_rng(seed + 2), 0, {}
    vocab, hidden = cfg["vocab_size"], cfg["hidden_size"]
    for c, s in enumerate([context] + [1] * steps):
        out.update({f"c{c}_input_ids": rng.integers(0, vocab, (1, s), dtype=np.int64),
                    f"c{c}_position_ids": np.arange(pos, pos + s, dtype=np.int64)[None],
                    f"c{c}_attention_mask": np.ones((1, pos + s), np.int64),
                    f"c{c}_hidden_states": np.float32(HIDDEN_STD) * rng.standard_normal((1, s, 3 * hidden),
                                                                                       dtype=np.float32),
                    f"c{c}_beam_idx": np.zeros(1, np.int32)})
        pos += s
    fc = checkpoint_matrix(ckpt, "fc.weight")  # [H, 3H]
    out["fc_g"] = (out["c0_hidden_states"].astype(np.float64) @ fc.T.astype(np.float64)).astype(np.float32)
    out["calls"] = np.asarray(1 + steps, np.int64)
    return out


def export_optimum(ckpt: Path, out: Path, venv: Path) -> str:
    if (out / "openvino_model.xml").is_file():
        return f"optimum: reused {out}"
    cmd = [str(venv / "bin" / "optimum-cli"), "export", "openvino", "--model", str(ckpt), "--task",
           "text-generation-with-past", "--trust-remote-code", "--disable-convert-tokenizer", "--weight-format",
           "fp32", str(out) + ".part"]
    shutil.rmtree(str(out) + ".part", ignore_errors=True)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **OFFLINE})
    if r.returncode:
        raise SystemExit(f"optimum-cli export failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    Path(str(out) + ".part").rename(out)
    return f"optimum: exported in {time.perf_counter() - t:.1f} s"


# ---- one IR (child) ----

def irsurgeon_model(ckpt: Path):
    from irsurgeon.draft.build import build_model
    from irsurgeon.draft.load import load_with
    from irsurgeon.families.eagle3 import model as eagle3

    cfg, weights, handle = load_with(eagle3.RECIPE, ckpt, warn=lambda _: None)
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE)
    finally:
        handle.close()


def prepared(name: str, ckpt: Path, optimum_xml: Path, table: np.ndarray, form: str):
    """The IR with genai's shared table, its fed-back output, and (genai form) fc moved out."""
    import openvino as ov

    from irsurgeon.families.eagle3 import surgery

    model = irsurgeon_model(ckpt) if name == "irsurgeon" else ov.Core().read_model(str(optimum_xml))
    data = surgery.embedding_gather(model).input_value(0).get_node()
    replaced = (data.get_type_name(), list(data.get_output_shape(0)))
    data.output(0).replace(ov.op.Constant(table, shared_memory=True).output(0))
    fed = surgery.fed_back_add(model)
    if form == "genai":
        fc = surgery.fc_matmul(model)
        hidden = fc.input_value(0)
        for target_input in list(fc.output(0).get_target_inputs()):
            target_input.replace_source_output(hidden)
    model.add_outputs([fed.output(0)])
    model.outputs[-1].get_tensor().set_names({FED_BACK})
    model.validate_nodes_and_infer_types()
    return model, replaced, fed.get_friendly_name()


def child(argv: list[str]) -> None:
    """--child NAME CKPT OPTIMUM_XML TABLE.npy FEEDS.npz OUT.npz: both forms' calls of one IR, to OUT.npz."""
    import openvino as ov

    name, ckpt, optimum_xml, table_path, feeds_path, out_path = argv[0], *map(Path, argv[1:])
    table = np.load(table_path, mmap_mode="c")  # copy-on-write: writable for openvino, pages shared
    with np.load(feeds_path) as z:
        feeds = dict(z)
    calls, result, info = int(feeds["calls"]), {}, {}
    for form in FORMS:
        t = time.perf_counter()
        model, replaced, fed = prepared(name, ckpt, optimum_xml, table, form)
        request = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
        info[form] = {"replaced": replaced, "fed_back": fed, "ready_s": round(time.perf_counter() - t, 1)}
        del model
        request.reset_state()
        previous = None
        for c in range(calls):
            feed = {k: feeds[f"c{c}_{k}"] for k in FEEDS}
            if form == "genai":
                feed["hidden_states"] = feeds["fc_g"] if c == 0 else previous[:, -1:, :]
            request.infer(feed)
            result[f"{form}_c{c}_logits"] = request.get_tensor("logits").data.copy()
            previous = request.get_tensor(FED_BACK).data.copy()
            result[f"{form}_c{c}_{FED_BACK}"] = previous
        if form == FORMS[0]:
            result["d2t"] = request.get_tensor("d2t").data.copy()
        del request
    np.savez(out_path, **result)
    info["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(info))


def torch_child(argv: list[str]) -> None:
    """--torch-child CKPT TABLE.npy FEEDS.npz OUT.npz, run by the venv's python: optimum-intel 2.2.0's own PyTorch
    module of the draft (model_patcher.LlamaEagle3ForCausalLM, what its export traces; as
    scripts/make_eagle3_reference.py loads it), the same table copied in, the same calls of both forms on one
    DynamicCache each (its forward skips fc when hidden_states is already H wide: the genai form); the fed-back
    hidden state is the midlayer's output (r2, before the final norm), taken with a forward hook."""
    import torch
    import transformers
    from transformers import AutoConfig, DynamicCache

    from optimum.exporters.openvino.model_patcher import LlamaEagle3ForCausalLM

    ckpt, table_path, feeds_path, out_path = map(Path, argv)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    with np.load(feeds_path) as z:
        feeds = dict(z)
    config = AutoConfig.from_pretrained(ckpt)
    config.tie_word_embeddings = False  # optimum's update_config_for_custom_draft_model
    model = LlamaEagle3ForCausalLM.from_pretrained(ckpt, config=config, dtype=torch.float32).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.from_numpy(np.load(table_path, mmap_mode="c")))
    fed = {}
    model.model.midlayer.register_forward_hook(lambda module, args, out: fed.update(r2=out.detach().numpy().copy()))
    calls, result = int(feeds["calls"]), {}
    for form in FORMS:
        cache, previous = DynamicCache(config=config), None
        for c in range(calls):
            hidden = feeds[f"c{c}_hidden_states"]
            if form == "genai":
                hidden = feeds["fc_g"] if c == 0 else previous[:, -1:, :]
            with torch.no_grad():
                r = model(input_ids=torch.from_numpy(feeds[f"c{c}_input_ids"]),
                          hidden_states=torch.from_numpy(np.ascontiguousarray(hidden)),
                          attention_mask=torch.from_numpy(feeds[f"c{c}_attention_mask"]),
                          position_ids=torch.from_numpy(feeds[f"c{c}_position_ids"]), past_key_values=cache,
                          use_cache=True)
            result[f"{form}_c{c}_logits"] = r.logits.numpy().copy()
            previous = result[f"{form}_c{c}_{FED_BACK}"] = fed["r2"]
        if form == FORMS[0]:
            result["d2t"] = r.d2t.numpy().copy()
    np.savez(out_path, **result)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


def run_child(name: str, work: Path, optimum_xml: Path, venv: Path) -> tuple[dict, dict]:
    out = work / f"{name}.npz"
    if name == "torch":
        cmd = [venv / "bin" / "python", __file__, "--torch-child", work / "ckpt", work / "table.npy",
               work / "feeds.npz", out]
    else:
        cmd = [sys.executable, __file__, "--child", name, work / "ckpt", optimum_xml, work / "table.npy",
               work / "feeds.npz", out]
    t = time.perf_counter()
    env = {**os.environ, **OFFLINE, "PYTHONPATH": "" if name == "torch" else str(ROOT)}
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{name}'s run failed:\n{r.stderr[-3000:]}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["wall_s"] = round(time.perf_counter() - t, 1)
    with np.load(out) as z:
        return info, dict(z)


# ---- comparison ----

def distance(ours: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    d = ours.astype(np.float64) - ref.astype(np.float64)
    return {"max": float(np.abs(d).max()), "rel": float(np.abs(d).max() / np.abs(ref).max()),
            "l2": float(np.linalg.norm(d) / np.linalg.norm(ref.astype(np.float64))), "ref": float(np.abs(ref).max())}


def report(ours: dict, ref: dict, names: tuple[str, str], context: int, steps: int) -> None:
    calls, (a_name, b_name) = [context] + [1] * steps, names
    print(f"\n==== {a_name} against {b_name}")
    for form in FORMS:
        print(f"{form} form, per call (tokens): max |d|, max |d| / max |{b_name}|, ||d|| / ||{b_name}||")
        worst = {"logits": [], FED_BACK: []}
        for c, s in enumerate(calls):
            parts = []
            for key in worst:
                a, b = ours[f"{form}_c{c}_{key}"], ref[f"{form}_c{c}_{key}"]
                assert a.shape == b.shape, (form, c, key, a.shape, b.shape)
                m = distance(a, b)
                worst[key].append(m)
                parts.append(f"{key} {m['max']:.3g}, {m['rel']:.3g}, {m['l2']:.3g} (max |{b_name}| {m['ref']:.3g})")
            top1 = ours[f"{form}_c{c}_logits"].argmax(-1) == ref[f"{form}_c{c}_logits"].argmax(-1)
            print(f"  call {c} ({s}): " + "; ".join(parts) + f"; top-1 equal {int(top1.sum())}/{top1.size}")
        for key, ms in worst.items():
            print(f"  worst over the calls, {key}: max |d| {max(m['max'] for m in ms):.3g}, relative "
                  f"{max(m['rel'] for m in ms):.3g}, ||d|| / ||{b_name}|| {max(m['l2'] for m in ms):.3g}")
    print(f"d2t equal: {np.array_equal(ours['d2t'], ref['d2t'])} ({ours['d2t'].dtype} vs {ref['d2t'].dtype}, "
          f"[{ref['d2t'].size}])")


def venv_versions(venv: Path) -> str:
    code = ("from importlib.metadata import version as v; print(', '.join(f'{p} {v(p)}' for p in "
            "('torch', 'transformers', 'optimum', 'optimum-intel', 'openvino')))")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True)
    return r.stdout.strip() or r.stderr.strip()[-200:]


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(ROOT))
        return child(sys.argv[2:])
    if sys.argv[1:2] == ["--torch-child"]:
        return torch_child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/irsurgeon-eagle3-parity"))
    ap.add_argument("--venv", type=Path, default=Path("/tmp/eagle3-ref"), help="optimum-intel 2.2.0's environment "
                    "(scripts/make_eagle3_reference.py says how it is made)")
    ap.add_argument("--seed", type=int, default=0, help="the checkpoint's (the table and feeds use seed + 1, + 2)")
    ap.add_argument("--context", type=int, default=16, help="tokens of the first call")
    ap.add_argument("--steps", type=int, default=4, help="one-token calls after it")
    ap.add_argument("--keep", action="store_true", help="keep --work (6.8 GB)")
    ap.add_argument("--no-torch", action="store_true", help="skip the replay through optimum's PyTorch module")
    a = ap.parse_args()
    if not (a.venv / "bin" / "optimum-cli").is_file():
        raise SystemExit(f"optimum-cli must be in {a.venv}/bin (scripts/make_eagle3_reference.py has the venv)")
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_eagle3 import REAL_CONFIG, write_real_checkpoint

    print(f"load {os.getloadavg()}, {os.cpu_count()} CPUs; openvino {version('openvino')} here; the venv: "
          f"{venv_versions(a.venv)}", flush=True)
    work, ckpt = a.work, a.work / "ckpt"
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        if not (ckpt / "model.safetensors").is_file():
            write_real_checkpoint(ckpt, seed=a.seed)
        cfg = json.loads((ckpt / "config.json").read_text())
        if cfg != REAL_CONFIG:
            raise SystemExit(f"{ckpt}/config.json is not bench_eagle3.REAL_CONFIG: remove {work}")
        if not (work / "table.npy").is_file():
            write_table(work / "table.npy", cfg["vocab_size"], cfg["hidden_size"], a.seed)
        np.savez(work / "feeds.npz", **make_feeds(ckpt, cfg, a.context, a.steps, a.seed))
        print(f"checkpoint, table and feeds in {time.perf_counter() - t:.0f} s (seed {a.seed})", flush=True)
        print(export_optimum(ckpt, work / "optimum", a.venv), flush=True)
        optimum_xml = work / "optimum" / "openvino_model.xml"
        runs = {}
        for name in ("irsurgeon", "optimum") + (() if a.no_torch else ("torch",)):
            info, runs[name] = run_child(name, work, optimum_xml, a.venv)
            print(f"{name}: {json.dumps(info)}", flush=True)
        report(runs["irsurgeon"], runs["optimum"], ("irsurgeon", "optimum"), a.context, a.steps)
        if "torch" in runs:  # the scale of f32 op-order noise: optimum's IR against the module it was traced from
            report(runs["optimum"], runs["torch"], ("optimum", "torch"), a.context, a.steps)
            report(runs["irsurgeon"], runs["torch"], ("irsurgeon", "torch"), a.context, a.steps)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nload {os.getloadavg()}")


if __name__ == "__main__":
    main()
