"""Hostile checkpoints: safetensors headers, files truncated while a build reads them, the memory budget, and a shard
that is not a regular file.

A checkpoint truncated by another process during a build is made for real (a subprocess build, os.truncate from the
test); an absurd checkpoint whose header matches its config is a sparse file that really holds 128 GiB and more.
Expected: exit 1 with one `Error:` line naming the file and tensor, never SIGBUS, never a large allocation.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import invoke, one_error, refused
from lab.demo import DEMO_TARGET, sharded_demo_ckpt, writable_copy
from lab.hostile import DEMO_CKPT, truncation_race
from lab.hostile_forms import CANARY, absurd_checkpoint, secret_link
from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from irsurgeon.weights.safetensors_io import SafetensorsFile
from helpers.tiers import every_nth

pytestmark = pytest.mark.usefixtures("no_hang")  # every test: a read that blocks fails it (conftest.py)


def test_safetensors_header_length_is_not_echoed(tmp_path):
    """The first 8 bytes of a linked-to text file are its 'header length': printing it would print those bytes."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    secret_link(ckpt / "model.safetensors")
    leaked = str(struct.unpack("<Q", CANARY.encode()[:8])[0])
    err = one_error(invoke("build-mtp", ckpt, "-o", tmp_path / "out"))
    assert "model.safetensors" in err and leaked not in err and CANARY not in err


# --- safetensors --------------------------------------------------------------------------------------------------

def rewrite_header(path: Path, raw: bytes) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


@pytest.mark.parametrize("form, expected", [
    ("fifo", "is a FIFO"), ("dev-zero", "is a character device"),
    ("deep", "nested deeper than 64"), ("huge-int", "a number of more than 40 digits"),
])
def test_hostile_safetensors_are_refused(tmp_path, form, expected):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    st = ckpt / "model.safetensors"
    if form in ("fifo", "dev-zero"):
        st.unlink()
        os.mkfifo(st) if form == "fifo" else st.symlink_to("/dev/zero")
        with pytest.raises(CheckpointError, match=expected):
            SafetensorsFile(st)
        return
    raw = b"[" * 100_000 + b"]" * 100_000 if form == "deep" else \
        b'{"mtp.fc.weight": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 4]}}'
    rewrite_header(st, raw)
    err = one_error(invoke("build-mtp", ckpt, "-o", tmp_path / "out"))
    assert "model.safetensors" in err and expected in err


def test_a_checkpoint_truncated_after_opening_is_a_clean_error(tmp_path):
    """Deterministic half of the race: the header was read, then the file shrank. With a memory map this was SIGBUS."""
    write_checkpoint(tmp_path, SynthSpec(hidden=256, intermediate=512), seed=1)
    st = SafetensorsFile(tmp_path / "model.safetensors")
    try:
        info = st.tensors["mtp.fc.weight"]
        os.truncate(st.path, st.data_start + info.begin + 100)
        for read in (st.get, st.raw):
            with pytest.raises(CheckpointError, match=r"tensor 'mtp.fc.weight'.*truncated while being read"):
                read("mtp.fc.weight")
    finally:
        st.close()


def test_reading_by_pread_matches_the_stored_values(tmp_path):
    stored = write_checkpoint(tmp_path, SynthSpec(), seed=3)
    st = SafetensorsFile(tmp_path / "model.safetensors")
    try:
        for name, value in stored.items():
            got = st.get(name)
            assert got.dtype == np.float32 and np.array_equal(got, value), name
    finally:
        st.close()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_checkpoints_build(tmp_path, dtype):
    """A float32 tensor is handed to openvino without a copy; a read-only (memory-mapped) one was refused with
    'array is not writeable'."""
    write_checkpoint(tmp_path / "ckpt", SynthSpec(), seed=5, dtype=dtype)
    result = invoke("build-mtp", tmp_path / "ckpt", "-o", tmp_path / "out", "--weight-format", "f32")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "openvino_mtp_model.bin").stat().st_size > 0


def test_bf16_is_decoded_in_pieces(tmp_path, monkeypatch):
    import irsurgeon.weights.safetensors_io as sio

    stored = write_checkpoint(tmp_path, SynthSpec(), seed=4)
    monkeypatch.setattr(sio, "DECODE_CHUNK", 1000)  # fc.weight has 64 x 128: nine pieces, the last one short
    st = SafetensorsFile(tmp_path / "model.safetensors")
    try:
        assert np.array_equal(st.get("mtp.fc.weight"), stored["mtp.fc.weight"])
    finally:
        st.close()


@pytest.mark.parametrize("keep", every_nth([0.5, 0.9, 0.1], 3, ids=str))  # the others: CI's extended tier
def test_concurrent_truncation_during_a_build_never_kills_the_process(tmp_path, keep):
    """A real race: build-mtp in a subprocess, the checkpoint truncated from here once the build has it open."""
    outcome = truncation_race(tmp_path, keep)
    assert outcome.code == 1 and not outcome.problems, (outcome.problems, outcome.stderr)
    assert "model.safetensors" in outcome.stderr and "truncated" in outcome.stderr, outcome.stderr
    assert not (tmp_path / "out").exists()


# --- memory budget ------------------------------------------------------------------------------------------------

def test_available_memory_is_what_the_kernel_reports():
    available = limits.available_memory()
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = (int(fields["MemTotal"].split()[0]) + int(fields["SwapTotal"].split()[0])) * 1024
    assert 0 < available <= total


def test_absurd_but_consistent_checkpoint_is_refused_by_the_memory_budget(tmp_path):
    """hidden_size at config.py's bound, headers that match it, a sparse file that holds it: before the budget this
    tried to decode a 128 GiB fc.weight."""
    size = absurd_checkpoint(tmp_path / "ckpt")
    assert size > 128 << 30
    tracemalloc.start()
    try:
        err = one_error(invoke("build-mtp", tmp_path / "ckpt", "-o", tmp_path / "out"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "building its draft needs" in err and "GiB of memory, but only" in err, err
    assert peak < 32 << 20
    assert not (tmp_path / "out").exists()


def test_a_tensor_read_checks_the_budget_too(tmp_path):
    absurd_checkpoint(tmp_path / "ckpt", hidden=1 << 16)
    st = SafetensorsFile(tmp_path / "ckpt" / "model.safetensors")
    try:
        with pytest.raises(CheckpointError, match=r"tensor 'mtp.fc.weight' \(BF16 \[65536, 131072\]\) needs 32.0 GiB"):
            st.get("mtp.fc.weight")
    finally:
        st.close()


def test_the_budget_refuses_only_what_does_not_fit(tmp_path, monkeypatch):
    from irsurgeon.draft.load import memory_need
    from irsurgeon.flows.standalone import build_mtp_model
    from irsurgeon.families.qwen35_mtp.model import load_config, tensors

    need = memory_need(tensors(load_config(DEMO_CKPT / "config.json")).shapes())
    monkeypatch.setattr(limits, "available_memory", lambda: need - 1)
    with pytest.raises(CheckpointError, match="building its draft needs"):
        build_mtp_model(DEMO_CKPT)
    monkeypatch.setattr(limits, "available_memory", lambda: need)
    assert build_mtp_model(DEMO_CKPT).get_parameters()


def test_synth_at_its_largest_sizes_is_refused_by_the_memory_budget(tmp_path):
    """Every size at synth's own bound: ~86 GiB of float32 weights, refused before a folder is made."""
    err = one_error(invoke("synth", tmp_path / "out", "--hidden", 8192, "--vocab", 1 << 18, "--layers", 64,
                           "--heads", 64, "--kv-heads", 8, "--head-dim", 128))
    assert "needs" in err and "GiB of memory, but only" in err
    assert not (tmp_path / "out").exists()


def test_a_megabyte_tensor_name_is_cut_short_in_errors(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    rewrite_header(ckpt / "model.safetensors", json.dumps({"x" * (1 << 20): {"dtype": "F32"}}).encode())
    err = one_error(invoke("build-mtp", ckpt, "-o", tmp_path / "out"))
    assert len(err) < 400 and f"({1 << 20} characters)" in err


def test_synth_refuses_a_negative_seed_before_writing(tmp_path):
    result = invoke("synth", tmp_path / "out", "--seed", -1)
    assert result.exit_code == 2 and "--seed" in result.output and "unexpected" not in result.output
    assert not (tmp_path / "out").exists()


# --- a checkpoint shard that is not a regular file ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_embedding_shard_that_is_not_a_regular_file_is_refused_by_name(tmp_path, kind):
    ckpt = sharded_demo_ckpt(tmp_path / "ckpt")
    shard = ckpt / "model-1.safetensors"  # the token embeddings; the mtp.* tensors are in model-2
    shard.unlink()
    os.mkfifo(shard) if kind == "fifo" else shard.mkdir()
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    what = "a FIFO (named pipe)" if kind == "fifo" else "a directory"
    expected = f"{shard}: is {what}; expected a regular file"
    assert expected in refused(("patch", target, "--checkpoint", ckpt), target)
    result = invoke("verify", target, "--checkpoint", ckpt)
    assert result.exit_code == 1 and f"FAIL checkpoint identity: {expected}" in result.output, result.output


# --- headers whose cost or layout is hostile --------------------------------------------------------------------------

def hostile_copy(tmp_path: Path, form: str) -> Path:
    """The demo checkpoint with the hostile_forms safetensors form applied to its model.safetensors."""
    from lab.hostile_forms import SAFETENSORS_FORMS

    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO_CKPT, ckpt)
    SAFETENSORS_FORMS[form](ckpt / "model.safetensors")
    return ckpt


def test_a_header_of_a_million_tensors_is_refused_before_its_entries_are_parsed(tmp_path, monkeypatch):
    """A consistent header listing a million 1-element tensors (each with bytes of its own) took 29 s and 2.3 GB of
    a patch before it was refused (Gemma 4) or accepted (Qwen3.5); now its entries are counted on the raw bytes and
    the JSON is never built."""
    import irsurgeon.weights.safetensors_io as sio

    ckpt = hostile_copy(tmp_path, "header-million-tensors")
    parsed, checked = [], []
    real_loads, real_check = limits.json.loads, sio.check_entry
    monkeypatch.setattr(limits.json, "loads", lambda *a, **k: parsed.append(1) or real_loads(*a, **k))
    monkeypatch.setattr(sio, "check_entry", lambda *a: checked.append(1) or real_check(*a))
    with pytest.raises(CheckpointError) as e:
        SafetensorsFile(ckpt / "model.safetensors")
    line = str(e.value)
    assert f"{ckpt / 'model.safetensors'}: header: lists more than {limits.SAFETENSORS_TENSORS} entries" in line, line
    assert "\n" not in line and len(line) < 300
    assert not parsed and not checked  # refused on the count, before json.loads and before any entry


def test_the_tensor_limit_is_exact(tmp_path, monkeypatch):
    """At the limit a file is read; one entry more is refused (the count is of entries, not of bytes)."""
    write_checkpoint(tmp_path, SynthSpec(), seed=1)
    st = SafetensorsFile(tmp_path / "model.safetensors")
    entries = len(st.tensors) + 1  # and __metadata__
    st.close()
    monkeypatch.setattr(limits, "SAFETENSORS_TENSORS", entries)
    SafetensorsFile(tmp_path / "model.safetensors").close()
    monkeypatch.setattr(limits, "SAFETENSORS_TENSORS", entries - 1)
    with pytest.raises(CheckpointError, match=f"lists more than {entries - 1} entries"):
        SafetensorsFile(tmp_path / "model.safetensors")


@pytest.mark.extended  # CI's extended tier: the reader's own refusal of it runs in the default tier
def test_a_million_tensor_header_through_build_mtp_is_one_line_and_writes_nothing(tmp_path):
    ckpt = hostile_copy(tmp_path, "header-million-tensors")
    err = one_error(invoke("build-mtp", ckpt, "-o", tmp_path / "out"))
    assert "model.safetensors" in err and str(limits.SAFETENSORS_TENSORS) in err, err
    assert not (tmp_path / "out").exists()


def entry_header(entries: str) -> bytes:
    """A header of entries given as JSON text ("name": {...}, ...), data of 16 bytes after it."""
    raw = ("{" + entries + "}").encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(range(16))


F32 = '{"dtype": "F32", "shape": [%d], "data_offsets": [%d, %d]}'


SHARED = [
    ("k and v aliased", f'"k": {F32 % (2, 0, 8)}, "v": {F32 % (2, 0, 8)}, "o": {F32 % (2, 8, 16)}',
     "tensors 'k' and 'v' share bytes 0-8"),
    ("partly overlapping", f'"a": {F32 % (3, 0, 12)}, "b": {F32 % (2, 8, 16)}', "tensors 'a' and 'b' share bytes 8-12"),
    ("inside another", f'"a": {F32 % (4, 0, 16)}, "b": {F32 % (1, 4, 8)}', "tensors 'a' and 'b' share bytes 4-8"),
    ("named twice, other bytes", f'"a": {F32 % (2, 0, 8)}, "a": {F32 % (2, 8, 16)}', "names 'a' twice"),
    ("named twice, same entry", f'"a": {F32 % (2, 0, 8)}, "b": {F32 % (2, 8, 16)}, "a": {F32 % (2, 0, 8)}',
     "names 'a' twice"),
    ("a field named twice", '"a": {"dtype": "F32", "dtype": "F32", "shape": [4], "data_offsets": [0, 16]}',
     "names 'dtype' twice"),
]


@pytest.mark.parametrize("case, entries, expected", SHARED, ids=[c[0] for c in SHARED])
def test_tensors_sharing_bytes_or_a_name_are_refused(tmp_path, case, entries, expected):
    """safetensors refuses both (huggingface/safetensors, safetensors/src/tensor.rs, Metadata::validate: tensors
    sorted by offsets must each start where the previous ended, else InvalidOffset); Python's json would keep the
    last of two equal names, so a reader of the first one would build from other bytes."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(entry_header(entries))
    with pytest.raises(CheckpointError) as e:
        SafetensorsFile(path)
    assert str(e.value).startswith(f"{path}: header") and expected in str(e.value), str(e.value)


def test_empty_tensors_share_no_bytes(tmp_path):
    """Zero-length tensors at one offset hold no bytes: accepted, as safetensors accepts them; a gap is accepted."""
    path = tmp_path / "model.safetensors"
    path.write_bytes(entry_header(f'"e": {F32 % (0, 4, 4)}, "f": {F32 % (0, 4, 4)}, "a": {F32 % (1, 0, 4)}, '
                                  f'"b": {F32 % (1, 8, 12)}'))
    st = SafetensorsFile(path)
    try:
        assert sorted(st.tensors) == ["a", "b", "e", "f"]
    finally:
        st.close()


@pytest.mark.parametrize("form, expected", [("header-aliased-tensors", "share bytes"),
                                            ("header-duplicate-name", "twice")])
def test_aliased_or_twice_named_tensors_through_build_mtp_are_one_line(tmp_path, form, expected):
    ckpt = hostile_copy(tmp_path, form)
    err = one_error(invoke("build-mtp", ckpt, "-o", tmp_path / "out"))
    assert "model.safetensors" in err and expected in err, err
    assert not (tmp_path / "out").exists()
