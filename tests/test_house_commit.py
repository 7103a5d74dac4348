"""One transaction for every file of a patch, for every registered family: links are never written through, and a
full disk or an I/O error at any mutating call of the patch leaves the directory as before or complete, or holding a
commit the next run recovers; "rolled back" is said only when it is true. (Kills and Ctrl-C at every write:
test_reliability.py's kill lab, over the same families.)"""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from helpers.cli import invoke
from lab.dirsnap import snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS
from irsurgeon.flows.verify import verify_directory

STAGE_DIR = ".irsurgeon-staging"
CALLS = ("replace", "rename", "link", "unlink", "mkdir", "rmdir", "chmod", "fsync", "open", "write")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT


def where(path, dir_fd) -> str | None:
    """The absolute path a call acts on (through its dir_fd, or an fd itself), or None."""
    try:
        if isinstance(path, int):
            return os.readlink(f"/proc/self/fd/{path}")
        path = os.fsdecode(path)
        if isinstance(dir_fd, int) and not os.path.isabs(path):
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        return os.path.abspath(path)
    except (OSError, TypeError, ValueError):
        return None


class Faults:
    """Wraps the os calls that mutate; counts those inside `root` and makes the `at`-th fail with `code`."""

    def __init__(self, monkeypatch, root: Path, at: int = 0, code: int = errno.ENOSPC):
        self.root, self.at, self.code, self.seen = os.path.realpath(root), at, code, []
        for name in CALLS:
            monkeypatch.setattr(os, name, self.wrap(name, getattr(os, name)))

    def inside(self, path) -> bool:
        return path is not None and (path == self.root or path.startswith(self.root + os.sep))

    def wrap(self, name, real):
        def call(*args, **kwargs):
            if name == "open" and not (len(args) > 1 and args[1] & WRITE_FLAGS):
                return real(*args, **kwargs)
            targets = [where(args[0], kwargs.get("dir_fd", kwargs.get("src_dir_fd")))] if args else []
            if name in ("replace", "rename", "link") and len(args) > 1:
                targets.append(where(args[1], kwargs.get("dst_dir_fd")))
            if any(self.inside(t) for t in targets):
                self.seen.append(f"{name} {os.path.basename(targets[-1] or '')}")
                if len(self.seen) == self.at:
                    raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)
        return call


def files_only(state: dict) -> dict:
    return {k: v for k, v in state.items() if not k.startswith(STAGE_DIR)}


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    """(family, pristine target, checkpoint, the patched snapshot, the numbered mutating calls of a patch)."""
    family = request.param
    source, ckpt = FIXTURE_PAIRS[family.key]
    root = tmp_path_factory.mktemp(f"faults-{family.key}")
    probe = root / "probe"
    shutil.copytree(source, probe)
    mp = pytest.MonkeyPatch()
    faults = Faults(mp, probe)
    try:
        result = invoke("patch", probe, "--checkpoint", ckpt)
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return family, source, ckpt, snapshot(probe), faults.seen


def test_the_fault_points_cover_staging_journal_moves_and_cleanup(pair):
    family, _, _, _, seen = pair
    joined = " ".join(seen)
    assert "mkdir .irsurgeon-staging" in joined and "journal.json" in joined and "committed" in joined, seen
    names = {n.rsplit("/", 1)[-1] for n in family.layout.writes}
    moved = {s.split(" ", 1)[1] for s in seen if s.split(" ", 1)[0] in ("replace", "rename")}
    assert len(moved & names) >= 2, seen


SWEEPS = [pytest.param(errno.ENOSPC, 20, id="ENOSPC-every-20th"),
          pytest.param(errno.ENOSPC, 10, id="ENOSPC-every-10th", marks=pytest.mark.extended),
          pytest.param(errno.ENOSPC, 1, id="ENOSPC", marks=pytest.mark.slow),
          pytest.param(errno.EIO, 1, id="EIO", marks=pytest.mark.slow)]


@pytest.mark.parametrize("code, stride", SWEEPS)
def test_a_fault_at_every_mutating_call_leaves_before_complete_or_recoverable(pair, tmp_path, monkeypatch, code,
                                                                               stride):
    """The default run takes every 20th call (and the last), CI's extended tier every tenth; `make test-all` every
    call, for ENOSPC and EIO."""
    family, source, ckpt, after, seen = pair
    before = snapshot(source)
    outcomes: dict[str, int] = {}
    problems = []
    for at in sorted({*range(1, len(seen) + 1, stride), len(seen)}):
        target = tmp_path / f"t{at}"
        shutil.copytree(source, target)
        mp = pytest.MonkeyPatch()
        Faults(mp, target, at, code)
        try:
            result = invoke("patch", target, "--checkpoint", ckpt)
        finally:
            mp.undo()
        state = files_only(snapshot(target))
        said = result.output
        label = f"{os.strerror(code)} at {at} ({seen[at - 1]})"
        if "Traceback" in said or (result.exception and not isinstance(result.exception, SystemExit)):
            problems.append(f"{label}: {result.exception!r} {said[-300:]}")
        if state == files_only(before):
            outcome = "as before"
        elif state == files_only(after):
            outcome = "complete"
        elif (target / STAGE_DIR / "journal.json").exists():
            outcome = "recoverable"
        else:
            problems.append(f"{label}: neither as before, nor complete, nor a journal: exit {result.exit_code}")
            continue
        if "rolled back" in said and outcome != "as before":
            problems.append(f"{label}: said rolled back but the directory is {outcome}")
        if result.exit_code == 0 and outcome != "complete":
            problems.append(f"{label}: exit 0 with the directory {outcome}")
        again = invoke("patch", target, "--checkpoint", ckpt)
        if again.exit_code != 0 or snapshot(target) != after or not all(c.ok for c in verify_directory(target)):
            problems.append(f"{label}: the next run did not complete it: {again.output[-300:]}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        shutil.rmtree(target)
    print(f"{family.key} {os.strerror(code)}: {len(seen)} fault points, every {stride}: {outcomes}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("family", FAMILIES)
def test_no_write_follows_a_link_under_the_target(family, tmp_path):
    """Every name a patch writes, and every subfolder it writes into, made a link to another model's directory:
    the patch refuses or replaces the link itself; the other directory stays byte-identical."""
    source, ckpt = FIXTURE_PAIRS[family.key]
    other = tmp_path / "other"
    shutil.copytree(source, other)
    (other / "mtp_assistant").mkdir(exist_ok=True)
    for folder in family.layout.subfolders:
        (other / folder).mkdir(exist_ok=True)
    for name in family.layout.writes:
        (other / name).write_bytes(b"another model's file")
    theirs = snapshot(other)
    target = tmp_path / "target"
    shutil.copytree(source, target)
    for folder in family.layout.subfolders:
        os.symlink(other / folder, target / folder)
    for name in family.layout.writes:
        if "/" not in name and (target / name).exists():
            continue  # the target's own files stay; the others become links into `other`
        if "/" not in name:
            os.symlink(other / name, target / name)
    result = invoke("patch", target, "--checkpoint", ckpt)
    assert snapshot(other) == theirs, result.output
    if result.exit_code != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "link" in lines[0], result.output
