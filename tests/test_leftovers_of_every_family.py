"""What a killed run of any registered family leaves is recovered by every writing command, not only by `patch`.

A run killed while staging leaves `.irsurgeon-staging/` holding staged files and no journal. Every command that writes
into a directory (patch, annotate, build-mtp -o) clears it first, provided every name in it is one a family writes:
the writable set comes from the registry (families.registry.writable), never from a list kept below it, so a family
registered tomorrow is covered the day it lands.
"""
from __future__ import annotations

import shutil

import pytest

from helpers.cli import invoke
from lab.families import FAMILIES, FIXTURE_PAIRS
from irsurgeon.commit.journal_format import STAGE_DIR, staged
from irsurgeon.families import registry


def killed_while_staging(directory, family) -> None:
    """A staging folder as a run of `family` killed while writing its draft leaves it: staged files, no journal."""
    stage = directory / STAGE_DIR
    stage.mkdir()
    for name in family.layout.writes:
        if name == family.layout.draft_xml or name.startswith(family.layout.draft_xml.rsplit("/", 1)[0] + "/"):
            (stage / staged(name)).write_bytes(b"half written")


def qwen_target(tmp_path):
    return shutil.copytree(FIXTURE_PAIRS[registry.DEFAULT.key][0], tmp_path / "target")


@pytest.mark.parametrize("family", FAMILIES)
def test_annotate_clears_a_killed_run_of_any_family(family, tmp_path):
    target = qwen_target(tmp_path)
    killed_while_staging(target, family)
    result = invoke("annotate", target)
    assert result.exit_code == 0, result.output
    assert not (target / STAGE_DIR).exists() and "removed leftover staging folder" in result.output


@pytest.mark.parametrize("family", FAMILIES)
def test_build_mtp_clears_a_killed_run_of_any_family_in_its_output(family, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    killed_while_staging(out, family)
    result = invoke("build-mtp", FIXTURE_PAIRS[registry.DEFAULT.key][1], "-o", out)
    assert result.exit_code == 0, result.output
    standalone = next(f for f in registry.FAMILIES if f.standalone)
    assert not (out / STAGE_DIR).exists() and (out / standalone.layout.draft_xml).is_file()


def test_a_name_no_family_writes_is_still_left_alone(tmp_path):
    """The set is every family's names and nothing else: a foreign file in the staging folder stops annotate."""
    target = qwen_target(tmp_path)
    (target / STAGE_DIR).mkdir()
    (target / STAGE_DIR / "notes.txt").write_text("mine")
    result = invoke("annotate", target)
    assert result.exit_code == 1 and "not a file irsurgeon writes there" in result.output, result.output
    assert (target / STAGE_DIR / "notes.txt").read_text() == "mine"
