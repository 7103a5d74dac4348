"""Attack cases for links, leftover staging folders and journals, mid-run swaps and concurrent writers.

Run by benchmarks/bench_reliability.py (attack_links_and_journals). Each case builds a target (a copy of the demo
export) and a sibling `outside` folder, runs real `irsurgeon` processes against them, and is judged: refused with
one `Error:` line and nothing changed, or (a control) accepted; `outside` must never change. A leftover that is
refused must also be reported by `verify`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lab.dirsnap import snapshot
from lab.hub import hub_snapshot
from lab.procs import killed_commit, lock_held
from lab.demo import DEMO_CKPT, DEMO_TARGET
from lab.kills import CLI, KILLER, child_env, run_cli, run_killer

from irsurgeon.commit import journal

STAGE = ".irsurgeon-staging"
LM, HEAD = "openvino_language_model.xml", "openvino_mtp_model.xml"
NO_STAGE = {"dev": 0, "ino": 0}  # a shipped journal names a staging folder other than the one it is found in


@dataclass
class AttackTally:
    tried: int = 0
    refused: int = 0  # one Error: line, target and outside byte-identical
    accepted: int = 0  # controls: the legitimate form of the same thing works
    verify_reports: int = 0  # leftovers refused by the writers and named by verify
    outside_changed: int = 0
    problems: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # one per case: what it found


def one_line(proc: subprocess.CompletedProcess) -> bool:
    err = proc.stderr
    return proc.returncode == 1 and err.startswith("Error: ") and len(err.splitlines()) == 1 and "Traceback" not in err


class Bench:
    def __init__(self, root: Path):
        self.root, self.n, self.tally = root, 0, AttackTally()
        root.mkdir(parents=True, exist_ok=True)

    def sandbox(self) -> tuple[Path, Path]:
        self.n += 1
        box = self.root / f"case{self.n}"
        shutil.copytree(DEMO_TARGET, box / "target")
        (box / "outside").mkdir()
        (box / "outside" / "precious.txt").write_text("not irsurgeon's")
        return box / "target", box / "outside"

    def judge(self, name: str, ok: bool, outside: Path, around: dict, found: str) -> None:
        t = self.tally
        t.tried += 1
        if snapshot(outside) != around:
            t.outside_changed += 1
            t.problems.append(f"{name}: changed files outside the target")
        if not ok:
            t.problems.append(f"{name}: {found}")
        t.lines.append(f"{'ok ' if ok else 'BAD'} {name}: {found}")

    def refused(self, name: str, args: Callable[[Path], list[str]], setup: Callable[[Path, Path], None],
                verify: bool = False) -> None:
        """setup(target, outside) the attack, run the command, expect a clean refusal."""
        target, outside = self.sandbox()
        setup(target, outside)
        before, around = snapshot(target), snapshot(outside)
        if verify:
            check = run_cli("verify", str(target))
            if check.returncode == 1 and str(target / STAGE) in check.stdout:
                self.tally.verify_reports += 1
            else:
                self.tally.problems.append(f"{name}: verify did not name {STAGE}: {check.stdout[-200:]}")
        proc = run_cli(*args(target))
        ok = one_line(proc) and snapshot(target) == before
        self.tally.refused += ok
        self.judge(name, ok, outside, around, proc.stderr.strip()[:160] or f"exit {proc.returncode}, no error")

    def accepted(self, name: str, args: Callable[[Path], list[str]], setup: Callable[[Path, Path], None]) -> None:
        target, outside = self.sandbox()
        setup(target, outside)
        around = snapshot(outside)
        proc = run_cli(*args(target))
        self.tally.accepted += proc.returncode == 0
        self.judge(name, proc.returncode == 0, outside, around, f"exit {proc.returncode} {proc.stderr.strip()[:120]}")


WRITERS = {"patch": lambda t: ["patch", str(t), "--checkpoint", str(DEMO_CKPT)],
           "annotate": lambda t: ["annotate", str(t)],
           "build-mtp -o": lambda t: ["build-mtp", str(DEMO_CKPT), "-o", str(t), "--force"],  # past the rule that
           "synth": lambda t: ["synth", str(t), "--kind", "llama", "--force"]}             # a head/export is kept


def _bait(target: Path, outside: Path) -> None:
    (outside / "bait").mkdir()
    (outside / "bait" / "journal.json").write_text(json.dumps([LM]))
    (outside / "bait" / (LM + ".orig")).write_text("attacker's model")
    (target / STAGE).symlink_to(outside / "bait")


def _real_leftovers_moved_out(target: Path, outside: Path) -> None:
    killed_commit(target, {LM: "new"}, 3)
    os.replace(target / STAGE, outside / "moved")
    (target / STAGE).symlink_to(outside / "moved")


def _journal_link(target: Path, outside: Path) -> None:
    killed_commit(target, {LM: "new"}, 3)
    os.replace(target / STAGE / "journal.json", outside / "journal.json")
    (target / STAGE / "journal.json").symlink_to(outside / "journal.json")


def _journal(data) -> Callable[[Path, Path], None]:
    def setup(target: Path, _outside: Path) -> None:
        (target / STAGE).mkdir()
        (target / STAGE / "journal.json").write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    return setup


def _edited_after_kill(target: Path, _outside: Path) -> None:
    killed_commit(target, {"openvino_config.json": "{}", HEAD: "head"}, 4)
    (target / HEAD).write_text("edited since")


def _backup_copied(target: Path, _outside: Path) -> None:
    killed_commit(target, {LM: "new"}, 2)
    backup = target / STAGE / (LM + ".orig")
    data = backup.read_bytes()
    backup.unlink()
    backup.write_bytes(data)


def _entry(kind: str) -> Callable[[Path, Path], None]:
    def setup(target: Path, outside: Path) -> None:
        (target / STAGE).mkdir()
        where = target / STAGE / HEAD
        {"subfolder": lambda: where.mkdir(), "link": lambda: where.symlink_to(outside / "precious.txt"),
         "unknown": lambda: (target / STAGE / "notes.txt").write_text("x")}[kind]()
    return setup


LEFTOVERS = {
    "staging link to an outside journal + .orig": _bait,
    "staging link to a killed run's real leftovers moved outside": _real_leftovers_moved_out,
    "staging link to nowhere": lambda t, o: (t / STAGE).symlink_to(o / "nowhere"),
    "staging is a plain file": lambda t, o: (t / STAGE).write_text("x"),
    "journal.json a link to a real journal outside": _journal_link,
    "shipped bare-list journal naming the LM .bin": _journal(["openvino_language_model.bin"]),
    "shipped {files, replaced} journal": _journal({"files": ["openvino_language_model.bin", LM], "replaced": []}),
    "checksummed journal naming a file never written": _journal(journal.encode("x", [
        {"name": "openvino_language_model.bin", "new": {"size": 1, "sha256": "0" * 64}, "old": None}], NO_STAGE)),
    "checksummed journal whose entry matches nothing": _journal(journal.encode("x", [
        {"name": LM, "new": {"size": 1, "sha256": "0" * 64}, "old": None}], NO_STAGE)),
    "killed commit, moved-in file edited since": _edited_after_kill,
    "killed commit, backup replaced by a copy": _backup_copied,
    "staging holds a subfolder": _entry("subfolder"),
    "staging holds a link out": _entry("link"),
    "staging holds an unknown file": _entry("unknown"),
}


def leftovers(bench: Bench) -> None:
    for name, setup in LEFTOVERS.items():
        for k, writer in enumerate(("patch", "annotate", "build-mtp -o")):
            bench.refused(f"{name} / {writer}", WRITERS[writer], setup, verify=k == 0)
    bench.accepted("control: a real half-done commit, rolled back by patch", WRITERS["patch"],
                   lambda t, o: killed_commit(t, {LM: "new", HEAD: "head"}, 3))


def _hub(**kw) -> Callable[[Path, Path], Path]:
    return lambda box, outside: hub_snapshot(box, **kw)


def _tweak_hub(where: str) -> Callable[[Path, Path], Path]:
    def setup(box: Path, outside: Path) -> Path:
        snap = hub_snapshot(box, shared_store=where == "no-marker")
        repo, shard = snap.parent.parent, snap / "model.safetensors"
        blob = repo / "blobs" / shard.readlink().name
        if where == "other-repo":
            (repo.parent / "models--evil--x" / "blobs").mkdir(parents=True)
            shutil.copy(shard, repo.parent / "models--evil--x" / "blobs" / "w")
            shard.unlink()
            shard.symlink_to(Path("..", "..", "..", "models--evil--x", "blobs", "w"))
        elif where == "blob-out":
            shutil.copy(blob, outside / "w.safetensors")
            blob.unlink()
            blob.symlink_to(outside / "w.safetensors")
        else:
            (repo.parent / "blobs" / ".huggingface-shared-blobs").unlink()
        return snap
    return setup


def _plain_link_out(indexed: bool) -> Callable[[Path, Path], Path]:
    def setup(box: Path, outside: Path) -> Path:
        ckpt = box / "ckpt"
        ckpt.mkdir()
        shutil.copy(DEMO_CKPT / "config.json", ckpt / "config.json")
        shutil.copy(DEMO_CKPT / "model.safetensors", outside / "w.safetensors")
        name = "model-1.safetensors" if indexed else "model.safetensors"
        (ckpt / name).symlink_to(outside / "w.safetensors")
        if indexed:
            from irsurgeon.weights.safetensors_io import SafetensorsFile
            st = SafetensorsFile(outside / "w.safetensors")
            weight_map = {n: name for n in st.tensors}
            (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
            st.close()
        return ckpt
    return setup


def _ckpt_file_out(name: str) -> Callable[[Path, Path], Path]:
    def setup(box: Path, outside: Path) -> Path:
        ckpt = box / "ckpt"
        shutil.copytree(DEMO_CKPT, ckpt)
        if name == "config.json":
            shutil.move(ckpt / name, outside / name)
        else:
            from irsurgeon.weights.safetensors_io import SafetensorsFile
            st = SafetensorsFile(ckpt / "model.safetensors")
            (outside / name).write_text(json.dumps({"weight_map": {n: "model.safetensors" for n in st.tensors}}))
            st.close()
        (ckpt / name).symlink_to(outside / name)
        return ckpt
    return setup


CHECKPOINTS = {
    "HF layout, blobs a link to any folder": (lambda box, outside: hub_snapshot(box, outside / "any"), False),
    "HF layout, snapshot link into another repo's blobs": (_tweak_hub("other-repo"), False),
    "HF layout, blob a link out of the cache": (_tweak_hub("blob-out"), False),
    "HF layout, shared store without its marker": (_tweak_hub("no-marker"), False),
    "model.safetensors a link out of the checkpoint": (_plain_link_out(False), False),
    "index shard a link out of the checkpoint": (_plain_link_out(True), False),
    "config.json a link out of the checkpoint": (_ckpt_file_out("config.json"), False),
    "index file a link out of the checkpoint": (_ckpt_file_out("model.safetensors.index.json"), False),
    "control: real HF cache layout": (_hub(), True),
    "control: real HF cache with the shared blob store": (_hub(shared_store=True), True),
}


def checkpoints(bench: Bench) -> None:
    for name, (make, legit) in CHECKPOINTS.items():
        for writer in ("build-mtp", "patch"):
            holder: dict[str, Path] = {}

            def setup(target: Path, outside: Path, make=make, holder=holder) -> None:
                holder["ckpt"] = make(target.parent, outside)

            def args(target: Path, writer=writer, holder=holder) -> list[str]:
                ckpt = str(holder["ckpt"])
                return ["build-mtp", ckpt, "-o", str(target.parent / "out")] if writer == "build-mtp" \
                    else ["patch", str(target), "--checkpoint", ckpt]
            (bench.accepted if legit else bench.refused)(f"{name} / {writer}", args, setup)


def _link_out(names: tuple[str, ...], hard: bool = False) -> Callable[[Path, Path], None]:
    """Target files moved outside and linked back (symbolic, or hard links sharing the outside inode)."""
    def setup(target: Path, outside: Path) -> None:
        for name in names:
            if not (target / name).exists():
                (target / name).write_bytes(b"garbage")
            os.replace(target / name, outside / name)
            (os.link if hard else os.symlink)(outside / name, target / name)
    return setup


def target_links(bench: Bench) -> None:
    """Files of the target that are links out of it: read through, but every write replaces the link itself."""
    lm, head = (LM,), (HEAD, "openvino_mtp_model.bin")
    for name, writer, setup in (
            ("language model .xml a symlink to outside", "patch", _link_out(lm)),
            ("language model .xml a symlink to outside", "annotate", _link_out(lm)),
            ("language model .xml a hard link of an outside file", "patch", _link_out(lm, hard=True)),
            ("language model .xml a hard link of an outside file", "annotate", _link_out(lm, hard=True)),
            ("head .xml/.bin symlinks to outside files", "patch", _link_out(head)),
            ("head .xml/.bin symlinks to outside files", "build-mtp -o", _link_out(head)),
            ("head .xml/.bin hard links of outside files", "build-mtp -o", _link_out(head, hard=True)),
            ("an empty staging folder left behind", "patch", lambda t, o: (t / STAGE).mkdir())):
        bench.accepted(f"{name} / {writer}", WRITERS[writer], setup)
    bench.refused("synth OUT whose target/ is a link to outside / synth", WRITERS["synth"],
                  lambda t, o: (t / "target").symlink_to(o))


def _paused_patch(bench: Bench, target: Path, point: str, gate: Path) -> subprocess.Popen:
    """A patch run stopped just before its first write whose description contains `point`."""
    script = bench.root / "killer.py"
    script.write_text(KILLER)
    probe = run_killer(script, bench.sandbox()[0], at=0)
    points = [ln.split(" ", 2)[2] for ln in probe.stderr.splitlines() if ln.startswith("@write ")]
    at = next(i for i, p in enumerate(points, 1) if point in p)
    gate.write_text("")
    proc = run_killer(script, target, at, pause=gate, wait=False)
    while not Path(f"{gate}.here").exists():
        if proc.poll() is not None:
            raise RuntimeError(f"patch did not reach {point}: {proc.communicate()}")
        time.sleep(0.05)
    return proc


def swaps(bench: Bench) -> None:
    """The staging folder, then the target itself, swapped for a link to `outside` while patch runs."""
    for what in ("staging folder", "target"):
        target, outside = bench.sandbox()
        around, gate, before = snapshot(outside), target.parent / "gate", snapshot(target)
        proc = _paused_patch(bench, target, "open openvino_language_model.xml", gate)
        moved = target.parent / "moved"
        os.replace(target / STAGE if what == "staging folder" else target, moved)
        (target / STAGE if what == "staging folder" else target).symlink_to(outside)
        gate.unlink()
        out, err = proc.communicate(timeout=120)
        err = "\n".join(ln for ln in err.splitlines() if not ln.startswith("@write "))  # the pausing hook's lines
        home = target if what == "staging folder" else moved
        landed = (home / HEAD).is_file() and proc.returncode == 0
        ours = {k: v for k, v in snapshot(home).items() if k != STAGE}  # the link put there is not ours to remove
        untouched = proc.returncode == 1 and len(err.splitlines()) == 1 and ours == before
        bench.tally.accepted += landed
        bench.tally.refused += untouched
        bench.judge(f"{what} swapped for a link to outside mid-run / patch", landed or untouched, outside, around,
                    f"exit {proc.returncode}; head written into the real folder: {landed}; real folder as before: "
                    f"{untouched} {err.strip()[:100]}")


def concurrent(bench: Bench) -> None:
    """Each writer against a lock held by another process: refused at once; with --wait, waits and succeeds."""
    for name, args in WRITERS.items():
        for wait in (False, True):
            target, outside = bench.sandbox()
            around, before = snapshot(outside), snapshot(target)
            with lock_held(target, target.parent / "gate") as release:
                cmd = [sys.executable, "-c", CLI, *args(target), *(["--wait"] if wait else [])]
                proc = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                time.sleep(2.0)
                still = proc.poll() is None
                release()
                out, err = proc.communicate(timeout=120)
            if wait:
                ok = still and proc.returncode == 0
                found = f"waited for the holder: {still}, then exit {proc.returncode}"
                bench.tally.accepted += ok
            else:
                ok = not still and proc.returncode == 1 and "another irsurgeon run holds" in err \
                    and len(err.splitlines()) == 1 and snapshot(target) == before
                found = err.strip()[:120]
                bench.tally.refused += ok
            bench.judge(f"lock held by another process / {name}{' --wait' if wait else ''}", ok, outside, around,
                        found)
    target, outside = bench.sandbox()
    around, gate = snapshot(outside), target.parent / "gate"
    proc = _paused_patch(bench, target, "os.rename openvino_mtp_model.xml", gate)
    for name in ("build-mtp -o", "annotate"):
        other = run_cli(*WRITERS[name](target))
        ok = one_line(other) and "another irsurgeon run holds" in other.stderr
        bench.tally.refused += ok
        bench.judge(f"patch between the head's .bin and .xml / {name}", ok, outside, around,
                    other.stderr.strip()[:120])
    gate.unlink()
    proc.communicate(timeout=120)
    check = run_cli("verify", str(target))
    bench.tally.accepted += proc.returncode == 0 and check.returncode == 0
    bench.judge("that patch, finished: verify", proc.returncode == 0 and check.returncode == 0, outside, around,
                f"patch exit {proc.returncode}, verify exit {check.returncode}")


def run_all(root: Path) -> AttackTally:
    bench = Bench(root)
    for section in (leftovers, target_links, checkpoints, swaps, concurrent):
        section(bench)
    return bench.tally
