"""Checkpoints from the Hugging Face Hub, through huggingface_hub's cache and irsurgeon's own, against a hub that may
be hostile.

    fetch.py      config.json and the index through huggingface_hub's cache (a whole shard when ranges are refused);
                  HubOptions; the reachability probe; one-line errors
    partial.py    fetch_weights: the tensors the draft needs, by byte range, into irsurgeon's cache
    ranges.py     HubBytes: byte ranges of a file over HTTP, exactly as asked (the identity check's rows, headers,
                  tensors), the small ones kept in irsurgeon's cache
    store.py      irsurgeon's cache: <cache>/irsurgeon/models--<owner>--<name>/snapshots/<commit>/, atomic writes,
                  a lock per file for runs sharing it
    transport.py  every request in a scope: hashes that would be paths refused, bodies cut at their announced size,
                  the --hub-timeout clock on each socket operation, huggingface_hub's telemetry off
    guard.py      the clock, the errors and the limits, without importing the HTTP client
    names.py      what a revision, a commit and an ETag must look like before they become cache paths
"""
from irsurgeon.weights.hub.fetch import (OFFLINE_HINT, PROBE_TIMEOUT, REPO_ID, Echo, HubOptions, HubUnreachable,
                                         cached_file, endpoint, fetch_checkpoint, fetcher, hub_error, hub_failures,
                                         inside_cache, is_network_error, is_offline, is_repo_id, looks_like_repo_id,
                                         network_reason, probe, probe_timeout, resolve_source, snapshot_commit)
from irsurgeon.weights.hub.guard import DEFAULT_TIMEOUT, TIMEOUT_ENV, HubGuardError, HubRefused, HubTimeout
from irsurgeon.weights.hub.names import revision_problem
from irsurgeon.weights.hub.partial import fetch_to_judge, fetch_weights
from irsurgeon.weights.hub.ranges import HubBytes, HubOffline, RangesRefused

__all__ = ["OFFLINE_HINT", "PROBE_TIMEOUT", "REPO_ID", "Echo", "HubOptions", "HubUnreachable", "cached_file",
           "endpoint", "fetch_checkpoint", "fetcher", "hub_error", "hub_failures", "inside_cache", "is_network_error",
           "is_offline", "is_repo_id", "looks_like_repo_id", "network_reason", "probe", "probe_timeout",
           "resolve_source", "snapshot_commit", "DEFAULT_TIMEOUT", "TIMEOUT_ENV", "HubGuardError", "HubRefused",
           "HubTimeout", "revision_problem", "fetch_to_judge", "fetch_weights", "HubBytes", "HubOffline", "RangesRefused"]
