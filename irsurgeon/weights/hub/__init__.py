"""Checkpoints from the Hugging Face Hub, through huggingface_hub's cache, against a hub that may be hostile.

    fetch.py      what is fetched: config.json, the index, the head's shards (or a small checkpoint whole); HubOptions
    ranges.py     HubBytes: byte ranges of a shard over HTTP (the identity check's rows)
    transport.py  every request in a scope: hashes that would be paths refused, bodies cut at their announced size,
                  the --hub-timeout clock on each socket operation, huggingface_hub's telemetry off
    guard.py      the clock, the errors and the limits, without importing the HTTP client
    names.py      what a revision, a commit and an ETag must look like before they become cache paths
"""
from irsurgeon.weights.hub.fetch import (OFFLINE_HINT, PROBE_TIMEOUT, REPO_ID, Echo, HubOptions, HubUnreachable,
                                         all_shards, cached_file, endpoint, fetch_checkpoint, fetch_weights,
                                         fetch_whole, fetch_whole_weights, fetcher, head_shards, hub_error,
                                         hub_failures, inside_cache, is_network_error, is_offline, is_repo_id,
                                         looks_like_repo_id, network_reason, probe, probe_timeout, resolve_source,
                                         snapshot_commit)
from irsurgeon.weights.hub.guard import DEFAULT_TIMEOUT, TIMEOUT_ENV, HubGuardError, HubRefused, HubTimeout
from irsurgeon.weights.hub.names import revision_problem
from irsurgeon.weights.hub.ranges import HubBytes

__all__ = ["OFFLINE_HINT", "PROBE_TIMEOUT", "REPO_ID", "Echo", "HubOptions", "HubUnreachable", "all_shards",
           "cached_file", "endpoint", "fetch_checkpoint", "fetch_weights", "fetch_whole", "fetch_whole_weights",
           "fetcher", "head_shards", "hub_error", "hub_failures", "inside_cache", "is_network_error", "is_offline",
           "is_repo_id", "looks_like_repo_id", "network_reason", "probe", "probe_timeout", "resolve_source",
           "snapshot_commit", "DEFAULT_TIMEOUT", "TIMEOUT_ENV", "HubGuardError", "HubRefused", "HubTimeout",
           "revision_problem", "HubBytes"]
