"""streamed.Tail's two threads (one writes, one hashes): the digest is the file's with short and slow writes, a write
error is raised and nothing digested, stop() with pieces in flight writes nothing after it returns."""
from __future__ import annotations

import hashlib
import os
import random
import threading
import time

import numpy as np
import pytest

from irsurgeon.ir import streamed
from irsurgeon.ir.streamed import Tail


class Jittery:
    """A file whose writes are short and slow at random (the hasher runs ahead or behind)."""

    def __init__(self, f, rng, fail_at=None):
        self.f, self.rng, self.calls, self.fail_at = f, rng, 0, fail_at
        self.after_stop = 0
        self.tail = None

    def write(self, b):
        self.calls += 1
        if self.tail is not None and self.tail.stopped:
            self.after_stop += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise OSError(28, "No space left on device")
        time.sleep(self.rng.random() * 0.002)
        n = max(1, min(len(b), self.rng.randint(1, len(b))))
        return self.f.write(bytes(b[:n]))

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.mark.parametrize("seed", range(2))
def test_digest_is_the_file_content_with_jittery_writes(seed, tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 4096 + 3)  # many odd-sized pieces
    rng = random.Random(seed)
    p = tmp_path / "x.bin"
    p.write_bytes(os.urandom(10_000))  # the serializer's part
    with open(p, "r+b") as raw:
        f = Jittery(raw, rng)
        tail = Tail(f)
        for i in range(6):
            blocks = [np.frombuffer(os.urandom(rng.randint(0, 30_000) * 2), np.float16) for _ in range(3)]
            n = sum(b.size for b in blocks)
            tail.append(f"w{i}", (n,), "f16", blocks, 2)
        tail.settle()
        d = tail.digest()
    data = p.read_bytes()
    assert d == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_write_error_is_raised_and_nothing_is_digested(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 4096)
    p = tmp_path / "x.bin"
    p.write_bytes(b"")
    with open(p, "r+b") as raw:
        f = Jittery(raw, random.Random(1), fail_at=5)
        tail = Tail(f)
        f.tail = tail
        with pytest.raises(OSError):
            tail.append("w", (40_000,), "f16", [np.zeros(40_000, np.float16)], 2)
            tail.settle()
        tail.stop()
        calls = f.calls
        assert tail.digest() is None
        time.sleep(0.1)
        assert f.calls == calls  # nothing written once stop() returned (the piece in flight finishes inside it)


def test_stop_with_pieces_in_flight_writes_nothing_after_it_returns(tmp_path, monkeypatch):
    monkeypatch.setattr(streamed, "PIECE", 4096)
    gate = threading.Event()
    p = tmp_path / "x.bin"
    p.write_bytes(b"")
    with open(p, "r+b") as raw:
        class Blocking:
            def __init__(s):
                s.writes = 0

            def write(s, b):
                gate.wait(5)
                s.writes += 1
                return raw.write(b)

            def __getattr__(s, n):
                return getattr(raw, n)
        f = Blocking()
        tail = Tail(f)
        threading.Timer(0.2, gate.set).start()
        tail.append("w", (6 * 2048,), "f16", [np.zeros(6 * 2048, np.float16)], 2)  # 6 pieces, window 4
        tail.stop()
        n = f.writes
        time.sleep(0.2)
        assert f.writes == n  # nothing written after stop returned
        assert not any(t.name.startswith(("irsurgeon-write", "irsurgeon-hash")) and t.is_alive()
                       for t in threading.enumerate())
