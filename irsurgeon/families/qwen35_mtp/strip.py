"""A writable copy of an exported directory without its MTP head: what a published IR without the head looks like.

    strip_mtp(export_dir, dest)   copies everything but openvino_mtp_model.*, drops the language model's
                                  `hidden_states_decoder_layers` rt_info (text edit, .bin untouched), makes it writable
"""
from __future__ import annotations

import shutil
from pathlib import Path

from irsurgeon.ir import xmlsafe
from irsurgeon.families.qwen35_mtp.layout import MTP_BIN, MTP_XML
from irsurgeon.ir.export import LANGUAGE_MODEL
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS


def strip_mtp(export_dir: str | Path, dest: str | Path) -> Path:
    dest = Path(dest)
    shutil.copytree(export_dir, dest, ignore=shutil.ignore_patterns(MTP_XML, MTP_BIN))
    for p in [dest, *dest.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    xml = dest / LANGUAGE_MODEL
    if xml.is_file():
        xml.write_bytes(xmlsafe.remove_value(xml.read_bytes(), (HIDDEN_STATES_LAYERS,), source=str(xml)))
    return dest
