"""Hostile input files and a judge for what a command does with them.

A Lab holds pristine copies of the demo checkpoint (single file and sharded), the demo target and a patched target.
A Case (hostile_forms.py) names an input file, a way to make it hostile and a command; `Lab.run` makes a fresh
copy, applies the form, runs the real CLI in a subprocess with a timeout and judges the outcome (`Outcome`):
success, or exit 1 with exactly one `Error:` line; no traceback, no "unexpected" fallback, no signal death, no hang,
no peak RSS above `RSS_LIMIT`, no byte of a linked-to file echoed, nothing changed outside the command's output.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.hostile_forms import CANARY, INPUTS, Case

ROOT = Path(__file__).resolve().parents[2]
DEMO_TARGET = ROOT / "fixtures" / "demo" / "target"
DEMO_CKPT = ROOT / "fixtures" / "demo" / "ckpt"
GEMMA4 = ROOT / "fixtures" / "gemma4"  # a text-only target and its gemma4_assistant checkpoint
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
    """(exit code or None when it hung, stdout, stderr, seconds, peak RSS bytes) of the CLI in a subprocess;
    a negative code is the signal that ended it (then the peak is the last one seen while it ran)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("r") as hwm:
        proc = subprocess.Popen([sys.executable, "-c", MEASURED, *args], env={**env(), "HOSTILE_HWM": hwm.name},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)
        seen = 0
        try:
            proc.wait(timeout=timeout or TIMEOUT)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            seen = _vm_hwm(proc.pid)
            proc.kill()
            proc.wait()
            code = None
        out.seek(0)
        err.seek(0)
        reported = hwm.read().strip()
        peak = int(reported) * 1024 if reported.isdigit() else seen
        return code, out.read(), err.read(), time.perf_counter() - start, peak


def _vm_hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return int(next(ln for ln in status if ln.startswith("VmHWM")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


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


class Lab:
    """Pristine inputs made once; every case runs on a fresh copy in its own folder."""

    def __init__(self, root: Path):
        self.root = root
        self.pristine = root / "pristine"
        self.pristine.mkdir(parents=True)
        shutil.copytree(DEMO_CKPT, self.pristine / "ckpt")
        shutil.copytree(DEMO_TARGET, self.pristine / "target")
        (self.pristine / "target" / "openvino_config.json").write_text("{}")
        _sharded(self.pristine / "sharded")
        shutil.copytree(DEMO_TARGET, self.pristine / "patched")
        (self.pristine / "prompts.txt").write_text("The capital of France is\n")
        from irsurgeon.patch import patch
        patch(self.pristine / "patched", self.pristine / "ckpt", echo=lambda _line: None)
        shutil.copytree(GEMMA4 / "assistant", self.pristine / "g4ckpt")
        shutil.copytree(GEMMA4 / "target", self.pristine / "g4target")
        shutil.copytree(GEMMA4 / "target", self.pristine / "g4patched")
        patch(self.pristine / "g4patched", self.pristine / "g4ckpt", echo=lambda _line: None)
        self.count = 0

    def fresh(self) -> Path:
        self.count += 1
        work = self.root / f"case{self.count}"
        shutil.copytree(self.pristine, work, symlinks=True)
        return work

    def run(self, case: Case) -> Outcome:
        rel, forms, _ = INPUTS[case.input]
        work = self.fresh()
        try:
            forms[case.form](work / rel)
            args, output = command_args(case.command, work, work / rel)
            before = snapshot(work)
            code, out, err, seconds, peak = run_cli(args)
            after = snapshot(work)
            allowed = output if code == 0 else None
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                             and not (allowed and (k == allowed or k.startswith(allowed + "/"))))
            return judge(str(case), code, out, err, seconds, peak, changed, case.command == "verify-prompts")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def command_args(command: str, work: Path, victim: Path) -> tuple[list[str], str | None]:
    """CLI arguments of a command reading `victim`, and the folder it may change when it succeeds."""
    ckpt = work / ("sharded" if "sharded" in victim.parts else "ckpt")
    target = work / ("patched" if "patched" in victim.parts else "target")
    g4 = work / ("g4patched" if "g4patched" in victim.parts else "g4target")
    table = {
        "show": (["show", target], None),
        "show-xml": (["show", victim], None),
        "build-mtp": (["build-mtp", ckpt, "-o", work / "out"], "out"),
        "build-mtp-auto": (["build-mtp", ckpt, "-o", work / "out", "--weight-format", "auto", "--target", target],
                           "out"),
        "annotate": (["annotate", target], target.name),
        "patch": (["patch", target, "--checkpoint", ckpt], target.name),
        "verify": (["verify", target], None),
        "verify-prompts": (["verify", work / "patched", "--prompts", victim], None),
        "verify-genai": (["verify", target, "--genai", "--prompts", "1", "--sweep", "1", "--max-new-tokens", "4"],
                         None),
        "g4-show": (["show", g4], None),
        "g4-show-xml": (["show", victim], None),
        "g4-build-mtp": (["build-mtp", work / "g4ckpt", "-o", work / "out"], "out"),
        "g4-patch": (["patch", g4, "--checkpoint", work / "g4ckpt"], g4.name),
        "g4-verify": (["verify", g4], None),
    }
    args, output = table[command]
    return [str(a) for a in args], output


def _sharded(directory: Path) -> None:
    """The demo checkpoint in two shards with an index: the mtp.* tensors alone in the second."""
    from helpers.demo import sharded_demo_ckpt

    sharded_demo_ckpt(directory)


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
