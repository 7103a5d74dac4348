"""Patch benchmark: `irsurgeon patch` of a target whose checkpoint has a realistically sized head beside big shards.

    python benchmarks/bench_patch.py [--work DIR] [--formats f16,int4] [--big-shard-gib 4] [--keep] [--moe]
                                  [--no-latency]

The checkpoint is benchmarks/bench_build.py's (bf16, hidden 2048, 16/2 heads of 256, intermediate 6144; the `mtp.*`
shard, ~147 MB, beside a non-MTP shard of --big-shard-gib GiB, both in the index). The target is `irsurgeon synth`'s
qwen35 layout with the same attention geometry (one decoder layer, vocabulary 2048, f16), and the checkpoint's
config.json carries that vocabulary so that patch's checkpoint-belongs-to-target check passes. Per weight format, a
fresh copy of the target is patched in a child process (checkpoint evicted from the page cache first): wall time,
peak RSS (also above the import baseline `python -c "import openvino, nncf"`, per byte of the head's shard), bytes
read from the device, the written head; then the draft-step latency of the head
patched into the reference export (tests/data/reference) against optimum-intel's head
(prefill 128 tokens, then the median of 50 one-token steps).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_build import CHILD, SPEC, baselines, evict, mb, run_child

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 2048


def make_inputs(work: Path, big_gib: float, moe: bool = False) -> tuple[Path, Path]:
    """The checkpoint (bench_build.py's, dense or --moe) and a synthesized target of the same attention geometry
    (for --moe a qwen35-moe target: patch compares hidden size, heads, head_dim and model_type, not the experts)."""
    ckpt, synth = work / ("ckpt-moe" if moe else "ckpt"), work / ("synth-moe" if moe else "synth")
    if not (ckpt / "model.safetensors.index.json").is_file():
        made = run_child([str(Path(__file__).parent / "bench_build.py"), "--write-checkpoint", str(ckpt),
                          "--big-shard-gib", str(big_gib)] + (["--moe"] if moe else []))
        if made["rc"]:
            raise SystemExit(f"writing the checkpoint failed:\n{made['out']}")
    cfg = json.loads((ckpt / "config.json").read_text())  # also for a checkpoint bench_build.py left behind
    if cfg.get("text_config", cfg)["vocab_size"] != VOCAB:
        cfg.get("text_config", cfg)["vocab_size"] = VOCAB
        (ckpt / "config.json").write_text(json.dumps(cfg, indent=1))
    if not (synth / "target").is_dir():
        made = run_child(["-m", "irsurgeon.cli", "synth", str(synth), "--kind", "qwen35-moe" if moe else "qwen35",
                          "--layers", "1",
                          "--layer-types", "1", "--hidden", str(SPEC["hidden"]), "--heads", str(SPEC["heads"]),
                          "--kv-heads", str(SPEC["kv_heads"]), "--head-dim", str(SPEC["head_dim"]), "--vocab", str(VOCAB),
                          "--with-mtp", "--weight-format", "f16"])
        if made["rc"]:
            raise SystemExit(f"synthesizing the target failed:\n{made['out']}")
    return ckpt, synth / "target"


def patch(ckpt: Path, target: Path, out: Path, fmt: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(target, out)
    evict(ckpt)
    io_file = out.parent / f"{out.name}.io"
    r = run_child(["-c", CHILD, str(io_file), "patch", str(out), "--checkpoint", str(ckpt), "--weight-format", fmt])
    if r["rc"]:
        raise SystemExit(f"patch --weight-format {fmt} failed:\n{r['out']}")
    io = dict(line.split(":", 1) for line in io_file.read_text().splitlines())
    r.update(read_bytes=int(io["read_bytes"]), bin=(out / "openvino_mtp_model.bin").stat().st_size)
    return r


def draft_step_latency(reference: Path, work: Path) -> None:
    """The irsurgeon head patched into optimum's dense-fp16 export vs optimum's own head, same weights."""
    export = reference / "export" / "dense-fp16"
    if not export.is_dir():
        print(f"draft-step latency: skipped, no reference export at {export}")
        return
    from irsurgeon.families.qwen35_mtp.strip import strip_mtp

    shutil.rmtree(work / "latency-target", ignore_errors=True)
    target = strip_mtp(export, work / "latency-target")
    made = run_child(["-m", "irsurgeon.cli", "patch", str(target), "--checkpoint",
                      str(reference / "ckpt" / "qwen35-dense"), "--weight-format", "f16"])
    if made["rc"]:
        raise SystemExit(f"patching the reference export failed:\n{made['out']}")
    ours, theirs = step_ms([target / "openvino_mtp_model.xml", export / "openvino_mtp_model.xml"])
    print(f"draft step (tiny reference head, f32 inference, median of 50 after a 128-token prefill, best of 5 "
          f"interleaved rounds, load {os.getloadavg()[0]:.1f}): irsurgeon {ours:.3f} ms, optimum-intel "
          f"{theirs:.3f} ms, ratio {ours / theirs:.2f}")


def step_ms(xmls: list[Path], prefill: int = 128, steps: int = 50, rounds: int = 5) -> list[float]:
    """Per head: the best over interleaved rounds of the median one-token step after a prefill (a shared machine
    slows whichever head runs at a bad moment; interleaving spreads that evenly)."""
    import numpy as np
    import openvino as ov

    core = ov.Core()
    models = [core.read_model(x) for x in xmls]
    H = models[0].input("hidden_states").get_partial_shape()[2].get_length()
    reqs = [core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request() for m in models]
    rng = np.random.default_rng(0)

    def feed(t0, n):
        return {"hidden_states": rng.standard_normal((1, n, H)).astype(np.float32),
                "inputs_embeds": rng.standard_normal((1, n, H)).astype(np.float32),
                "attention_mask": np.ones((1, t0 + n), np.int64),
                "position_ids": np.arange(t0, t0 + n, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}
    best = [float("inf")] * len(reqs)
    for _ in range(rounds):
        for k, req in enumerate(reqs):
            req.reset_state()
            req.infer(feed(0, prefill))
            times = []
            for i in range(steps):
                f = feed(prefill + i, 1)
                t = time.perf_counter()
                req.infer(f)
                times.append(time.perf_counter() - t)
            best[k] = min(best[k], float(np.median(times)) * 1e3)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path)
    ap.add_argument("--formats", default="f16,int4")
    ap.add_argument("--big-shard-gib", type=float, default=4.0)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--moe", action="store_true", help="the Qwen3.6-35B-A3B-sized MoE head of bench_build.py --moe")
    ap.add_argument("--no-latency", action="store_true", help="skip the draft-step latency comparison")
    ap.add_argument("--reference", type=Path,
                    default=Path(os.environ.get("IRSURGEON_REFERENCE") or ROOT / "tests" / "data" / "reference"))
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="irsurgeon-bench-patch-"))
    try:
        ckpt, target = make_inputs(work, a.big_shard_gib, a.moe)
        mtp = (ckpt / "model-00002-of-00002.safetensors").stat().st_size
        big = (ckpt / "model-00001-of-00002.safetensors").stat().st_size
        print(f"checkpoint shards: mtp {mb(mtp).strip()} MB, non-MTP {mb(big).strip()} MB; target {target}")
        base = baselines()
        print(f"{'format':8}{'wall s':>8}{'peak RSS MB':>13}{'RSS/mtp shard':>15}{'(RSS-base)/mtp':>16}{'read MB':>10}"
              f"{'read/mtp shard':>16}{'head .bin MB':>14}{'load':>6}")
        for fmt in a.formats.split(","):
            load = os.getloadavg()[0]
            r = patch(ckpt, target, work / f"patched-{fmt}", fmt)
            print(f"{fmt:8}{r['wall']:8.1f}{mb(r['rss']):>13}{r['rss'] / mtp:15.2f}{(r['rss'] - base) / mtp:16.2f}"
                  f"{mb(r['read_bytes']):>10}{r['read_bytes'] / mtp:16.2f}{mb(r['bin']):>14}{load:6.1f}")
        if not a.no_latency:
            draft_step_latency(a.reference, work)
    finally:
        if not a.keep and a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
