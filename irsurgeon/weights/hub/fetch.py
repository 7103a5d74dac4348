"""What irsurgeon fetches of a Hugging Face repo through huggingface_hub's cache: config.json and the index (the
weights come by byte range: partial.py), and, when a server will not serve ranges, a whole shard.

Through huggingface_hub's cache go its token discovery, `HF_ENDPOINT` and `HF_HUB_OFFLINE=1`. A repo without an index
holds a single `model.safetensors`, or `.bin` files (partial.stored_as_bin asks, by one HEAD: has_file). Before any
download, one HEAD request with a short timeout asks whether the hub answers at all: an unreachable hub is one line
within seconds, not huggingface_hub's minute of retries
(huggingface_hub 2.4.0, file_download.py: a failed HEAD without a cached copy is retried with
`_ETAG_RETRY_TIMEOUT = 60` and backoff).
A hub that accepts connections but never answers costs the probe's 5 s (plus, when the user turned telemetry on, up
to 3 s that huggingface_hub spends once a day fetching `{ENDPOINT}/api/agent-harnesses`: utils/_detect_agent.py,
`_REGISTRY_FETCH_TIMEOUT = 3`; transport.py turns it off otherwise).

What a hostile hub or command line could do through huggingface_hub is bounded before it happens: the revision must
be a git ref name or a commit (HubOptions refuses any other), each answer is checked and bounded inside a scope
(transport.py: hashes that are paths refused, bodies cut at their announced size, the --hub-timeout clock),
every path huggingface_hub returns must lie in the cache (inside_cache), and none of the folders it writes the
repo's files in may be a link before it writes (refuse_linked_folders).

huggingface_hub (and its httpx2) is imported inside the functions that talk to the hub, never at module level:
it costs ~145 ms (measured, huggingface_hub 2.4.0) that a local checkpoint, and the CLI's start-up, never need.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError, cause, with_hint
from irsurgeon.weights.checkpoint import CONFIG_FILE, INDEX_FILE, home_of
from irsurgeon.weights.hub.guard import TIMEOUT_ENV, Clock, HubGuardError, HubTimeout, check_timeout, default_timeout
from irsurgeon.weights.hub.names import check_content, commit_problem, etag_problem, revision_problem, shown

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
PROBE_TIMEOUT = 5.0  # seconds for the first HEAD; HF_HUB_ETAG_TIMEOUT, when set, wins
OFFLINE_HINT = "set HF_HUB_OFFLINE=1 to use the local Hugging Face cache only"
TIMEOUT_HINT = ("--hub-timeout", f"raise it with --hub-timeout SECONDS or {TIMEOUT_ENV}")
Echo = Callable[[str], None]


class HubUnreachable(CheckpointError):
    """The hub did not answer (connection refused, timeout, DNS): the local cache may still serve."""


@dataclass(frozen=True)
class HubOptions:
    """Where and as whom to fetch: revision (branch, tag or commit), token (None: the hub's own discovery), and how
    long all requests made with these options may take together (timeout, seconds; None: IRSURGEON_HUB_TIMEOUT or
    600). Copies made with dataclasses.replace share the clock. A revision git would not accept is refused here."""

    revision: str | None = None
    token: str | None = None
    cache_dir: Path | None = None
    timeout: float | None = None
    clock: Clock = field(default=None, compare=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self):
        if self.revision is not None and (why := revision_problem(self.revision)):
            raise CheckpointError(f"revision {shown(self.revision)} is not a branch, tag or commit name: {why}")
        if self.clock is None:
            seconds = default_timeout() if self.timeout is None else check_timeout(self.timeout, "hub timeout")
            object.__setattr__(self, "clock", Clock(seconds))


def looks_like_repo_id(source: str) -> bool:
    return bool(REPO_ID.match(source)) and ".." not in source


def is_repo_id(source: str | Path) -> bool:
    """A repo id is what names no local path and has the hub's owner/name form."""
    return not Path(source).exists() and looks_like_repo_id(str(source))


def resolve_source(source: str | Path, echo: Echo = print, hub: HubOptions | None = None) -> Path:
    """A local checkpoint path as is; for a repo id, config.json and the index (what the family and the identity
    check need before any weight) fetched into the cache: its snapshot directory. The weights come after, by
    partial.fetch_weights."""
    path = Path(source)
    if path.exists():
        return path
    if not looks_like_repo_id(str(source)):
        raise CheckpointError(f"{source}: no such checkpoint file or directory (nor a Hugging Face repo id)")
    try:
        return fetch_checkpoint(str(source), hub or HubOptions(), echo)
    except CheckpointError as e:  # a mistyped local path reads as a repo id too: say the local answer first
        said = str(e).removeprefix(f"{source}: ")
        both = type(e)(f"{source}: {local_answer(path)}; as a Hugging Face repo id: {said}")
        both.hint = e.hint  # the advice the hub's answer carried (errors.with_hint)
        raise both from None


def local_answer(path: Path) -> str:
    """What the file system says of a missing local path: the folder it names that is missing, or, when its folder
    is there, that it holds no such checkpoint."""
    if path.parent.is_dir():
        return f"no such local checkpoint in {path.parent}" + did_you_mean(path)
    missing = next((p for p in reversed(path.parents) if not p.is_dir()), path.parent)
    if os.path.lexists(missing):  # a file (or a dangling link) where the path needs a folder
        what = "a file, not a folder" if missing.is_file() else "a link to nothing" if not missing.exists() \
            else "not a folder"
        return f"no such local path ({missing} is {what})"
    return f"no such local path ({missing}/ does not exist)"


def did_you_mean(path: Path) -> str:
    """" (did you mean X?)" naming the entry of path's folder closest to its name (difflib, as argparse and git
    suggest), else nothing; a folder of more than LISTED entries is not read for it."""
    import difflib
    from itertools import islice

    try:
        with os.scandir(path.parent) as entries:
            names = [e.name for e in islice(entries, LISTED)]
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return f" (did you mean {shown(str(path.parent / close[0]))}?)" if close else ""


LISTED = 10_000  # entries of a folder read for a suggestion


def probe_timeout() -> float:
    """PROBE_TIMEOUT, unless HF_HUB_ETAG_TIMEOUT is set (huggingface_hub 2.4.0 hf_hub_download lets that variable
    override any etag_timeout passed in; so does this)."""
    from huggingface_hub import constants

    etag = constants.HF_HUB_ETAG_TIMEOUT
    return float(etag) if etag != constants.DEFAULT_ETAG_TIMEOUT else PROBE_TIMEOUT


def download_timeout() -> float:
    """The read timeout of a download's GET: huggingface_hub's own (HF_HUB_DOWNLOAD_TIMEOUT, 10 s by default;
    file_download.py http_get passes constants.HF_HUB_DOWNLOAD_TIMEOUT), so that a range is let wait as long as
    hf_hub_download would wait for the same bytes (a 7 s stall mid-body was cut at the HEAD's 5 s)."""
    from huggingface_hub import constants

    return float(constants.HF_HUB_DOWNLOAD_TIMEOUT)


def endpoint() -> str:
    from huggingface_hub import constants
    return constants.ENDPOINT


def is_offline() -> bool:
    from huggingface_hub import constants
    return constants.is_offline_mode()


def cache_root(hub: HubOptions) -> Path:
    """The cache directory as huggingface_hub 2.4.0 hf_hub_download resolves it (expanduser, resolve)."""
    from huggingface_hub import constants
    return Path(hub.cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()


def head(repo_id: str, filename: str, hub: HubOptions) -> int | None:
    """One HEAD of the repo's file: the one huggingface_hub makes first (file_download.py
    _get_metadata_or_catch_error -> get_hf_file_metadata), bounded by the scope, its commit and ETag checked here as
    well as by the scope; huggingface_hub's failures are raised as they are. Returns the size it announces."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    from irsurgeon.weights.hub.transport import scope

    url = hf_hub_url(repo_id, filename, revision=hub.revision)
    try:
        with scope(hub.clock, *size_limit(filename)):
            meta = get_hf_file_metadata(url, token=hub.token, timeout=probe_timeout())
    except HubGuardError as e:
        raise labelled(e, f"{at(repo_id, hub)}: {filename}") from None
    check_metadata(repo_id, filename, hub, meta.commit_hash, meta.etag)
    return meta.size if isinstance(meta.size, int) and meta.size >= 0 else None


def file_size(repo_id: str, filename: str, hub: HubOptions) -> int | None:
    """The size the hub announces for the repo's file (one HEAD), None when the repo has no such file or announces
    none; any other failure is one line (hub_error)."""
    from huggingface_hub.errors import RemoteEntryNotFoundError

    try:
        return head(repo_id, filename, hub)
    except RemoteEntryNotFoundError:
        return None
    except hub_failures() as e:
        raise hub_error(repo_id, filename, hub, e) from None


def has_file(repo_id: str, filename: str, hub: HubOptions) -> bool:
    """Whether the repo holds `filename`: one HEAD, as huggingface_hub's HfApi.file_exists asks (hf_api.py); any
    other failure than a missing file is one line (hub_error)."""
    from huggingface_hub.errors import RemoteEntryNotFoundError

    try:
        head(repo_id, filename, hub)
    except RemoteEntryNotFoundError:
        return False
    except hub_failures() as e:
        raise hub_error(repo_id, filename, hub, e) from None
    return True


def probe(repo_id: str, hub: HubOptions, echo: Echo) -> bool:
    """Whether the hub answers for the repo's config.json (True) or only the cache can serve it (False), by its
    HEAD (head)."""
    if is_offline():
        return False
    try:
        head(repo_id, CONFIG_FILE, hub)
        return True
    except hub_failures() as e:
        if not is_network_error(e):
            raise hub_error(repo_id, CONFIG_FILE, hub, e) from None
        why = network_reason(e)
    if cached_file(repo_id, CONFIG_FILE, hub) is not None:
        echo(f"{repo_id}: cannot reach {endpoint()} ({why}); using the local Hugging Face cache")
        return False
    raise HubUnreachable(f"{repo_id}: cannot reach the Hugging Face Hub at {endpoint()} ({why}); {OFFLINE_HINT}")


def check_metadata(repo_id: str, filename: str, hub: HubOptions, commit: str | None, etag: str | None) -> None:
    """The commit and (normalized) ETag huggingface_hub read from a HEAD: of the form it will make paths of."""
    for what, value, problem in (("commit", commit, commit_problem), ("ETag", etag, etag_problem)):
        if value is not None and (why := problem(value)):
            raise CheckpointError(f"{at(repo_id, hub)}: {filename}: the hub's {what} {shown(value)} is {why}; "
                                  f"not making a cache path of it")


def hub_failures() -> tuple[type[Exception], ...]:
    """What huggingface_hub 2.4.0 raises for a failed fetch: its HTTP and entry errors (OSError subclasses or
    EntryNotFoundError), httpx2's transport errors, ValueError (file_download.py: "Force download failed ...")."""
    import httpx2
    from huggingface_hub.errors import EntryNotFoundError

    return OSError, ValueError, httpx2.HTTPError, EntryNotFoundError


def is_network_error(e: Exception) -> bool:
    import httpx2  # huggingface_hub 2.4.0's HTTP client (utils/_http.py: get_session() is an httpx2.Client)

    return isinstance(e, (httpx2.TransportError, ConnectionError, TimeoutError))


def network_reason(e: Exception, timeout: float | None = None) -> str:
    """Why a request failed; timeout: the one it ran with (default: the HEAD's, probe_timeout)."""
    import httpx2

    if isinstance(e, httpx2.TimeoutException):
        return f"no answer within {timeout or probe_timeout():g} s"
    text = cause(e)
    return "connection refused" if "refused" in text.lower() else text


def at(repo_id: str, hub: HubOptions) -> str:
    return f"{repo_id}@{hub.revision}" if hub.revision else repo_id


def labelled(e: HubGuardError, where: str) -> HubGuardError:
    """The scope's refusal or timeout, naming where it happened (the repo and file)."""
    error = type(e)(f"{where}: {e}")
    return with_hint(error, *TIMEOUT_HINT) if isinstance(e, HubTimeout) else error


def hub_error(repo_id: str, filename: str, hub: HubOptions, e: Exception,
              timeout: float | None = None) -> CheckpointError:
    """One line for any failure of huggingface_hub while fetching `filename` (timeout: the request's, when it was not
    the HEAD's)."""
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RemoteEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)

    where = at(repo_id, hub)
    if isinstance(e, GatedRepoError):
        return with_hint(CheckpointError(f"{where}: gated repo: accept its terms on the hub, then give a token with "
                                         f"access (HF_TOKEN or `hf auth login`)"), "--token", "or pass --token")
    if isinstance(e, RepositoryNotFoundError):
        return with_hint(CheckpointError(f"{where}: repo not found at {endpoint()}, or private and the token (HF_TOKEN "
                                         f"or `hf auth login`) does not give access (HTTP {e.response.status_code})"),
                         "--token", "a token can also be passed with --token")
    if isinstance(e, RevisionNotFoundError):
        return CheckpointError(f"{where}: no revision {hub.revision or 'main'!r} in the repo")
    if isinstance(e, RemoteEntryNotFoundError):
        return CheckpointError(f"{where}: {filename} is not in the repo")
    if isinstance(e, LocalEntryNotFoundError):
        if is_offline():
            return CheckpointError(f"{where}: {filename} is not in the local Hugging Face cache (HF_HUB_OFFLINE is "
                                   f"set)")
        underlying = e.__cause__ if isinstance(e.__cause__, Exception) else e
        why = network_reason(underlying, timeout)
        return CheckpointError(f"{where}: cannot fetch {filename} from {endpoint()} ({why}); {OFFLINE_HINT}")
    if isinstance(e, HfHubHTTPError):
        status = e.response.status_code if e.response is not None else "?"
        return CheckpointError(f"{where}: cannot fetch {filename}: HTTP {status} from {endpoint()}")
    if is_network_error(e):
        return HubUnreachable(f"{where}: connection to {endpoint()} lost while fetching {filename} "
                              f"({network_reason(e, timeout)}); {OFFLINE_HINT}")
    return CheckpointError(f"{where}: cannot fetch {filename}: {cause(e)}")


def fetch_checkpoint(repo_id: str, hub: HubOptions, echo: Echo = print) -> Path:
    """The cache snapshot directory holding config.json and (when the repo has one) the index.

    With a commit hash as revision, files already in the cache are taken without a request (huggingface_hub 2.4.0
    file_download.py: "if user provides a commit_hash and they already have the file on disk, shortcut everything").
    """
    online = probe(repo_id, hub, echo)
    fetch = fetcher(repo_id, hub, online)
    config = fetch(CONFIG_FILE)
    if online:
        fetch(INDEX_FILE, optional=True)
    return config.parent


def size_limit(filename: str) -> tuple[int | None, str]:
    """The most bytes `filename` may have, and what that limit is: limits.py's for the JSON irsurgeon reads; for
    weights none beyond the size the hub announces (transport.Scope cuts the download there)."""
    if filename == CONFIG_FILE:
        return limits.CONFIG_JSON_BYTES, "the largest config.json irsurgeon reads"
    if filename.endswith(limits.INDEX_SUFFIX):
        return limits.INDEX_JSON_BYTES, "the largest index irsurgeon reads"
    return None, "announced"


def fetcher(repo_id: str, hub: HubOptions, online: bool) -> Callable[..., Path | None]:
    """fetch(filename, optional=False): the file's cached path, fetched when online; None for a missing optional
    file; any failure one CheckpointError line (hub_error, or the scope's refusal naming the file)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError

    from irsurgeon.weights.hub.transport import scope

    def fetch(filename: str, optional: bool = False) -> Path | None:
        if online:
            refuse_linked_folders(repo_id, hub)
        try:
            with scope(hub.clock, *size_limit(filename)):
                found = hf_hub_download(repo_id, filename, revision=hub.revision, token=hub.token,
                                        cache_dir=hub.cache_dir, local_files_only=not online)
        except HubGuardError as e:
            raise labelled(e, f"{at(repo_id, hub)}: {filename}") from None
        except RemoteEntryNotFoundError as e:
            if optional:
                return None
            raise hub_error(repo_id, filename, hub, e) from None
        except hub_failures() as e:
            raise hub_error(repo_id, filename, hub, e) from None
        path = inside_cache(Path(found), repo_id, hub)
        if (limit := size_limit(filename)[0]) is not None:  # the small JSON files irsurgeon reads, on every use
            check_blob(path, limit, f"{at(repo_id, hub)}: {filename}")
        return path
    return fetch


def check_blob(path: Path, limit: int, label: str) -> None:
    """A file of huggingface_hub's cache must still hash to the ETag its blob is named by (blobs/<etag>): the cache is
    trusted by huggingface_hub once written (a commit's file on disk is not fetched again), so a config.json changed
    there would decide a draft's taps unnoticed. A blob of another name (the shared store's) says nothing to check."""
    real = Path(os.path.realpath(path))
    if real.parent.name != "blobs":
        return
    data = limits.read_bytes(real, limit, CheckpointError, label)  # a regular file of at most `limit` bytes
    check_content([data], len(data), real.name, label)


def refuse_linked_folders(repo_id: str, hub: HubOptions) -> None:
    """Before huggingface_hub writes into the cache: none of the folders it writes the repo's files in is a link.
    It follows them (huggingface_hub 2.4.0 file_download.py: os.makedirs of blobs/, snapshots/<commit>/, refs/ and
    .locks/<repo folder>/, files created inside), so a link there would have it write outside the cache, and the
    checkpoint reader then refuses what it wrote. The cache itself may be a link: the user's choice."""
    from huggingface_hub import constants

    cache = cache_root(hub)
    repo = constants.REPO_ID_SEPARATOR.join(["models", *repo_id.split("/")])
    folders = [repo, *(f"{repo}/{sub}" for sub in ("blobs", "snapshots", "refs")), ".locks", f".locks/{repo}"]
    snapshots = cache / repo / "snapshots"
    if snapshots.is_dir() and not snapshots.is_symlink():
        folders += [f"{repo}/snapshots/{entry.name}" for entry in os.scandir(snapshots)]
    for folder in folders:
        if (cache / folder).is_symlink():
            raise with_hint(CheckpointError(f"{cache / folder}: a link in the Hugging Face cache; huggingface_hub would write "
                                  f"{repo_id}'s files through it, outside the cache {cache} (make it a folder)"), "--cache-dir",
                            "or pass --cache-dir")


def inside_cache(path: Path, repo_id: str, hub: HubOptions) -> Path:
    """path, when it is a file of the repo's snapshots in the cache and resolves into the cache (or into the repo's
    own `blobs`, should that be a link to another disk); else CheckpointError: huggingface_hub was made to step out
    of it (by a name no check above caught), and what lies there is not read."""
    from huggingface_hub import constants

    cache = cache_root(hub)
    storage = cache / constants.REPO_ID_SEPARATOR.join(["models", *repo_id.split("/")])
    real = os.path.realpath(path)
    homes = [os.path.realpath(cache), os.path.realpath(storage / "blobs")]
    in_snapshots = _within(os.path.join(os.path.realpath(path.parent), path.name),
                           os.path.realpath(storage / "snapshots"))
    if not (in_snapshots and any(_within(real, home) for home in homes)):
        raise CheckpointError(f"{repo_id}: huggingface_hub returned {shown(str(path))}, which resolves to "
                              f"{shown(real)}, outside the cache {cache}; not reading it")
    return path


def _within(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder and path != folder


def cached_file(repo_id: str, filename: str, hub: HubOptions) -> Path | None:
    """The cached copy of a file, or None (cache-only mode: a missing index means a single-file checkpoint)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=hub.cache_dir, revision=hub.revision)
    return inside_cache(Path(found), repo_id, hub) if isinstance(found, str) else None


def snapshot_commit(path: Path) -> str | None:
    """The commit of a cache snapshot directory (`.../snapshots/<commit>`), None for any other directory."""
    path = home_of(path)
    return path.name if path.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", path.name) else None
