"""Hostile input files and a judge for what a command does with them.

A Lab holds, for every registered family (families.registry), pristine copies of its bundled pair
(lab.families.FIXTURE_PAIRS) in a folder named by its key: ckpt/, sharded/ (the same tensors in two shards with
an index), target/ (with an openvino_config.json), patched/ (target/ patched with ckpt/ through the CLI) and
prompts.txt. A Case (hostile_forms.py) names a family, an input file of its folder, a way to make it hostile and a
command; `Lab.run` makes a fresh copy of the family's folder, applies the form, runs the real CLI in a process of
its own (lab.forkrun) with a timeout and judges the outcome (`Outcome`): success, or exit 1 with exactly one `Error:`
line; no traceback, no "unexpected" fallback, no signal death, no hang, no peak RSS above `RSS_LIMIT`, no byte of a
linked-to file echoed, nothing changed outside the command's output.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import forkrun
from lab.families import FIXTURE_PAIRS
from lab.hostile_forms import CANARY, INDEX, INPUTS, PROMPTS, SHARDS, Case, family_inputs, written
from irsurgeon.families import registry

ROOT = Path(__file__).resolve().parents[1]
DEMO_TARGET = ROOT / "fixtures" / "qwen3_5" / "target"  # the reader tests' own copies (test_bounds, _checkpoint)
DEMO_CKPT = ROOT / "fixtures" / "qwen3_5" / "ckpt"
CLI = "import sys; from irsurgeon.entry import run; sys.argv[0] = 'irsurgeon'; run()"  # the console script
TIMEOUT = 60.0
RSS_LIMIT = 2 << 30


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "IRSURGEON_DEBUG": ""}


# --- running and judging ------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: str
    code: int | None
    stderr: str
    seconds: float
    peak_rss: int
    problems: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.code == 1 and not self.problems


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> what it is, never reading a special or large file (hash for regular files under 64 MB)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        elif not p.is_file():
            out[rel] = f"special:{st.st_mode:o}"
        elif st.st_size > 64 << 20:
            out[rel] = f"size:{st.st_size}:{st.st_mtime_ns}"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# The child writes its own peak RSS (VmHWM) as it exits: the rusage of a child counts the parent's pages it started
# from (Linux records the pre-exec mm's high-water mark), so it cannot measure a small child of a large parent.
MEASURED = ("import atexit, os\n"
            "def _hwm(path=os.environ['HOSTILE_HWM']):\n"
            "    with open('/proc/self/status') as s, open(path, 'w') as f:\n"
            "        f.write(next(l for l in s if l.startswith('VmHWM')).split()[1])\n"
            "atexit.register(_hwm)\n") + CLI


def run_cli(args: list[str], timeout: float | None = None) -> tuple[int | None, str, str, float, int]:
    """(exit code or None when it hung, stdout, stderr, seconds, peak RSS bytes) of the CLI in a process of its own
    (lab.forkrun); a negative code is the signal that ended it (then the peak is the last one seen while it ran)."""
    with tempfile.NamedTemporaryFile("r") as hwm:
        ran = forkrun.run(MEASURED, args, {**env(), "HOSTILE_HWM": hwm.name}, timeout=timeout or TIMEOUT)
        reported = hwm.read().strip()
        peak = int(reported) * 1024 if reported.isdigit() else ran.hwm
        return ran.returncode, ran.stdout, ran.stderr, ran.seconds, peak


def judge(case: str, code: int | None, out: str, err: str, seconds: float, peak: int, changed: list[str],
          allow_usage_error: bool = False) -> Outcome:
    o = Outcome(case, code, err, seconds, peak)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code is None:
        o.problems.append(f"hung: no exit within {TIMEOUT:.0f} s")
    elif code < 0 or code > 128:
        o.problems.append(f"killed by signal {-code if code < 0 else code - 128} (exit {code})")
    elif code not in (0, 1) and not (allow_usage_error and code == 2):
        o.problems.append(f"exit {code}: {err.strip()[-200:]}")
    if "Traceback" in err or "Error: unexpected " in err:  # cli/__init__.py's fallback for a non-IRSurgeonError
        o.problems.append(f"traceback or unexpected error: {lines[-1] if lines else ''}")
    elif code == 1 and not (len(lines) == 1 and lines[0].startswith("Error: ")):
        o.problems.append(f"not one Error: line: {err.strip()[:300]!r}")
    elif code == 2 and allow_usage_error and not (lines and lines[-1].startswith("Error: ")):
        o.problems.append(f"usage error without an Error: line: {err.strip()[:300]!r}")
    if CANARY in err or CANARY in out:
        o.problems.append("echoed bytes of a linked-to file")
    if peak > RSS_LIMIT:
        o.problems.append(f"peak RSS {peak / 2**30:.1f} GiB")
    if changed:
        o.problems.append(f"changed outside its output: {changed[:4]}")
    return o


class Pristine:
    """Every family's pristine folder under `root` (make_family_folder), made on first use."""

    def __init__(self, root: Path):
        self.root = root

    def folder(self, key: str) -> Path:
        folder = self.root / key
        if not folder.exists():
            try:
                make_family_folder(registry.by_key(key), folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)  # never a half-made folder for the next case
                raise
        return folder


class Lab:
    """Pristine inputs made once per family (on first use); every case runs on a fresh copy of its family's folder."""

    def __init__(self, root: Path, pristine: Pristine | None = None):
        self.root = root
        self.pristine = pristine or Pristine(root / "pristine")  # one Pristine may serve several labs and benches
        self.count = 0

    def fresh(self, key: str) -> Path:
        """A new case folder holding a copy of the family's pristine folder (under its key); returns the case folder."""
        source = self.pristine.folder(key)
        self.count += 1
        work = self.root / f"case{self.count}"
        shutil.copytree(source, work / key, symlinks=True)
        return work

    def run(self, case: Case) -> Outcome:
        forms = INPUTS[(case.family, case.input)].forms
        work = self.fresh(case.family)
        try:
            victim = work / case.family / case.input
            forms[case.form](victim)
            args, output = command_args(case, work)
            before = snapshot(work)
            code, out, err, seconds, peak = run_cli(args)
            after = snapshot(work)
            allowed = output if code == 0 else None
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                             and not (allowed and (k == allowed or k.startswith(allowed + "/"))))
            return judge(str(case), code, out, err, seconds, peak, changed, case.command == "verify-prompts")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def command_args(case: Case, work: Path) -> tuple[list[str], str | None]:
    """CLI arguments of a case's command reading its input, and the folder (relative to `work`) it may change when
    it succeeds. The checkpoint is sharded/ for an input there, the directory patched/ for an input there."""
    base = work / case.family
    victim = base / case.input
    top = case.input.split("/", 1)[0]
    ckpt = base / ("sharded" if top == "sharded" else "ckpt")
    target = base / ("patched" if top == "patched" else "target")
    rel = lambda p: p.relative_to(work).as_posix()
    table = {
        "show": (["show", target], None),
        "show-xml": (["show", victim.with_suffix(".xml")], None),  # the IR itself (of a hostile .bin: its .xml)
        "build-mtp": (["build-mtp", ckpt, "-o", base / "out"], rel(base / "out")),
        "build-mtp-auto": (["build-mtp", ckpt, "-o", base / "out", "--weight-format", "auto", "--target", target],
                           rel(base / "out")),
        "annotate": (["annotate", target], rel(target)),
        "patch": (["patch", target, "--checkpoint", ckpt], rel(target)),
        "verify": (["verify", target], None),
        "verify-prompts": (["verify", base / "patched", "--prompts", victim], None),
        "verify-genai": (["verify", target, "--genai", "--prompts", "1", "--sweep", "1", "--max-new-tokens", "4"],
                         None),
    }
    args, output = table[case.command]
    return [str(a) for a in args], output


# --- a family's pristine folder -------------------------------------------------------------------------------------

def make_family_folder(family, folder: Path) -> Path:
    """ckpt/, sharded/, target/ (+ openvino_config.json), patched/ and prompts.txt of a family (see the module doc);
    every input hostile_forms derives for the family is checked to be there."""
    from click.testing import CliRunner

    from irsurgeon.cli import main
    from irsurgeon.ir.export import OPENVINO_CONFIG

    target, ckpt = FIXTURE_PAIRS[family.key]
    writable_copy(ckpt, folder / "ckpt")
    writable_copy(target, folder / "target")
    if not (folder / "target" / OPENVINO_CONFIG).exists():
        (folder / "target" / OPENVINO_CONFIG).write_text("{}")  # read by every patch (--weight-format auto)
    sharded_copy(folder / "ckpt", folder / "sharded", family.hub_prefix)
    shutil.copytree(folder / "target", folder / "patched")
    result = CliRunner().invoke(main, ["patch", str(folder / "patched"), "--checkpoint", str(folder / "ckpt")])
    assert result.exit_code == 0, f"{family.key}: patch of the bundled pair failed: {result.output[-2000:]}"
    (folder / PROMPTS).write_text("The capital of France is\n")
    missing = [i.path for i in family_inputs(family) if not os.path.lexists(folder / i.path)]
    assert not missing, f"{family.key}: the lab lacks inputs its layout names: {missing}"
    wrote = [n for n in family.layout.writes if os.path.lexists(folder / "patched" / n)]
    assert wrote == written(family, target), f"{family.key}: the patch wrote {wrote}, hostile_forms.written says " \
                                             f"{written(family, target)}"
    return folder


def writable_copy(src: Path, dest: Path) -> None:
    """A copy whose files and folders are writable whatever the checkout's modes."""
    shutil.copytree(src, dest)
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def sharded_copy(ckpt: Path, out: Path, prefix: str | None) -> Path:
    """ckpt's tensors (from all its .safetensors files) in two shards with an index, its other files beside them:
    the draft's tensors (`prefix*`; without a prefix, the second half by name) alone in the second shard."""
    from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

    out.mkdir(parents=True)
    for p in ckpt.iterdir():
        if p.is_file() and not p.name.endswith((".safetensors", ".index.json")):
            shutil.copy(p, out / p.name)
    tensors = {}
    for path in sorted(ckpt.glob("*.safetensors")):
        st = SafetensorsFile(path)
        tensors.update({n: (st.raw(n), st.tensors[n].dtype) for n in st.tensors})
        st.close()
    names = sorted(tensors)
    draft = [n for n in names if prefix and n.startswith(prefix)]
    if not draft or len(draft) == len(names):
        draft = names[len(names) // 2:]
    parts = {SHARDS[0]: [n for n in names if n not in draft], SHARDS[1]: draft}
    for shard, part in parts.items():
        write_safetensors(out / shard, {n: tensors[n][0] for n in part}, {n: tensors[n][1] for n in part})
    (out / INDEX).write_text(json.dumps({"weight_map": {n: shard for shard, part in parts.items() for n in part}}))
    return out


# --- a checkpoint truncated while a build reads it ------------------------------------------------------------------

def truncation_race(directory: Path, keep: float) -> Outcome:
    """build-mtp in a subprocess on a hidden-1024 bf16 checkpoint; once the build has the file open, it is truncated
    from here to `keep` of its size. With a memory-mapped reader this died of SIGBUS (exit -7)."""
    from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint

    ckpt = directory / "ckpt"
    write_checkpoint(ckpt, SynthSpec(hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=3072), seed=2)
    st = ckpt / "model.safetensors"
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", CLI, "build-mtp", str(ckpt), "-o", str(directory / "out")],
                                env=env(), stdout=subprocess.DEVNULL, stderr=err, text=True)
        wait_until_open(proc.pid, st)
        os.truncate(st, int(st.stat().st_size * keep))
        try:
            code = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        err.seek(0)
        text = err.read()
    changed = ["out"] if (directory / "out").exists() and code != 0 else []
    return judge(f"checkpoint truncated to {keep:.0%} during build-mtp", code, "", text,
                 time.perf_counter() - start, 0, changed)


def wait_until_open(pid: int, path: Path, timeout: float = TIMEOUT) -> None:
    target = str(path.resolve())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except OSError:  # an fd closed between listing and reading it
            pass
        time.sleep(0.002)
    raise AssertionError(f"process {pid} never opened {path}")
