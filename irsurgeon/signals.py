"""Ctrl-C delivered on the interrupted thread's own stack, never on a stale alternate signal stack.

CPython installs its signal handlers with SA_ONSTACK (Modules/signalmodule.c, 3.11), so the kernel runs them on the
thread's alternate signal stack when one is set. openvino-genai 2026.4.1 leaves the main thread with an alternate stack
that is no longer mapped once a VLMPipeline has run (seen: sigaltstack then names a 20144-byte region of a finished
worker), and the next SIGINT kills the process with SIGSEGV inside kill(2) instead of raising KeyboardInterrupt.
Python's handler only sets a flag, which is safe on any stack: `on_own_stack()` clears SA_ONSTACK from the SIGINT
action after every `signal.signal(SIGINT, ...)` irsurgeon makes. Linux x86-64/aarch64 glibc layout; elsewhere a no-op.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys
from contextlib import contextmanager

SA_ONSTACK = 0x08000000  # linux/include/uapi/asm-generic/signal-defs.h


class _SigAction(ctypes.Structure):  # glibc's struct sigaction on 64-bit Linux
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                ("restorer", ctypes.c_void_p)]


def _libc():
    if not sys.platform.startswith("linux") or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def on_own_stack(signum: int = signal.SIGINT) -> bool:
    """Clear SA_ONSTACK from `signum`'s current action (handler, mask and other flags kept); True when done."""
    if _LIBC is None:
        return False
    action = _SigAction()
    if _LIBC.sigaction(int(signum), None, ctypes.byref(action)) != 0:
        return False
    if not action.flags & SA_ONSTACK:
        return True
    action.flags &= ~SA_ONSTACK
    return _LIBC.sigaction(int(signum), ctypes.byref(action), None) == 0


def flags(signum: int = signal.SIGINT) -> int | None:
    """The current sa_flags of `signum` (for tests), or None where they cannot be read."""
    action = _SigAction()
    if _LIBC is None or _LIBC.sigaction(int(signum), None, ctypes.byref(action)) != 0:
        return None
    return action.flags


@contextmanager
def deferred_sigint():
    """Hold SIGINT while a commit or a move runs; re-deliver it as KeyboardInterrupt afterwards."""
    received = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: received.append(True))
    except ValueError:  # not the main thread: signals cannot be handled here anyway
        yield
        return
    on_own_stack()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        on_own_stack()
    if received:
        raise KeyboardInterrupt
