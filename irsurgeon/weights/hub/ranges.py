"""Byte ranges of one file of a repo at one commit, read over HTTP: the identity check's rows, a shard's header and
the tensors a draft needs (partial.py); the small reads are kept in irsurgeon's cache (store.py)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from irsurgeon.core.errors import CheckpointError
from irsurgeon.weights.hub import store
from irsurgeon.weights.hub.fetch import (HubOptions, HubUnreachable, cache_root, check_metadata, download_timeout,
                                         hub_error, hub_failures, is_offline, labelled, probe_timeout)
from irsurgeon.weights.hub.guard import HubGuardError
from irsurgeon.weights.hub.names import shown

Sink = Callable[[int, bytes], None]  # (offset in the file, bytes) as they arrive


class RangesRefused(CheckpointError):
    """The server answered a Range request with the whole file (200): it does not serve byte ranges."""


class HubOffline(HubUnreachable):
    """Bytes not in irsurgeon's cache were asked for while HF_HUB_OFFLINE is set."""


class _BodyFailed(Exception):
    """A transport error while reading an answer's body, carried out of huggingface_hub's backoff context."""


class HubBytes:
    """Byte ranges of one file of a repo at one commit, by GET with a Range header, through huggingface_hub's
    session, headers and retries. One HEAD (get_hf_file_metadata) gives the size, the ETag and where the bytes are
    (the hub's redirect to its CDN), so each range is one request; the token is not sent to another origin (as
    huggingface_hub 2.4.0 file_download.py drops `authorization` for a location off the hub). The first read at 0
    fetches HEADER_GUESS bytes (at most 1/64 of the file): the 8-byte length and the header of a shard of a few
    dozen tensors; a longer header (tens of KiB for hundreds of tensors) costs one more request, for exactly its
    rest. The other ranges of one read() are fetched in parallel.

    read() keeps what it fetched, and the file's size, in irsurgeon's cache (store.read_ranges): the same ranges of
    the same commit are read from there by a later run, with no request, offline too. copy() streams large spans to
    a sink in pieces of PIECE bytes and keeps nothing.

    Each answer must be exactly the bytes asked: 206, Content-Length and Content-Range naming that span of this file,
    read at most to its length (by one network read, 64 KiB). A server that answers with the whole file (200: it
    ignores Range) is RangesRefused, its body unread; a longer, shorter or other answer is one line naming the file.
    Every request runs in a scope of the HubOptions' clock (transport.py), so --hub-timeout ends them.

    Bytes of two versions of the file are never mixed: the HEAD must answer for the commit asked (X-Repo-Commit), the
    range answers of one run must carry one ETag (a CDN sends its object's; a file replaced between two requests
    changes it), and what the cache stored under another ETag, or another size, than the HEAD's is fetched again.
    A server that sends no ETag and changes the file between requests cannot be told apart from an unchanged one,
    except where every byte of the file is read and hashed (partial.py)."""

    HEADER_GUESS = 4 << 10  # most of a small shard's header; a larger one is fetched after it, exactly
    PARALLEL = 8
    PIECE = 64 << 20

    def __init__(self, repo_id: str, filename: str, commit: str, hub: HubOptions):
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        self.label = f"{repo_id}@{commit[:12]}/{filename}"
        self.url = hf_hub_url(repo_id, filename, revision=commit)
        self.headers = build_hf_headers(token=hub.token)
        self.hub, self.repo_id, self.filename, self.commit = hub, repo_id, filename, commit
        self.location: str | None = None
        self.etag: str | None = None
        self._size: int | None = None
        self._held: list[tuple[int, bytes]] | None = None  # (offset, bytes) read so far, and stored ones
        self._stored_etag: str | None = None  # the ETag the stored spans were read under
        self._validator: str | None = None  # the ETag of this run's first range answer
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes = 0

    def size(self) -> int:
        if self._size is None:
            self._load()
        if self._size is None:
            self._locate()
        return self._size

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length), from what is held or stored, else fetched (and then stored). A range
        that starts inside a held one fetches only its tail (the header after the first read's HEADER_GUESS)."""
        self.size()
        if any(self._slice(*r) is None for r in ranges):
            self.located()  # first: the HEAD may find the stored spans of another version, and drop them
        before = len(self._held)
        if ranges and ranges[0][0] == 0 and self._slice(0, 8) is None:
            self._held.append((0, self._get(0, min(self.HEADER_GUESS, max(self._size // 64, 8), self._size))))
        todo = list(dict.fromkeys(r for r in ranges if self._slice(*r) is None))
        tails = [r for r in todo if self._holding(r[0]) is not None]
        for offset, length in tails:
            k = self._holding(offset)
            at, data = self._held[k]
            self._held[k] = (at, data + self._get(at + len(data), offset + length - at - len(data)))
        fresh = [r for r in todo if r not in tails]
        with ThreadPoolExecutor(min(self.PARALLEL, max(len(fresh), 1))) as pool:
            self._held += [(o, data) for (o, _), data in zip(fresh, pool.map(lambda r: self._get(*r), fresh))]
        if todo or len(self._held) > before:
            with store.Folder(cache_root(self.hub), self.repo_id, self.commit) as folder:
                store.write_ranges(folder, self.filename, self._size, self._held, self.etag)
        return [self._slice(o, n) for o, n in ranges]

    def copy(self, spans: list[tuple[int, int]], sink: Sink) -> None:
        """Each (offset, length) span's bytes to sink as they arrive, PIECE bytes a request, PARALLEL at a time; a
        span's start already held (the first read's bytes past the header) is not fetched again."""
        self.size()
        if spans:
            self.located()  # before what is held is used: the HEAD may drop stored spans of another version
        rest = []
        for offset, length in spans:
            while length and (k := self._holding(offset)) is not None:
                at, data = self._held[k]
                part = data[offset - at:offset - at + length]
                sink(offset, part)
                offset, length = offset + len(part), length - len(part)
            if length:
                rest.append((offset, length))
        pieces = [(o + at, min(self.PIECE, n - at)) for o, n in rest for at in range(0, n, self.PIECE)]
        with ThreadPoolExecutor(min(self.PARALLEL, max(len(pieces), 1))) as pool:
            list(pool.map(lambda p: self._get(*p, sink=sink), pieces))

    def _holding(self, offset: int) -> int | None:
        """The index of the held span the byte at offset lies in."""
        return next((k for k, (at, data) in enumerate(self._held) if at <= offset < at + len(data)), None)

    def _slice(self, offset: int, length: int) -> bytes | None:
        for at, data in self._held:
            if at <= offset and offset + length <= at + len(data):
                return data[offset - at:offset - at + length]
        return None

    def located(self) -> None:
        """The HEAD made (size, ETag, where the bytes are), when it was not yet: what the cache stored of another
        version of the file is dropped then. Before using stored bytes with fetched ones (partial.relayout)."""
        if self._held is None:
            self._load()
        if self.location is None:
            self._locate()

    def _load(self) -> None:
        """What irsurgeon's cache holds of this file (its size, ranges read before)."""
        with store.Folder(cache_root(self.hub), self.repo_id, self.commit) as folder:
            found = store.read_ranges(folder, self.filename)
        self._size, self._held, self._stored_etag = found if found is not None else (None, [], None)

    def _offline(self, what: str) -> None:
        if is_offline():
            raise HubOffline(f"{self.label}: {what} is not in irsurgeon's cache and HF_HUB_OFFLINE is set")

    def _locate(self) -> None:
        from urllib.parse import urlsplit

        from huggingface_hub import get_hf_file_metadata

        from irsurgeon.weights.hub.transport import scope

        self._offline("the file's size and location")
        try:
            with scope(self.hub.clock):
                meta = get_hf_file_metadata(self.url, token=self.hub.token, timeout=probe_timeout())
        except HubGuardError as e:
            raise labelled(e, self.label) from None
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e) from None
        check_metadata(self.repo_id, self.filename, self.hub, meta.commit_hash, meta.etag)
        self.requests += 1
        if meta.commit_hash is not None and meta.commit_hash != self.commit:
            raise CheckpointError(f"{self.label}: the hub answers for commit {shown(meta.commit_hash)}, not "
                                  f"{self.commit} asked for; not mixing two commits' files")
        if meta.size is None:
            raise CheckpointError(f"{self.label}: the hub did not tell the file's size")
        if urlsplit(meta.location).scheme not in ("http", "https"):
            raise CheckpointError(f"{self.label}: the hub sends its bytes' location as {shown(meta.location)}, not "
                                  f"an http(s) URL; not following it")
        if self._held and (self._size, self._stored_etag) != (meta.size, meta.etag):
            self._held.clear()  # stored from another version of the file (or before ETags were kept): read again
        self._size, self.location, self.etag = meta.size, meta.location, meta.etag
        if urlsplit(self.location)[:2] != urlsplit(self.url)[:2]:
            self.headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}

    def _get(self, offset: int, length: int, sink: Sink | None = None) -> bytes:
        """length bytes at offset (to sink when given, else returned), in a scope of its own (it runs in a pool
        thread: scopes do not cross threads)."""
        from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

        from irsurgeon.weights.hub.transport import scope

        self._offline(f"bytes {offset}-{offset + length - 1}")
        self.located()
        headers = {**self.headers, "Range": f"bytes={offset}-{offset + length - 1}", "Accept-Encoding": "identity"}
        timeout = download_timeout()
        try:
            with scope(self.hub.clock, length, "the range asked"):
                with http_stream_backoff("GET", self.location, headers=headers, timeout=timeout,
                                         max_retries=2) as r:
                    hf_raise_for_status(r)
                    try:
                        data = self._body(r, offset, length, sink)
                    except hub_failures() as e:  # not into the backoff generator: it would retry mid-body
                        raise _BodyFailed(e) from None  # (huggingface_hub 2.4.0 utils/_http.py _http_backoff_base)
        except HubGuardError as e:
            raise labelled(e, self.label) from None
        except _BodyFailed as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e.args[0], timeout) from None
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e, timeout) from None
        self.requests += 1  # counters: int += under the GIL, one per finished request
        self.bytes += length
        return data

    def _same_version(self, etag: str | None) -> None:
        """A range answer's ETag (None: not sent) is the one of this run's first answer: the file is unchanged."""
        if etag is None:
            return
        with self._lock:  # answers arrive on several threads
            first = self._validator = self._validator or etag
        if etag != first:
            raise CheckpointError(f"{self.label}: changed on the server during the download (its range answers' "
                                  f"ETag was {shown(first)}, now {shown(etag)}); not mixing two versions of it")

    def _body(self, r, offset: int, length: int, sink: Sink | None) -> bytes:
        """The answer's bytes, read only while they are what was asked: a 206 of exactly [offset, offset+length)."""
        asked = f"asked for {length} bytes at {offset}"
        if r.status_code != 206:  # a server ignoring Range would send the whole file
            raise RangesRefused(f"{self.label}: the server ignored the byte range (HTTP {r.status_code}); "
                                f"not downloading the whole file for a part of it")
        announced = (r.headers.get("Content-Length") or "").strip()
        if announced and announced != str(length):
            raise CheckpointError(f"{self.label}: {asked}, the server announces {announced[:40]} "
                                  f"(Content-Length); not reading them")
        self._same_version(r.headers.get("ETag"))
        span = (r.headers.get("Content-Range") or "").strip()
        if span != f"bytes {offset}-{offset + length - 1}/{self._size}" and span != f"bytes {offset}-" \
                                                                                   f"{offset + length - 1}/*":
            raise CheckpointError(f"{self.label}: {asked}, the server sends Content-Range {shown(span)}; not "
                                  f"reading it")
        data, got = bytearray(), 0
        for chunk in r.iter_raw():  # raw: nothing decompressed, nothing beyond one network read buffered
            if got + len(chunk) > length:
                raise CheckpointError(f"{self.label}: {asked}, the server sent more; stopped reading")
            if sink is None:
                data += chunk
            else:
                sink(offset + got, chunk)
            got += len(chunk)
        if got != length:
            raise CheckpointError(f"{self.label}: {asked}, got {got}")
        return bytes(data)
