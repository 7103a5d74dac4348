"""Fetch only what the MTP head needs from a Hugging Face repo: config.json, the index, and the shards with `mtp.*`.

Everything goes through huggingface_hub's cache (its own progress bars, token discovery, `HF_ENDPOINT`,
`HF_HUB_OFFLINE=1`). A repo without an index holds a single `model.safetensors`; that one file is then the only way
to the head. Before any download, one HEAD request with a short timeout asks whether the hub answers at all: an
unreachable hub is one line within seconds, not huggingface_hub's minute of retries (huggingface_hub 2.4.0,
file_download.py: a failed HEAD without a cached copy is retried with `_ETAG_RETRY_TIMEOUT = 60` and backoff).
A hub that accepts connections but never answers costs the probe's 5 s, plus, with telemetry on, up to 3 s that
huggingface_hub itself spends once a day fetching `{ENDPOINT}/api/agent-harnesses` for its user agent
(utils/_detect_agent.py, `_REGISTRY_FETCH_TIMEOUT = 3`).

huggingface_hub (and its httpx2) is imported inside the functions that talk to the hub, never at module level:
it costs ~145 ms (measured, huggingface_hub 2.4.0) that a local checkpoint, and the CLI's start-up, never need.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from irsurgeon.errors import CheckpointError, cause
from irsurgeon.weights.checkpoint import CONFIG_FILE, INDEX_FILE, SINGLE_FILE, weight_map

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PROBE_TIMEOUT = 5.0  # seconds for the first HEAD; HF_HUB_ETAG_TIMEOUT, when set, wins
OFFLINE_HINT = "set HF_HUB_OFFLINE=1 to use the local Hugging Face cache only"
Echo = Callable[[str], None]


class HubUnreachable(CheckpointError):
    """The hub did not answer (connection refused, timeout, DNS): the local cache may still serve."""


@dataclass(frozen=True)
class HubOptions:
    """Where and as whom to fetch: revision (branch, tag or commit), token (None: the hub's own discovery)."""

    revision: str | None = None
    token: str | None = None
    cache_dir: Path | None = None


def looks_like_repo_id(source: str) -> bool:
    return bool(REPO_ID.match(source)) and ".." not in source


def is_repo_id(source: str | Path) -> bool:
    """A repo id is what names no local path and has the hub's owner/name form."""
    return not Path(source).exists() and looks_like_repo_id(str(source))


def resolve_source(source: str | Path, echo: Echo = print, hub: HubOptions | None = None,
                   prefix: str | None = None) -> Path:
    """A local checkpoint path as is; a repo id fetched (partially: see the module docstring) into the cache.

    prefix: fetch the shards holding the tensors named `prefix*` (the head's, e.g. "mtp."); None fetches config.json
    and the index only (what the identity check needs besides a few rows).
    """
    path = Path(source)
    if path.exists():
        return path
    if not looks_like_repo_id(str(source)):
        raise CheckpointError(f"{source}: no such checkpoint file or directory (nor a Hugging Face repo id)")
    return fetch_checkpoint(str(source), hub or HubOptions(), echo, prefix)


def fetch_weights(source: str | Path, root: Path, hub: HubOptions | None, prefix: str, echo: Echo = print) -> Path:
    """After resolve_source(prefix=None): the `prefix*` shards of that same commit (a local path is returned as is),
    so a branch that moves between the two steps cannot mix files of two commits."""
    commit = snapshot_commit(root)
    if not (commit and is_repo_id(source)):
        return root
    pinned = HubOptions(commit, (hub or HubOptions()).token, (hub or HubOptions()).cache_dir)
    return fetch_checkpoint(str(source), pinned, echo, prefix, quiet_probe=True)


def probe_timeout() -> float:
    """PROBE_TIMEOUT, unless HF_HUB_ETAG_TIMEOUT is set (huggingface_hub 2.4.0 hf_hub_download lets that variable
    override any etag_timeout passed in; so does this)."""
    from huggingface_hub import constants

    etag = constants.HF_HUB_ETAG_TIMEOUT
    return float(etag) if etag != constants.DEFAULT_ETAG_TIMEOUT else PROBE_TIMEOUT


def endpoint() -> str:
    from huggingface_hub import constants
    return constants.ENDPOINT


def is_offline() -> bool:
    from huggingface_hub import constants
    return constants.is_offline_mode()


def probe(repo_id: str, hub: HubOptions, echo: Echo) -> bool:
    """Whether the hub answers for the repo's config.json (True) or only the cache can serve it (False)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url, try_to_load_from_cache

    if is_offline():
        return False
    url = hf_hub_url(repo_id, CONFIG_FILE, revision=hub.revision)
    try:
        get_hf_file_metadata(url, token=hub.token, timeout=probe_timeout())
        return True
    except hub_failures() as e:
        if not is_network_error(e):
            raise hub_error(repo_id, CONFIG_FILE, hub, e) from None
        why = network_reason(e)
    cached = try_to_load_from_cache(repo_id, CONFIG_FILE, cache_dir=hub.cache_dir, revision=hub.revision)
    if isinstance(cached, str):
        echo(f"{repo_id}: cannot reach {endpoint()} ({why}); using the local Hugging Face cache")
        return False
    raise CheckpointError(f"{repo_id}: cannot reach the Hugging Face Hub at {endpoint()} ({why}); {OFFLINE_HINT}")


def hub_failures() -> tuple[type[Exception], ...]:
    """What huggingface_hub 2.4.0 raises for a failed fetch: its HTTP and entry errors (OSError subclasses or
    EntryNotFoundError), httpx2's transport errors, ValueError (file_download.py: "Force download failed ...")."""
    import httpx2
    from huggingface_hub.errors import EntryNotFoundError

    return OSError, ValueError, httpx2.HTTPError, EntryNotFoundError


def is_network_error(e: Exception) -> bool:
    import httpx2  # huggingface_hub 2.4.0's HTTP client (utils/_http.py: get_session() is an httpx2.Client)

    return isinstance(e, (httpx2.TransportError, ConnectionError, TimeoutError))


def network_reason(e: Exception) -> str:
    import httpx2

    if isinstance(e, httpx2.TimeoutException):
        return f"no answer within {probe_timeout():g} s"
    text = cause(e)
    return "connection refused" if "refused" in text.lower() else text


def hub_error(repo_id: str, filename: str, hub: HubOptions, e: Exception) -> CheckpointError:
    """One line for any failure of huggingface_hub while fetching `filename`."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)

    at = f"{repo_id}@{hub.revision}" if hub.revision else repo_id
    if isinstance(e, GatedRepoError):
        return CheckpointError(f"{at}: gated repo: accept its terms on the hub, then pass --token (or `hf auth login`)")
    if isinstance(e, RepositoryNotFoundError):
        return CheckpointError(f"{at}: repo not found at {endpoint()}, or private and the token (--token, HF_TOKEN or "
                               f"`hf auth login`) does not give access (HTTP {e.response.status_code})")
    if isinstance(e, RevisionNotFoundError):
        return CheckpointError(f"{at}: no revision {hub.revision or 'main'!r} in the repo")
    if isinstance(e, RemoteEntryNotFoundError):
        return CheckpointError(f"{at}: {filename} is not in the repo")
    if isinstance(e, LocalEntryNotFoundError):
        if is_offline():
            return CheckpointError(f"{at}: {filename} is not in the local Hugging Face cache (HF_HUB_OFFLINE is set)")
        underlying = e.__cause__ if isinstance(e.__cause__, Exception) else e
        return CheckpointError(f"{at}: cannot fetch {filename} from {endpoint()} ({network_reason(underlying)}); "
                               f"{OFFLINE_HINT}")
    if isinstance(e, HfHubHTTPError):
        status = e.response.status_code if e.response is not None else "?"
        return CheckpointError(f"{at}: cannot fetch {filename}: HTTP {status} from {endpoint()}")
    if is_network_error(e):
        return HubUnreachable(f"{at}: connection to {endpoint()} lost while fetching {filename} "
                               f"({network_reason(e)}); {OFFLINE_HINT}")
    return CheckpointError(f"{at}: cannot fetch {filename}: {cause(e)}")


def fetch_checkpoint(repo_id: str, hub: HubOptions, echo: Echo = print, prefix: str | None = None,
                     quiet_probe: bool = False) -> Path:
    """The cache snapshot directory holding config.json, the index and (prefix given) the shards of `prefix*`.

    With a commit hash as revision, files already in the cache are taken without a request (huggingface_hub 2.4.0
    file_download.py: "if user provides a commit_hash and they already have the file on disk, shortcut everything").
    """
    online = probe(repo_id, hub, (lambda _: None) if quiet_probe else echo)  # quiet: said by the first probe
    fetch = fetcher(repo_id, hub, online)
    config = fetch(CONFIG_FILE)
    index = fetch(INDEX_FILE, optional=True) if online else cached_file(repo_id, INDEX_FILE, hub)
    if prefix is None:
        return config.parent
    if index is None:
        echo(f"{repo_id}: no {INDEX_FILE}; fetching the single {SINGLE_FILE}")
        fetch(SINGLE_FILE)
        return config.parent
    for shard in head_shards(index, prefix):
        echo(f"{repo_id}: fetching {shard} (holds {prefix}* tensors)")
        fetch(shard)
    return config.parent


def fetcher(repo_id: str, hub: HubOptions, online: bool) -> Callable[..., Path | None]:
    """fetch(filename, optional=False): the file's cached path, fetched when online; None for a missing optional
    file; any failure one CheckpointError line (hub_error)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError

    def fetch(filename: str, optional: bool = False) -> Path | None:
        try:
            return Path(hf_hub_download(repo_id, filename, revision=hub.revision, token=hub.token,
                                        cache_dir=hub.cache_dir, local_files_only=not online))
        except RemoteEntryNotFoundError as e:
            if optional:
                return None
            raise hub_error(repo_id, filename, hub, e) from None
        except hub_failures() as e:
            raise hub_error(repo_id, filename, hub, e) from None
    return fetch


def fetch_whole(repo_id: str, hub: HubOptions, check: Callable[[Path], None], echo: Echo = print,
                weights: bool = True) -> Path:
    """A small checkpoint fetched whole (a Gemma 4 assistant): config.json, which check(path) judges before any
    weight is fetched, then (weights=True; else later by fetch_whole_weights) its weights. Returns the snapshot."""
    online = probe(repo_id, hub, echo)
    config = fetcher(repo_id, hub, online)(CONFIG_FILE)
    check(config)
    if weights:
        _fetch_weights_of(repo_id, config.parent, hub, online, echo)
    return config.parent


def fetch_whole_weights(repo_id: str, root: Path, hub: HubOptions, echo: Echo = print) -> Path:
    """After fetch_whole(weights=False): the weights of root's commit (quiet probe: the first one spoke)."""
    _fetch_weights_of(repo_id, root, hub, probe(repo_id, hub, lambda _: None), echo)
    return root


def _fetch_weights_of(repo_id: str, root: Path, hub: HubOptions, online: bool, echo: Echo) -> None:
    """model.safetensors, or the index and every shard it lists, all of root's commit (a branch that moves meanwhile
    cannot mix two commits' files)."""
    commit = snapshot_commit(root)
    pinned = HubOptions(commit, hub.token, hub.cache_dir) if commit else hub
    fetch = fetcher(repo_id, pinned, online)
    index = fetch(INDEX_FILE, optional=True) if online else cached_file(repo_id, INDEX_FILE, pinned)
    for name in [SINGLE_FILE] if index is None else all_shards(index):
        echo(f"{repo_id}: fetching {name}")
        fetch(name)


def all_shards(index: Path) -> list[str]:
    return sorted(set(weight_map(index).values()))


def cached_file(repo_id: str, filename: str, hub: HubOptions) -> Path | None:
    """The cached copy of a file, or None (cache-only mode: a missing index means a single-file checkpoint)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=hub.cache_dir, revision=hub.revision)
    return Path(found) if isinstance(found, str) else None


def head_shards(index: Path, prefix: str) -> list[str]:
    shards = sorted({s for n, s in weight_map(index).items() if n.startswith(prefix)})
    if not shards:
        raise CheckpointError(f"{index}: no '{prefix}*' tensors listed: this checkpoint carries no MTP head")
    return shards


def snapshot_commit(path: Path) -> str | None:
    """The commit of a cache snapshot directory (`.../snapshots/<commit>`), None for any other directory."""
    path = path if path.is_dir() else path.parent
    return path.name if path.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", path.name) else None


class HubBytes:
    """Byte ranges of one file of a repo at one commit, by GET with a Range header, through huggingface_hub's
    session, headers and retries. One HEAD (get_hf_file_metadata) gives the size and where the bytes are (the
    hub's redirect to its CDN), so each range is one request; the token is not sent to another origin (as
    huggingface_hub 2.4.0 file_download.py drops `authorization` for a location off the hub). The first read
    fetches HEADER_GUESS bytes (at most 1/64 of the file), which hold the length and, usually, the whole
    safetensors header (tens of KiB for a shard of hundreds of tensors); the rows are
    then fetched in parallel. A server that answers a range with the whole file (200) is refused, not read."""

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

        try:
            meta = get_hf_file_metadata(self.url, token=self.hub.token, timeout=probe_timeout())
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e) from None
        self.requests += 1
        if meta.size is None:
            raise CheckpointError(f"{self.label}: the hub did not tell the file's size")
        self._size, self.location = meta.size, meta.location
        if urlsplit(self.location)[:2] != urlsplit(self.url)[:2]:
            self.headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}

    def _get(self, offset: int, length: int) -> bytes:
        from huggingface_hub.utils import hf_raise_for_status, http_stream_backoff

        headers = {**self.headers, "Range": f"bytes={offset}-{offset + length - 1}", "Accept-Encoding": "identity"}
        try:
            with http_stream_backoff("GET", self.location, headers=headers, timeout=probe_timeout(),
                                     max_retries=2) as r:
                hf_raise_for_status(r)
                if r.status_code != 206:  # a server ignoring Range would send the whole shard
                    raise CheckpointError(f"{self.label}: the server ignored the byte range (HTTP {r.status_code}); "
                                          f"not downloading the whole file for a few rows")
                data = r.read()
        except hub_failures() as e:
            raise hub_error(self.repo_id, self.filename, self.hub, e) from None
        if len(data) != length:
            raise CheckpointError(f"{self.label}: asked for {length} bytes at {offset}, got {len(data)}")
        self.requests += 1  # counters: int += under the GIL, one per finished request
        self.bytes += len(data)
        return data
