"""Where `irsurgeon patch` spends its time at a published model's real sizes, against the I/O floor of the same run.

    python benchmarks/profile_patch.py [--work DIR] [--config CONFIG.json] [--formats f16,int4] [--rounds 2] [--keep]
                                       [--baseline DIR]

Inputs: scripts/make_real_size.py's sparse real-shaped checkpoint and target (default config: the 27B dense
Qwen3.6 one, tests/data/reference/real-configs/qwen3.6-27B-awq-community, quantization_config dropped: hidden 5120,
64 layers, a 424.7 M-parameter head, 0.85 GB bf16). Rounds of these, alternating, on a machine shared with other
work (load average printed with every row); a floor comes between two rounds and after the last:
    patch <fmt>   the real CLI on a fresh sparse copy of the target (twice the head shard's bytes written and
                  dropped untimed, then page cache dropped for the checkpoint and the copy: the patch's I/O gets
                  page cache just freed, as the floor's does) in a child process, through lab/trace_phases.py: wall and CPU time per phase
                  (read, convert, compress, graph, save, smoke test, annotation, commit, verify, ...; the openvino,
                  fsync and sha256 calls inside each listed under it), child wall, peak RSS, bytes read from the
                  device
    floor         the head's shard read once from the device (posix_fadvise DONTNEED first, as bench_build.evict
                  does), then as many bytes as the first format's patch wrote for the head written and fsynced
                  into page cache just freed (floor_run: the fastest this machine writes): read + write is the
                  I/O no patch can avoid
    nncf alone    (int4) the f16 head built by the house (irsurgeon.draft.build), then one plain nncf.compress_weights of
                  that ov.Model with the house's int4 parameters, timed alone, in its own child process
Prints the per-phase table (median over rounds), f16 wall / the run's fastest floor (target <= 2x), and int4 wall and the house's
compress phase against nncf alone. --baseline DIR: each patch is also run by the irsurgeon package in DIR (e.g.
`git archive main irsurgeon | tar -x -C DIR`), before or after the current one in turn: its columns are `base`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "scripts"), str(ROOT)]  # bench_build lives in either folder
from bench_build import evict, run_child  # noqa: E402  (sys.path set above)

CONFIG = ROOT / "tests" / "data" / "reference" / "real-configs" / "qwen3.6-27B-awq-community" / "config.json"
HEAD_SHARD = "mtp.safetensors"
CHUNK = 1 << 24
PHASES = ["startup", "inspect", "identity", "load", "read", "convert", "graph", "compress", "save", "smoke test",
          "annotation", "commit", "verify", "import", "other"]


def make_inputs(work: Path, config: Path) -> tuple[Path, Path]:
    """The checkpoint and target (kept in --work between runs: make_real_size.py skips what is there)."""
    made = run_child([str(ROOT / "scripts" / "make_real_size.py"), str(work), "--config", str(config)])
    if made["rc"]:
        raise SystemExit(f"make_real_size.py failed:\n{made['out']}")
    print(made["out"].strip())
    return work / "ckpt", work / "target"


def cold(*dirs: Path) -> None:
    """Dirty pages written back, then every file's pages dropped from the page cache (subfolders' too)."""
    os.sync()
    for d in dirs:
        for sub in [d, *(p for p in d.rglob("*") if p.is_dir() and not p.is_symlink())]:
            evict(sub)


def patch_run(ckpt: Path, target: Path, work: Path, fmt: str, root: Path | None = None) -> dict:
    """One traced `irsurgeon patch` of a fresh sparse copy of the target (root: the irsurgeon checkout to run)."""
    out = work / f"patched-{fmt}"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(target), str(out)], check=True)
    warm = work / "warm.bin"  # untimed, as floor_run's first write: as much page cache to free as the patch's I/O
    write_once(warm, 2 * (ckpt / HEAD_SHARD).stat().st_size)
    cold(ckpt, out, work)
    warm.unlink()
    trace = work / f"trace-{fmt}{'-base' if root else ''}.json"
    load = os.getloadavg()[0]
    os.environ["IRSURGEON_ROOT"] = str(root or ROOT)  # run_child passes the environment on
    r = run_child([str(ROOT / "lab" / "trace_phases.py"), str(trace), "patch", str(out), "--checkpoint", str(ckpt),
                   "--weight-format", fmt])
    if r["rc"]:
        raise SystemExit(f"patch --weight-format {fmt} failed:\n{r['out']}")
    t = json.loads(trace.read_text())
    head = sum((out / f"openvino_mtp_model.{x}").stat().st_size for x in ("bin", "xml"))
    return {"wall": r["wall"], "rss": r["rss"], "load": load, "phases": t["phases"], "cpu": t["cpu"],
            "background": t.get("background", {}), "calls": t["calls"],
            "read_bytes": t["io"]["read_bytes"], "head_bytes": head}


def floor_run(ckpt: Path, work: Path, write_bytes: int, say: str) -> dict:
    """The head's shard read cold, then write_bytes written and fsynced (the same buffer, 16 MiB at a time).

    The floor is the fastest this machine does that I/O: the bytes are read and written into page cache just freed
    (the checkpoint's pages are dropped first, and the write is made once untimed, its pages dropped, then timed).
    On this virtual machine pages the guest has not used for a while cost the write more than the device does: 849
    MB written and fsynced into pages just freed took 0.45-0.52 s (CPU 0.18), into others 1.2-2.4 s (CPU 0.9-2.1),
    three pairs of one run (2026-12-03); the patch's reads suffer alike (its read phase 0.9-1.1 s wall, 1.6-1.8 s
    CPU, against 0.25 s and 0.45 s with page cache just freed, four rounds each, 2026-12-03). So patch_run frees as
    much page cache before each patch, and every patch is held against the run's fastest floor."""
    shard = ckpt / HEAD_SHARD
    sink = work / "floor.bin"
    write_once(sink, write_bytes)  # untimed: leaves write_bytes of page cache to free
    cold(ckpt, work)
    buf = memoryview(bytearray(CHUNK))
    load = os.getloadavg()[0]
    t, cpu = time.perf_counter(), time.process_time()
    fd, got = os.open(shard, os.O_RDONLY), 0
    try:
        while n := os.preadv(fd, [buf], got):
            got += n
    finally:
        os.close(fd)
    read_s, read_cpu = time.perf_counter() - t, time.process_time() - cpu
    write_s, write_cpu = write_once(sink, write_bytes)
    sink.unlink()
    os.sync()
    print(f"{say}: read {got / 1e6:.1f} MB {read_s:.2f} s (CPU {read_cpu:.2f}) + write+fsync {write_bytes / 1e6:.1f} "
          f"MB {write_s:.2f} s (CPU {write_cpu:.2f}) = {read_s + write_s:.2f} s; load {load:.1f}")
    return {"read": read_s, "write": write_s, "floor": read_s + write_s, "load": load}


def write_once(sink: Path, size: int) -> tuple[float, float]:
    """size bytes written to sink (truncated first) 16 MiB at a time and fsynced: (wall, CPU) seconds."""
    buf = memoryview(bytearray(CHUNK))
    t, cpu = time.perf_counter(), time.process_time()
    fd, left = os.open(sink, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), size
    try:
        while left:
            left -= os.write(fd, buf[:min(left, CHUNK)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t, time.process_time() - cpu


def nncf_alone(ckpt: Path) -> dict:
    """Child mode: the house's f16 head, then nncf.compress_weights of it with the house's int4 parameters."""
    from irsurgeon.draft.build import build_model
    from irsurgeon.draft.load import load_with
    from irsurgeon.quant.compress import DEFAULTS as p
    from irsurgeon.quant.compress import marked_consumers, routing_scope
    from irsurgeon.families import registry

    builder = registry.for_checkpoint(ckpt).recipe()
    t = time.perf_counter()
    cfg, weights, opened = load_with(builder, ckpt, warn=lambda _: None)
    model = build_model(cfg, weights, "f16", lambda _: None, family=builder)
    opened.close()
    built = time.perf_counter() - t
    t = time.perf_counter()
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode
    imported = time.perf_counter() - t
    scope = routing_scope(nncf, model, marked_consumers(model))
    t = time.perf_counter()
    # the arguments irsurgeon.quant.compress.compress_model passes for int4 (without its bounded-memory blocks)
    nncf.compress_weights(model, mode=nncf.CompressWeightsMode(p.mode), ignored_scope=scope, group_size=p.group_size,
                          ratio=p.ratio, all_layers=p.all_layers, backup_mode=nncf.BackupMode(p.backup),
                          advanced_parameters=AdvancedCompressionParameters(
                              group_size_fallback_mode=GroupSizeFallbackMode.ADJUST,
                              min_adjusted_group_size=p.min_group_size))
    return {"build": built, "import": imported, "compress": time.perf_counter() - t}


def nncf_run(ckpt: Path) -> dict:
    cold(ckpt)
    load = os.getloadavg()[0]
    r = run_child([__file__, "--nncf-alone", str(ckpt)])
    if r["rc"]:
        raise SystemExit(f"nncf alone failed:\n{r['out']}")
    return {**json.loads(r["out"].strip().splitlines()[-1]), "rss": r["rss"], "load": load}


def med(values) -> float:
    return statistics.median(values) if values else float("nan")


def phase_table(runs: dict[str, list[dict]], clock: str = "phases") -> None:
    """Median seconds per phase (its sub-phases included, each also on its own indented line), per column; clock
    "phases": wall, "cpu": the process's CPU time."""
    cols = list(runs)
    labels = list(dict.fromkeys(k for r in runs.values() for x in r for k in x[clock]))
    tops = list(dict.fromkeys(k.split(": ")[0] for k in labels))
    order = [p for p in PHASES if p in tops] + [p for p in tops if p not in PHASES]
    title = "wall s" if clock == "phases" else "CPU s"
    print(f"{'phase (' + title + ', median of rounds)':30}" + "".join(f"{c:>11}" for c in cols))
    for phase in order:
        print(f"{phase:30}" + "".join(f"{med([phase_total(x, phase, clock) for x in runs[c]]):11.2f}" for c in cols))
        for label in sorted(x for x in labels if x.startswith(phase + ": ")):
            cells = [med([x[clock].get(label, 0.0) for x in runs[c]]) for c in cols]
            print(f"{'  ' + label.split(': ', 1)[1]:30}" + "".join(f"{v:11.2f}" for v in cells))
    if clock != "phases":
        return
    for label in sorted({k for r in runs.values() for x in r for k in x["background"]}):
        cells = [med([x["background"].get(label, 0.0) for x in runs[c]]) for c in cols]
        print(f"{'(in a thread) ' + label:30}" + "".join(f"{v:11.2f}" for v in cells))
    rows = [("sum of phases", lambda x: sum(x["phases"].values()), "{:11.2f}"),
            ("child wall (process)", lambda x: x["wall"], "{:11.2f}"),
            ("peak RSS MB", lambda x: x["rss"] / 1e6, "{:11.0f}"),
            ("read from the device MB", lambda x: x["read_bytes"] / 1e6, "{:11.1f}")]
    for name, get, form in rows:
        print(f"{name:30}" + "".join(form.format(med([get(x) for x in runs[c]])) for c in cols))


def rounds(ckpt: Path, target: Path, work: Path, fmts: list[str], n: int, baseline: Path | None):
    """n rounds of: the floor, then per format the patch and the baseline's (ABBA: each goes first in every other
    round, so what the floor's write leaves behind falls on both alike), then nncf alone (int4)."""
    variants = [("", None)] + ([(" base", baseline)] if baseline else [])
    runs, floors, alone = {f + v: [] for f in fmts for v, _ in variants}, [], []
    head = None
    for k in range(n):
        if head is not None:
            floors.append(floor_run(ckpt, work, head, f"round {k + 1} floor"))
        for fmt in fmts:
            for mark, root in variants[::-1] if k % 2 else variants:
                r = patch_run(ckpt, target, work, fmt, root)
                runs[fmt + mark].append(r)
                head = head or r["head_bytes"]  # the first format's head: what the floor writes
                print(f"round {k + 1} patch {fmt}{mark}: wall {r['wall']:.2f} s, peak RSS {r['rss'] / 1e6:.0f} MB, "
                      f"read {r['read_bytes'] / 1e6:.1f} MB, head written {r['head_bytes'] / 1e6:.1f} MB; "
                      f"load {r['load']:.1f}")
        if "int4" in fmts:
            alone.append(nncf_run(ckpt))
            a = alone[-1]
            print(f"round {k + 1} nncf alone: compress_weights {a['compress']:.2f} s (import {a['import']:.2f} s, "
                  f"house f16 build {a['build']:.2f} s), peak RSS {a['rss'] / 1e6:.0f} MB; load {a['load']:.1f}")
    floors.append(floor_run(ckpt, work, head, "last floor"))
    return runs, floors, alone


def phase_total(run: dict, phase: str, clock: str = "phases") -> float:
    return sum(v for k, v in run[clock].items() if k == phase or k.startswith(phase + ": "))


def ratios(runs: dict[str, list[dict]], floors: list[dict], alone: list[dict]) -> None:
    for key in [k for k in runs if k.startswith("f16")]:
        fast = min(floors, key=lambda f: f["floor"])  # the fastest floor of the run: the strictest
        per = [r["wall"] / fast["floor"] for r in runs[key]]
        print(f"{key} patch wall / I/O floor: {med(per):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in per)}; "
              f"fastest floor {fast['floor']:.2f} s = read {fast['read']:.2f} + write {fast['write']:.2f}, median "
              f"{med([f['floor'] for f in floors]):.2f} s; target <= 2x)")
    for key in [k for k in runs if k.startswith("int4")] if alone else []:
        walls = [r["wall"] / a["compress"] for r, a in zip(runs[key], alone)]
        house = [phase_total(r, "compress") / a["compress"] for r, a in zip(runs[key], alone)]
        print(f"{key} patch wall / nncf.compress_weights alone: {med(walls):.2f}x; the house's compress phase / "
              f"nncf alone: {med(house):.2f}x (nncf alone {med([a['compress'] for a in alone]):.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="keeps the generated checkpoint and target between runs")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--formats", default="f16,int4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--baseline", type=Path, help="a directory holding another irsurgeon package to compare with")
    ap.add_argument("--nncf-alone", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.nncf_alone:
        return print(json.dumps(nncf_alone(a.nncf_alone)))
    work = a.work or Path(tempfile.mkdtemp(prefix="irsurgeon-profile-"))
    try:
        ckpt, target = make_inputs(work, a.config)
        fmts = a.formats.split(",")
        runs, floors, alone = rounds(ckpt, target, work, fmts, a.rounds, a.baseline)
        phase_table(runs)
        phase_table(runs, "cpu")
        ratios(runs, floors, alone)
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    finally:
        for fmt in a.formats.split(","):
            shutil.rmtree(work / f"patched-{fmt}", ignore_errors=True)
        if not a.keep and a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
