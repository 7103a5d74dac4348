"""One exception hierarchy; the CLI prints any of these as a one-line `Error: ...` and exits non-zero.

`cause(e)` reduces a library exception (OpenVINO, openvino-genai, nncf) to the one line that says what went wrong,
for every message that wraps one. `with_hint(error, option, text)` attaches advice that names a command-line
option: the CLI appends it only when the running command has that option, so no message names a flag the user
cannot pass.
"""
from __future__ import annotations

import re

# OpenVINO prefixes a message with where it was raised, one line per frame it passed through
# (openvino 2026.4, src/core/include/openvino/core/except.hpp: "Exception from <file>:<line>:\n<message>"), and a
# failed OPENVINO_ASSERT with "Check '<condition>' failed at <file>:<line>:" (src/core/src/except.cpp).
LOCATION_LINES = (re.compile(r"^Exception from \S+:\d+:?$"), re.compile(r"^Check '.*' failed at \S+:\d+:?$"))
STATUS_PREFIX = re.compile(r"^\[ ?[A-Z_]+ ?\]\s*")  # "[ GENERAL_ERROR ] ..." of older plugin messages


class IRSurgeonError(Exception):
    """Base of every error irsurgeon raises on purpose."""

    hint: tuple[str, str] | None = None  # (option, advice naming it); see with_hint


class ConfigError(IRSurgeonError):
    """config.json is missing, malformed, or describes no usable MTP head."""


class CheckpointError(IRSurgeonError):
    """A safetensors checkpoint is unreadable, incomplete, or does not match its config."""


class IRError(IRSurgeonError):
    """An OpenVINO IR is missing, malformed, or does not have the structure an edit needs."""


class OutputError(IRSurgeonError):
    """The output location cannot be written."""


class CommitError(OutputError):
    """A commit that failed part-way: its message says whether the target was rolled back or the next run finishes
    undoing it, which a Ctrl-C pressed meanwhile must not hide (cli.Group reports it as it is)."""


class CompressionError(IRSurgeonError):
    """Weight compression options are invalid or cannot be applied to the model."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what had already been done when it came (the CLI prints it after "interrupted: ", exit 130)."""


def cause(e: BaseException) -> str:
    """The first informative line of an exception's text: not a location line, not assertion boilerplate, and
    not a lead-in that ends in ':' ("While validating node ...:", "FrontEnd API failed with GeneralFailure:")
    when a line follows it."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    told = [ln for ln in lines if not any(p.match(ln) for p in LOCATION_LINES)]
    line = next((ln for ln in told if not ln.endswith(":")), told[0] if told else None)
    if line is None:
        return lines[-1] if lines else type(e).__name__
    return STATUS_PREFIX.sub("", line) or line


def with_hint(error: IRSurgeonError, option: str, text: str) -> IRSurgeonError:
    """Attach advice naming `option` (e.g. "--config"), shown by a command that has that option."""
    error.hint = (option, text)
    return error
