"""Check a directory against its draft family's contract without running genai.

The family is the one the directory belongs to (families.registry.for_directory); its checks come from the family
(Family.verify), and the house adds, for every family:

    interrupted run     the state of an interrupted run's staging folder (a half-done commit mixes two versions; a
                        journal irsurgeon cannot prove it wrote is named)
    generation config   every generation_config.json openvino-genai reads itself (the target's, and each of the
                        family's subfolders'), checked as `verify --genai` checks them before genai runs
    openvino config     openvino_config.json, read as `patch` reads it (irsurgeon.quant.formats): a file patch would
                        refuse in an unpatched target is a failed check of a patched one

Each check is a Check row; `verify_directory` never raises for a failed check, only for a directory it cannot read
at all.
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.config import check_generation_config, present, vocabulary_of
from irsurgeon.core.errors import IRError, IRSurgeonError
from irsurgeon.core.text import silent
from irsurgeon.families import registry
from irsurgeon.ir import files
from irsurgeon.draft.protocol import Check, Family
from irsurgeon.ir.export import CONFIG, GENERATION_CONFIG, OPENVINO_CONFIG, directory_problem
from irsurgeon.commit.journal import leftover_state
from irsurgeon.quant.formats import openvino_config_format


def verify_directory(target: str | Path, checkpoint: str | Path | None = None, *, hub=None, echo=silent,
                     family: Family | None = None) -> list[Check]:
    """The checks of the directory's family (`family`: the one the caller already resolved); with `checkpoint` (a
    path or repo id; `hub`: weights.hub.HubOptions) also whether that checkpoint belongs to the directory, as the
    family can tell."""
    target = Path(target)
    problem = directory_problem(target)
    if problem:  # a directory it cannot read at all, in the words of every command (show, annotate, patch, tune)
        raise IRError(problem)
    family = family or registry.for_directory(target)
    with files.parsed_once():  # each IR parsed once (irsurgeon.ir.files), as in the CLI
        checks = family.verify(target, checkpoint, hub, echo)
    leftovers = leftover_state(target, registry.writable()) if target.is_dir() else None
    if leftovers is not None:  # after the layout line, as every family's first check is its target's layout
        checks.insert(1, Check("interrupted run", *leftovers))
    return checks + config_checks(target, family)


def config_checks(target: Path, family: Family, replaced: tuple[str, ...] = ()) -> list[Check]:
    """The house's checks of the config files others read (the generation configs, openvino_config.json), leaving
    out the generation configs in `replaced` (what a patch is about to write anew): verify's rows, and what patch
    refuses. openvino_config.json is checked even where patch rewrites it: its update keeps the rest of the file."""
    return [c for c in (generation_check(target, family, replaced), openvino_config_check(target)) if c is not None]


def generation_configs(target: Path, family: Family) -> list[Path]:
    """The generation_config.json files there are for openvino-genai to read: the target's and those of the
    family's subfolders (Gemma 4's mtp_assistant/)."""
    folders = (target, *(target / sub for sub in family.layout.subfolders))
    return [f / GENERATION_CONFIG for f in folders if present(f / GENERATION_CONFIG)]


def generation_check(target: Path, family: Family, replaced: tuple[str, ...] = ()) -> Check | None:
    """config.check_generation_config of each generation_configs file but those `replaced`; None when none is left."""
    paths = [p for p in generation_configs(target, family) if p.relative_to(target).as_posix() not in replaced]
    if not paths:
        return None
    vocab = vocabulary_of(target / CONFIG)
    try:
        for path in paths:
            check_generation_config(path, vocab)
    except IRSurgeonError as e:
        return Check("generation config", False, str(e))
    names = ", ".join(p.relative_to(target).as_posix() for p in paths)
    within = f"within the vocabulary of {vocab}" if vocab is not None else "in range (config.json states no vocab_size)"
    return Check("generation config", True, f"{names}: readable JSON, token ids {within}")


def openvino_config_check(target: Path) -> Check | None:
    """openvino_config.json read as patch reads it (quantization.openvino_config_format); None when absent."""
    if not present(target / OPENVINO_CONFIG):
        return None
    try:
        recorded = openvino_config_format(target)
    except IRSurgeonError as e:
        return Check("openvino config", False, str(e))
    detail = f"lm_model {recorded.weight_format} ({recorded.reason})" if recorded else "no lm_model quantization entry"
    return Check("openvino config", True, f"{OPENVINO_CONFIG}: {detail}")
