"""The `hidden_states_decoder_layers` annotation written into an exported IR: one write path, in place or staged.

What the value holds and how it is found: irsurgeon.ir.hidden_states. Only the `.xml`'s rt_info changes; the new
text is read back by OpenVINO with the original `.bin`, must carry the value as written, and every producer it
names must still resolve to one op, before it replaces the file (annotate_ir) or counts as staged (patch).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Callable

from irsurgeon.ir import export, files, xmlsafe
from irsurgeon.ir.hidden_states import Locator, annotation_json, config_facts, discover, producers_resolve
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS
from irsurgeon.commit.transaction import directory_lock, recover


class Status(str, Enum):
    """What annotate did; the value is the word the CLI prints."""
    WRITTEN = "written"
    REWRITTEN = "rewritten"
    UNCHANGED = "unchanged"
    KEPT = "kept"
    DRY_RUN = "dry-run"


@dataclass
class AnnotationResult:
    """What annotate_ir found and did."""
    xml: Path
    status: Status
    value: str
    layers: dict[int, Locator]
    num_layers: int
    hidden_size: int
    layer_source: str
    previous: str | None = None
    notes: list[str] = field(default_factory=list)
    data: bytes = field(default=b"", repr=False)  # the `.xml` as read, for the write

    @property
    def changed(self) -> bool:
        return self.status in (Status.WRITTEN, Status.REWRITTEN)


def annotate_ir(xml_path: str | Path, *, writable: frozenset[str], force: bool = False, dry_run: bool = False,
                num_layers: int | None = None, wait: bool = False) -> AnnotationResult:
    """Discover the hidden states of a target (directory or `.xml`) and write the annotation into its `.xml`.

    An identical annotation is left alone; a different one only with force. dry_run writes nothing. The write
    holds the directory lock every writing command takes (wait: wait for another run to release it) and first
    rolls back a commit a killed run left there, as `patch` does (writable: the names it may have written; the flow
    irsurgeon.flows.annotate passes every registered family's).
    """
    xml = export.language_model_xml(xml_path)
    if dry_run:
        return plan_annotation(xml, force, num_layers)
    with directory_lock(xml.parent, wait) as fd:
        notes = recover(xml.parent, fd, writable=writable)
        result = write_annotation(plan_annotation(xml, force, num_layers))
    result.notes[:0] = notes
    return result


def plan_annotation(xml: Path, force: bool, num_layers: int | None = None, hidden_size: int | None = None,
                    model=None, data: bytes | None = None) -> AnnotationResult:
    """The annotation xml should carry and whether it is to be written (status DRY_RUN) or left (UNCHANGED, KEPT).

    num_layers, hidden_size: taken over config.json's when given. model, data: the graph and the checked `.xml`
    bytes when the caller has just read them (the same file), else read here.
    """
    data = files.read_ir_bytes(xml) if data is None else data
    model = files.read_model(xml, checked=True) if model is None else model
    cfg_layers, cfg_width = config_facts(xml.parent)
    count = num_layers if num_layers is not None else cfg_layers
    origin = "argument" if num_layers is not None else export.CONFIG if cfg_layers is not None else "graph"
    layers, width = discover(model, count, hidden_size or cfg_width, str(xml))
    del model  # the read-back check loads the edited IR; do not hold two graphs at once
    value = annotation_json(layers)
    previous = xmlsafe.get_value(data, (HIDDEN_STATES_LAYERS,), str(xml))
    result = AnnotationResult(xml, Status.DRY_RUN, value, layers, len(layers), width, origin, previous, data=data)
    return with_force(result, force)


def with_force(result: AnnotationResult, force: bool) -> AnnotationResult:
    """A plan's status under `force`: UNCHANGED when the value is there, KEPT when another is and force is off."""
    if result.previous == result.value:
        status = Status.UNCHANGED
    elif result.previous is not None and not force:
        status = Status.KEPT
    else:
        status = Status.DRY_RUN
    return replace(result, status=status)


def write_annotation(result: AnnotationResult, into: Callable[[bytes], Path] | None = None) -> AnnotationResult:
    """Write a planned annotation (status DRY_RUN; others are returned as they are): in place, or by `into(bytes)`
    (which writes the new `.xml` elsewhere and returns its path), read back and checked either way."""
    if result.status is not Status.DRY_RUN:
        return result
    files.write_rt_info(result.xml, {(HIDDEN_STATES_LAYERS,): result.value},
                        producers_resolve(result.layers, result.xml), result.data, into)
    result.status = Status.REWRITTEN if result.previous is not None else Status.WRITTEN
    return result
