"""The guarantees the house gives every registered draft family, each test parametrized over the registry.

    accounting   every stored tensor of the draft's checkpoint is read, or proven redundant, or named and refused;
                 one the config requires but the checkpoint lacks is a one-line error naming it
    identity     a checkpoint of another model of the same geometry is refused, or `patch` says what it could not
                 prove offline (and `verify --genai` measures acceptance: test_gemma4_verify, test_patch)
    ready        `patch` answers "already ready" only when the family's verify agrees; else it rebuilds
    one commit   every file of a patch, subfolders included, moves in by one transaction (test_house_commit.py)
A new family gets all of it by its registry line, its fixture pair (lab.families.FIXTURE_PAIRS) and its synth.
"""
from __future__ import annotations

import os

import pytest

from helpers.checkpoints import read_tensors, write_variant
from helpers.cli import invoke, one_error
from lab.dirsnap import snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS, ROOT, fixture_pair, synth_pair
from irsurgeon.core.config import read_json
from irsurgeon.families import registry
from irsurgeon.flows.verify import verify_directory
from helpers.tiers import every_nth


def test_every_family_has_a_fixture_pair_a_synth_kind_and_its_own_files():
    pairs = {p.name for p in (ROOT / "fixtures").iterdir() if (p / "target").is_dir() or (p / "ckpt").is_dir()}
    assert pairs == {f.key for f in registry.FAMILIES}  # fixtures/<key>/: no pair without a family, nor the reverse
    for family in registry.FAMILIES:
        assert family.synth_kinds and family.layout.draft_xml in family.layout.writes
        target, ckpt = FIXTURE_PAIRS[family.key]
        assert registry.for_directory(target) is family and registry.for_checkpoint(ckpt) is family
    names = [n for f in registry.FAMILIES for n in f.layout.writes]
    assert registry.writable() == frozenset(names) | {"generation_config.json"}  # the one the house adds: tune's K
    assert not set(registry.HOUSE_WRITES) & set(names)  # no family writes the file tune stages (no name staged twice)


def table_of(family, ckpt):
    builder = family.recipe()
    cfg = builder.parse_config(read_json(ckpt / "config.json"), str(ckpt / "config.json"))
    return builder.tensors(cfg)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_stored_tensor_is_read_or_accounted_for(family):
    """The fixture checkpoint's tensors under the family's prefix are exactly the table's rows, plus those the table
    names as never read (with the reason) or as proven copies."""
    _, ckpt = FIXTURE_PAIRS[family.key]
    table = table_of(family, ckpt)
    stored = {n[len(table.prefix):] for n in read_tensors(ckpt) if n.startswith(table.prefix)}
    rows = set(table.stored(table.layouts[0] if table.layouts else None))
    assert rows <= stored and stored - rows <= set(table.ignored) | set(table.tied), sorted(stored - rows)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_stored_tensor_nobody_reads_is_refused_by_name(family, tmp_path):
    target, ckpt = fixture_pair(family, tmp_path)
    table = table_of(family, ckpt)
    tensors = read_tensors(ckpt)
    some = next(n for n in tensors if n.startswith(table.prefix))
    tensors[f"{table.prefix}unknown.extra_weight"] = tensors[some]
    bad = write_variant(ckpt, tmp_path / "ckpt", tensors)
    before = snapshot(target)
    error = one_error(invoke("patch", target, "--checkpoint", bad))
    assert f"unexpected tensor {table.prefix}unknown.extra_weight" in error
    assert snapshot(target) == before


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tensor_the_config_requires_is_named_when_missing(family, tmp_path):
    target, ckpt = fixture_pair(family, tmp_path)
    table = table_of(family, ckpt)
    tensors = read_tensors(ckpt)
    row = next(t for t in table.tensors if table.prefix + t.role in tensors)
    del tensors[table.prefix + row.role]
    bad = write_variant(ckpt, tmp_path / "ckpt", tensors)
    before = snapshot(target)
    error = one_error(invoke("patch", target, "--checkpoint", bad))
    assert f"missing tensor {table.prefix}{row.role}" in error, error
    assert snapshot(target) == before


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_of_another_model_is_refused_or_said_unproven(family, tmp_path):
    """Two synth seeds: one geometry, two models. The second's checkpoint for the first's target is refused in one
    line naming --allow-foreign-checkpoint (which then builds and records it), or, where the family cannot prove
    a pairing offline, patch says so in a note (verify --genai then measures the drafts' acceptance)."""
    target, _ = synth_pair(family, tmp_path / "mine", 0)
    _, foreign = synth_pair(family, tmp_path / "other", 1)
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", foreign)
    if result.exit_code == 1:
        error = one_error(result)
        assert "--allow-foreign-checkpoint" in error and snapshot(target) == before, error
        forced = invoke("patch", target, "--checkpoint", foreign, "--allow-foreign-checkpoint")
        assert forced.exit_code == 0, forced.output
        assert all(c.ok for c in verify_directory(target))
    else:
        assert result.exit_code == 0, result.output
        notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
        assert any("only its geometry" in n and "verify" in n and "--genai" in n for n in notes), result.output


def damage_draft(target, family) -> None:
    """Cut the draft's weights file in half: its IR still parses as XML, but verify refuses the short .bin."""
    binary = target / (family.layout.draft_xml.removesuffix(".xml") + ".bin")
    data = binary.read_bytes()
    os.unlink(binary)
    binary.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("family", every_nth(FAMILIES, 2))  # the others: CI's extended tier
def test_already_ready_only_when_verify_agrees(family, tmp_path):
    target, ckpt = fixture_pair(family, tmp_path)
    first = invoke("patch", target, "--checkpoint", ckpt)
    assert first.exit_code == 0, first.output
    again = invoke("patch", target, "--checkpoint", ckpt)
    assert again.exit_code == 0 and "already has its draft" in again.output, again.output
    done = snapshot(target)
    damage_draft(target, family)
    assert not all(c.ok for c in verify_directory(target))
    repaired = invoke("patch", target, "--checkpoint", ckpt)
    assert repaired.exit_code == 0 and "already has its draft" not in repaired.output, repaired.output
    assert "does not pass verify" in repaired.output
    assert all(c.ok for c in verify_directory(target)) and snapshot(target) == done


@pytest.mark.parametrize("family", FAMILIES)
def test_patch_never_succeeds_on_a_directory_verify_rejects(family, tmp_path, monkeypatch):
    """Whatever the staged checks miss (here: verify made to reject the committed directory), patch fails in one
    line naming verify's failed check instead of reporting success."""
    from irsurgeon.flows import patch as flow
    from irsurgeon.draft.protocol import Check

    target, ckpt = fixture_pair(family, tmp_path)
    real = flow.verify_directory
    monkeypatch.setattr(flow, "verify_directory", lambda d, *a, **k: [*real(d, *a, **k),
                                                                       Check("planted check", False, "rejected")])
    error = one_error(invoke("patch", target, "--checkpoint", ckpt))
    assert "the files were written, but verify rejects the directory: planted check: rejected" in error


@pytest.mark.parametrize("family", FAMILIES)
def test_a_weight_no_f32_computation_can_carry_is_refused_by_name(family, tmp_path):
    """1e30 is finite in bf16 and f32 but infinite in f16, and any norm after it squares it past f32's range: the
    build refuses it in one line naming the tensor and the value, whatever the format asked for."""
    import numpy as np

    from irsurgeon.weights.safetensors_io import f32_to_bf16

    target, ckpt = fixture_pair(family, tmp_path)
    table = table_of(family, ckpt)
    tensors = read_tensors(ckpt)
    name = next(table.prefix + t.role for t in table.tensors if not t.integer and len(t.shape) == 2
                and tensors.get(table.prefix + t.role, (None, ""))[1] in ("BF16", "F32"))
    raw, dtype = tensors[name]
    raw = raw.copy()
    raw.reshape(-1)[-1] = f32_to_bf16(np.array([1e30], np.float32))[0] if dtype == "BF16" else np.float32(1e30)
    tensors[name] = (raw, dtype)
    bad = write_variant(ckpt, tmp_path / "ckpt", tensors)
    before = snapshot(target)
    for fmt in ("auto", "f32"):
        error = one_error(invoke("patch", target, "--checkpoint", bad, "--weight-format", fmt))
        assert f"tensor {name}: holds 1e+30, beyond what the draft can compute in f32" in error, error
    assert snapshot(target) == before
