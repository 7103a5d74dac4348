"""Ctrl-C is a KeyboardInterrupt even when a library left the main thread a stale alternate signal stack (as
openvino-genai 2026.4.1 does once a VLMPipeline has run): irsurgeon.signals keeps SIGINT off that stack."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STALE_STACK = r'''
import ctypes, mmap, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
class stack_t(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
size = 1 << 16
region = libc.mmap(None, size, 3, 0x22, -1, 0)            # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
st = stack_t(region, 0, size)
assert libc.sigaltstack(ctypes.byref(st), None) == 0
libc.munmap(ctypes.c_void_p(region), ctypes.c_size_t(size))  # the alternate stack is gone, still registered
mode = sys.argv[1]
if mode == "transaction":
    from irsurgeon.transaction import _deferred_sigint
    try:
        with _deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
elif mode == "cli":
    from irsurgeon.cli import _watch_sigint
    _watch_sigint()
    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        print("KeyboardInterrupt")
'''


def run(mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STALE_STACK, mode], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_ctrl_c_in_a_commit_survives_a_stale_alternate_stack():
    proc = run("transaction")
    assert proc.returncode == 0 and proc.stdout.strip() == "KeyboardInterrupt", (proc.returncode, proc.stderr)


def test_ctrl_c_under_the_cli_survives_a_stale_alternate_stack():
    proc = run("cli")
    assert proc.returncode == 0 and proc.stdout.strip() == "KeyboardInterrupt", (proc.returncode, proc.stderr)


def test_the_cli_and_the_commit_keep_sigint_off_the_alternate_stack():
    from irsurgeon import signals
    from irsurgeon.cli import _watch_sigint
    from irsurgeon.transaction import _deferred_sigint

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert signals.flags() & signals.SA_ONSTACK  # CPython's own registration
        with _deferred_sigint():
            assert not signals.flags() & signals.SA_ONSTACK
        assert not signals.flags() & signals.SA_ONSTACK
        _watch_sigint()
        assert not signals.flags() & signals.SA_ONSTACK
    finally:
        signal.signal(signal.SIGINT, previous)
