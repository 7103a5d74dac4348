"""Byte-level access to an OpenVINO IR `.xml`: safety checks and in-place edits of the net-level rt_info.

An IR is `<net name=.. version=..>` with `<layers>`, `<edges>` and, last, the model's `<rt_info>`, written by
OpenVINO (pugixml, tab-indented, keys sorted byte-wise as in its std::map):

    <rt_info>
        <key value="..." />                 a string value
        <info name="key with space" value=".." />
        <section> <key value=".." /> </section>
    </rt_info>

Edits here are text edits of that block only: every other byte of the file stays as it was, so weights, layer
attributes and layer-level rt_info cannot change by accident. A DOCTYPE or ENTITY declaration is refused before
anything parses the file (entity expansion bombs, external entities).
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from irsurgeon.core.errors import IRError

_FORBIDDEN = (b"<!DOCTYPE", b"<!ENTITY")
_ROOT = re.compile(rb'<net\s[^>]*?version="(\d{1,9})"')
# no leading \b: it keeps re from scanning for the literal (45 ms against 5 ms for a 64-layer model's 6.8 MB .xml);
# weights_extent checks the byte before each match instead
_DATA_EXTENT = re.compile(rb'offset="(\d+)"\s+size="(\d+)"')
_WORD = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz")
MAX_EXTENT_DIGITS = 20  # a 64-bit offset or size has at most 20 digits; more would exceed Python's int parsing
_CHAR_REF = re.compile(r"&#(\d{1,7});")
_ANY_CHAR_REF = re.compile(rb"&#(x[0-9A-Fa-f]{1,7}|[0-9]{1,8});|&#")
_ANY_TAG = re.compile(rb"<(/?)[A-Za-z_][^<>]*?(/?)>")
# OpenVINO writes the model's rt_info a few sections deep; its Python binding converts that tree recursively (a
# 100000-deep one crashed the process), so deeper nesting is refused before OpenVINO reads the file
MAX_RT_INFO_DEPTH = 32
_ATTR = r'\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|\'[^\']*\')'
_TAG = re.compile(rf'<(/?)([A-Za-z_][\w.\-:]*)((?:{_ATTR})*)\s*(/?)>'.encode())
_NAME_ATTR = re.compile(rb'\bname="([^"]*)"')
_VALUE_ATTR = re.compile(rb'\bvalue="([^"]*)"')
_XML_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def check_ir_bytes(data: bytes, source: str) -> int:
    """Refuse DTDs and anything that is not an OpenVINO IR; return the IR version."""
    for bad in _FORBIDDEN:
        if bad in data:
            raise IRError(f"{source}: contains a {bad[2:].decode()} declaration; refusing to parse it "
                          f"(OpenVINO IR never has one)")
    _check_utf8(data, source)
    _check_char_refs(data, source)
    _check_rt_info_depth(data, source)
    head = data[:4096].lstrip()
    if head.startswith(b"<?xml"):
        head = head[head.find(b"?>") + 2:].lstrip()
    match = _ROOT.match(head)
    if not match:
        raise IRError(f"{source}: not an OpenVINO IR (expected a <net ... version=\"10|11\"> root element)")
    return int(match.group(1))


def _check_utf8(data: bytes, source: str, chunk: int = 1 << 20) -> None:
    """OpenVINO writes UTF-8; other bytes would reach Python inside OpenVINO's strings and fail far from here."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(data)
    try:
        for at in range(0, len(data), chunk):
            decoder.decode(view[at:at + chunk], final=at + chunk >= len(data))
    except UnicodeDecodeError as e:
        raise IRError(f"{source}: not UTF-8 text near byte {at + e.start}; an OpenVINO IR .xml is UTF-8") from None


def _check_char_refs(data: bytes, source: str) -> None:
    """A character reference naming no Unicode scalar value would reach Python as bytes that are not UTF-8 inside
    OpenVINO's strings (names, rt_info) and fail far from here; pugixml writes only valid ones."""
    for ref in _ANY_CHAR_REF.finditer(data):
        body = ref.group(1)
        code = None if body is None else int(body[1:], 16) if body.startswith(b"x") else int(body)
        if code is None or not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise IRError(f"{source}: the character reference at byte {ref.start()} names no Unicode character; "
                          f"an OpenVINO IR .xml holds only valid ones")


def _check_rt_info_depth(data: bytes, source: str) -> None:
    edges = data.rfind(b"</edges>")
    start = data.find(b"<rt_info>", max(edges, 0))
    if edges < 0 or start < 0:
        return  # no net-level block, or not an IR at all: the structure checks report that
    depth = 0
    for tag in _ANY_TAG.finditer(data, start):
        closing, self_closing = tag.group(1), tag.group(2)
        depth += -1 if closing else 0 if self_closing else 1
        if depth > MAX_RT_INFO_DEPTH:
            raise IRError(f"{source}: the model's rt_info is nested deeper than {MAX_RT_INFO_DEPTH} levels; "
                          f"OpenVINO writes a few")
        if depth <= 0:
            return


def weights_extent(data: bytes, source: str = "IR") -> int:
    """Bytes of the `.bin` the IR refers to (the largest offset + size of its Constants)."""
    extent = 0
    for m in _DATA_EXTENT.finditer(data):
        if m.start() and data[m.start() - 1] in _WORD:  # part of a longer name (`xoffset=`): not an extent
            continue
        offset, size = m.groups()
        if max(len(offset), len(size)) > MAX_EXTENT_DIGITS:
            raise IRError(f"{source}: a Constant's offset or size has more than {MAX_EXTENT_DIGITS} digits; "
                          f"expected a byte position in its .bin")
        extent = max(extent, int(offset) + int(size))
    return extent


def escape_attr(text: str) -> str:
    """Attribute escaping as pugixml writes it, so a re-inserted value is byte-identical to OpenVINO's."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    return "".join(c if ord(c) >= 32 else f"&#{ord(c)};" for c in out)


def unescape_attr(raw: bytes) -> str:
    text = raw.decode("utf-8")
    text = _CHAR_REF.sub(_char, text)
    return text.replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&apos;", "'") \
        .replace("&amp;", "&")


def _char(ref: re.Match) -> str:
    """A decimal character reference; one naming no Unicode character stays as written (as pugixml keeps it)."""
    code = int(ref.group(1))
    return chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else ref.group(0)


@dataclass(frozen=True)
class Element:
    """One child of an rt_info block: its key, where its text starts/ends (whole lines) and its body."""
    key: str
    start: int
    end: int
    body: tuple[int, int] | None  # inner span of a section; None for a value element
    value: str | None


@dataclass(frozen=True)
class Block:
    """The net-level rt_info: body span data[start:end]; `tag` is the span of a `<rt_info />` or of the place
    before `</net>` where a missing block goes, else None."""
    start: int
    end: int
    indent: bytes
    tag: tuple[int, int] | None = None


def net_rt_info(data: bytes, source: str = "IR") -> Block:
    """Locate the net-level `<rt_info>` (the one after `<edges>`)."""
    net_end = data.rfind(b"</net>")
    edges = max(data.rfind(b"</edges>"), data.rfind(b"<edges />"), data.rfind(b"<edges/>"))
    if net_end < 0 or edges < 0:
        raise IRError(f"{source}: no <edges> ... </net> structure; not a complete OpenVINO IR")
    open_at = data.find(b"<rt_info", edges, net_end)
    if open_at < 0:
        return Block(net_end, net_end, b"\t\t", (net_end, net_end))
    tag = _TAG.match(data, open_at)
    if tag is None:
        raise IRError(f"{source}: malformed net-level <rt_info> tag")
    indent = _indent_before(data, open_at) + b"\t"
    if tag.group(4):
        return Block(tag.end(), tag.end(), indent, (open_at, tag.end()))
    close_at = data.rfind(b"</rt_info>", tag.end(), net_end)
    if close_at < 0:
        raise IRError(f"{source}: net-level <rt_info> is never closed")
    return Block(tag.end(), close_at, indent)


def children(data: bytes, start: int, end: int) -> list[Element]:
    """Direct child elements of the block data[start:end] (a tag scan, not a parse: the block is OpenVINO's own)."""
    out, depth, pos, current = [], 0, start, None
    while True:
        tag = _TAG.search(data, pos, end)
        if tag is None:
            break
        closing, self_closing = bool(tag.group(1)), bool(tag.group(4))
        if depth == 0 and not closing:
            current = (_key(tag), _line_start(data, tag.start()), tag)
        if closing:
            depth -= 1
        elif not self_closing:
            depth += 1
        if depth == 0 and current is not None:
            key, line, open_tag = current
            body = None if open_tag is tag else (open_tag.end(), tag.start())
            value = _VALUE_ATTR.search(open_tag.group(3))
            out.append(Element(key, line, _line_end(data, tag.end()), body,
                               unescape_attr(value.group(1)) if value and body is None else None))
            current = None
        if depth < 0:
            raise IRError("malformed net-level <rt_info>: unbalanced tags")
        pos = tag.end()
    return out


def get_value(data: bytes, path: tuple[str, ...], source: str = "IR") -> str | None:
    """The string value stored at path in the net-level rt_info, or None."""
    found = _find(data, net_rt_info(data, source), path)
    return found.value if found is not None else None


def set_value(data: bytes, path: tuple[str, ...], value: str, source: str = "IR") -> bytes:
    """A copy of data whose net-level rt_info holds value at path (created or replaced); nothing else changes."""
    block = net_rt_info(data, source)
    if block.tag is None:
        return _set_in_block(data, block.start, block.end, block.indent, path, value)
    at, end = block.tag
    outer = block.indent[:-1]
    body = _element(path, value, block.indent)
    if at == end:  # no rt_info at all: it goes last in <net>
        return data[:at] + outer + b"<rt_info>\n" + body + outer + b"</rt_info>\n" + data[at:]
    return data[:at] + b"<rt_info>\n" + body + outer + b"</rt_info>" + data[end:]


def remove_value(data: bytes, path: tuple[str, ...], source: str = "IR") -> bytes:
    """A copy of data without the rt_info element at path (unchanged when absent)."""
    found = _find(data, net_rt_info(data, source), path)
    return data if found is None else data[:found.start] + data[found.end:]


def _find(data: bytes, block: Block, path: tuple[str, ...]) -> Element | None:
    start, end = block.start, block.end
    found = None
    for key in path:
        if found is not None:
            if found.body is None:
                return None
            start, end = found.body
        found = next((e for e in children(data, start, end) if e.key == key), None)
        if found is None:
            return None
    return found


def _set_in_block(data: bytes, start: int, end: int, indent: bytes, path: tuple[str, ...], value: str) -> bytes:
    elements = children(data, start, end)
    key = path[0]
    same = [e for e in elements if e.key == key]
    if same and len(path) > 1 and same[0].body is not None:
        inner_start, inner_end = same[0].body
        return _set_in_block(data, inner_start, inner_end, indent + b"\t", path[1:], value)
    new = _element(path, value, indent)
    if same:
        return data[:same[0].start] + new + data[same[0].end:]
    later = [e for e in elements if e.key.encode() > key.encode()]
    at = later[0].start if later else _line_start(data, end)
    return data[:at] + new + data[at:]


def _element(path: tuple[str, ...], value: str, indent: bytes) -> bytes:
    key = path[0]
    if not _XML_NAME.fullmatch(key):
        open_tag, close_tag = f'info name="{escape_attr(key)}"', "info"
    else:
        open_tag, close_tag = key, key
    if len(path) == 1:
        return indent + f'<{open_tag} value="{escape_attr(value)}" />\n'.encode()
    inner = _element(path[1:], value, indent + b"\t")
    return indent + f"<{open_tag}>\n".encode() + inner + indent + f"</{close_tag}>\n".encode()


def _key(tag: re.Match) -> str:
    name = tag.group(2).decode()
    if name == "info":
        attr = _NAME_ATTR.search(tag.group(3))
        if attr:
            return unescape_attr(attr.group(1))
    return name


def _line_start(data: bytes, pos: int) -> int:
    return data.rfind(b"\n", 0, pos) + 1


def _line_end(data: bytes, pos: int) -> int:
    nl = data.find(b"\n", pos)
    return len(data) if nl < 0 else nl + 1


def _indent_before(data: bytes, pos: int) -> bytes:
    return data[_line_start(data, pos):pos]
