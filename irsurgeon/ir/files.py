"""IR files: safe reading, and the one atomic in-place write every replaced file goes through.

Which file is which in an export directory: irsurgeon.ir.export. Every IR is checked as bytes (no DTD, `<net>`
root, `.bin` long enough) before OpenVINO reads it: OpenVINO's read_model would otherwise hand a foreign `.xml` to
its other frontends.
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from irsurgeon.core import limits
from irsurgeon.core.errors import IRError, IRSurgeonError, OutputError, cause
from irsurgeon.ir import xmlsafe


def list_irs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.xml") if p.is_file())


def read_ir_bytes(xml: Path) -> bytes:
    """The `.xml` bytes after checking they are an OpenVINO IR whose `.bin` holds every Constant it names."""
    data = limits.read_bytes(xml, limits.IR_XML_BYTES, IRError, "OpenVINO IR .xml")
    xmlsafe.check_ir_bytes(data, str(xml))
    need = xmlsafe.weights_extent(data, str(xml))
    bin_path = xml.with_suffix(".bin")
    limits.check_regular(bin_path, IRError)  # OpenVINO opens the .bin by this name itself: never a FIFO or device
    if need:
        size = bin_path.stat().st_size if bin_path.is_file() else None
        if size is None:
            raise IRError(f"{bin_path}: not found; {xml.name} needs {need} bytes of weights from it")
        if size < need:
            raise IRError(f"{bin_path}: {size} bytes, but {xml.name} reads up to byte {need}: truncated?")
    return data


_KEPT: list = []  # [(file_identity, ov.Model)]: the last edited IR read back, until the next read_model


def read_model(xml: Path, checked: bool = False):
    """ov.Model of an IR, checked first unless the caller already did (the `.bin` is memory-mapped, not read)."""
    import openvino as ov  # ~120 ms: the CLI imports this module at start-up (annotate) and needs openvino only here

    size = len(read_ir_bytes(xml)) if not checked else xml.stat().st_size
    kept = _take_kept(xml)
    if kept is not None:
        return kept
    parsed = _PARSED[0] if _PARSED else None  # the open parsed_once scope's parses
    key = parse_key(xml) if parsed is not None else None
    if parsed is not None and key in parsed:
        return parsed[key].clone()
    limits.check_memory(size * limits.IR_XML_MEMORY_FACTOR, f"{xml}: reading it with OpenVINO", IRError)
    model = _read(ov, xml, xml.with_suffix(".bin"))
    if parsed is None:
        return model
    parsed[key] = model  # kept for the scope's later readers; each reader gets a clone
    return model.clone()


# Within one command an IR is parsed by OpenVINO once (`parsed_once`: the CLI runs every command inside it, and the
# flows' public calls open it too). A later read of the same, unchanged files (device, inode, size and mtime of the
# .xml and the .bin: file_identity; irsurgeon replaces an IR by rename, never in place) gets a clone of that parse:
# about a sixth of its cost, its constants shared with it, never copied. Every reader gets a clone, never the parse
# itself, so no reader sees another's edits. A patch of a DFlash target parsed its language model six times, and its
# verify three.
_PARSED: list[dict] = []  # the open scope's {key: ov.Model}


@contextmanager
def parsed_once():
    """A scope in which each unchanged IR is parsed once (nested scopes share the outermost one)."""
    if _PARSED:
        yield
        return
    _PARSED.append({})
    try:
        yield
    finally:
        _PARSED.clear()


def parse_key(xml: Path) -> tuple:
    """What a parse is kept under: the `.xml`'s path and its files' identity (file_identity)."""
    return os.path.abspath(xml), file_identity(xml, xml.with_suffix(".bin"))


def file_identity(xml: Path, bin_path: Path) -> tuple:
    """(device, inode, size, mtime) of the `.xml` and of the `.bin` (None when missing): the same files, unchanged."""
    out = []
    for path in (xml, bin_path):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out.append(None)
            continue
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def forget_kept() -> None:
    """Drop the kept model (a run that ends without reading it back: its files are no longer held open)."""
    _KEPT.clear()


def _take_kept(xml: Path):
    """The kept model when it was read from these very files; the slot is emptied either way."""
    if not _KEPT:
        return None
    identity, model = _KEPT.pop()
    return model if identity == file_identity(xml, xml.with_suffix(".bin")) else None


def _read(ov, xml: Path, bin_path: Path):
    try:
        if bin_path.is_file():
            return ov.Core().read_model(str(xml), str(bin_path))
        return ov.Core().read_model(str(xml))
    except RuntimeError as e:
        raise IRError(f"{xml}: OpenVINO cannot read it: {cause(e)}") from None
    except UnicodeDecodeError:  # OpenVINO's message quoted bytes of the file that are not UTF-8
        raise IRError(f"{xml}: OpenVINO cannot read it (it reports bytes that are not UTF-8)") from None


def write_atomic(path: Path, data: bytes, check: Callable[[Path], None] | None = None) -> None:
    """Atomically replace (or create) path with data: write beside, fsync, `check(temporary)`, keep the mode, rename.

    If anything fails, the original stays and the temporary is removed.
    """
    directory = path.parent
    exists = path.exists()
    if exists and not os.access(path, os.W_OK):
        raise OutputError(f"{path}: file is read-only; not replacing it")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"{directory}: cannot write beside {path.name}: {e.strerror or e}") from None
    tmp_path = Path(tmp)
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:  # a full disk: the write itself names no file
            raise OutputError(f"{path}: cannot write its new version beside it: {e.strerror or e}") from None
        if exists:
            os.chmod(tmp_path, path.stat().st_mode & 0o7777)
        if check is not None:
            check(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)


def read_back(xml: Path, weights_of: Path, check: Callable[[object], None]) -> None:
    """Read a new `.xml` with the `.bin` of the IR it replaces (weights_of) and pass the model to `check`."""
    import openvino as ov  # as in read_model

    _KEPT.clear()  # never two graphs at once
    bin_path = weights_of.with_suffix(".bin")
    try:
        model = _read(ov, xml, bin_path)
    except IRError as e:
        raise IRError(f"{weights_of}: the edited copy does not read back; original kept ({e})") from None
    check(model)
    _KEPT.append((file_identity(xml, bin_path), model))


def replace_xml(xml: Path, data: bytes, check: Callable[[object], None]) -> None:
    """Atomically replace xml by data, read back with OpenVINO and `check(model)` first; the `.bin` is never opened
    for writing."""
    write_atomic(xml, data, lambda tmp: read_back(tmp, xml, check))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles: the rename is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rt_info_object(xml: Path, path: tuple[str, ...]) -> dict | None:
    """A net-level rt_info value recorded as a JSON object (a draft's config edits, its tuning record), read from the
    checked `.xml` text; None when there is none, or the text is not a JSON object. Parsed within the house's depth
    and number-size bounds: a record nested too deep or with a number too long is no record, as one not JSON."""
    text = xmlsafe.get_value(read_ir_bytes(xml), path, str(xml))
    try:
        data = limits.parse_json(text, str(xml), IRSurgeonError) if text else None
    except IRSurgeonError:
        return None
    return data if isinstance(data, dict) else None


def edit_rt_info(data: bytes, values: dict[tuple[str, ...], str], source: str) -> bytes:
    """The `.xml` bytes with net-level rt_info values (path -> string) set by a text edit."""
    for path, value in values.items():
        data = xmlsafe.set_value(data, path, value, source)
    return data


def rt_info_check(xml: Path, values: dict[tuple[str, ...], str], check: Callable[[object], None] | None = None):
    """A read-back check: every value in place, then `check(model)`."""
    def verify(model) -> None:
        for path, value in values.items():
            if not model.has_rt_info(list(path)) or model.get_rt_info(list(path)).value != value:
                raise IRError(f"{xml}: rt_info {'/'.join(path)} did not read back as written; original kept")
        if check is not None:
            check(model)
    return verify


def write_rt_info(xml: Path, values: dict[tuple[str, ...], str], check: Callable[[object], None] | None = None,
                  data: bytes | None = None, into: Callable[[bytes], Path] | None = None) -> bytes:
    """Set net-level rt_info values in xml by a text edit; return the new bytes. OpenVINO must read the result back
    with every value in place (and pass `check`) before it counts as written.

    into=None: replace xml atomically. Otherwise `into(new bytes)` writes the new version elsewhere (a staging
    folder) and returns its path, which is read back with xml's `.bin` the same way.
    """
    data = read_ir_bytes(xml) if data is None else data
    new = edit_rt_info(data, values, str(xml))
    verify = rt_info_check(xml, values, check)
    if into is None:
        replace_xml(xml, new, verify)
    else:
        read_back(into(new), xml, verify)
    return new
