"""What a name must look like before huggingface_hub makes a cache path of it, and how a refused one is shown.

huggingface_hub 2.4.0 joins three names to paths under the cache without checking them (file_download.py,
_hf_hub_download_to_cache_dir): the revision (`refs/<revision>`, written by _cache_commit_hash_for_specific_revision),
the server's ETag (`blobs/<etag>`, after _normalize_etag strips `W/` and quotes) and its X-Repo-Commit
(`snapshots/<commit>/`, and `.no_exist/<commit>/<file>` after a 404 in _get_metadata_or_catch_error). A revision of
`../../../X`, or an ETag or commit of that form from a hostile server, writes outside the cache. So:

    revision_problem(rev)   a branch or tag name as `git check-ref-format` allows it, or a 40-hex commit
    commit_problem(value)   40 lowercase hex digits (huggingface_hub's own REGEX_COMMIT_HASH)
    etag_problem(value)     a content hash once normalized as huggingface_hub does: 40 hex (git blob sha1) or 64 hex
                            (LFS sha256), optionally quoted and W/-prefixed as the hub sends it

    check_content(chunks, size, etag, label)   the content hashes to the ETag (sha256, or git's blob sha1)

Each *_problem returns None when the name is fine, else why not. shown(value) quotes a value for a one-line message: control,
format and other unprintable characters escaped, cut to SHOWN_CHARS.
"""
from __future__ import annotations

import hashlib
import re

from irsurgeon.core.errors import CheckpointError

COMMIT = re.compile(r"[0-9a-f]{40}")
CONTENT_HASH = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
REVISION_BYTES = 255  # one path component under refs/ on common filesystems; real branch names are far shorter
REF_FORBIDDEN = set(" ~^:?*[\\")  # git check-ref-format rule 4 and 5, and the backslash (rule 10)
SHOWN_CHARS = 200


def shown(value: str) -> str:
    """repr() of the value (it escapes what is not printable: control, bidi and format characters), cut long."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"


def revision_problem(revision: str) -> str | None:
    """Why `revision` is not a ref name git would accept (git-check-ref-format(1), with --branch's rule that a name
    does not start with '-'), nor a commit hash; None when it is one."""
    if COMMIT.fullmatch(revision):
        return None
    if not revision:
        return "it is empty"
    if len(revision.encode("utf-8", "surrogatepass")) > REVISION_BYTES:
        return f"it is longer than {REVISION_BYTES} bytes"
    if any(not c.isprintable() or c.isspace() for c in revision):
        return "it holds a space, control or other unprintable character"
    bad = sorted(set(revision) & REF_FORBIDDEN)
    if bad:
        return f"it holds {' '.join(repr(c) for c in bad)}"
    if ".." in revision:
        return "it holds '..'"
    if "@{" in revision or revision == "@":
        return "it holds '@{' or is '@'"
    if revision.startswith(("/", "-")) or revision.endswith(("/", ".")):
        return "it starts with '/' or '-', or ends with '/' or '.'"
    if "//" in revision:
        return "it holds '//'"
    parts = revision.split("/")
    if any(p.startswith(".") for p in parts):
        return "a part of it starts with '.'"
    if any(p.endswith(".lock") for p in parts):
        return "a part of it ends with '.lock'"
    return None


def commit_problem(value: str) -> str | None:
    return None if COMMIT.fullmatch(value) else "not 40 lowercase hex digits"


def etag_problem(value: str) -> str | None:
    # huggingface_hub 2.4.0 file_download.py _normalize_etag: `etag.lstrip("W/").strip('"')`; the name it gives
    # blobs/ is what must be a hash
    normalized = value.lstrip("W/").strip('"')
    return None if CONTENT_HASH.fullmatch(normalized) else "not a content hash (40 or 64 hex digits)"


def check_content(chunks, size: int, etag: str | None, label: str) -> None:
    """The content (chunks, `size` bytes in all) must hash to the ETag: sha256 (64 hex, an LFS file) or git's blob
    sha1 (40 hex: sha1 of b"blob <size>\\0" + content). An ETag of neither form says nothing to check."""
    etag = (etag or "").lstrip("W/").strip('"').lower()  # as huggingface_hub 2.4.0 file_download.py _normalize_etag
    if not CONTENT_HASH.fullmatch(etag):
        return
    digest = hashlib.sha256() if len(etag) == 64 else hashlib.sha1(b"blob %d\0" % size)
    for chunk in chunks:
        digest.update(chunk)
    if digest.hexdigest() != etag:
        kind = "sha256" if len(etag) == 64 else "git blob sha1"
        raise CheckpointError(f"{label}: its content's {kind} is {digest.hexdigest()}, the hub's ETag says {etag}: "
                              f"a corrupt download or another file; not using it")
