"""Work that runs on a thread beside the main thread's, joined before anything depends on it.

    with alongside(lambda say: stage_annotation(..., echo=say)) as other:  # starts it
        stage_ir(...); smoke_test(...)                                      # meanwhile
    other.result(echo)                                                      # its lines said, its error raised

Leaving the block waits for the thread whatever happens (it may be writing into a staging folder the block's
error is about to remove; a Ctrl-C meanwhile is held until it has finished), so the block's own error, a Ctrl-C
included, comes first; result() then says the lines the work gave to `say`, in order, and raises its error if it
failed. Only work that releases the GIL for most of its time gains from it (openvino's read_model, file I/O,
hashing), on a machine with a core to spare; on a loaded one it costs nothing but the thread.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from irsurgeon.core.signals import deferred_sigint


class Other:
    def __init__(self, work: Callable[[Callable[[str], None]], object]):
        self.lines: list[str] = []
        self.value: object = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), name="irsurgeon-alongside", daemon=True)

    def _run(self, work) -> None:
        try:
            self.value = work(self.lines.append)
        except BaseException as e:  # handed to the main thread by result()
            self.error = e

    def result(self, echo: Callable[[str], None]) -> object:
        with deferred_sigint():
            self.thread.join()
        for line in self.lines:
            echo(line)
        if self.error is not None:
            raise self.error
        return self.value


@contextmanager
def alongside(work: Callable[[Callable[[str], None]], object]) -> Iterator[Other]:
    other = Other(work)
    other.thread.start()
    try:
        yield other
    finally:
        with deferred_sigint():  # an interrupted join would leave the work running past the caller's cleanup
            other.thread.join()
