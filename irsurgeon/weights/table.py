"""A family's declarative tensor table: which tensors a head reads, their shapes, how a release may store them.

A family module (families.<family>.model) describes its head as `Tensor` rows: a role (the name the graph asks
for, relative to the table's prefix), the shape the config gives it, how it may be stored (`layouts`: a whole tensor
under the role's name by default, or a part of a fused tensor, or a stack of per-item tensors), an optional transform
applied on load, and whether weight compression may touch it. `choose_layout` decides which of a table's
alternative layouts a checkpoint uses; irsurgeon.weights.spec loads it. Nothing here knows a family.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from irsurgeon.core.errors import CheckpointError

Transform = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Whole:
    """Stored as one tensor of the role's shape."""
    name: str


@dataclass(frozen=True)
class Part:
    """Rows lo:hi along `axis` of a fused stored tensor of shape `stored_shape` (e.g. gate half of gate_up_proj)."""
    name: str
    stored_shape: tuple[int, ...]
    axis: int
    lo: int
    hi: int


@dataclass(frozen=True)
class Stack:
    """One stored tensor per index 0..count-1 (`template` with `{i}`), stacked on a new leading axis."""
    template: str
    count: int
    unit: str = "item"  # what one index is, for messages ("expert")

    def name(self, i: int) -> str:
        return self.template.format(i=i)

    def index(self, name: str) -> str | None:
        """The index text of a stored name of this stack's form (any digits), else None."""
        head, _, tail = self.template.partition("{i}")
        match = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail), name)
        return match.group(1) if match else None


Source = Whole | Part | Stack


@dataclass(frozen=True)
class Tensor:
    """One row of a family's tensor table."""
    role: str
    shape: tuple[int, ...]
    layouts: Mapping[str, Source] | None = None  # layout name -> how it is stored; None: Whole(role) in every layout
    transform: Transform | None = None
    compress: bool = True  # False: weight compression leaves it as built (e.g. MoE routing)
    integer: bool = False  # an index table (I64/I32), read as int64: never a weight constant, never transformed

    def source(self, layout: str | None) -> Source:
        return self.layouts[layout] if self.layouts else Whole(self.role)


@dataclass(frozen=True)
class Table:
    """A family's tensors for one config. layouts: the alternative stored layouts (none: one), named in messages
    with `layouts_of` (what they store, e.g. "routed experts")."""
    prefix: str
    tensors: tuple[Tensor, ...]
    layouts: tuple[str, ...] = ()
    layouts_of: str = "tensors"
    source: str = field(default="the config", compare=False)  # where the shapes come from, for messages
    ignored: Mapping[str, str] = field(default_factory=dict)  # stored names the head never reads -> a note ("": none)
    # stored names that are copies of a role the table reads (a tied lm_head): accepted only when their bytes equal
    # that role's stored tensor, else refused with `tied_because` (why the config says they are the same)
    tied: Mapping[str, str] = field(default_factory=dict)
    tied_because: str = ""

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """role -> shape: what the loader returns."""
        return {t.role: t.shape for t in self.tensors}

    def stored(self, layout: str | None) -> dict[str, tuple[int, ...]]:
        """The stored names (relative to the prefix, FP8 scales aside) a checkpoint of `layout` holds, with shapes."""
        out: dict[str, tuple[int, ...]] = {}
        for t in self.tensors:
            src = t.source(layout)
            if isinstance(src, Whole):
                out[src.name] = t.shape
            elif isinstance(src, Part):
                out[src.name] = src.stored_shape
            else:
                out.update({src.name(i): t.shape[1:] for i in range(src.count)})
        return out


def choose_layout(table: Table, present: set[str], root: object) -> str | None:
    """The one stored layout the names belong to; a mixture, or none of them, is an error naming what was found."""
    if not table.layouts:
        return None
    hits = {layout: sorted(n for n in present if _claims(table, layout, n)) for layout in table.layouts}
    found = [layout for layout in table.layouts if hits[layout]]
    p = table.prefix
    if len(found) > 1:
        a, b = found[:2]
        raise CheckpointError(f"{root}: {table.layouts_of} mix the {a} layout ({p}{hits[a][0]}) and the {b} "
                              f"layout ({p}{hits[b][0]}); expected exactly one")
    if not found:
        expected = " or ".join(f"{' + '.join(p + n for n in _names(table, layout))} ({layout})"
                               for layout in table.layouts)
        raise CheckpointError(f"{root}: no {table.layouts_of} found: expected {expected}")
    layout = found[0]
    groups: dict[tuple[int, str], list[Stack]] = {}  # stacks over the same items are checked together
    for t in table.tensors:
        if isinstance(src := t.source(layout), Stack):
            groups.setdefault((src.count, src.unit), []).append(src)
    for stacks in groups.values():
        _check_stacks(stacks, present, p, root)
    return layout


def _claims(table: Table, layout: str, name: str) -> bool:
    for t in table.tensors:
        if t.layouts:
            src = t.layouts[layout]
            if (src.index(name) is not None) if isinstance(src, Stack) else src.name == name:
                return True
    return False


def _names(table: Table, layout: str) -> list[str]:
    names = [src.template.replace("{i}", "<i>") if isinstance(src, Stack) else src.name
             for t in table.tensors if t.layouts for src in [t.layouts[layout]]]
    return list(dict.fromkeys(names))


def _check_stacks(stacks: list[Stack], present: set[str], prefix: str, root: object) -> None:
    """Every index 0..count-1 of every stack (same count and unit) present, none beyond, in canonical spelling; a
    gap is named at its lowest index (then in table order), as the whole item when no stack holds that index."""
    n, unit = stacks[0].count, stacks[0].unit
    indices = {name: i for src in stacks for name in present if (i := src.index(name)) is not None}
    for name, i in sorted(indices.items()):
        if not _canonical_below(i, n):
            raise CheckpointError(f"{root}: tensor {prefix}{name} is not one of {unit}s 0..{n - 1} ({n} {unit}s)")
    held = {int(i) for i in indices.values()}
    for i in range(n):
        for src in stacks:
            if src.name(i) not in present:
                raise CheckpointError(f"{root}: missing {unit} {i} of {n}: no tensor {prefix}{src.name(i)}"
                                      + ("" if i in held else f" (the whole {unit} is absent)"))


def _canonical_below(i: str, n: int) -> bool:
    """i spells an index below n as str(int) would (ASCII digits, no leading zero); never int() of a long
    string (Python refuses more than 4300 digits, sys.get_int_max_str_digits)."""
    canonical = i.isascii() and i.isdigit() and (i == "0" or not i.startswith("0"))
    return canonical and len(i) <= len(str(n)) and int(i) < n
