"""irsurgeon vs optimum-intel on the same weights: cost to produce the MTP head, and speed of the head.

    python benchmarks/bench_vs_optimum.py [--sizes tiny-dense,...] [--formats fp16,int4] [--work DIR] [--drop-caches]

1. A separate virtual environment holds the reference exporter (torch 2.13.0 CPU, transformers 5.2.0, optimum 2.3.0,
   optimum-intel 2.2.0 --no-deps, requests, pillow, huggingface-hub<1.22, openvino/nncf pinned like the project,
   matplotlib for the plot); it is created once under --venv and reused, never mixed with the project's environment.
2. Per size, a seeded full Qwen3.5 checkpoint is made there by scripts/make_hf_checkpoint.py (cached under --work):
   the non-MTP part as small as the exporter allows, the head at the size's real shape.
3. Per size and weight format, each in a fresh child process, with the checkpoint and target evicted from the page
   cache first (posix_fadvise; --drop-caches also drops the whole cache, then library reads count too):
     optimum    `optimum-cli export openvino --model CKPT --task image-text-to-text --weight-format ...` (full export)
     irsurgeon  `irsurgeon patch TARGET --checkpoint CKPT`, TARGET = that export without openvino_mtp_model.* and
                without the language model's hidden_states_decoder_layers rt_info
   wall time, peak RSS (os.wait4), read_bytes (from the device) and rchar (through read()) from /proc/self/io at
   exit. Then benchmarks/bench_head_latency.py times both heads side by side (prefill, then median one-token step).
4. One table with the ratios irsurgeon/optimum; JSON and a PNG of cost against checkpoint size next to each other
   in --out; a linear fit of the cost, applied to real model sizes, as a paper estimate.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REFERENCE = Path(os.environ.get("IRSURGEON_REFERENCE") or HERE.parent / "tests" / "data" / "reference")
CACHE = Path.home() / ".cache" / "irsurgeon-bench"
VENV_PACKAGES = (["torch==2.13.0", "transformers==5.2.0", "optimum==2.3.0", "requests>=2.33,<3",
                  "huggingface-hub>=1.3,<1.22", "pillow", "openvino==2026.4.1", "openvino-tokenizers==2026.4.1.0",
                  "nncf==3.4.0", "matplotlib"], ["--no-deps", "optimum-intel==2.2.0"])
TINY = dict(hidden=64, heads=4, kv_heads=2, head_dim=64)
H1024 = dict(hidden=1024, heads=8, kv_heads=2, head_dim=256)
H2048 = dict(hidden=2048, heads=16, kv_heads=2, head_dim=256)
SIZES = {  # name: (template checkpoint, make_hf_checkpoint sizes)
    "tiny-dense": ("qwen35-dense", dict(TINY, intermediate=128)),
    "tiny-moe": ("qwen35-moe", dict(TINY, experts=4, top_k=2, expert_size=32)),
    "h1024-dense": ("qwen35-dense", dict(H1024, intermediate=3584)),
    "h1024-moe": ("qwen35-moe", dict(H1024, experts=32, top_k=8, expert_size=256)),
    "h2048-dense": ("qwen35-dense", dict(H2048, intermediate=6144)),
    "h2048-moe": ("qwen35-moe", dict(H2048, experts=64, top_k=8, expert_size=512)),
}
EXPORT_ARGS = {"fp16": ["--weight-format", "fp16"],
               "int4": ["--weight-format", "int4", "--group-size", "32", "--group-size-fallback", "ignore"]}
MTP_FILES = ("openvino_mtp_model.xml", "openvino_mtp_model.bin")

# Runs `module:function` in the child and leaves its /proc/self/io behind at exit (gone once the child is reaped).
CHILD = """
import atexit, importlib, sys
io_path, entry = sys.argv[1], sys.argv[2]
def dump():
    with open("/proc/self/io") as io, open(io_path, "w") as dst:
        dst.write(io.read())
atexit.register(dump)
module, function = entry.split(":")
sys.argv = [module] + sys.argv[3:]
sys.exit(getattr(importlib.import_module(module), function)())
"""


def run(cmd: list, check: str | None = None) -> dict:
    """Run cmd; wall seconds, peak RSS bytes of that child (and its reaped children), exit code, output."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if check and rc != 0:
        raise SystemExit(f"{check} failed (exit {rc}):\n{out[-4000:]}")
    return {"wall_s": time.perf_counter() - start, "rss": usage.ru_maxrss * 1024, "rc": rc, "out": out}


def ensure_venv(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not (venv / "bin" / "optimum-cli").is_file():
        print(f"creating the reference exporter environment in {venv} (once)")
        run([sys.executable, "-m", "venv", venv], check="python -m venv")
        for packages in VENV_PACKAGES:
            run([python, "-m", "pip", "install", "-q", *packages], check=f"pip install {' '.join(packages)}")
    return python


def ensure_checkpoint(python: Path, size: str, root: Path) -> Path:
    ckpt = root / "ckpt"
    if not (ckpt / "model.safetensors").is_file():
        template, sizes = SIZES[size]
        args = [f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]
        t = time.perf_counter()
        run([python, HERE.parent / "scripts" / "make_hf_checkpoint.py", REFERENCE / "ckpt" / template, ckpt, *args],
            check=f"make_hf_checkpoint {size}")
        print(f"{size}: checkpoint written in {time.perf_counter() - t:.0f} s")
    return ckpt


def checkpoint_sizes(ckpt: Path) -> dict:
    """Bytes and parameter counts of the whole checkpoint and of its mtp.* tensors, from the safetensors header."""
    from irsurgeon.weights.safetensors_io import SafetensorsFile

    st = SafetensorsFile(ckpt / "model.safetensors")
    try:
        infos = list(st.tensors.values())
    finally:
        st.close()
    head = [i for i in infos if i.name.startswith("mtp.")]
    count = lambda group: sum(int(__import__("math").prod(i.shape)) for i in group)
    return {"ckpt_bytes": sum(i.end - i.begin for i in infos), "head_bytes": sum(i.end - i.begin for i in head),
            "params": count(infos), "head_params": count(head)}


def evict(*roots: Path, drop_all: bool = False) -> None:
    """Write back, then drop these files' pages from the page cache (all pages with drop_all, when permitted)."""
    os.sync()
    if drop_all:
        try:
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
        except OSError as e:
            print(f"--drop-caches: {e.strerror}; evicting the benchmark's files only")
    for root in roots:
        for f in (p for p in root.rglob("*") if p.is_file()):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def measured(python: Path, entry: str, args: list, io_file: Path, what: str) -> dict:
    result = run([python, "-c", CHILD, io_file, entry, *args], check=what)
    io = dict(line.split(":", 1) for line in io_file.read_text().splitlines())
    result.update(read_bytes=int(io["read_bytes"]), rchar=int(io["rchar"]))
    del result["out"], result["rc"]
    return result


def prepare_target(export: Path, target: Path) -> Path:
    """The export as if optimum had no MTP support: no head files, no hidden-state annotation."""
    from irsurgeon.ir import xmlsafe
    from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS

    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(export, target, ignore=shutil.ignore_patterns(*MTP_FILES))
    lm = target / "openvino_language_model.xml"
    lm.write_bytes(xmlsafe.remove_value(lm.read_bytes(), (HIDDEN_STATES_LAYERS,), source=str(lm)))
    return target


def bench_format(python: Path, ckpt: Path, root: Path, fmt: str, a: argparse.Namespace) -> dict:
    """Both tools' cost for one weight format, then both heads' draft-step latency."""
    export, target = root / f"optimum-{fmt}", root / f"irsurgeon-{fmt}"
    shutil.rmtree(export, ignore_errors=True)
    evict(ckpt, drop_all=a.drop_caches)
    optimum = measured(python, "optimum.commands.optimum_cli:main",
                       ["export", "openvino", "--model", ckpt, "--task", "image-text-to-text", *EXPORT_ARGS[fmt], export],
                       root / f"optimum-{fmt}.io", f"optimum-cli export ({fmt})")
    prepare_target(export, target)
    evict(ckpt, target, drop_all=a.drop_caches)
    irsurgeon = measured(Path(sys.executable), "irsurgeon.cli:main", ["patch", target, "--checkpoint", ckpt],
                         root / f"irsurgeon-{fmt}.io", f"irsurgeon patch ({fmt})")
    latency = run([sys.executable, HERE / "bench_head_latency.py", f"optimum={export / MTP_FILES[0]}",
                   f"irsurgeon={target / MTP_FILES[0]}", "--prefill", a.prefill, "--steps", a.steps,
                   "--rounds", a.rounds], check=f"latency ({fmt})")
    heads = json.loads(latency["out"].strip().splitlines()[-1])
    for tool, cost in (("optimum", optimum), ("irsurgeon", irsurgeon)):
        cost["head_bin_bytes"] = (root / f"{tool}-{fmt}" / MTP_FILES[1]).stat().st_size
        cost["latency"] = heads[tool]
    return {"optimum": optimum, "irsurgeon": irsurgeon}


def import_baselines(python: Path) -> dict:
    """Peak RSS and wall of importing each stack alone (after one warm-up run each, so the libraries are cached)."""
    stacks = {"optimum": (python, "import torch, transformers, optimum.intel, openvino, nncf"),
              "irsurgeon": (Path(sys.executable), "import openvino, nncf, irsurgeon.cli")}
    out = {}
    for tool, (py, code) in stacks.items():
        run([py, "-c", code], check=f"import {tool} stack")
        r = run([py, "-c", code], check=f"import {tool} stack")
        out[tool] = {"wall_s": r["wall_s"], "rss": r["rss"]}
    return out


COLUMNS = (("wall s", lambda r: r["wall_s"], "{:.1f}"), ("peak RSS MB", lambda r: r["rss"] / 1e6, "{:.0f}"),
           ("read_bytes MB", lambda r: r["read_bytes"] / 1e6, "{:.1f}"), ("rchar MB", lambda r: r["rchar"] / 1e6, "{:.0f}"),
           ("step ms f32", lambda r: r["latency"]["f32"]["ms"], "{:.2f}"),
           ("step ms default", lambda r: r["latency"]["default"]["ms"], "{:.2f}"))
CELL = 22


def table(results: dict) -> str:
    """One line per size and format: each metric as optimum, irsurgeon and the ratio irsurgeon/optimum."""
    top = f"{'':31}" + "".join(f"{c[0]:>{CELL}}" for c in COLUMNS)
    head = f"{'size':12}{'params':>8}{'head':>7} {'fmt':4}" + f"{'opt':>8}{'irs':>8}{'ratio':>6}" * len(COLUMNS)
    lines = [top, head, "-" * len(head)]
    for size, entry in results.items():
        for fmt, pair in entry["formats"].items():
            cells = []
            for _, get, form in COLUMNS:
                o, i = get(pair["optimum"]), get(pair["irsurgeon"])
                cells.append(f"{form.format(o):>8}{form.format(i):>8}{(f'{i / o:.3f}' if o else 'n/a'):>6}")
            lines.append(f"{size:12}{entry['params'] / 1e6:7.1f}M{entry['head_params'] / 1e6:6.1f}M {fmt:4}"
                         + "".join(cells))
    return "\n".join(lines)


# Public sizes (model cards' parameter counts) and head shapes from the released configs; bf16 = 2 bytes/parameter.
REAL = {"Qwen3.5-27B": dict(kind="dense", params=27e9, hidden=5120, heads=24, kv_heads=4, head_dim=256, intermediate=17408),
        "Qwen3.6-35B-A3B": dict(kind="moe", params=35e9, hidden=2048, heads=16, kv_heads=2, head_dim=256, experts=256,
                                expert_size=512)}


def head_params(hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int = 0, experts: int = 0,
                expert_size: int = 0, **_) -> int:
    """Parameters of the one-layer MTP head: fc, 5 norms, gated attention (+ q/k norms), MLP or experts + shared."""
    H = hidden
    attn = 2 * heads * head_dim * H + 2 * kv_heads * head_dim * H + H * heads * head_dim + 2 * head_dim
    mlp = 3 * intermediate * H if not experts else (3 * experts * expert_size * H + experts * H + 3 * expert_size * H + H)
    return 2 * H * H + 5 * H + attn + mlp


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares y = a + b x."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def estimate(results: dict, fmt: str = "fp16") -> dict:
    """Cost = a + b * bytes, fitted over the measured sizes of the same family (optimum against the checkpoint,
    irsurgeon against the head: the bytes each must read), then applied to the real models. A paper estimate."""
    out = {}
    for name, spec in REAL.items():
        rows = [(e, e["formats"][fmt]) for size, e in results.items()
                if size.endswith(spec["kind"]) and fmt in e["formats"]]
        if not rows:
            continue
        sizes = {"optimum": 2 * spec["params"], "irsurgeon": 2 * head_params(**spec)}
        out[name] = {"ckpt_bytes": sizes["optimum"], "head_bytes": sizes["irsurgeon"]}
        for tool, x_key in (("optimum", "ckpt_bytes"), ("irsurgeon", "head_bytes")):
            for metric in ("rss", "read_bytes"):  # wall time is left out: on a shared machine it does not fit a line
                a, b = fit([e[x_key] for e, _ in rows], [p[tool][metric] for _, p in rows])
                out[name][f"{tool}_{metric}"] = a + b * sizes[tool]
    return out


def print_estimate(est: dict) -> None:
    print("\npaper estimate (linear fit of the same family's fp16 rows, bf16 checkpoints; not measured):")
    for name, e in est.items():
        print(f"  {name}: checkpoint {e['ckpt_bytes'] / 1e9:.0f} GB, head {e['head_bytes'] / 1e9:.2f} GB | "
              f"optimum reads {e['optimum_read_bytes'] / 1e9:.1f} GB, peak RSS {e['optimum_rss'] / 1e9:.1f} GB | "
              f"irsurgeon reads {e['irsurgeon_read_bytes'] / 1e9:.2f} GB, peak RSS {e['irsurgeon_rss'] / 1e9:.2f} GB")


def plot(json_path: Path, png: Path) -> None:
    """Wall time, peak RSS and bytes read against checkpoint size, both tools (runs where matplotlib is)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = json.loads(json_path.read_text())["results"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    metrics = (("wall_s", "wall time (s)", 1), ("rss", "peak RSS (MB)", 1e6), ("read_bytes", "bytes read (MB)", 1e6))
    for ax, (key, label, unit) in zip(axes, metrics):
        for tool, color in (("optimum", "tab:red"), ("irsurgeon", "tab:blue")):
            for kind, marker in (("dense", "o"), ("moe", "s")):
                for fmt, style in (("fp16", "-"), ("int4", "--")):
                    pts = sorted((e["ckpt_bytes"] / 1e6, e["formats"][fmt][tool][key] / unit)
                                 for name, e in results.items() if name.endswith(kind) and fmt in e["formats"])
                    if pts:
                        ax.plot(*zip(*pts), style, marker=marker, color=color, label=f"{tool} {kind} {fmt}")
        ax.set(xscale="log", yscale="log", xlabel="checkpoint size (MB, bf16)", ylabel=label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Cost to produce the MTP head: optimum-intel full export vs irsurgeon patch")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def bench_size(python: Path, size: str, a: argparse.Namespace) -> dict:
    root = a.work / size
    ckpt = ensure_checkpoint(python, size, root)
    entry = {**checkpoint_sizes(ckpt), "shape": SIZES[size][1], "formats": {}}
    for fmt in a.formats:
        t = time.perf_counter()
        entry["formats"][fmt] = bench_format(python, ckpt, root, fmt, a)
        print(f"{size} {fmt}: measured in {time.perf_counter() - t:.0f} s")
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, from {', '.join(SIZES)}")
    ap.add_argument("--formats", default="fp16,int4")
    ap.add_argument("--work", type=Path, default=CACHE / "work", help="checkpoints and exports (kept for reuse)")
    ap.add_argument("--venv", type=Path, default=CACHE / "venv", help="the reference exporter's environment")
    ap.add_argument("--out", type=Path, default=Path("out/bench_vs_optimum"), help="JSON and PNG go here")
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--drop-caches", action="store_true", help="drop the whole page cache before each measured run")
    ap.add_argument("--table", type=Path, metavar="JSON", help="print the table and estimate of an earlier run")
    ap.add_argument("--plot", nargs=2, type=Path, metavar=("JSON", "PNG"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.plot:
        return plot(*a.plot)
    if a.table:
        results = json.loads(a.table.read_text())["results"]
        return print(table(results)) or print_estimate(estimate(results))
    a.formats = a.formats.split(",")
    unknown = [s for s in a.sizes.split(",") if s not in SIZES] + [f for f in a.formats if f not in EXPORT_ARGS]
    if unknown:
        raise SystemExit(f"unknown size or format: {', '.join(unknown)}")
    python = ensure_venv(a.venv)
    a.out.mkdir(parents=True, exist_ok=True)
    report = {"prefill": a.prefill, "steps": a.steps, "rounds": a.rounds, "imports": import_baselines(python),
              "results": {}}
    for size in a.sizes.split(","):
        report["results"][size] = bench_size(python, size, a)
        report["estimate"] = estimate(report["results"])
        (a.out / "bench_vs_optimum.json").write_text(json.dumps(report, indent=1))
    print(table(report["results"]))
    print("imports alone: " + ", ".join(f"{t} {v['rss'] / 1e6:.0f} MB / {v['wall_s']:.1f} s"
                                        for t, v in report["imports"].items()))
    print_estimate(report["estimate"])
    run([python, __file__, "--plot", a.out / "bench_vs_optimum.json", a.out / "bench_vs_optimum.png"], check="plot")
    print(f"wrote {a.out / 'bench_vs_optimum.json'} and {a.out / 'bench_vs_optimum.png'}")


if __name__ == "__main__":
    main()
