"""Running the CLI in-process for tests, and what a refused command must leave: one `Error:` line, nothing changed.

The guard that turns a blocking read into a failure is the `no_hang` fixture of tests/conftest.py."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from irsurgeon.cli import main
from lab.dirsnap import snapshot


PATCH_INTERRUPTED = "Error: interrupted before the commit: the directory is as it was"  # cli.interruption


def one_error(result) -> str:
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), \
        (result.exit_code, result.output, result.exception)
    return lines[0]


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def refused(args, *unchanged: Path) -> str:
    """The one Error: line of a refused command, which changed nothing in `unchanged`."""
    before = [snapshot(d) for d in unchanged]
    line = one_error(invoke(*args))
    assert [snapshot(d) for d in unchanged] == before, line
    return line


def result_of(text: str) -> dict:
    """The `result` of a successful command's one JSON document, its envelope checked (docs/cli.md: ok, command,
    result; nothing else on success)."""
    import json
    doc = json.loads(text)
    assert tuple(doc) == ("ok", "command", "result") and doc["ok"] is True, doc
    return doc["result"]
