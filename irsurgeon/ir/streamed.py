"""The placeholder layers of a streamed IR made the Const layers of the weights appended to its `.bin`.

A build that streams its f32 weights (irsurgeon.build.Stream) makes each matrix a placeholder Parameter of its
shape, so openvino's serializer writes the graph and the small constants only; the build then appends each matrix's
rows to the `.bin` (64-byte aligned, one block at a time) and records where they went (Place). Here, bytes to bytes:
each placeholder's layer in the `.xml` becomes the Const layer openvino writes for a weight (the same output port;
`offset`/`size` into the .bin):

        <layer id="3" name="fc.weight" type="Parameter" version="opset1">
            <data shape="32,64" element_type="f32" />
    ->
        <layer id="3" name="fc.weight" type="Const" version="opset1">
            <data element_type="f32" shape="32, 64" offset="8576" size="8192" />

The caller reads the result back (openvino) before it counts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from irsurgeon.errors import IRError
from irsurgeon.ir.xmlsafe import escape_attr


@dataclass(frozen=True)
class Place:
    shape: tuple[int, ...]
    offset: int
    size: int


def _placeholder(name: str) -> re.Pattern:
    return re.compile(rb'(<layer id="\d+" name="' + re.escape(escape_attr(name).encode())
                      + rb'" type=")Parameter(" version="opset1">\s*)<data shape="([^"]*)" element_type="f32" />')


def constants_from_parameters(xml: bytes, places: dict[str, Place], source: str) -> bytes:
    """The .xml with each named placeholder Parameter layer made the Const layer of its Place (exactly one each)."""
    for name, place in places.items():
        found = list(_placeholder(name).finditer(xml))
        if len(found) != 1:
            raise IRError(f"{source}: expected one placeholder layer for weight {name}, found {len(found)}")
        m = found[0]
        if m.group(3).decode() != ",".join(map(str, place.shape)):
            raise IRError(f"{source}: placeholder {name} has shape {m.group(3).decode()!r}, the weight "
                          f"{list(place.shape)}")
        data = (f'<data element_type="f32" shape="{", ".join(map(str, place.shape))}" offset="{place.offset}" '
                f'size="{place.size}" />').encode()
        xml = xml[:m.start()] + m.group(1) + b"Const" + m.group(2) + data + xml[m.end():]
    return xml
