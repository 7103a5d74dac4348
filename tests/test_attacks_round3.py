"""Attacks on the ranged hub fetch, synth's output folders, the transaction's staging check, the generation-config
check and show's tokenizer role, each a rule of docs/reliability.md and docs/cli.md that a hostile server, cache,
directory or file broke until fixed.

The hub cases run the real CLI against the look-alike hub on 127.0.0.1 (lab/hub_server.py); the others call the
product's functions, with a child process where a kill is the attack.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.families import WRITABLE
from lab.hub import run_cli
from lab.hub_server import Faults, HubServer, Revision, split_checkpoint
from irsurgeon.core.errors import ConfigError, OutputError
from irsurgeon.synth import synthesize
from irsurgeon.synth.registry import default_spec
from irsurgeon.weights.hub import store

REPO = "acme/qwen35-tiny"
SHARD = "model-00002-of-00002.safetensors"  # the head beside a large tensor: never read whole, never hashed
FILLER = {"model.visual.blocks.filler.weight": (np.zeros(1 << 21, np.uint16), "BF16")}
OTHER_COMMIT = "1234567890abcdef1234567890abcdef12345678"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A two-shard repo (the embeddings; the rest with the head), and the same shard with a header 64 bytes longer:
    every tensor the same, every offset in the file 64 bytes further (another version of the file)."""
    base = tmp_path_factory.mktemp("round3")
    s = synthesize(base / "s", "qwen35", default_spec("qwen35").with_(vocab=4096), seed=1)
    files = split_checkpoint(s.ckpt, base / "repo", 2, FILLER)
    data = bytearray(files[SHARD].read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    longer = data[8:8 + n] + b" " * 64
    (base / "v2").mkdir()
    (base / "v2" / SHARD).write_bytes(struct.pack("<Q", n + 64) + longer + data[8 + n:])
    return files, base / "v2" / SHARD


def one_error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


def build_from_hub(files: dict, tmp_path, faults: Faults | None = None, cache=None):
    """`build-mtp REPO -o tmp_path/out` against the look-alike hub serving files (with faults)."""
    with HubServer({REPO: {"main": Revision(files)}}, faults=faults or Faults()) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", "--cache-dir", cache or tmp_path / "cache",
                          endpoint=hub.url, home=tmp_path / "hf")
    return proc


def cached(cache) -> list[str]:
    return sorted(p.name for p in cache.glob("irsurgeon/models--acme--qwen35-tiny/snapshots/*/*"))


# --- the hub: bytes of two versions or two commits are never mixed ---------------------------------------------------

def test_a_shard_replaced_on_the_server_between_two_range_requests_is_one_line(repo, tmp_path):
    """The header comes from one version, the tensors from the other (their ETag changes): a head built from them
    would be the bytes 64 further on, shaped right and wrong."""
    files, v2 = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(swap_file=(SHARD, v2))))
    assert SHARD in error and "changed on the server during the download" in error, error
    assert not (tmp_path / "out").exists() and SHARD not in cached(tmp_path / "cache")


def test_a_shard_answered_for_another_commit_is_refused(repo, tmp_path):
    """config.json and the index came from one commit; the shard's HEAD says another (the branch moved between two
    requests): its bytes would be filed under the first commit."""
    files, _ = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(file_commit={SHARD: OTHER_COMMIT})))
    assert SHARD in error and OTHER_COMMIT in error and "not mixing two commits' files" in error, error
    assert not (tmp_path / "out").exists() and SHARD not in cached(tmp_path / "cache")


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_a_redirect_to_a_location_that_is_not_http_is_refused_by_name(repo, tmp_path, location):
    """It used to read 'connection lost ... set HF_HUB_OFFLINE=1', which is neither what happened nor a remedy."""
    files, _ = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(location={SHARD: location})))
    assert SHARD in error and location in error and "not an http(s) URL" in error, error


@pytest.mark.slow  # two CLI runs
def test_what_the_cache_stored_under_another_etag_is_fetched_again(repo, tmp_path):
    """The shard's bytes change at the same commit between two runs (a killed first run left its header stored):
    the second run's HEAD names another ETag, so the stored header is not used with the new tensors."""
    files, v2 = repo
    commit = Revision(files).commit
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "a", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
    assert first.returncode == 0, first.stderr
    (folder,) = (tmp_path / "cache").glob("irsurgeon/*/snapshots/*")
    (folder / SHARD).unlink()  # as if killed after the header was stored
    with HubServer({REPO: {"main": Revision({**files, SHARD: v2}, commit=commit)}}) as hub:
        again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "b", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
        header_reads = [e for e in hub.log if e[2] and e[2].startswith("bytes=0-")]
    assert again.returncode == 0, again.stderr
    assert header_reads, "\n".join(map(str, hub.log))  # read again, not taken from the cache
    # both versions hold the same tensors: the same head, unless one's header was read with the other's bytes
    head = "openvino_mtp_model.bin"
    assert (tmp_path / "b" / head).read_bytes() == (tmp_path / "a" / head).read_bytes()


@pytest.mark.parametrize("link", ["models--acme--qwen35-tiny", "models--acme--qwen35-tiny/snapshots",
                                  "models--acme--qwen35-tiny/blobs", ".locks"])
def test_a_link_among_huggingface_hubs_folders_is_refused_before_it_writes_through_it(repo, tmp_path, link):
    """huggingface_hub follows a link in its repo folder and writes config.json there, outside the cache; the
    checkpoint reader then refused what it had written. Now nothing is written and the link is named."""
    files, _ = repo
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (cache / link).parent.mkdir(parents=True, exist_ok=True)
    (cache / link).symlink_to(outside)
    error = one_error(build_from_hub(files, tmp_path, cache=cache))
    assert f"{cache / link}: a link in the Hugging Face cache" in error, error
    assert list(outside.iterdir()) == []


def test_a_stored_header_the_reader_refuses_is_not_used(tmp_path):
    """A .ranges file whose header bytes the local reader refuses (an absurd length, a tensor past the file) is not
    usable: fetched again, where it used to refuse the shard on every later run, offline or not."""
    def header(entries: dict) -> bytes:
        raw = json.dumps(entries).encode()
        return struct.pack("<Q", len(raw)) + raw

    good = header({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
    past = header({"t": {"dtype": "F32", "shape": [2], "data_offsets": [992, 1000]}})
    with store.Folder(tmp_path / "cache", "acme/tiny", "c" * 40) as folder:
        for name, first, usable in (("good", good, True), ("2^63", struct.pack("<Q", 1 << 63) + b"{}", False),
                                    ("past the file", past, False), ("cut short", good[:20], True)):
            store.write_ranges(folder, "x.safetensors", len(good) + 8, [(0, first)], "e" * 64)
            found = store.read_ranges(folder, "x.safetensors")
            assert (found is not None) == usable, name
            if usable:
                assert found == (len(good) + 8, [(0, first)], "e" * 64)


# --- synth: OUT_DIR holds the earlier pair or the new one, never one of each -----------------------------------------

MOVE_THEN_SIGNAL = r'''
import os, signal, sys
from irsurgeon.synth import output
out, at, sig, text = sys.argv[1], int(sys.argv[2]), getattr(signal, sys.argv[3]), sys.argv[4]
real, calls = os.rename, []
def rename(*args, **kwargs):
    calls.append(args)
    if len(calls) == at:
        os.kill(os.getpid(), sig)
    return real(*args, **kwargs)
os.rename = rename
with output.output_pair(out, False, True) as (target, ckpt):
    (target / "f").write_text(text)
    (ckpt / "f").write_text(text)
'''


def pair_state(out) -> tuple[str | None, str | None]:
    return tuple((out / name / "f").read_text() if (out / name / "f").exists() else None for name in ("target", "ckpt"))


def old_pair(out, earlier: bool = True) -> None:
    """OUT_DIR holding an earlier synth output (or, not earlier, nothing yet)."""
    for name in ("target", "ckpt") if earlier else ():
        (out / name).mkdir(parents=True)
        (out / name / "f").write_text("old")


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}


def move_then_signal(out, at: int, sig: str) -> int:
    return subprocess.run([sys.executable, "-c", MOVE_THEN_SIGNAL, str(out), str(at), sig, "new"], env=child_env(),
                          capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("earlier,at", [(True, 1), (True, 2), (True, 3), (True, 4), (False, 1), (False, 2)])
def test_synth_killed_between_its_renames_is_rolled_back_by_the_next_run(tmp_path, earlier, at):
    """SIGKILL before the at-th rename of the move (--force over an earlier output: four; into an empty OUT_DIR:
    two). The next run (here its first step, recover) puts back what OUT_DIR held: the old target came back
    missing, or a new target beside the old ckpt, before the move was undone."""
    from irsurgeon.synth.output import recover

    out = tmp_path / "out"
    old_pair(out, earlier)
    before = pair_state(out)
    assert move_then_signal(out, at, "SIGKILL") == -9
    recover(out, False)
    assert pair_state(out) == before and sorted(p.name for p in out.iterdir()) == (["ckpt", "target"] if earlier
                                                                                     else [])


RECOVER_THEN_KILL = r'''
import os, signal, sys
from irsurgeon.synth import output
at, calls = int(sys.argv[2]), []
def wrap(real):
    def call(*args, **kwargs):
        calls.append(args)
        if len(calls) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for name in ("rename", "unlink", "rmdir"):
    setattr(os, name, wrap(getattr(os, name)))
output.recover(sys.argv[1], False)
'''


@pytest.mark.slow  # ~90 child processes
@pytest.mark.parametrize("earlier,at", [(True, 1), (True, 2), (True, 3), (True, 4), (False, 1), (False, 2)])
def test_a_killed_rollback_of_a_killed_synth_is_finished_by_the_run_after(tmp_path, earlier, at):
    """The move killed before its at-th rename, then the next run's rollback killed at each of its renames and
    removals in turn: the run after that still ends with what OUT_DIR held first (a rollback done, then killed
    while the staging folder went, once took the earlier ckpt for a new one that had moved in)."""
    from irsurgeon.synth.output import recover

    for call in range(1, 100):
        out = tmp_path / str(call)
        old_pair(out, earlier)
        before = pair_state(out)
        assert move_then_signal(out, at, "SIGKILL") == -9
        proc = subprocess.run([sys.executable, "-c", RECOVER_THEN_KILL, str(out), str(call)], env=child_env(),
                              capture_output=True, timeout=60)
        if proc.returncode == 0:  # the rollback made fewer calls: every one was a kill point
            break
        recover(out, False)
        assert pair_state(out) == before and not list(out.glob(".synth-*")), call
    assert call > 3 and pair_state(out) == before


def test_synth_interrupted_during_its_renames_finishes_the_move_first(tmp_path):
    """Ctrl-C between two renames is held until the move is done: the new pair, then the interruption."""
    out = tmp_path / "out"
    old_pair(out)
    assert move_then_signal(out, 2, "SIGINT") != 0
    assert pair_state(out) == ("new", "new") and sorted(p.name for p in out.iterdir()) == ["ckpt", "target"]


@pytest.mark.parametrize("kind", ["a link", "a file", "a folder of the user's"])
def test_an_entry_named_like_synths_staging_that_synth_did_not_make_is_refused_never_removed(tmp_path, kind):
    """It used to be removed as a killed run's staging (a folder of the user's with it, even without --force), or
    to end the run with 'Error: Cannot call rmtree on a symbolic link'."""
    from irsurgeon.synth.output import output_pair

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "keep").write_text("keep")
    entry = out / ".synth-abcd1234"
    {"a link": lambda: entry.symlink_to(outside), "a file": lambda: entry.write_text("x"),
     "a folder of the user's": lambda: (entry.mkdir(), (entry / "notes.txt").write_text("mine"))}[kind]()
    with pytest.raises(OutputError, match=r"\.synth-abcd1234: not a staging folder synth made"):
        with output_pair(out, False, True):
            pass
    assert (outside / "keep").read_text() == "keep" and (entry.is_symlink() or entry.exists())
    assert sorted(p.name for p in out.iterdir()) == [".synth-abcd1234"]


# --- the transaction: the staging folder checked again once the journal is written ---------------------------------

def test_a_staging_folder_moved_while_the_files_are_hashed_is_refused_before_anything_moves(tmp_path, monkeypatch):
    """The check before the journal came before the files were fsynced and hashed (seconds for a large head): a
    folder moved then took the journal with it, and a kill during the moves left a half patch that the next run,
    finding an empty staging folder under the name, could not roll back."""
    from irsurgeon.commit.transaction import JOURNAL, STAGE_DIR, DirectoryTransaction

    target = tmp_path / "target"
    target.mkdir()
    (target / "openvino_language_model.xml").write_text("old")
    real = DirectoryTransaction._prepare

    def prepare(self, name):
        if not (target / "moved-away").exists():
            os.rename(target / STAGE_DIR, target / "moved-away")
            (target / STAGE_DIR).mkdir()
        return real(self, name)

    monkeypatch.setattr(DirectoryTransaction, "_prepare", prepare)
    with DirectoryTransaction(target, writable=WRITABLE) as tx:
        tx.stage("openvino_language_model.xml").write_text("new")
        tx.stage("openvino_mtp_model.xml").write_text("head")
        with pytest.raises(OutputError, match="replaced or moved since files were staged in it; nothing was written"):
            tx.commit()
    assert (target / "openvino_language_model.xml").read_text() == "old"
    assert not (target / "openvino_mtp_model.xml").exists() and not list(target.rglob(JOURNAL))
    assert list((target / "moved-away").iterdir()) == []


# --- generation_config.json: what openvino-genai refuses, verify refuses, by key -----------------------------------

GENERATION_VALUES = {  # text in generation_config.json -> the key refused (None: openvino-genai reads it)
    '{"temperature": "hot"}': "temperature", '{"do_sample": "false"}': "do_sample", '{"max_length": "x"}':
    "max_length", '{"top_k": true}': "top_k", '{"echo": 1}': "echo", '{"top_p": {}}': "top_p",
    '{"num_assistant_tokens": 1.5}': "num_assistant_tokens", '{"stop_strings": [1]}': "stop_strings",
    '{"temperature": 1e400}': "a number", '{"top_p": NaN}': "a number", '{"x": [-Infinity]}': "a number",
    '{"temperature": true}': None, '{"max_new_tokens": 1.5}': None, '{"num_beams": [3]}': None,
    '{"stop_strings": ["</s>"]}': None, '{"repetition_penalty": null}': None, '{"early_stopping": "never"}': None,
}


@pytest.mark.parametrize("text", list(GENERATION_VALUES))
def test_a_generation_config_openvino_genai_refuses_is_refused_naming_the_key(tmp_path, text):
    """verify said 'readable JSON, token ids in range' of these, and verify --genai then stopped on openvino-genai's
    '[json.exception.type_error.302] type must be number, but is string', naming neither file nor key. Each
    verdict is also openvino-genai's own (its GenerationConfig reads the file as the pipelines do)."""
    import openvino_genai

    from irsurgeon.core.config import check_generation_config

    path = tmp_path / "generation_config.json"
    path.write_text(text)
    key = GENERATION_VALUES[text]
    try:
        openvino_genai.GenerationConfig(str(path))
        genai_refuses = False
    except RuntimeError:
        genai_refuses = True
    assert genai_refuses == (key is not None)
    if key is None:
        check_generation_config(path)
        return
    with pytest.raises(ConfigError) as e:
        check_generation_config(path)
    assert str(path) in str(e.value) and key in str(e.value) and "\n" not in str(e.value), e.value


# --- show: a string port does not make a model's weights disappear ---------------------------------------------------

def test_an_ir_with_a_string_input_and_matmul_weights_is_not_shown_as_a_tokenizer(tmp_path):
    """show said 'weights: none (a tokenizer: string ops over vocabulary tables)' of a 4 MiB f32 MatMul weight,
    because the IR also took a string input."""
    import openvino as ov
    import openvino.opset13 as ops

    from irsurgeon.ir.describe import show_ir

    text = ops.parameter([-1], ov.Type.string, name="text")
    x = ops.parameter([1, 256], np.float32, name="x")
    w = ops.constant(np.ones((256, 4096), np.float32))
    model = ov.Model([ops.matmul(x, w, False, False).output(0)], [text, x], "lm_with_a_string_input")
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    info = show_ir(tmp_path / "m.xml")
    assert info["role"] is None and info["weights"]["count"] == 1, info["weights"]
