"""How irsurgeon takes Ctrl-C: on the interrupted thread's own stack (on_own_stack), held through a commit or a
move (deferred_sigint), and read at once while openvino-genai's C++ holds the main thread (NativeCalls).

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
import os
import signal
import sys
import threading
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


class NativeCalls:
    """Ctrl-C while a long C++ call (openvino-genai's pipeline load or generate) holds the main thread.

    Python runs its SIGINT handler only between bytecodes of the main thread, so a Ctrl-C during a C++ call would
    be silent until the call returns (minutes for a large model's load). Inside this block the C-level handler's
    wakeup byte (signal.set_wakeup_fd, written at once from whichever thread the kernel picked) is read by a watcher
    thread: the first Ctrl-C says, unless the block is left within NOTICE_AFTER seconds, that the command stops when
    the running call returns (a generation stops at its next token: `interrupted()` makes the streamer cancel); the
    second exits at once with 130. Leaving the block, or `check()`, raises KeyboardInterrupt once interrupted.
    Outside the main thread: a no-op."""

    FIRST = "interrupted: stopping when the running openvino-genai call returns (Ctrl-C again stops at once)"
    STEP = "interrupted: stopping when the running step returns (Ctrl-C again stops at once)"

    def __init__(self, err=sys.stderr, *, raising: bool = False):
        """raising: Ctrl-C also raises KeyboardInterrupt as soon as Python runs again (a command whose C++ calls
        return between Python steps: a build, nncf's compression), not only when the block is left; the second
        press exits at once only outside a `no_exit` section (a transaction's lifetime: its staging folder and
        commit must be left by the code that made them)."""
        self.err, self.count, self._active, self.raising = err, 0, False, raising

    def __enter__(self) -> "NativeCalls":
        global _CURRENT
        if threading.current_thread() is not threading.main_thread():
            return self
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started with Ctrl-C ignored: it stays so
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, _raise if self.raising else lambda signum, frame: None)
        on_own_stack()
        self._left = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="irsurgeon-sigint", daemon=True)
        self._thread.start()
        self._active, _CURRENT = True, self
        return self

    def _watch(self) -> None:
        while True:
            got = os.read(self._read, 64)
            if not got or STOP in got:
                return
            presses = got.count(signal.SIGINT)  # one byte each: two Ctrl-C before this thread ran are read at once
            if presses:
                self.count += presses
                PRESSES.extend([signal.SIGINT] * presses)
                if self.count > 1 and not _NO_EXIT:
                    os.write(2, b"Error: interrupted\n")
                    os._exit(130)
                if self.count == presses and not self._left.wait(NOTICE_AFTER):  # one that returns at once needs none
                    print(self.STEP if self.raising else self.FIRST, file=self.err, flush=True)

    def check(self) -> None:
        if self.count:
            raise KeyboardInterrupt

    def __exit__(self, exc_type, exc, tb) -> None:
        global _CURRENT
        if not self._active:
            return
        _CURRENT, self._active = None, False
        self._left.set()
        signal.set_wakeup_fd(self._old_fd)
        signal.signal(signal.SIGINT, self._old_handler)
        on_own_stack()
        os.write(self._write, bytes([STOP]))
        self._thread.join()
        os.close(self._read)
        os.close(self._write)
        if exc_type is None:
            self.check()


def _raise(signum, frame):
    PRESSES.append(signum)
    raise KeyboardInterrupt


PRESSES: list[int] = []  # every Ctrl-C a handler of this module saw (the CLI asks whether an error followed one)


_NO_EXIT: list[bool] = []  # open no_exit sections: a second Ctrl-C does not end the process at once inside one


@contextmanager
def no_exit():
    """A section the process may not leave by NativeCalls' second Ctrl-C (os._exit): files it made in a target must
    be removed or committed by its own code (commit.transaction)."""
    _NO_EXIT.append(True)
    try:
        yield
    finally:
        _NO_EXIT.pop()


STOP = 0  # the byte that ends the watcher (no signal has number 0)
NOTICE_AFTER = 1.0  # seconds
_CURRENT: NativeCalls | None = None


def interrupted() -> bool:
    """Ctrl-C seen inside the running NativeCalls block (for a streamer to cancel the generation)."""
    return _CURRENT is not None and _CURRENT.count > 0


def check_interrupted() -> None:
    """KeyboardInterrupt when Ctrl-C was seen inside the running NativeCalls block."""
    if _CURRENT is not None:
        _CURRENT.check()


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
        with no_exit():  # held sections are never left by a second Ctrl-C's exit either
            yield
    finally:
        signal.signal(signal.SIGINT, previous)
        on_own_stack()
    if received and previous is not signal.SIG_IGN:  # a process started with Ctrl-C ignored keeps ignoring it
        raise KeyboardInterrupt
