"""What bounds irsurgeon's requests to the hub, without importing huggingface_hub or its HTTP client: the errors and
the clock of --hub-timeout. transport.py applies them to every request (see there).

The clock: all requests made with one HubOptions share a Clock of `seconds` (--hub-timeout, else
IRSURGEON_HUB_TIMEOUT, else DEFAULT_TIMEOUT), spent while at least one of them runs; once it is spent, the request
under way, and any later one, ends with HubTimeout. The default, 10 minutes, leaves a multi-GB shard at tens of MB/s
its time and still ends a hub that drips bytes; a larger download over a slow link needs --hub-timeout raised (the
error says so).
"""
from __future__ import annotations

import os
import threading
import time

from irsurgeon.core.errors import CheckpointError
from irsurgeon.weights.hub.names import shown

DEFAULT_TIMEOUT = 600.0
TIMEOUT_ENV = "IRSURGEON_HUB_TIMEOUT"


class HubGuardError(CheckpointError):
    """A request stopped by its scope (transport.scope); the caller adds the repo and file (fetch.labelled)."""


class HubRefused(HubGuardError):
    """An answer of a form huggingface_hub would misuse (a path for a hash), or longer than announced or asked."""


class HubTimeout(HubGuardError):
    """The time allowed for the hub requests of one run is spent."""


def default_timeout() -> float:
    """IRSURGEON_HUB_TIMEOUT when set (seconds, > 0), else DEFAULT_TIMEOUT."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    return check_timeout(float_or_none(text), f"{TIMEOUT_ENV}={shown(text)}") if text else DEFAULT_TIMEOUT


def check_timeout(seconds: float | None, what: str) -> float:
    if seconds is None or not 0 < seconds < float("inf"):
        raise CheckpointError(f"{what}: not a number of seconds above 0")
    return seconds


def float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class Clock:
    """Seconds that the requests made with one HubOptions may take together. Time counts while at least one of them
    runs (parallel range reads count once), not in between (local work between two fetches)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._spent = 0.0
        self._open = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            if self._open == 0:
                self._since = time.monotonic()
            self._open += 1

    def leave(self) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0:
                self._spent += time.monotonic() - self._since

    def remaining(self) -> float:
        with self._lock:
            running = time.monotonic() - self._since if self._open else 0.0
            return self.seconds - self._spent - running

    def clamp(self, timeout: float | None) -> float:
        """How long an operation may wait: its own timeout, at most the time left; HubTimeout when none is left."""
        left = self.remaining()
        if left <= 0:
            raise self.expired()
        return left if timeout is None else min(timeout, left)

    def expired(self, why: str = "") -> HubTimeout:
        return HubTimeout(f"no answer within {self.seconds:g} s{why}, the time allowed for all hub requests of one "
                          f"run")
