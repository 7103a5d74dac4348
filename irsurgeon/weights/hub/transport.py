"""Every request irsurgeon makes through huggingface_hub runs inside a scope: checked, bounded and timed.

    with scope(clock, limit, what):   # around one hf_hub_download, get_hf_file_metadata or range GET
        ...

Inside a scope, each answer passes Scope.check before huggingface_hub sees it (a response hook on its client):
  * X-Repo-Commit must be a commit hash, and a HEAD's X-Linked-Etag (else its ETag) a content hash (names.py):
    huggingface_hub makes cache paths of both, so a hostile value is refused before any path is built;
  * a body is read at most to the size announced for it: what its HEAD announced (X-Linked-Size, else Content-Length,
    as huggingface_hub 2.4.0 file_download.py get_hf_file_metadata reads it), the length of the range asked (nothing
    of a range answered with the whole file: 200), or the scope's limit (the largest config.json or index limits.py
    allows). An announced size above the limit is refused before the download; a longer body, where it passes the
    size (huggingface_hub's http_get would write it all to disk and compare sizes only at the end);
  * a Retry-After beyond the time left is the deadline reached now (huggingface_hub's utils/_http.py
    _http_backoff_base would sleep it out with time.sleep: a day, if the server asks for one).
And the clock (guard.Clock) bounds the time: every connect, read and write on a socket waits at most the time left (a
wrapper around httpcore2's network backend), so a server that drips a byte per second cannot outlast it.

The hooks act only inside a scope (a context variable): other users of huggingface_hub in the process are not
affected. They are installed once, on first use, around the client factory huggingface_hub uses (utils/_http.py
set_client_factory), so a client it re-creates (_http_backoff_base calls close_session after a ConnectError) has them
too. Telemetry is turned off unless the user set HF_HUB_DISABLE_TELEMETRY, DISABLE_TELEMETRY or DO_NOT_TRACK: with it,
huggingface_hub 2.4.0 fetches {ENDPOINT}/api/agent-harnesses while building its headers (utils/_headers.py
_http_user_agent -> utils/_detect_agent.py _load_registry) and caches the answer in HF_HOME
(constants.AGENT_HARNESSES_PATH), outside --cache-dir.
"""
from __future__ import annotations

import contextvars
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpcore2
import httpx2

from irsurgeon.weights.hub.guard import Clock, HubRefused
from irsurgeon.weights.hub.names import commit_problem, etag_problem, shown

TELEMETRY_ENV = ("HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY", "DO_NOT_TRACK")  # huggingface_hub constants.py
ERROR_BODY_BYTES = 1 << 20  # an error or redirect answer (hf_raise_for_status reads its text for the message)
UNANNOUNCED_BODY_BYTES = 64 << 20  # a body no HEAD, range or limit gave a size for
RETRIED = {408, 429, 500, 502, 503, 504}  # what huggingface_hub's backoff retries, sleeping Retry-After first


@dataclass
class Scope:
    clock: Clock
    limit: int | None  # the most bytes the file fetched in this scope may have (None: what is announced or asked)
    what: str  # what the limit is, for the message ("the largest config.json irsurgeon reads")
    expected: dict[str, int | None] = field(default_factory=dict)  # URL -> the size a HEAD announced for it

    def check(self, response: httpx2.Response) -> None:
        """Refuse an answer huggingface_hub would make a path of, or wait out past the deadline; bound its body."""
        headers, request = response.headers, response.request
        commit = headers.get("X-Repo-Commit")
        if commit is not None and (why := commit_problem(commit)):
            raise HubRefused(f"the hub's X-Repo-Commit {shown(commit)} is {why}; not making a cache path of it")
        if request.method == "HEAD":  # the one huggingface_hub names a blob after: X-Linked-Etag, else ETag
            name = "X-Linked-Etag" if headers.get("X-Linked-Etag") else "ETag"
            value = headers.get(name)
            if value is not None and (why := etag_problem(value)):
                raise HubRefused(f"the hub's {name} {shown(value)} is {why}; not making a cache path of it")
        if response.status_code in RETRIED:
            wait = retry_after(headers)
            if wait is not None and wait > self.clock.remaining():
                raise self.clock.expired(f" (the server asks to retry after {wait:g} s)")
        if request.method == "HEAD":
            self._announced(response)
        else:
            response.stream = Capped(response.stream, self._cap(response), self.clock)

    def _announced(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            return
        headers = response.headers
        # get_hf_file_metadata: the size is X-Linked-Size, else (not after a redirect) Content-Length; the GET then
        # goes to `Location`, or to the URL asked
        size = _int(headers.get("X-Linked-Size") or (None if response.is_redirect else headers.get("Content-Length")))
        if size is not None and self.limit is not None and size > self.limit:
            raise HubRefused(f"the hub announces {size} bytes, more than {self.what} ({self.limit} bytes); "
                             f"not downloading it")
        url = str(response.request.url)
        where = _join(url, headers["Location"]) if response.has_redirect_location else url
        self.expected[where] = size if size is not None else self.limit

    def _cap(self, response: httpx2.Response) -> int:
        """The most bytes this answer's body may have."""
        url = str(response.request.url)
        if response.status_code >= 300:
            if response.has_redirect_location and url in self.expected:  # the size follows the file
                self.expected[_join(url, response.headers["Location"])] = self.expected[url]
            return ERROR_BODY_BYTES
        cap = self.expected.get(url)
        if cap is None:
            cap = self.limit if self.limit is not None else UNANNOUNCED_BODY_BYTES
        asked = range_length(response.request.headers.get("Range"), cap)
        if response.status_code == 200 and asked is not None:
            return 0  # a range answered with the whole file: none of it is read (ranges.HubBytes falls back)
        if response.status_code == 206 and asked is not None:
            cap = min(cap, asked)
        length = _int(response.headers.get("Content-Length"))
        if length is not None and length > cap:
            raise HubRefused(f"the server answers {length} bytes where {cap} were announced or asked for; "
                             f"not reading them")
        return cap


class Capped(httpx2.SyncByteStream):
    """A response body that stops with HubRefused once it passes `cap` bytes (by one network read, at most 64 KiB),
    and with HubTimeout once the clock is spent (a second guard, for a transport this module could not wrap)."""

    def __init__(self, inner: httpx2.SyncByteStream, cap: int, clock: Clock):
        self._inner, self._cap, self._clock = inner, cap, clock

    def __iter__(self):
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise HubRefused(f"the server sent more than the {self._cap} bytes announced or asked for; "
                                 f"stopped reading")
            self._clock.clamp(None)
            yield chunk

    def close(self) -> None:
        self._inner.close()


_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("irsurgeon_hub_scope", default=None)
_INSTALL = threading.Lock()
_installed = False


@contextmanager
def scope(clock: Clock, limit: int | None = None, what: str = "allowed"):
    """Run the requests of the block under `clock`, checked and bounded (see the module docstring). Threads started
    inside do not inherit it: each enters its own (ranges.HubBytes does)."""
    install()
    clock.clamp(None)  # spent already: not even a connection
    token = _SCOPE.set(Scope(clock, limit, what))
    clock.enter()
    try:
        yield
    finally:
        clock.leave()
        _SCOPE.reset(token)


def install() -> None:
    """Once per process: telemetry off (unless the user chose), and the hooks on every client huggingface_hub makes."""
    global _installed
    with _INSTALL:
        if _installed:
            return
        from huggingface_hub import constants
        from huggingface_hub.utils import _http

        if not any(name in os.environ for name in TELEMETRY_ENV):
            constants.HF_HUB_DISABLE_TELEMETRY = True  # read on each call by utils/_headers.py _http_user_agent
        # the factory in use, so that one a user set stays in force (utils/_http.py keeps it in this global)
        previous = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)
        _http.set_client_factory(lambda: harden(previous()))
        _installed = True


def harden(client: httpx2.Client) -> httpx2.Client:
    """The client, with the scope's request and response hooks, and the time-bounded network backend."""
    hooks = client.event_hooks
    client.event_hooks = {"request": [*hooks.get("request", []), _on_request],
                          "response": [*hooks.get("response", []), _on_response]}
    # httpx2 2.16.2 keeps a client's transports in `_transport` and (proxies) `_mounts`; an HTTPTransport's
    # httpcore2.ConnectionPool opens every connection through `_network_backend` (httpcore2/_sync/connection_pool.py).
    # A transport of another kind keeps its own I/O; the request hook and Capped still bound it by the clock.
    for transport in (getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()):
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, Backend):
            pool._network_backend = Backend(backend)
    return client


def _on_request(request: httpx2.Request) -> None:
    current = _SCOPE.get()
    if current is not None:  # httpcore2 reads these once per phase: a cut here bounds waiting for a pooled connection
        timeouts = request.extensions.get("timeout", {})
        request.extensions["timeout"] = {k: current.clock.clamp(v) for k, v in timeouts.items()}


def _on_response(response: httpx2.Response) -> None:
    current = _SCOPE.get()
    if current is not None:
        current.check(response)


def _timed(call, timeout: float | None):
    """call(timeout), the timeout cut to the time left of the current scope; a timeout the cut caused is HubTimeout."""
    current = _SCOPE.get()
    if current is None:
        return call(timeout)
    allowed = current.clock.clamp(timeout)
    try:
        return call(allowed)
    except httpcore2.TimeoutException:
        if timeout is None or allowed < timeout:
            raise current.clock.expired() from None
        raise


class Backend(httpcore2.NetworkBackend):
    """httpcore2's network backend, each connect bounded by the time left of the current scope."""

    def __init__(self, inner: httpcore2.NetworkBackend):
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return Stream(_timed(lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options), timeout))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return Stream(_timed(lambda t: self._inner.connect_unix_socket(path, t, socket_options), timeout))

    def sleep(self, seconds):
        self._inner.sleep(seconds)


class Stream(httpcore2.NetworkStream):
    """A connection whose every read and write waits at most the time left of the scope it serves."""

    def __init__(self, inner: httpcore2.NetworkStream):
        self._inner = inner

    def read(self, max_bytes, timeout=None):
        return _timed(lambda t: self._inner.read(max_bytes, t), timeout)

    def write(self, buffer, timeout=None):
        return _timed(lambda t: self._inner.write(buffer, t), timeout)

    def close(self):
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None):
        return Stream(_timed(lambda t: self._inner.start_tls(ssl_context, server_hostname, t), timeout))

    def get_extra_info(self, info):
        return self._inner.get_extra_info(info)


def retry_after(headers) -> float | None:
    """The seconds a retryable answer asks to wait: the `t=` of a `ratelimit` header at r=0, else a Retry-After of
    delay-seconds (huggingface_hub 2.4.0 utils/_http.py _http_backoff_base, parse_ratelimit_headers and
    _parse_retry_after read them so; an HTTP-date it ignores)."""
    from huggingface_hub.utils import parse_ratelimit_headers

    limited = parse_ratelimit_headers(headers)
    if limited is not None and limited.remaining == 0:
        return float(limited.reset_in_seconds)
    value = (headers.get("Retry-After") or "").strip()
    return float(value) if value.isdigit() else None


def range_length(header: str | None, size: int) -> int | None:
    """Bytes `Range: bytes=a-b` (or `a-`, of a file of `size`) asks for; None for no range, or another kind."""
    m = re.fullmatch(r"bytes=(\d+)-(\d*)", (header or "").strip())
    if not m:
        return None
    end = int(m.group(2)) if m.group(2) else size - 1
    return max(end - int(m.group(1)) + 1, 0)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _join(url: str, location: str) -> str:
    try:
        return str(httpx2.URL(url).join(location))
    except (httpx2.InvalidURL, ValueError, TypeError):  # huggingface_hub's GET of it would fail the same way
        return location
