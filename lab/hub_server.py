"""A Hugging Face Hub look-alike on 127.0.0.1, just enough for huggingface_hub 2.4.0's hf_hub_download and ranges.

What hf_hub_download needs (huggingface_hub 2.4.0 file_download.py, get_hf_file_metadata and
_get_metadata_or_catch_error): `HEAD /{repo}/resolve/{revision}/{file}` answering `X-Repo-Commit` and `ETag`
(or `X-Linked-Etag`) and the size (`X-Linked-Size` or `Content-Length`); a redirect to another host stops the HEAD
there and the GET goes to its `Location`. Errors carry `X-Error-Code` (utils/_http.py hf_raise_for_status):
RepoNotFound (401, as the hub answers for an unknown or private repo), RevisionNotFound, EntryNotFound (404).

    hub = HubServer({"acme/tiny": {"main": Revision(files), "v2": Revision(other)}}, private={"acme/tiny": "tok"})
    with hub: ... HF_ENDPOINT=hub.url ...; hub.log -> [(method, path, range, bytes sent)]

`.safetensors` and `.bin` files are redirected to a second port (another origin, like the hub's CDN), which serves
`Range`.
Both servers run in daemon threads and stop on `__exit__` or, at the latest, after `lifetime` seconds.
`GET /api/agent-harnesses` answers a registry, as the hub does for huggingface_hub's telemetry (utils/_detect_agent.py).

Faults make it a hostile hub: ETags and commit hashes that are paths, any revision name accepted, sizes announced
wrongly, answers longer than asked (a range answered with gigabytes, a download without end), answers that drip one
byte at a time, a Retry-After far in the future, one file's answers for another commit, a redirect anywhere, and a
file replaced between two range requests. One fault is a schedule rather than an attack: a file's first range request
for tensor bytes is held until the test releases it (`stall_data`: `hub.stalled` is set when it arrives, the test
sets `hub.release`), so a test knows that the run that made it is mid-download, whatever the machine's speed.
The CDN's answers carry an ETag (the sha256 of the file sent), as a CDN
sends its object's. Long answers are generated as they are sent, never held whole.
"""
from __future__ import annotations

import hashlib
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Revision:
    files: dict[str, Path]
    commit: str = ""

    def __post_init__(self):
        if not self.commit:
            digest = hashlib.sha1()
            for name in sorted(self.files):
                digest.update(name.encode() + hashlib.sha256(self.files[name].read_bytes()).digest())
            self.commit = digest.hexdigest()


@dataclass
class Faults:
    die_mid_file: str | None = None  # file name: send half of it, then stop both servers
    slow_file: str | None = None  # file name: pause `pause` seconds after its first half (a slow, legit download)
    pause: float = 0.0
    etag: dict[str, str] = field(default_factory=dict)  # file name -> its ETag (X-Linked-Etag if LFS), sent as is
    commit: str | None = None  # X-Repo-Commit of every answer (a 404 EntryNotFound too), sent as is
    missing_commit: str | None = None  # X-Repo-Commit of a 404 EntryNotFound only
    any_revision: bool = False  # any revision name is served the repo's first revision (a hub that checks none)
    announce: dict[str, int] = field(default_factory=dict)  # file name -> the size its HEAD announces
    range_bytes: int | None = None  # every range request answered with this many bytes (Content-Length says so)
    range_status: int = 206  # ... with this status (200: as if the Range header were ignored)
    range_file: str | None = None  # file name: range_bytes and range_shift apply to its ranges only
    range_shift: int = 0  # a range answered with the bytes this far after those asked (Content-Range says so)
    ignore_range: str | None = None  # file name: a Range request for it answered 200 with the whole file, no
    # Accept-Ranges (a server that does not serve ranges)
    endless_file: str | None = None  # file name: its GET (ranged or not) is chunked, without Content-Length, and
    # never ends
    drip: tuple[str, str] | None = None  # (HEAD | GET | RANGE, file name): that answer, head and body, byte by byte
    drip_every: float = 0.25  # seconds between two dripped bytes
    retry_after: tuple[str, str] | None = None  # (HEAD | GET | RANGE, file name): answered 429, Retry-After: 100000
    file_commit: dict[str, str] = field(default_factory=dict)  # file name -> X-Repo-Commit of its answers alone
    location: dict[str, str] = field(default_factory=dict)  # file name -> where its HEAD redirects (sent as is)
    swap_file: tuple[str, Path] | None = None  # (file name, other file): its range answers after the first
    swap_after: int = 1  # ... `swap_after` come from the other file, with that file's ETag (replaced on the server)
    stall_data: str | None = None  # file name: its first range request starting in the tensors' bytes (past the
    # safetensors header) is answered only once HubServer.release is set; HubServer.stalled is set when it arrives


@dataclass
class HubServer:
    repos: dict[str, dict[str, Revision]]
    private: dict[str, str] = field(default_factory=dict)  # repo -> the token it needs
    faults: Faults = field(default_factory=Faults)
    lifetime: float = 120.0

    def __post_init__(self):
        self.log: list[tuple[str, str, str | None, int]] = []
        self.blobs: dict[str, Path] = {}
        self._sums: dict[Path, str] = {}
        self._lock = threading.Lock()
        self.stalled, self.release = threading.Event(), threading.Event()  # Faults.stall_data's schedule
        self._servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
        for s in self._servers:
            s.daemon_threads = True
            s.hub = self
        self.url = f"http://127.0.0.1:{self._servers[0].server_port}"
        self.cdn = f"http://127.0.0.1:{self._servers[1].server_port}"

    def __enter__(self) -> "HubServer":
        for s in self._servers:
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        self.release.set()  # a request still held ends with the servers
        self.stop()

    def stop(self) -> None:
        for s in self._servers:
            threading.Thread(target=s.shutdown, daemon=True).start()  # shutdown() blocks: not from a handler
            s.socket.close()

    def sha256(self, path: Path) -> str:
        with self._lock:
            if path not in self._sums:
                self._sums[path] = hashlib.sha256(path.read_bytes()).hexdigest()
            return self._sums[path]

    def stall(self, path: Path, start: int) -> None:
        """Faults.stall_data: the first range request of that file starting past its header waits for `release`."""
        if self.faults.stall_data != path.name:
            return
        with open(path, "rb") as f:
            data_start = 8 + int.from_bytes(f.read(8), "little")
        with self._lock:
            if start < data_start or self.stalled.is_set():
                return
            self.stalled.set()
        self.release.wait(self.lifetime)

    def count_swap(self) -> int:
        """How many range answers of Faults.swap_file's file there have been, this one included."""
        with self._lock:
            self._swaps = getattr(self, "_swaps", 0) + 1
            return self._swaps

    def record(self, method: str, path: str, rng: str | None, sent: int) -> None:
        with self._lock:
            self.log.append((method, path, rng, sent))

    def served(self, filename: str) -> tuple[int, int]:
        """(requests, bytes sent) for one file name, over the resolve and the CDN paths."""
        blobs = {sha for sha, p in self.blobs.items() if p.name == filename}
        hits = [e for e in self.log if e[1].endswith("/" + filename) or e[1].rsplit("/", 1)[-1] in blobs]
        return len(hits), sum(e[3] for e in hits)

class Handler(BaseHTTPRequestHandler):
    """One request of the look-alike; the HubServer it serves is `self.server.hub`."""

    protocol_version = "HTTP/1.1"

    @property
    def hub(self) -> "HubServer":
        return self.server.hub

    def log_message(self, *args):  # keep test output clean; the log list records every request
        pass

    def do_HEAD(self):
        self.answer(body=False)

    def do_GET(self):
        self.answer(body=True)

    def answer(self, body: bool):
        self.file = None  # the file this answer is about, for the faults that pick one
        faults = self.hub.faults
        if self.path == "/api/agent-harnesses":
            self.hub.record(self.command, self.path, None, 0)
            registry = b'{"standardEnvVars": [], "harnesses": {}}'
            return self.reply(200, {"Content-Type": "application/json", "Content-Length": str(len(registry))}, registry)
        cdn = re.fullmatch(r"/cdn/([0-9a-f]{64})", self.path)
        if cdn and cdn.group(1) in self.hub.blobs:
            self.file = self.hub.blobs[cdn.group(1)].name
            if self.retries():
                return None
            return self.send_file(self.hub.blobs[cdn.group(1)], body, {"ETag": f'"{cdn.group(1)}"'})
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
        if not m:
            return self.error(404, "EntryNotFound")
        repo, rev, filename = m.groups()
        self.file = filename
        revisions = self.hub.repos.get(repo)
        token = self.hub.private.get(repo)
        if revisions is None or (token and self.headers.get("authorization") != f"Bearer {token}"):
            return self.error(401, "RepoNotFound")
        found = revisions.get(rev) or next((r for r in revisions.values() if r.commit == rev), None)
        if found is None and faults.any_revision:
            found = next(iter(revisions.values()))
        if found is None:
            return self.error(404, "RevisionNotFound")
        path = found.files.get(filename)
        commit = faults.file_commit.get(filename) or faults.commit or found.commit
        if path is None:
            return self.error(404, "EntryNotFound", faults.missing_commit or commit)
        if self.retries():
            return None
        sha = self.hub.sha256(path)
        meta = {"X-Repo-Commit": commit}
        size = faults.announce.get(filename, path.stat().st_size)
        if filename.endswith((".safetensors", ".bin")):  # LFS-like: metadata here, bytes from the CDN origin
            self.hub.blobs[sha] = path
            meta.update({"X-Linked-Etag": faults.etag.get(filename, f'"{sha}"'), "X-Linked-Size": str(size),
                         "Location": faults.location.get(filename, f"{self.hub.cdn}/cdn/{sha}"), "Content-Length": "0"})
            self.hub.record(self.command, self.path, self.headers.get("Range"), 0)
            return self.reply(302, meta)
        meta["ETag"] = faults.etag.get(filename, f'"{sha}"')
        return self.send_file(path, body, meta, announced=size)

    def kind(self) -> str:
        return "HEAD" if self.command == "HEAD" else "RANGE" if self.headers.get("Range") else "GET"

    def retries(self) -> bool:
        """The Retry-After fault: answered 429, asking for a retry in a day (True when it was)."""
        if self.hub.faults.retry_after != (self.kind(), self.file):
            return False
        self.hub.record(self.command, self.path, self.headers.get("Range"), 0)
        self.reply(429, {"Retry-After": "100000", "Content-Length": "0"})
        return True

    def send_file(self, path: Path, body: bool, meta: dict, announced: int | None = None):
        rng = self.headers.get("Range")
        faults = self.hub.faults
        path, meta = self.swapped(path, meta) if rng else (path, meta)
        size = path.stat().st_size
        status, start, end = 200, 0, size - 1
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "") if faults.ignore_range != path.name else None
        targeted = faults.range_file in (None, path.name)
        if m:
            start, end, status = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1), 206
            if targeted and faults.range_shift:
                start, end = start + faults.range_shift, min(end + faults.range_shift, size - 1)
            meta["Content-Range"] = f"bytes {start}-{end}/{size}"
            if body:
                self.hub.stall(path, start)
        if m and body and faults.range_bytes is not None and targeted:
            return self.send_long(faults.range_status, meta, path, start, faults.range_bytes)
        if body and faults.endless_file == path.name:
            return self.send_endless(status, meta)
        with open(path, "rb") as f:  # only the bytes asked for
            f.seek(start)
            part = f.read(end - start + 1) if body else b""
        meta["Content-Length"] = str(end - start + 1)
        if faults.ignore_range != path.name:
            meta["Accept-Ranges"] = "bytes"
        if not body:
            if announced is not None and not m:
                meta["Content-Length"] = str(announced)
            self.hub.record("HEAD", self.path, rng, 0)
            return self.reply(status, meta)
        if self.hub.faults.die_mid_file and path.name == self.hub.faults.die_mid_file:
            self.reply(status, meta, part[: len(part) // 2])
            self.hub.record("GET", self.path, rng, len(part) // 2)
            self.hub.stop()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        try:
            if self.hub.faults.slow_file and path.name == self.hub.faults.slow_file:
                self.reply(status, meta, part[: len(part) // 2])
                time.sleep(self.hub.faults.pause)
                self.wfile.write(part[len(part) // 2:])
            else:
                self.reply(status, meta, part)
        except OSError:  # the client hung up (as on a range answered whole: it reads none of it)
            self.close_connection = True
        self.hub.record("GET", self.path, rng, len(part))

    def swapped(self, path: Path, meta: dict) -> tuple[Path, dict]:
        """A range answer's file and headers: Faults.swap_file's other file, with its ETag, once swap_after have gone."""
        swap = self.hub.faults.swap_file
        if swap and path.name == swap[0] and self.hub.count_swap() > self.hub.faults.swap_after:
            return swap[1], {**meta, "ETag": f'"{self.hub.sha256(swap[1])}"'}
        return path, meta

    def send_long(self, status: int, meta: dict, path: Path, start: int, length: int):
        """`length` bytes from `start` (the file's, then zeros), as Content-Length announces, made as they are sent."""
        meta = {k: v for k, v in meta.items() if k != "Content-Range"}
        meta["Content-Length"] = str(length)
        if status == 206:
            meta["Content-Range"] = f"bytes {start}-{start + length - 1}/{path.stat().st_size}"
        self.reply(status, meta)
        with open(path, "rb") as f:
            f.seek(start)
            head = f.read(length)
        sent = self.write_until_closed(head, length)
        self.hub.record("GET", self.path, self.headers.get("Range"), sent)

    def send_endless(self, status: int, meta: dict):
        """A chunked body that never ends (until the client hangs up, or 4 GiB)."""
        meta = {k: v for k, v in meta.items() if k != "Content-Length"}
        self.reply(status, {**meta, "Transfer-Encoding": "chunked"})
        block = b"\0" * (1 << 20)
        frame = b"%x\r\n" % len(block) + block + b"\r\n"
        sent = 0
        try:
            while sent < 4 << 30:
                self.wfile.write(frame)
                sent += len(block)
        except OSError:  # the client stopped reading: what a bounded client does
            pass
        self.close_connection = True
        self.hub.record("GET", self.path, None, sent)

    def write_until_closed(self, head: bytes, length: int) -> int:
        """head, then zeros up to `length` bytes, 1 MiB at a time, until done or the client hangs up; bytes sent."""
        sent, block = 0, b"\0" * (1 << 20)
        try:
            self.wfile.write(head)
            sent = len(head)
            while sent < length:
                n = min(len(block), length - sent)
                self.wfile.write(block[:n])
                sent += n
        except OSError:
            self.close_connection = True
        return sent

    def error(self, status: int, code: str, commit: str | None = None):
        self.hub.record(self.command, self.path, self.headers.get("Range"), 0)
        meta = {"X-Error-Code": code, "Content-Length": "0"}
        if commit:
            meta["X-Repo-Commit"] = commit
        self.reply(status, meta)

    def reply(self, status: int, headers: dict, payload: bytes = b""):
        if self.hub.faults.drip == (self.kind(), getattr(self, "file", None)):
            return self.drip(status, headers, payload)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if payload:
            self.wfile.write(payload)
            self.wfile.flush()

    def drip(self, status: int, headers: dict, payload: bytes):
        """The whole answer, status line included, one byte every `drip_every` s, until the client hangs up."""
        status_line = f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"
        lines = [status_line, *(f"{k}: {v}" for k, v in headers.items())]
        raw = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
        self.close_connection = True
        try:
            for i in range(len(raw)):
                self.wfile.write(raw[i:i + 1])
                self.wfile.flush()
                time.sleep(self.hub.faults.drip_every)
        except OSError:
            pass


class Refusing:
    """A loopback port held bound but not listening: connections to it are refused (RST), and no other process
    (another pytest worker's HubServer, binding port 0) can be given it while the block runs."""

    def __enter__(self) -> "Refusing":
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


class Blackhole:
    """A loopback socket that listens but never accepts or answers: connections open, requests time out."""

    def __enter__(self) -> "Blackhole":
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()


def split_checkpoint(src: Path, dest: Path, shards: int = 3, extra: dict | None = None) -> dict[str, Path]:
    """A single-file checkpoint re-laid as an index + 3 shards: the token embeddings alone in the first, the rest of
    the main model in the second, `mtp.*` in the third; shards=2 keeps `mtp.*` in the second, beside the rest;
    shards=1 writes one model.safetensors (no index). extra: {name: (array, dtype)} added to the rest (a large
    tensor beside the head). Returns the repo's files by name."""
    import json

    from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

    dest.mkdir(parents=True)
    st = SafetensorsFile(src / "model.safetensors")
    tensors = {n: (st.raw(n), st.tensors[n].dtype) for n in st.tensors}
    st.close()
    tensors.update(extra or {})
    names = sorted(tensors)
    embed = [n for n in names if "embed_tokens" in n]
    mtp = [n for n in names if n.startswith("mtp.")]
    rest = [n for n in names if n not in embed and n not in mtp]
    parts = {1: [embed + rest + mtp], 2: [embed, rest + mtp], 3: [embed, rest, mtp]}[shards]
    groups = {"model.safetensors": parts[0]} if shards == 1 else {
        f"model-{i:05d}-of-{shards:05d}.safetensors": members for i, members in enumerate(parts, 1)}
    for shard, members in groups.items():
        write_safetensors(dest / shard, {n: tensors[n][0] for n in members}, {n: tensors[n][1] for n in members})
    if shards > 1:
        index = {"metadata": {}, "weight_map": {n: shard for shard, members in groups.items() for n in members}}
        (dest / "model.safetensors.index.json").write_text(json.dumps(index))
    (dest / "config.json").write_bytes((src / "config.json").read_bytes())
    return {p.name: p for p in dest.iterdir()}
