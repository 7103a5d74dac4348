"""Checkpoint identity: a head is only built from the checkpoint its target was exported from.

Tolerance (irsurgeon.families.qwen35_mtp.identity): each element may differ by the rounding the two storages can add to one original
weight: half an ulp of a float storage (f16 2^-11, bf16 2^-8 relative), half a quantisation step of integer codes
(a whole step for a clipped extreme code), times 1.1. The tests below show both sides of that bound: every real
pairing lands under it (int8/int4 close to it, as half a step is the true worst case), and another seed, or a single
value moved by a few times the rounding, lands far above it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner

from lab.dirsnap import snapshot
from irsurgeon.cli import main
from irsurgeon.families.qwen35_mtp.identity import check_identity, sample_ids
from irsurgeon.ir.export import TEXT_EMBEDDINGS as EMBEDDINGS_XML
from irsurgeon.synth import synthesize
from irsurgeon.families.qwen35_mtp.strip import strip_mtp
from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

ROOT = Path(__file__).resolve().parents[3]
EMBED = "model.language_model.embed_tokens.weight"
PAIRS = {"dense-fp16": "qwen35-dense", "dense-int4": "qwen35-dense", "dense-bigram-fp16": "qwen35-dense-bigram",
         "dense-bigram-int4": "qwen35-dense-bigram", "moe-int4": "qwen35-moe", "dense-bf16": "qwen35-dense",
         "dense-f32ckpt-fp32": "qwen35-dense-f32"}


def run(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Two seeds of one synthetic config (same config.json, different weights); f32 targets."""
    base = tmp_path_factory.mktemp("seeds")
    return {seed: synthesize(base / str(seed), "qwen35", seed=seed) for seed in (1, 2)}


def quantised_target(src: Path, dest: Path, mode: str) -> Path:
    """A copy of a target whose token-embedding table nncf compressed (int8 per row, or int4 in groups of 16)."""
    import nncf

    shutil.copytree(src, dest)
    model = ov.Core().read_model(src / EMBEDDINGS_XML)  # read from the source: the copy's .bin is rewritten
    extra = {"group_size": 16, "ratio": 1.0, "all_layers": True} if "INT4" in mode else {}
    model = nncf.compress_weights(model, mode=getattr(nncf.CompressWeightsMode, mode), **extra)
    ov.save_model(model, dest / EMBEDDINGS_XML, compress_to_fp16=False)
    return dest


def test_sample_ids_are_distinct_and_spread():
    ids = sample_ids(248320)
    assert len(ids) == 16 and len(set(ids)) == 16 and ids[0] > 0 and ids[-1] < 248320
    assert np.all(np.diff(ids) == 248320 // 16)
    assert list(sample_ids(5)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_reference_exports_match_their_own_checkpoints(export, ckpt, tmp_path, name):
    target = strip_mtp(export(name), tmp_path / "t")
    result = check_identity(target, ckpt(PAIRS[name]))
    assert result.ok, result.detail
    if "int4" in name:  # optimum keeps the embeddings in int8 per row: the differences reach into the bound
        assert 0.5 < result.worst_ratio <= 1 and "i8 table" in result.detail
    else:  # f16/bf16/f32 hold the bf16 values exactly
        assert result.max_difference == 0


def test_another_seed_is_refused_and_nothing_is_written(seeds, tmp_path):
    target = shutil.copytree(seeds[1].target, tmp_path / "t")
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", seeds[2].ckpt)
    assert code == 1 and "does not belong" in out and "--allow-foreign-checkpoint" in out, out
    assert "max difference" in out and "allowed" in out
    assert snapshot(target) == before


def test_allow_foreign_checkpoint_builds_and_records_it(seeds, tmp_path):
    target = shutil.copytree(seeds[1].target, tmp_path / "t")
    code, out = run("patch", target, "--checkpoint", seeds[2].ckpt, "--allow-foreign-checkpoint")
    assert code == 0, out
    head = ov.Core().read_model(target / "openvino_mtp_model.xml")
    note = head.get_rt_info(["irsurgeon", "checkpoint_identity"]).astype(str)
    assert note.startswith("foreign checkpoint allowed") and "differ" in note
    code, out = run("verify", target, "--checkpoint", seeds[2].ckpt)
    assert code == 1 and "FAIL checkpoint identity" in out
    code, out = run("verify", target, "--checkpoint", seeds[1].ckpt)
    assert code == 0 and "ok   checkpoint identity" in out, out


def test_own_checkpoint_is_verified_and_recorded(seeds, tmp_path):
    target = shutil.copytree(seeds[2].target, tmp_path / "t")
    code, out = run("patch", target, "--checkpoint", seeds[2].ckpt)
    assert code == 0 and "checkpoint identity: 16 rows" in out, out
    head = ov.Core().read_model(target / "openvino_mtp_model.xml")
    assert head.get_rt_info(["irsurgeon", "checkpoint_identity"]).astype(str).startswith("verified")


@pytest.mark.parametrize("mode", ["INT8_ASYM", "INT8_SYM", "INT4_ASYM", "INT4_SYM"])
def test_quantised_embedding_targets_accept_their_seed_only(seeds, tmp_path, mode):
    target = quantised_target(seeds[1].target, tmp_path / "t", mode)
    own, other = check_identity(target, seeds[1].ckpt), check_identity(target, seeds[2].ckpt)
    assert own.ok and own.max_difference > 0, own.detail  # really dequantised, really within half a step
    assert other.ok is False and other.worst_ratio > 10, other.detail


def test_a_single_value_moved_by_one_bf16_ulp_is_caught(seeds, tmp_path):
    """The smallest change a bf16 checkpoint can hold (one ulp, twice the half-ulp its own rounding is allowed),
    in one value of one sampled row, against an f32 target that stores the bf16 values exactly."""
    ckpt = shutil.copytree(seeds[1].ckpt, tmp_path / "ckpt")
    st = SafetensorsFile(ckpt / "model.safetensors")
    tensors = {n: st.raw(n).copy() for n in st.tensors}
    dtypes = {n: st.tensors[n].dtype for n in st.tensors}
    st.close()
    row = sample_ids(tensors[EMBED].shape[0])[5]
    tensors[EMBED][row, 3] += 1  # bf16 bit pattern: the next representable magnitude
    write_safetensors(ckpt / "model.safetensors", tensors, dtypes)
    result = check_identity(seeds[1].target, ckpt)
    assert result.ok is False and "1 of 1024 values" in result.detail, result.detail
    assert 1 < result.worst_ratio < 2.5, result.worst_ratio  # the bound is tight: one ulp is ~1.8x of it


def test_checkpoint_without_an_embedding_table_warns_and_is_recorded(tmp_path):
    """An `mtp.*`-only extract of the demo checkpoint cannot be checked: said, recorded, not refused."""
    target = shutil.copytree(ROOT / "fixtures" / "qwen3_5" / "target", tmp_path / "t")
    ckpt = shutil.copytree(ROOT / "fixtures" / "qwen3_5" / "ckpt", tmp_path / "ckpt")
    st = SafetensorsFile(ckpt / "model.safetensors")
    assert EMBED in st.tensors  # the bundled demo checkpoint carries its table; the extract drops it
    mtp = [n for n in st.tensors if n.startswith("mtp.")]
    tensors, dtypes = {n: st.raw(n).copy() for n in mtp}, {n: st.tensors[n].dtype for n in mtp}
    st.close()
    write_safetensors(ckpt / "model.safetensors", tensors, dtypes)
    code, out = run("patch", target, "--checkpoint", ckpt)
    assert code == 0 and "warning: checkpoint identity not checked" in out, out
    head = ov.Core().read_model(target / "openvino_mtp_model.xml")
    assert head.get_rt_info(["irsurgeon", "checkpoint_identity"]).astype(str).startswith("not checked")


def test_a_nan_in_a_sampled_row_is_refused_by_name(seeds, tmp_path):
    """NaN compares as neither equal nor different: it must not pass, nor be counted as '0 values differ'."""
    ckpt = shutil.copytree(seeds[1].ckpt, tmp_path / "ckpt")
    st = SafetensorsFile(ckpt / "model.safetensors")
    tensors = {n: st.raw(n).copy() for n in st.tensors}
    dtypes = {n: st.tensors[n].dtype for n in st.tensors}
    st.close()
    tensors[EMBED][sample_ids(tensors[EMBED].shape[0])[3], 0] = 0x7FC0  # a bf16 NaN
    write_safetensors(ckpt / "model.safetensors", tensors, dtypes)
    result = check_identity(seeds[1].target, ckpt)
    assert result.ok is False and "NaN or Inf" in result.detail and "checkpoint's" in result.detail, result.detail


def test_a_target_bin_that_shrinks_while_identity_reads_it_is_one_line(tmp_path, monkeypatch):
    """The rows are read with pread into a buffer of their own (never mapped): a .bin cut short under the read is an
    error naming the file, not a SIGBUS."""
    import os
    import shutil

    from lab.demo import DEMO_CKPT, DEMO_TARGET
    from irsurgeon.core.errors import IRError
    from irsurgeon.families.qwen35_mtp import identity

    target = tmp_path / "t"
    shutil.copytree(DEMO_TARGET, target)
    real = identity.os.pread

    def shrinking(fd, n, off):  # the target's .bin only: as if cut while being read
        got = real(fd, n, off)
        return got[: n // 2] if os.readlink(f"/proc/self/fd/{fd}").endswith("embeddings_model.bin") else got
    monkeypatch.setattr(identity.os, "pread", shrinking)
    with pytest.raises(IRError, match=r"openvino_text_embeddings_model\.bin: holds \d+ bytes, but its IR reads bytes "
                                      r"\d+\.\.\d+ \(the file is shorter than its \.xml says, or shrank"):
        identity.check_identity(target, DEMO_CKPT)


def test_identity_reads_only_the_sampled_rows_of_the_table(tmp_path, monkeypatch):
    import os

    from lab.demo import DEMO_CKPT, DEMO_TARGET
    from irsurgeon.families.qwen35_mtp import identity

    read = []
    real = identity.os.pread
    def counting(fd, n, off):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("embeddings_model.bin"):
            read.append(n)
        return real(fd, n, off)
    monkeypatch.setattr(identity.os, "pread", counting)
    monkeypatch.setattr(identity, "WHOLE", 1024)  # the demo's table is small: make it count as large
    assert identity.check_identity(DEMO_TARGET, DEMO_CKPT).ok
    table = (DEMO_TARGET / "openvino_text_embeddings_model.bin").stat().st_size
    assert sum(read) < table / 4, (sum(read), table)
