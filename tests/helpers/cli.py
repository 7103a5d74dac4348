"""Running the CLI in-process for tests, and a guard that turns a blocking read into a failure."""
from __future__ import annotations

import signal

import pytest
from click.testing import CliRunner

from irsurgeon.cli import main


@pytest.fixture(autouse=True)
def no_hang():
    """A read that blocks (a FIFO opened without O_NONBLOCK) fails the test instead of hanging the suite."""
    def expired(signum, frame):
        raise TimeoutError("blocked for 60 s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def one_error(result) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), \
        (result.exit_code, result.output, result.exception)
    return lines[0]


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])
