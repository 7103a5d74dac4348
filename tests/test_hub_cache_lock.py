"""Two runs sharing irsurgeon's hub cache (irsurgeon/weights/hub/store.py, partial.py): a run that needs a file another
run is writing waits for it, says so once, and then uses that run's file whole (no second download, no file replaced
under the other run's build); a run killed while it writes never keeps the next one waiting.

Real CLI runs (two processes, one --cache-dir) against the Hub look-alike on 127.0.0.1 (lab/hub_server.py). The
schedule is the server's, not the clock's: the first range request for the shard's tensor bytes is held
(Faults.stall_data) until the test releases it, so the first run is known to be mid-download, holding the shard's
lock, when the second one starts; the second run's "waiting" line is read before anything else happens.
"""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.hub import cli_env
from lab.hub_server import Faults, HubServer, Revision
from irsurgeon.flows.verify import verify_directory
from irsurgeon.families.dflash.synth import synthesize_dflash

REPO = "acme/dflash-tiny"
SHARD = "model.safetensors"
WAITING = "another irsurgeon run is writing it"
HELD = {"HF_HUB_ETAG_TIMEOUT": "300"}  # the held request's read timeout: it waits for the test, not for 5 s


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    target, ckpt = synthesize_dflash(tmp_path_factory.mktemp("cachelock") / "s", seed=3, wait=False)
    return target, {p.name: p for p in ckpt.iterdir()}


def start(target: Path, cache: Path, hub: HubServer, home: Path, extra_env: dict | None = None) -> subprocess.Popen:
    """`irsurgeon patch TARGET --checkpoint REPO --cache-dir CACHE` in a process of its own."""
    return subprocess.Popen([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint", REPO,
                             "--cache-dir", str(cache)], env=cli_env(hub.url, home, extra_env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines_until(proc: subprocess.Popen, words: str) -> list[str]:
    """proc's stdout lines up to the first holding `words` (all of them when it ends without one)."""
    seen = []
    for line in proc.stdout:
        seen.append(line.rstrip("\n"))
        if words in line:
            break
    return seen


def finish(proc: subprocess.Popen, before: list[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, "\n".join(before) + "\n" + out, err


def data_bytes(files: dict[str, Path]) -> int:
    """The shard's bytes past its safetensors header: what a download of its tensors takes."""
    raw = files[SHARD].read_bytes()
    return len(raw) - 8 - int.from_bytes(raw[:8], "little")


def leftovers(cache: Path) -> list[str]:
    """Temp files of irsurgeon's cache (a writer's, left behind)."""
    return sorted(p.name for p in (cache / "irsurgeon").rglob("*.tmp"))


def waiting_second(target: Path, cache: Path, hub: HubServer, home: Path) -> tuple[subprocess.Popen, list[str]]:
    """Once the first run holds the shard's lock (the server stalls its request for the tensors), a second run on
    `target`, read up to the line that says it waits for the first; returns it and the lines read."""
    assert hub.stalled.wait(120), "the first run never asked for the shard's tensors"
    second = start(target, cache, hub, home)
    said = lines_until(second, WAITING)
    assert said and WAITING in said[-1], f"the second run did not wait for the first: {said}"
    return second, said


def test_a_second_run_waits_for_the_shard_the_first_is_writing_then_uses_it_whole(pair, tmp_path):
    """The issue's case: two DFlash patches of two targets from one repo id with one --cache-dir. Before the cache
    had a lock, the second downloaded the shard again and renamed its copy over the first run's while that one was
    reading it ("model.safetensors: changed while tensor ... was read")."""
    target_src, files = pair
    cache, home = tmp_path / "cache", tmp_path / "hf"
    targets = [shutil.copytree(target_src, tmp_path / name) for name in ("a", "b")]
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(stall_data=SHARD)) as hub:
        first = start(targets[0], cache, hub, home, HELD)
        try:
            second, said = waiting_second(targets[1], cache, hub, home)
        finally:
            hub.release.set()
        code1, out1, err1 = finish(first, [])
        code2, out2, err2 = finish(second, said)
    assert code1 == 0, err1 + out1
    assert code2 == 0, err2 + out2
    assert out2.count(WAITING) == 1 and SHARD in said[-1], out2  # said once, naming the file
    assert hub.served(SHARD)[1] <= files[SHARD].stat().st_size, hub.log  # one download of it, not two
    assert hub.served(SHARD)[1] >= data_bytes(files)
    assert all(c.ok for t in targets for c in verify_directory(t))
    assert leftovers(cache) == []


def test_a_run_killed_while_it_writes_the_shard_does_not_keep_the_waiting_run_waiting(pair, tmp_path):
    """SIGKILL of the run holding the shard's lock: the kernel releases it (a flock held by a descriptor), the run
    waiting for it takes it, finds no complete copy, downloads the shard itself and removes the killed run's temp
    file."""
    target_src, files = pair
    cache, home = tmp_path / "cache", tmp_path / "hf"
    targets = [shutil.copytree(target_src, tmp_path / name) for name in ("a", "b")]
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(stall_data=SHARD)) as hub:
        first = start(targets[0], cache, hub, home, HELD)
        try:
            second, said = waiting_second(targets[1], cache, hub, home)
            first.send_signal(signal.SIGKILL)
            first.communicate(timeout=60)
            code, out, err = finish(second, said)
        finally:
            hub.release.set()
            if first.poll() is None:
                first.kill()
                first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert code == 0, err + out
    assert all(c.ok for c in verify_directory(targets[1]))
    assert leftovers(cache) == []


def test_the_lock_folder_is_never_reached_through_a_link(tmp_path):
    """The lock files live under <cache>/irsurgeon/.locks, entered without following a link: a link there is one
    line, and nothing is made where it points."""
    from irsurgeon.core.errors import CheckpointError
    from irsurgeon.weights.hub.store import LOCKS, ROOT, Folder

    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with Folder(cache, "acme/tiny", "c" * 40) as folder:
        (cache / ROOT / LOCKS).symlink_to(elsewhere)
        with pytest.raises(CheckpointError, match=r"\.lock: cannot make the lock of model\.safetensors"):
            with folder.writing(SHARD, print):
                pass
    assert list(elsewhere.iterdir()) == []
