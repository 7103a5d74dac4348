"""The IR files of a target: which `.xml` is the language model, safe reading, and atomic in-place replacement.

Layouts (optimum-intel exports):
    decomposed VLM   openvino_language_model.xml + openvino_text_embeddings_model.xml (+ vision, tokenizers)
    text-only        openvino_model.xml
Every IR is checked as bytes (no DTD, `<net>` root, `.bin` long enough) before OpenVINO reads it: OpenVINO's
read_model would otherwise hand a foreign `.xml` to its other frontends.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from irsurgeon import limits
from irsurgeon.errors import IRError, OutputError, cause
from irsurgeon.ir import xmlsafe

LANGUAGE_MODEL = "openvino_language_model.xml"
TEXT_EMBEDDINGS = "openvino_text_embeddings_model.xml"
TEXT_ONLY_MODEL = "openvino_model.xml"
MTP_MODEL = "openvino_mtp_model.xml"
CONFIG = "config.json"


def language_model_xml(target: str | Path) -> Path:
    """The language-model `.xml` of a target directory, or the target itself when it is an `.xml`."""
    target = Path(target)
    if target.is_dir():
        for name in (LANGUAGE_MODEL, TEXT_ONLY_MODEL):
            if (target / name).exists():  # not is_file(): a FIFO or device there is refused by name when read
                return target / name
        raise IRError(f"{target}: no language model found (expected {LANGUAGE_MODEL} or {TEXT_ONLY_MODEL})")
    if not target.exists():
        raise IRError(f"{target}: no such file or directory")
    if target.suffix != ".xml":
        raise IRError(f"{target}: expected an OpenVINO IR .xml file or an exported model directory")
    return target


def layout(directory: Path) -> str:
    """'vlm' (decomposed, what genai MTP needs), 'text-only', or 'none'."""
    if (directory / LANGUAGE_MODEL).is_file():
        return "vlm" if (directory / TEXT_EMBEDDINGS).is_file() else "vlm-incomplete"
    return "text-only" if (directory / TEXT_ONLY_MODEL).is_file() else "none"


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


def read_model(xml: Path, checked: bool = False):
    """ov.Model of an IR, checked first unless the caller already did (the `.bin` is memory-mapped, not read)."""
    import openvino as ov

    size = len(read_ir_bytes(xml)) if not checked else xml.stat().st_size
    limits.check_memory(size * limits.IR_XML_MEMORY_FACTOR, f"{xml}: reading it with OpenVINO", IRError)
    return _read(ov, xml, xml.with_suffix(".bin"))


def _read(ov, xml: Path, bin_path: Path):
    try:
        if bin_path.is_file():
            return ov.Core().read_model(str(xml), str(bin_path))
        return ov.Core().read_model(str(xml))
    except RuntimeError as e:
        raise IRError(f"{xml}: OpenVINO cannot read it: {cause(e)}") from None
    except UnicodeDecodeError:  # OpenVINO's message quoted bytes of the file that are not UTF-8
        raise IRError(f"{xml}: OpenVINO cannot read it (it reports bytes that are not UTF-8)") from None


def replace_xml(xml: Path, data: bytes, check: Callable[[object], None]) -> None:
    """Atomically replace xml by data: write beside, fsync, read back with OpenVINO, `check(model)`, rename.

    The `.bin` is never opened for writing. If anything fails, the original stays and the temporary is removed.
    """
    import openvino as ov

    directory = xml.parent
    if not os.access(xml, os.W_OK):
        raise OutputError(f"{xml}: file is read-only; not replacing it")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{xml.stem}.", suffix=".xml.tmp", dir=directory)
    except OSError as e:
        raise OutputError(f"{directory}: cannot write beside {xml.name}: {e.strerror or e}") from None
    tmp_path = Path(tmp)
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:  # a full disk: the write itself names no file
            raise OutputError(f"{xml}: cannot write its new version beside it: {e.strerror or e}") from None
        os.chmod(tmp_path, xml.stat().st_mode & 0o7777)
        check(_read(ov, tmp_path, xml.with_suffix(".bin")))
        os.replace(tmp_path, xml)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # platforms without directory handles: the rename is still atomic
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_rt_info(xml: Path, values: dict[tuple[str, ...], str], check: Callable[[object], None] | None = None,
                  data: bytes | None = None) -> bytes:
    """Set net-level rt_info values (path -> string) in xml by a text edit, atomically; return the new bytes.

    OpenVINO must read the result back with every value in place (and pass `check`) before it replaces xml.
    """
    data = read_ir_bytes(xml) if data is None else data
    new = data
    for path, value in values.items():
        new = xmlsafe.set_value(new, path, value, str(xml))

    def verify(model) -> None:
        for path, value in values.items():
            if not model.has_rt_info(list(path)) or model.get_rt_info(list(path)).value != value:
                raise IRError(f"{xml}: rt_info {'/'.join(path)} did not read back as written; original kept")
        if check is not None:
            check(model)

    replace_xml(xml, new, verify)
    return new
