"""Links, leftovers and concurrent writers against every command that writes, through the command line: the
directory lock (refused at once, or waited for with --wait, which says so), staging folders and journals that are
not irsurgeon's, and links out of a checkpoint or a Hugging Face cache.

Each test keeps a sibling `outside` folder next to the target and checks (lab/dirsnap.py, links recorded, never
followed) that a refused run changed neither. Concurrent writers are real: a child process holds the directory
lock through the product's own `directory_lock` (lab/procs.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from lab.dirsnap import snapshot
from lab.hub import hub_snapshot
from lab.families import FAMILIES, fixture_pair
from lab.procs import env, killed_commit, lock_held
from irsurgeon.cli import main

ROOT = Path(__file__).resolve().parents[1]
DEMO_TARGET = ROOT / "fixtures" / "qwen3_5" / "target"
DEMO_CKPT = ROOT / "fixtures" / "qwen3_5" / "ckpt"
STAGE_DIR = ".irsurgeon-staging"


def invoke(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 1 and err.startswith("Error: ") and len(err.splitlines()) == 1, (code, err)
    for needle in needles:
        assert needle in err, err


@pytest.fixture
def sandbox(tmp_path):
    """(target: a copy of the demo export, outside: a sibling folder holding a file)."""
    target = tmp_path / "target"
    shutil.copytree(DEMO_TARGET, target)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("not irsurgeon's")
    return target, outside


# --- no command writes around the lock -----------------------------------------------------------------------------

WRITERS = {
    "patch": lambda t: ["patch", t, "--checkpoint", DEMO_CKPT],
    "annotate": lambda t: ["annotate", t],
    "build-mtp": lambda t: ["build-mtp", DEMO_CKPT, "-o", t],
    "synth": lambda t: ["synth", t, "--kind", "llama", "--force"],  # t holds an export: --force gets to the lock
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_is_refused_at_once_while_another_process_holds_the_lock(sandbox, tmp_path, command):
    target, outside = sandbox
    before, around = snapshot(target), snapshot(outside)
    with lock_held(target, tmp_path / "gate"):
        start = time.monotonic()
        code, _, err = invoke(*WRITERS[command](target))
        assert time.monotonic() - start < 30
    one_line_error(code, err, "another irsurgeon run holds", str(target))
    assert snapshot(target) == before and snapshot(outside) == around


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_every_writer_waits_for_the_lock_with_wait(sandbox, tmp_path, command):
    target, outside = sandbox
    around = snapshot(outside)
    with lock_held(target, tmp_path / "gate") as release:
        timer = threading.Timer(1.0, release)
        start = time.monotonic()  # before the timer's 1 s begins: the lock is held at least that long after it
        timer.start()
        code, out, err = invoke(*WRITERS[command](target), "--wait")
        waited = time.monotonic() - start
        timer.join()
    assert code == 0, out + err
    assert waited >= 1.0, f"{command} --wait returned after {waited:.2f} s while the lock was held"
    assert snapshot(outside) == around


def test_wait_says_it_waits(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(DEMO_TARGET, target)
    with lock_held(target, tmp_path / "gate") as release:
        proc = subprocess.Popen([sys.executable, "-m", "irsurgeon", "patch", str(target), "--checkpoint",
                                 str(DEMO_CKPT), "--wait"], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        seen = []
        while not any("waiting for it to finish" in line for line in seen):
            line = proc.stdout.readline()  # the run blocks on the lock right after this line
            assert line, (seen, proc.stderr.read())
            seen.append(line)
        release()
    out, err = proc.communicate(timeout=120)
    assert "another irsurgeon run holds this directory; waiting for it to finish" in seen[-1]
    assert proc.returncode == 0 and "wrote openvino_mtp_model" in out, err


# --- leftovers that are not irsurgeon's ----------------------------------------------------------------------------

def test_staging_link_to_an_outside_journal_is_reported_and_refused(sandbox):
    """The attack: `.irsurgeon-staging` links to a folder holding a journal and an `.orig` for a target file."""
    target, outside = sandbox
    bait = outside / "bait"
    bait.mkdir()
    (bait / "journal.json").write_text(json.dumps(["openvino_language_model.xml"]))
    (bait / "openvino_language_model.xml.orig").write_text("attacker's model")
    (target / STAGE_DIR).symlink_to(bait)
    before, around = snapshot(target), snapshot(outside)
    code, out, _ = invoke("verify", target)
    assert code == 1 and "interrupted run" in out and "a link" in out and str(target / STAGE_DIR) in out, out
    for args in (["patch", target, "--checkpoint", DEMO_CKPT], ["annotate", target],
                 ["build-mtp", DEMO_CKPT, "-o", target]):
        code, _, err = invoke(*args)
        one_line_error(code, err, str(target / STAGE_DIR), "remove it by hand")
    assert snapshot(target) == before and snapshot(outside) == around


@pytest.mark.parametrize("journal", ["bare-list", "dict"])
def test_shipped_journal_never_deletes_the_files_it_names(sandbox, journal):
    """A journal inside a downloaded directory, naming the language model's weights: nothing is removed."""
    target, outside = sandbox
    (target / STAGE_DIR).mkdir()
    names = ["openvino_language_model.bin", "openvino_language_model.xml"]
    (target / STAGE_DIR / "journal.json").write_text(json.dumps(
        names if journal == "bare-list" else {"files": names, "replaced": []}))
    before, around = snapshot(target), snapshot(outside)
    code, out, _ = invoke("verify", target)
    assert code == 1 and "journal.json" in out and "not a journal irsurgeon wrote" in out, out
    code, _, err = invoke("patch", target, "--checkpoint", DEMO_CKPT)
    one_line_error(code, err, "journal.json", "by hand")
    assert snapshot(target) == before and snapshot(outside) == around


def test_half_done_commit_of_irsurgeon_is_still_rolled_back(sandbox):
    """The counterpart: a real killed commit is recognised, reported, and undone by the next writer."""
    target, outside = sandbox
    before, around = snapshot(target), snapshot(outside)
    assert killed_commit(target, {"openvino_language_model.xml": "new", "openvino_mtp_model.xml": "head"}, 3) == -9
    code, out, _ = invoke("verify", target)
    assert code == 1 and "half-done commit" in out, out
    left = snapshot(target)
    invoke("annotate", target, "--dry-run")  # fails on the half-new language model, and clears nothing
    assert snapshot(target) == left
    code, out, err = invoke("build-mtp", DEMO_CKPT, "-o", target)
    assert code == 0 and "rolled back an interrupted commit" in out, out + err
    assert not (target / STAGE_DIR).exists()
    assert snapshot(target) == {**before, **{k: v for k, v in snapshot(target).items() if "mtp" in k}}
    assert snapshot(outside) == around


# --- links out of a checkpoint --------------------------------------------------------------------------------------

def build(snap: Path, out: Path) -> tuple[int, str]:
    code, out_text, err = invoke("build-mtp", snap, "-o", out)
    return code, out_text + err


@pytest.mark.parametrize("layout", ["plain-blobs", "shared-store"])
def test_real_hugging_face_cache_layouts_are_followed(tmp_path, layout):
    snap = hub_snapshot(tmp_path, shared_store=layout == "shared-store")
    code, text = build(snap, tmp_path / "out")
    assert code == 0, text


def test_blobs_that_is_a_link_to_any_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "outside" / "anything"
    snap = hub_snapshot(tmp_path, blobs_elsewhere=elsewhere)
    around = snapshot(tmp_path / "outside")
    code, text = build(snap, tmp_path / "out")
    assert code == 1 and "outside the checkpoint" in text and "config.json" in text, text  # the first file read
    assert snapshot(tmp_path / "outside") == around and not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["other-repo-blobs", "blob-links-out", "store-without-marker"])
def test_links_that_only_look_like_the_cache_are_refused(tmp_path, where):
    snap = hub_snapshot(tmp_path, shared_store=where == "store-without-marker")
    repo = snap.parent.parent
    shard = snap / "model.safetensors"
    blob = repo / "blobs" / shard.readlink().name
    if where == "other-repo-blobs":  # a snapshot link into a sibling repo's blobs
        other = repo.parent / "models--evil--x" / "blobs"
        other.mkdir(parents=True)
        shutil.copy(shard, other / "w")
        shard.unlink()
        shard.symlink_to(Path("..", "..", "..", "models--evil--x", "blobs", "w"))
    elif where == "blob-links-out":  # the blob itself a link to a file outside the cache
        outside = tmp_path / "outside.safetensors"
        shutil.copy(blob, outside)
        blob.unlink()
        blob.symlink_to(outside)
    else:
        (repo.parent / "blobs" / ".huggingface-shared-blobs").unlink()
    code, text = build(snap, tmp_path / "out")
    assert code == 1 and "outside the checkpoint" in text, text


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "model.safetensors"])
def test_checkpoint_files_linked_out_of_the_checkpoint_are_refused(tmp_path, name):
    """Not only the shards an index names: config.json, the index and a lone model.safetensors follow one rule."""
    from irsurgeon.weights.safetensors_io import SafetensorsFile

    ckpt, outside = tmp_path / "ckpt", tmp_path / "outside"
    shutil.copytree(DEMO_CKPT, ckpt)
    outside.mkdir()
    if name == "model.safetensors.index.json":
        st = SafetensorsFile(ckpt / "model.safetensors")
        (outside / name).write_text(json.dumps({"weight_map": {n: "model.safetensors" for n in st.tensors}}))
        st.close()
    else:
        shutil.move(ckpt / name, outside / name)
    (ckpt / name).symlink_to(outside / name)
    around = snapshot(outside)
    code, text = build(ckpt, tmp_path / "out")
    assert code == 1 and "outside the checkpoint" in text and name in text, text
    assert snapshot(outside) == around and not (tmp_path / "out").exists()


# --- the lock covers the whole patch, not only its commit ------------------------------------------------------------

@pytest.fixture
def building(monkeypatch):
    """A patch run on a thread, held inside its build (after judging the target, before staging) until released."""
    import irsurgeon.flows.patch as flow
    inside, go = threading.Event(), threading.Event()
    real = flow.build

    def held_build(family, staging):
        inside.set()
        assert go.wait(120)
        return real(family, staging)
    monkeypatch.setattr(flow, "build", held_build)
    runs = []

    def start(target, ckpt):
        def run():
            try:
                runs.append(flow.patch(target, ckpt, options=flow.Options(weight_format="f32")))
            except BaseException as e:  # handed to the test below
                runs.append(e)
        thread = threading.Thread(target=run)
        thread.start()
        assert inside.wait(120), runs
        return thread
    yield start, go, runs
    go.set()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_second_patch_started_while_the_first_builds_is_refused_at_once(tmp_path, family, building):
    start, go, runs = building
    target, ckpt = fixture_pair(family, tmp_path)
    first = start(target, ckpt)
    before = snapshot(target)
    code, _, err = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f32")
    one_line_error(code, err, "another irsurgeon run holds", str(target))
    assert snapshot(target) == before
    go.set()
    first.join(120)
    assert runs and not isinstance(runs[0], BaseException) and runs[0].written, runs


@pytest.mark.parametrize("family", FAMILIES)
def test_a_second_patch_with_wait_waits_for_the_whole_first_run_and_then_finds_it_done(tmp_path, family, building):
    start, go, runs = building
    target, ckpt = fixture_pair(family, tmp_path)
    first = start(target, ckpt)
    threading.Timer(1.0, go.set).start()
    code, out, err = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f32", "--wait")
    first.join(120)
    assert runs and not isinstance(runs[0], BaseException) and runs[0].written, runs
    assert code == 0, out + err
    assert "already has its draft" in out + err and "wrote" not in out + err, out + err
