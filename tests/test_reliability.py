"""Reliability of `irsurgeon patch` on directories users cannot regenerate: kills, concurrent runs, full disks,
read-only targets, missing permissions, and untrusted checkpoints and IRs.

Kill points (lab.kills: `patch` under an audit hook that signals itself just before its N-th filesystem write in
the target). After each kill the directory must be byte-identical to before, byte-identical to a completed patch (builds are
deterministic) and verifiable, or hold an interrupted commit that `irsurgeon verify` reports and the next `patch`
rolls back; the next run must then leave a completely patched directory and say what it cleaned up.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab.families import WRITABLE
from lab.demo import DEMO_CKPT, DEMO_TARGET, sharded_demo_ckpt
from lab.dirsnap import digest as snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS
from lab.kills import CLI, STAGE_DIR, KillLab, Sweep, child_env, patch_args, run_cli, run_killer
from irsurgeon.families import registry
from helpers.tiers import every_nth


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> KillLab:
    return KillLab(tmp_path_factory.mktemp("kills"))


@pytest.fixture(scope="module", params=every_nth(FAMILIES, 2))
def family_lab(request, tmp_path_factory) -> KillLab:
    """The kill lab of every registered family's bundled pair (every other family in the default tier, the others in
    CI's extended tier)."""
    source, ckpt = FIXTURE_PAIRS[request.param.key]
    return KillLab(tmp_path_factory.mktemp(f"kills-{request.param.key}"), source, ckpt)


def moves(lab: KillLab) -> list[int]:
    """The write points that move a staged file into the target (os.rename of a name the family writes)."""
    family = registry.for_checkpoint(lab.ckpt)
    names = {n.rsplit("/", 1)[-1] for n in family.layout.writes}
    return [i for i, p in enumerate(lab.points, 1) if p.startswith("os.rename ") and p.split(" ", 1)[1] in names]


def test_patch_flow_has_the_expected_write_points(family_lab):
    """The numbering sees the staging folder, the journal, each move into place and the cleanup."""
    joined = " ".join(family_lab.points)
    for what in ("os.mkdir .irsurgeon-staging", "journal.json", "os.rename committed", "os.rmdir .irsurgeon-staging"):
        assert what in joined, family_lab.points
    assert len(moves(family_lab)) >= 2 and family_lab.after != family_lab.before


def named_points(lab: KillLab) -> list[int]:
    """The kill points where the outcome changes: the first move into the target (an interrupted commit) and the
    commit mark (every write: test_kill_point_sweep_every_write)."""
    return [moves(lab)[0], next(i for i, p in enumerate(lab.points, 1) if "committed" in p)]


@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGKILL", "SIGINT"])  # SIGINT at these points: make test-all (and at every write below)
def test_kill_points_leave_before_or_after(family_lab, sig):
    sweep = Sweep()
    points = named_points(family_lab)
    for at in points:
        family_lab.kill(at, sig, sweep)
    assert not sweep.problems, "\n".join(sweep.problems)
    assert sweep.tracebacks == 0
    assert sweep.kills == len(points)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_kill_point_sweep_every_write(family_lab, sig):
    sweep = Sweep()
    for at in range(1, len(family_lab.points) + 1):
        family_lab.kill(at, sig, sweep)
    print(f"{family_lab.ckpt.name}: {sig.name if hasattr(sig, 'name') else sig}: {sweep.kills} kills, "
          f"{sweep.intact} intact, {sweep.completed} completed, {sweep.interrupted_commits} rolled back by the next "
          f"run, {sweep.leftovers_reported} leftovers reported")
    assert not sweep.problems, "\n".join(sweep.problems)
    assert sweep.tracebacks == 0


# --- leftovers of a killed run, and leftovers that were never ours ------------------------------------------------

def test_journal_naming_files_outside_the_target_is_refused(tmp_path):
    """A downloaded directory can carry a crafted staging folder: its journal must not steer deletes outside."""
    from irsurgeon.core.errors import OutputError
    from irsurgeon.commit.transaction import DirectoryTransaction

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "target"
    (target / STAGE_DIR).mkdir(parents=True)
    (target / STAGE_DIR / "journal.json").write_text(json.dumps(["../victim.txt"]))
    with pytest.raises(OutputError, match="not a journal irsurgeon wrote"):
        with DirectoryTransaction(target, writable=WRITABLE):
            pass
    assert victim.read_text() == "precious"
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the refusal released the directory lock
    finally:
        os.close(fd)


@pytest.mark.parametrize("leftover", ["journal.json.tmp", "journal.json"])
def test_half_written_journal_is_handled(tmp_path, leftover):
    """Killed while writing the journal: no file has moved yet, so the folder is junk (or refused when garbled)."""
    from irsurgeon.core.errors import OutputError
    from irsurgeon.commit.transaction import DirectoryTransaction

    target = tmp_path / "target"
    (target / STAGE_DIR).mkdir(parents=True)
    (target / "a.xml").write_text("a")
    (target / STAGE_DIR / leftover).write_text('["a.x')
    if leftover == "journal.json.tmp":
        with DirectoryTransaction(target, writable=WRITABLE):
            pass
        assert not (target / STAGE_DIR).exists()
    else:
        with pytest.raises(OutputError, match="journal"):
            with DirectoryTransaction(target, writable=WRITABLE):
                pass
    assert (target / "a.xml").read_text() == "a"


# --- concurrent runs ----------------------------------------------------------------------------------------------

def paused_patch(lab, target: Path, gate: Path, point: str) -> subprocess.Popen:
    """A patch of target held just before its first write whose description holds `point`, until gate is removed."""
    gate.write_text("")
    at = next(i for i, p in enumerate(lab.points, 1) if point in p)
    proc = run_killer(lab.script, target, at, pause=gate, wait=False)
    deadline = time.monotonic() + 120
    while not Path(str(gate) + ".here").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc

def test_second_run_is_refused_or_waits_while_the_first_holds_the_lock(lab, tmp_path):
    """Run A is held inside its commit (the lock taken); B is refused at once, C (--wait) waits and then finds
    the directory patched; a holder killed with SIGKILL frees the lock and the next run cleans up after it."""
    target = lab.fresh("concurrent")
    gate = tmp_path / "gate"
    a = paused_patch(lab, target, gate, "journal.json")
    b = run_cli(*patch_args(target))
    assert b.returncode == 1 and b.stderr.startswith("Error: ") and len(b.stderr.splitlines()) == 1, b.stderr
    assert "another irsurgeon run" in b.stderr
    c = subprocess.Popen([sys.executable, "-c", CLI, *patch_args(target, "--wait")], env=child_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert c.poll() is None, "--wait did not wait for the lock holder"
    gate.unlink()
    assert a.wait(120) == 0, a.communicate()
    c_out, c_err = c.communicate(timeout=120)
    assert c.returncode == 0 and "already has its draft" in c_out, c_out + c_err
    assert snapshot(target) == lab.after


def test_other_writers_are_refused_while_patch_commits(lab, tmp_path):
    """build-mtp -o and annotate into a directory whose patch is between moving the head's .bin and its .xml: both
    are refused at once (before, build-mtp's .xml met patch's .bin); patch then finishes and verify passes."""
    target = lab.fresh("mixed")
    gate = tmp_path / "gate"
    a = paused_patch(lab, target, gate, "os.rename openvino_mtp_model.xml")
    for args in (["build-mtp", str(DEMO_CKPT), "-o", str(target)], ["annotate", str(target)]):
        other = run_cli(*args)
        assert "another irsurgeon run holds" in one_line_error(other), other.stderr
    gate.unlink()
    assert a.wait(120) == 0, a.communicate()
    assert run_cli("verify", str(target)).returncode == 0
    assert snapshot(target) == lab.after


def test_lock_holder_killed_is_detected_and_cleaned_up(lab, tmp_path):
    target = lab.fresh("stale")
    gate = tmp_path / "gate"
    a = paused_patch(lab, target, gate, "os.rename openvino_language_model.xml")
    a.kill()
    a.wait()
    check = run_cli("verify", str(target))
    assert check.returncode == 1 and "interrupted run" in check.stdout, check.stdout
    again = run_cli(*patch_args(target))
    assert again.returncode == 0 and "rolled back an interrupted commit" in again.stdout, again.stdout + again.stderr
    assert snapshot(target) == lab.after


# --- resource faults ----------------------------------------------------------------------------------------------

def one_line_error(result) -> str:
    """The stderr of a failed CliRunner or subprocess run, checked to be exactly one `Error: ...` line."""
    err = result.stderr
    code = getattr(result, "exit_code", getattr(result, "returncode", None))
    assert code == 1 and err.startswith("Error: ") and len(err.splitlines()) == 1, (code, err)
    assert "Traceback" not in err and "IRSURGEON_DEBUG" not in err, err
    return err


@pytest.fixture
def mount_point(tmp_path):
    """Mounts made by the test (tmpfs, read-only bind), unmounted afterwards; skips where mounting is not allowed."""
    made = []

    def mount(*args: str) -> Path:
        where = tmp_path / f"mnt{len(made)}"
        where.mkdir()
        proc = subprocess.run(["mount", *args, str(where)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount here ({proc.stderr.strip()}); the monkeypatched variant covers this fault")
        made.append(where)
        return where
    yield mount
    for where in reversed(made):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path, leave: int) -> None:
    """Take all but `leave` bytes of the file system holding directory."""
    free = shutil.disk_usage(directory).free
    with open(directory / "filler", "wb") as f:
        f.truncate(0)
        f.write(b"\0" * max(free - leave, 0))


@pytest.mark.parametrize("leave_kb", [64, 400], ids=["fails-saving-the-head", "fails-staging-the-annotation"])
def test_full_disk_is_a_clear_error_and_the_target_is_unchanged(mount_point, leave_kb):
    """A real full disk: the target on a small tmpfs filled up to a few hundred KB."""
    fs = mount_point("-t", "tmpfs", "-o", "size=8m", "tmpfs")
    target = fs / "target"
    shutil.copytree(DEMO_TARGET, target)
    fill(fs, leave_kb << 10)
    before = snapshot(target)
    err = one_line_error(run_cli(*patch_args(target)))
    assert str(target) in err and ("space" in err or "iostream" in err), err
    assert snapshot(target) == before


def test_full_disk_simulated(tmp_path, monkeypatch):
    """The same fault by monkeypatching (for hosts where tmpfs cannot be mounted): writes of staged files fail."""
    from click.testing import CliRunner

    from irsurgeon.cli import main

    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    before = snapshot(target)
    real_write = Path.write_bytes

    def no_space(self, data):
        if STAGE_DIR in os.path.realpath(self) and self.name == written:  # staged: through /proc/self/fd/N
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data)
    monkeypatch.setattr(Path, "write_bytes", no_space)
    for written in ("openvino_mtp_model.xml", "openvino_language_model.xml"):  # the head's own, the annotation's
        err = one_line_error(CliRunner().invoke(main, patch_args(target)))
        assert "No space left on device" in err and f".irsurgeon-staging/{written}: cannot write it" in err, err
        assert snapshot(target) == before


@pytest.mark.parametrize("command", ["patch", "annotate"])
def test_read_only_target_is_a_clear_error(mount_point, tmp_path, command):
    """A read-only bind mount of the target (chmod does not stop root)."""
    source = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, source)
    before = snapshot(source)
    ro = mount_point("--bind", str(source))
    remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True, text=True)
    if remount.returncode != 0:
        pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
    args = patch_args(ro) if command == "patch" else ["annotate", str(ro)]
    err = one_line_error(run_cli(*args))
    assert "Read-only file system" in err or "read-only" in err, err
    assert snapshot(source) == before


def test_permission_denied_simulated(tmp_path, monkeypatch):
    """No write permission on the target, simulated by monkeypatching (the tests run as root, whom modes do not
    stop): creating anything inside it raises EACCES."""
    from click.testing import CliRunner

    from irsurgeon.cli import main

    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    before = snapshot(target)
    real_mkdir = os.mkdir

    def denied(path, *args, dir_fd=None, **kwargs):
        where = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path) if dir_fd is not None else str(path)
        if where.startswith(str(target)):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, dir_fd=dir_fd, **kwargs)
    monkeypatch.setattr(os, "mkdir", denied)
    err = one_line_error(CliRunner().invoke(main, patch_args(target)))
    assert "Permission denied" in err and str(target) in err, err
    assert snapshot(target) == before


# --- untrusted checkpoints ----------------------------------------------------------------------------------------

class Payload:
    """Unpickling this runs code: it creates the file `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def invoke(*args: str):
    from click.testing import CliRunner

    from irsurgeon.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def demo_target(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    return target, snapshot(target)


def set_shard(ckpt: Path, shard: str) -> None:
    index = ckpt / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"] = {n: (shard if n.startswith("mtp.") else s) for n, s in data["weight_map"].items()}
    index.write_text(json.dumps(data))


def test_pickle_checkpoints_are_never_unpickled(tmp_path):
    import pickle

    target, before = demo_target(tmp_path)
    marker = tmp_path / "code-ran"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(DEMO_CKPT / "config.json", ckpt / "config.json")
    (ckpt / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker)))
    err = one_line_error(invoke(*patch_args(target)[:2], "--checkpoint", ckpt))
    assert "pytorch_model.bin: a bare pickle, not a torch.save zip" in err and "not read" in err
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"mtp.fc.weight": "pytorch_model.bin"}}))
    err = one_line_error(invoke(*patch_args(target)[:2], "--checkpoint", ckpt))
    assert "pytorch_model.bin" in err and "safetensors" in err
    assert not marker.exists() and snapshot(target) == before


@pytest.mark.parametrize("escape", ["dotdot", "absolute", "symlink-out"])
def test_shards_outside_the_checkpoint_are_refused(tmp_path, escape):
    target, before = demo_target(tmp_path)
    ckpt = sharded_demo_ckpt(tmp_path / "ckpt")
    outside = tmp_path / "outside.safetensors"
    shutil.move(ckpt / "model-2.safetensors", outside)  # a valid shard: only the path rule may stop it
    shard = {"dotdot": "../outside.safetensors", "absolute": str(outside), "symlink-out": "model-2.safetensors"}[escape]
    if escape == "symlink-out":
        (ckpt / "model-2.safetensors").symlink_to(outside)
    set_shard(ckpt, shard)
    err = one_line_error(invoke(*patch_args(target)[:2], "--checkpoint", ckpt))
    assert "model.safetensors.index.json" in err and ("plain file name" in err or "outside" in err), err
    assert snapshot(target) == before


def test_hugging_face_cache_links_are_followed(tmp_path):
    """A cache snapshot links every file to ../../blobs/<hash>: those links are the cache's, not an escape."""
    ckpt = sharded_demo_ckpt(tmp_path / "staging")
    repo = tmp_path / "hub" / "models--acme--tiny"
    snap, blobs = repo / "snapshots" / ("0" * 40), repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for f in ckpt.iterdir():
        blob = blobs / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.move(f, blob)
        (snap / f.name).symlink_to(Path("..", "..", "blobs", blob.name))
    target, _ = demo_target(tmp_path)
    result = invoke(*patch_args(target)[:2], "--checkpoint", snap)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("case", ["header-length", "huge-shape", "hidden-size"])
def test_absurd_sizes_are_refused_before_any_large_allocation(tmp_path, case):
    """Each input declares gigabytes; it must be refused while Python and numpy have allocated under 32 MB."""
    import struct
    import tracemalloc

    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    st = ckpt / "model.safetensors"
    if case == "header-length":
        st.write_bytes(struct.pack("<Q", 1 << 62) + st.read_bytes()[8:])
    elif case == "huge-shape":
        header = {"mtp.fc.weight": {"dtype": "F32", "shape": [1 << 20, 1 << 20], "data_offsets": [0, 1 << 42]}}
        raw = json.dumps(header).encode()
        st.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 64)
    else:
        cfg = json.loads((ckpt / "config.json").read_text())
        cfg.get("text_config", cfg)["hidden_size"] = 10 ** 9
        (ckpt / "config.json").write_text(json.dumps(cfg))
    tracemalloc.start()
    try:
        result = invoke("build-mtp", ckpt, "-o", tmp_path / "out")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    err = one_line_error(result)
    assert ("hidden_size" in err) if case == "hidden-size" else ("model.safetensors" in err), err
    assert peak < 32 << 20, f"{peak / 1e6:.0f} MB allocated before refusing"
    assert not (tmp_path / "out").exists()


# --- untrusted IR -------------------------------------------------------------------------------------------------

BOMB = (b'<?xml version="1.0"?>\n<!DOCTYPE net [\n <!ENTITY a "aaaaaaaaaa">\n'  # "billion laughs": 10**9 a's
        + b"".join(b' <!ENTITY %c "%s">\n' % (98 + i, b"&%c;" % (97 + i) * 10) for i in range(8)) + b"]>\n")
EXTERNAL = b'<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'


def hostile_xml(target: Path, kind: str) -> None:
    xml = target / "openvino_language_model.xml"
    data = xml.read_bytes()
    body = data[data.index(b"<net "):]
    if kind == "bomb":
        xml.write_bytes(BOMB + body.replace(b'name="', b'name="&i;', 1))
    elif kind == "external-entity":
        xml.write_bytes(EXTERNAL + body.replace(b'name="', b'name="&x;', 1))
    else:  # a .bin shorter than the offsets the .xml names
        with open(target / "openvino_language_model.bin", "r+b") as f:
            f.truncate(1000)


@pytest.mark.parametrize("kind", ["bomb", "external-entity", "short-bin"])
@pytest.mark.parametrize("command", ["show", "annotate", "patch"])
def test_hostile_ir_is_refused_by_every_command(tmp_path, kind, command):
    target, _ = demo_target(tmp_path)
    hostile_xml(target, kind)
    before = snapshot(target)
    xml = target / "openvino_language_model.xml"
    args = {"show": ["show", xml], "annotate": ["annotate", target], "patch": patch_args(target)}[command]
    err = one_line_error(invoke(*args))
    assert ("DOCTYPE" in err) if kind != "short-bin" else ("openvino_language_model.bin" in err and "truncated" in err)
    assert snapshot(target) == before
