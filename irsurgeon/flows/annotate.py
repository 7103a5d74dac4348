"""The hidden-state annotation of a target's IR as `irsurgeon annotate` and the Python API run it: the write path
is commit.annotate's; what a killed run of any family left in the directory is recovered first
(families.registry.writable)."""
from __future__ import annotations

from pathlib import Path

from irsurgeon.commit import annotate
from irsurgeon.commit.annotate import AnnotationResult, Status  # noqa: F401  (the CLI's words for what was done)
from irsurgeon.families import registry


def annotate_ir(xml_path: str | Path, *, force: bool = False, dry_run: bool = False, num_layers: int | None = None,
                wait: bool = False) -> AnnotationResult:
    """commit.annotate.annotate_ir with the names every registered family writes as the recoverable ones."""
    return annotate.annotate_ir(xml_path, force=force, dry_run=dry_run, num_layers=num_layers, wait=wait,
                                writable=registry.writable())
