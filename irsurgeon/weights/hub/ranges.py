"""Byte ranges of one file of a repo at one commit, read over HTTP: the checkpoint-identity check's rows."""
from __future__ import annotations

import re

from irsurgeon.errors import CheckpointError
from irsurgeon.weights.hub.fetch import HubOptions, check_metadata, hub_error, hub_failures, labelled, probe_timeout
from irsurgeon.weights.hub.guard import HubGuardError


class HubBytes:
    """Byte ranges of one file of a repo at one commit, by GET with a Range header, through huggingface_hub's
    session, headers and retries. One HEAD (get_hf_file_metadata) gives the size and where the bytes are (the
    hub's redirect to its CDN), so each range is one request; the token is not sent to another origin (as
    huggingface_hub 2.4.0 file_download.py drops `authorization` for a location off the hub). The first read
    fetches HEADER_GUESS bytes (at most 1/64 of the file), which hold the length and, usually, the whole
    safetensors header (tens of KiB for a shard of hundreds of tensors); the rows are then fetched in parallel.

    Each answer is read at most to the length asked (by one network read, 64 KiB): a server that answers a range
    with the whole file (200), announces more than was asked, or sends more is refused in one line, with the rest
    left unread. Every request runs in a scope of the HubOptions' clock (transport.py), so --hub-timeout ends them."""

    HEADER_GUESS = 64 << 10
    PARALLEL = 8

    def __init__(self, repo_id: str, filename: str, commit: str, hub: HubOptions):
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        self.label = f"{repo_id}@{commit[:12]}/{filename}"
        self.url = hf_hub_url(repo_id, filename, revision=commit)
        self.headers = build_hf_headers(token=hub.token)
        self.hub, self.repo_id, self.filename = hub, repo_id, filename
        self.location: str | None = None
        self._size = 0
        self._prefix = b""
        self.requests = 0
        self.bytes = 0

    def size(self) -> int:
        if self.location is None:
            self._locate()
        return self._size

    def read(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        from concurrent.futures import ThreadPoolExecutor

        self.size()
        if not self._prefix and ranges and ranges[0][0] == 0:
            self._prefix = self._get(0, min(self.HEADER_GUESS, max(self._size // 64, 8), self._size))
        todo = [(o, n) for o, n in ranges if o + n > len(self._prefix)]
        with ThreadPoolExecutor(min(self.PARALLEL, max(len(todo), 1))) as pool:
            fetched = dict(zip(todo, pool.map(lambda r: self._get(*r), todo)))
        return [fetched.get((o, n)) or self._prefix[o:o + n] for o, n in ranges]

    def _locate(self) -> None:
        from urllib.parse import urlsplit

        from huggingface_hub import get_hf_file_metadata

        from irsurgeon.weights.hub.transport import scope

        try:
            with scope(self.hub.clock):
                meta = get_hf_file_metadata(self.url, token=self.hub.token, timeout=probe_timeout())
        except HubGuardError as e:
            raise labelled(e, self.label) from None
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e) from None
        check_metadata(self.repo_id, self.filename, self.hub, meta.commit_hash, meta.etag)
        self.requests += 1
        if meta.size is None:
            raise CheckpointError(f"{self.label}: the hub did not tell the file's size")
        self._size, self.location = meta.size, meta.location
        if urlsplit(self.location)[:2] != urlsplit(self.url)[:2]:
            self.headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}

    def _get(self, offset: int, length: int) -> bytes:
        """length bytes at offset, in a scope of its own (it runs in a pool thread: scopes do not cross threads)."""
        from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

        from irsurgeon.weights.hub.transport import scope

        headers = {**self.headers, "Range": f"bytes={offset}-{offset + length - 1}", "Accept-Encoding": "identity"}
        try:
            with scope(self.hub.clock, length, "the range asked"):
                with http_stream_backoff("GET", self.location, headers=headers, timeout=probe_timeout(),
                                         max_retries=2) as r:
                    hf_raise_for_status(r)
                    data = self._body(r, offset, length)
        except HubGuardError as e:
            raise labelled(e, self.label) from None
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e) from None
        self.requests += 1  # counters: int += under the GIL, one per finished request
        self.bytes += len(data)
        return data

    def _body(self, r, offset: int, length: int) -> bytes:
        """The answer's bytes, read only while they are what was asked: a 206 of exactly [offset, offset+length)."""
        asked = f"asked for {length} bytes at {offset}"
        if r.status_code != 206:  # a server ignoring Range would send the whole shard
            raise CheckpointError(f"{self.label}: the server ignored the byte range (HTTP {r.status_code}); "
                                  f"not downloading the whole file for a few rows")
        announced = r.headers.get("Content-Length")
        if announced is not None and announced.strip() != str(length):
            raise CheckpointError(f"{self.label}: {asked}, the server announces {announced.strip()[:40]} "
                                  f"(Content-Length); not reading them")
        span = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (r.headers.get("Content-Range") or "").strip())
        if span and (int(span.group(1)), int(span.group(2))) != (offset, offset + length - 1):
            raise CheckpointError(f"{self.label}: {asked}, the server sends bytes {span.group(1)}-{span.group(2)}")
        data = bytearray()
        for chunk in r.iter_raw():  # raw: nothing decompressed, nothing beyond one network read buffered
            data += chunk
            if len(data) > length:
                raise CheckpointError(f"{self.label}: {asked}, the server sent more; stopped reading")
        if len(data) != length:
            raise CheckpointError(f"{self.label}: {asked}, got {len(data)}")
        return bytes(data)
