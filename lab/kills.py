"""The kill lab: `irsurgeon patch` stopped just before each numbered filesystem write it makes in a target.

`patch` runs in a subprocess under an audit hook (sys.addaudithook, KILLER) that numbers every filesystem write
inside the target directory (open for writing, mkdir, link, chmod, rename/replace, unlink, rmdir, rmtree) and
delivers SIGKILL or SIGINT to itself just before write number N. The product carries no test hook: the numbering
comes from Python's own audit events, so a new write in the flow is a new kill point automatically. KillLab.judge
holds the rules of the aftermath (as before / completely patched / an interrupted commit that `verify` reports and
the next run rolls back). tests/test_reliability.py runs it on every family's bundled pair;
benchmarks/bench_reliability.py sweeps it and times kills from outside.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lab import forkrun
from lab.demo import DEMO_CKPT, DEMO_TARGET
from lab.dirsnap import digest as snapshot

ROOT = Path(__file__).resolve().parents[1]
STAGE_DIR = ".irsurgeon-staging"

# Runs the CLI with an audit hook that numbers writes inside $KILL_TARGET and signals itself before write $KILL_AT
# (0: only number them); with $KILL_PAUSE set it instead creates $KILL_PAUSE.here and waits for $KILL_PAUSE to go.
KILLER = r'''
import os, signal, sys, time
TARGET = os.path.realpath(os.environ["KILL_TARGET"])
AT = int(os.environ.get("KILL_AT", "0"))
SIG = int(os.environ.get("KILL_SIGNAL", "9"))
PAUSE = os.environ.get("KILL_PAUSE")
WRITES = {"os.rename", "os.link", "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "shutil.rmtree",
          "os.truncate", "os.symlink"}
count = 0

def inside(p):
    try:
        p = os.path.realpath(os.fsdecode(p))
    except (TypeError, ValueError):
        return False
    return p == TARGET or p.startswith(TARGET + os.sep)

def at_fd(path, dir_fd):
    """Writes made relative to a directory descriptor (dir_fd=): resolve them through /proc."""
    if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(os.fsdecode(path)):
        return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
    return path

# Where each event's (path, dir_fd) pairs sit in its audit arguments.
FD_ARGS = {"os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),),
      "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "shutil.rmtree": ((0, 1),), "os.symlink": ((1, 2),)}

def writing(event, args):
    if event == "open":
        path, mode, flags = args
        if mode is not None:
            return any(c in mode for c in "wax+") and [path]
        return isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and [path]
    if event in FD_ARGS and all(len(args) > fd for _, fd in FD_ARGS[event]):
        return [at_fd(args[p], args[fd]) for p, fd in FD_ARGS[event]]
    return event in WRITES and [a for a in args if isinstance(a, (str, bytes, os.PathLike))]

def hook(event, args):
    global count
    paths = writing(event, args)
    if not paths or not any(inside(p) for p in paths):
        return
    count += 1
    os.write(2, f"@write {count} {event} {os.path.basename(os.fsdecode(paths[-1]))}\n".encode())
    if count != AT:
        return
    if PAUSE:
        open(PAUSE + ".here", "w").close()
        while os.path.exists(PAUSE):
            time.sleep(0.02)
        return
    os.kill(os.getpid(), SIG)

sys.addaudithook(hook)
from irsurgeon.cli import main
sys.argv[0] = "irsurgeon"
main()
'''


CLI = "import sys; from irsurgeon.entry import run; sys.argv[0] = 'irsurgeon'; run()"  # the console script


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child run: this checkout's irsurgeon first on the path, whatever is installed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_cli(*args: str, timeout: float = 300) -> forkrun.Ran:
    """The CLI in a process of its own (lab.forkrun), as subprocess.run(capture_output=True, text=True) gives it."""
    return forkrun.completed(CLI, args, child_env(), timeout=timeout)


def patch_args(target: Path, *extra: str, ckpt: Path = DEMO_CKPT) -> list[str]:
    return ["patch", str(target), "--checkpoint", str(ckpt), *extra]


def run_killer(script: Path, target: Path, at: int, sig: int = signal.SIGKILL, extra: tuple[str, ...] = (),
               pause: Path | None = None, wait: bool = True, ckpt: Path = DEMO_CKPT):
    env = child_env(KILL_TARGET=str(target), KILL_AT=str(at), KILL_SIGNAL=str(int(sig)))
    if pause is not None:
        env["KILL_PAUSE"] = str(pause)
    args = patch_args(target, *extra, ckpt=ckpt)
    if not wait:  # a Popen the caller talks to
        return subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return forkrun.completed(script.read_text(), args, env, timeout=300, argv0=str(script))


def write_points(stderr: str) -> list[str]:
    return [line.split(" ", 2)[2] for line in stderr.splitlines() if line.startswith("@write ")]


@dataclass
class Sweep:
    """Figures of a kill-point sweep; `problems` lists every kill whose aftermath broke a rule."""
    kills: int = 0
    intact: int = 0  # byte-identical to before (leftovers aside)
    completed: int = 0  # byte-identical to a finished patch
    interrupted_commits: int = 0  # a journal the next run rolled back
    leftovers_reported: int = 0
    tracebacks: int = 0
    problems: list[str] = field(default_factory=list)


def files_only(state: dict[str, str]) -> dict[str, str]:
    """A snapshot without the staging folder: what a reader of the directory sees."""
    return {k: v for k, v in state.items() if not k.startswith(STAGE_DIR) and k != "<dirs>"}


class KillLab:
    """A pristine copy of a family's bundled target, the snapshot of its patched form, and the numbered write
    points of its patch (the demo pair by default)."""

    def __init__(self, root: Path, source: Path = DEMO_TARGET, ckpt: Path = DEMO_CKPT):
        self.root, self.source, self.ckpt = root, source, ckpt
        root.mkdir(parents=True, exist_ok=True)
        self.script = root / "killer.py"
        self.script.write_text(KILLER)
        self.before = snapshot(source)
        probe = self.fresh("probe")
        done = run_killer(self.script, probe, at=0, ckpt=ckpt)
        if done.returncode != 0:
            raise RuntimeError(f"patch of {probe} failed without a kill: {done.stderr[-500:]}")
        self.points = write_points(done.stderr)
        self.after = snapshot(probe)
        self._n = 0

    def fresh(self, name: str) -> Path:
        target = self.root / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.source, target)
        return target

    def kill(self, at: int, sig: int, sweep: Sweep, extra: tuple[str, ...] = ()) -> None:
        """Kill a patch run before write `at`, judge the aftermath, run patch again, judge the result."""
        self._n += 1
        target = self.fresh(f"k{self._n}")
        where = f"{signal.Signals(sig).name} before write {at} ({self.points[at - 1]})"
        proc = run_killer(self.script, target, at, sig, extra, ckpt=self.ckpt)
        sweep.kills += 1
        expected_rc = -signal.SIGKILL if sig == signal.SIGKILL else 130
        if proc.returncode not in (expected_rc, 0):
            sweep.problems.append(f"{where}: exit {proc.returncode}: {proc.stderr[-300:]}")
        if "Traceback" in proc.stderr:
            sweep.tracebacks += 1
            sweep.problems.append(f"{where}: traceback: {proc.stderr.strip().splitlines()[-1]}")
        self.judge(target, where, sig, sweep)

    def judge(self, target: Path, where: str, sig: int, sweep: Sweep) -> None:
        leftover = (target / STAGE_DIR).exists()
        half_done = (target / STAGE_DIR / "journal.json").exists() and not (target / STAGE_DIR / "committed").exists()
        core = files_only(snapshot(target))
        if core == files_only(self.before):
            sweep.intact += 1
        elif core == files_only(self.after):
            sweep.completed += 1
        elif half_done:
            sweep.interrupted_commits += 1
            check = run_cli("verify", str(target))
            if check.returncode == 0:
                sweep.problems.append(f"{where}: verify passes a directory holding an interrupted commit")
        else:
            sweep.problems.append(f"{where}: directory is neither as before nor patched and has no journal")
        if sig == signal.SIGINT and leftover:
            sweep.problems.append(f"{where}: Ctrl-C left {STAGE_DIR} behind")
        again = run_cli(*patch_args(target, ckpt=self.ckpt))
        if "Traceback" in again.stderr:
            sweep.tracebacks += 1
            sweep.problems.append(f"{where}: traceback in the next run: {again.stderr.strip().splitlines()[-1]}")
        if again.returncode != 0:
            sweep.problems.append(f"{where}: the next run failed: {again.stderr.strip()[-300:]}")
        elif snapshot(target) != self.after:
            sweep.problems.append(f"{where}: the next run did not leave a completely patched directory")
        if leftover:
            said = again.stdout + again.stderr
            if "rolled back" in said or "leftover" in said:
                sweep.leftovers_reported += 1
            else:
                sweep.problems.append(f"{where}: the next run did not report the leftover {STAGE_DIR}")
