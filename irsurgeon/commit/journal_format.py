"""The journal file of a directory transaction, and the names a transaction may write (irsurgeon.commit.journal reads a
journal back against the disk; irsurgeon.commit.transaction writes it).

Names. A transaction moves into its target only names of its writable set (default WRITABLE): a plain name, or
`folder/name` one subdirectory down. In the staging folder TARGET/.irsurgeon-staging everything sits flat, a `/`
spelled `%2F` (no writable name holds a `%`, so the spelling is unambiguous):
    mtp_assistant%2Fopenvino_model.xml       the staged new version of mtp_assistant/openvino_model.xml
    mtp_assistant%2Fopenvino_model.xml.orig  its original: a hard link made just before the journal is written
    mtp_assistant%2F                         the folder made for a missing mtp_assistant/, empty; it is renamed
                                             into the target once the journal is in place
    journal.json.tmp, journal.json           the journal being written, and in place
    committed                                the journal renamed once every file has moved in
Anything else there, or any of these of the wrong kind, is not irsurgeon's.

Journal (FORMAT), written whole and renamed into place before anything in the target changes:
    {"format": "irsurgeon-journal/3", "run": "<uuid4 hex>",
     "stage": {"dev": d, "ino": i},
     "dirs": [{"name": D, "made": true | false, "dev": d, "ino": i}, ...],
     "files": [{"name": N, "new": {"size": s, "sha256": h, "dev": d, "ino": i},
                "old": {"size": s, "dev": d, "ino": i} | null}, ...],
     "checksum": "<sha256 of the canonical JSON of everything above>"}
`stage` is the staging folder the journal was written in: a journal read from any other folder (one copied or
downloaded with a directory) proves nothing. `dirs` lists each subdirectory files move into, once: `made` when the
run creates it (the folder made in the staging folder; a rename keeps its inode), else the folder that was there.
`new` is the staged file: the inode the run moves in (a rename keeps it) and its content. `old` is the original,
whose backup is a hard link to it; null when the name was free. A made folder's files have no original.

Everything here reads; nothing writes.
"""
from __future__ import annotations

import hashlib
import json
import os

from irsurgeon.ir.export import (CONFIG, GENERATION_CONFIG, HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG,
                                 TEXT_ONLY_MODEL, bin_of)

FORMAT = "irsurgeon-journal/3"
JOURNAL = "journal.json"
COMMITTED = "committed"  # the journal renamed once every file has moved in: the commit is complete
BACKUP_SUFFIX = ".orig"
STAGE_DIR = ".irsurgeon-staging"  # inside the target: staged files, backups, made folders and the journal
SLASH = "%2F"  # a `/` of a name, in the staging folder
ASSISTANT_DIR = "mtp_assistant"  # a Gemma 4 target's assistant folder (families.gemma4_mtp.layout.ASSISTANT_DIR)
# The only names a transaction moves into a directory unless told otherwise: the head, the annotated language
# model, the configs; for Gemma 4 the target's openvino_model.xml and the files of its mtp_assistant/ folder.
WRITABLE = frozenset({*HEAD_FILES, LANGUAGE_MODEL, OPENVINO_CONFIG, TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL), CONFIG,
                      GENERATION_CONFIG, *(f"{ASSISTANT_DIR}/{n}" for n in (TEXT_ONLY_MODEL, bin_of(TEXT_ONLY_MODEL),
                                                                             CONFIG, GENERATION_CONFIG))})
MAX_JOURNAL_BYTES = 1 << 16


def check_writable(names) -> frozenset[str]:
    """names as a writable set; ValueError for a name a transaction could not keep apart from another, from its
    staging folder, or inside the target."""
    names = frozenset(names)
    for name in names:
        parts = name.split("/") if isinstance(name, str) else [""]
        if len(parts) > 2 or any(p in ("", ".", "..") or "%" in p or "\0" in p for p in parts) \
                or parts[0] == STAGE_DIR:
            raise ValueError(f"{name!r}: not a name a transaction can write (a plain name, or folder/name)")
        if len(parts) == 1 and any(other.startswith(name + "/") for other in names):
            raise ValueError(f"{name!r}: both a file and a folder of the writable set")
    return names


def subdir(name: str) -> str | None:
    """The subdirectory a writable name is in (None for a name at the top of the target)."""
    return name.split("/")[0] if "/" in name else None


def leaf(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def staged(name: str) -> str:
    """The staging folder's name for the staged file of `name`."""
    return name.replace("/", SLASH)


def staged_dir(folder: str) -> str:
    """The staging folder's name for a folder made for a missing subdirectory."""
    return folder + SLASH


def stage_names(writable: frozenset[str]) -> frozenset[str]:
    """Every regular-file entry the staging folder may hold (made folders: made_dirs)."""
    files = {staged(n) for n in writable}
    return frozenset({*files, *(f + BACKUP_SUFFIX for f in files), JOURNAL, JOURNAL + ".tmp", COMMITTED})


def made_dirs(writable: frozenset[str]) -> frozenset[str]:
    return frozenset(staged_dir(d) for d in map(subdir, writable) if d)


def identity(st: os.stat_result) -> dict:
    return {"size": st.st_size, "dev": st.st_dev, "ino": st.st_ino}


def digest(fd: int) -> dict:
    """{"size", "sha256"} of what the open file fd holds, read from its start."""
    h, size, offset = hashlib.sha256(), 0, 0
    while chunk := os.pread(fd, 1 << 22, offset):
        h.update(chunk)
        size += len(chunk)
        offset += len(chunk)
    return {"size": size, "sha256": h.hexdigest()}


def _checksum(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode(run: str, files: list[dict], stage: dict, dirs: list[dict] = ()) -> bytes:
    """The journal of run: its staging folder's identity, its subdirectories and its files (module docstring)."""
    body = {"format": FORMAT, "run": run, "stage": stage, "dirs": list(dirs), "files": files}
    return json.dumps({**body, "checksum": _checksum(body)}).encode()


def decode(data: bytes, writable: frozenset[str]) -> dict | None:
    """The journal body data holds, or None when it is not one this version writes (form, checksum, names)."""
    try:
        entry = json.loads(data)
        body = {k: entry[k] for k in ("format", "run", "stage", "dirs", "files")}
        ok = entry["checksum"] == _checksum(body) and body["format"] == FORMAT and _valid(body, writable)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):  # 64 KiB of '[' nests too deep
        return None
    return body if ok else None


def _ints(record, keys) -> bool:
    return isinstance(record, dict) and all(type(record.get(k)) is int for k in keys)


def _valid(body: dict, writable: frozenset[str]) -> bool:
    files, dirs = body["files"], body["dirs"]
    names, folders = [f["name"] for f in files], [d["name"] for d in dirs]
    made = {d["name"] for d in dirs if d["made"] is True}
    return (isinstance(body["run"], str) and _ints(body["stage"], ("dev", "ino")) and bool(names)
            and len(set(names)) == len(names) and all(n in writable for n in names)
            and all(_ints(f["new"], ("size", "dev", "ino")) and isinstance(f["new"].get("sha256"), str)
                    and (f["old"] is None or _ints(f["old"], ("size", "dev", "ino"))) for f in files)
            and all(type(d["made"]) is bool and _ints(d, ("dev", "ino")) for d in dirs)
            and sorted(folders) == sorted({subdir(n) for n in names} - {None})
            and all(f["old"] is None for f in files if subdir(f["name"]) in made))
