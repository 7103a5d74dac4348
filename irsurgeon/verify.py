"""Check a directory against its draft family's contract without running genai.

The family is the one the directory belongs to (families.registry.for_directory); its checks come from the family
(Family.verify), and the house adds, for every family, the state of an interrupted run's staging folder (a half-done
commit mixes two versions; a journal irsurgeon cannot prove it wrote is named). Each check is a Check row;
`verify_directory` never raises for a failed check, only for a directory it cannot read at all.
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.families import registry
from irsurgeon.families.base import Check  # noqa: F401  (the rows verify_directory returns)
from irsurgeon.journal import leftover_state


def verify_directory(target: str | Path, checkpoint: str | Path | None = None, hub=None, echo=print) -> list[Check]:
    """The checks of the directory's family; with `checkpoint` (a path or repo id; `hub`: weights.hub.HubOptions)
    also whether that checkpoint belongs to the directory, as the family can tell."""
    target = Path(target)
    family = registry.for_directory(target)
    checks = family.verify(target, checkpoint, hub, echo)
    leftovers = leftover_state(target, registry.writable()) if target.is_dir() else None
    if leftovers is not None:  # after the layout line, as every family's first check is its target's layout
        checks.insert(1, Check("interrupted run", *leftovers))
    return checks
