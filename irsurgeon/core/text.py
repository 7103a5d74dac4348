"""Text from files and servers made safe for one terminal line.

    shown(text)   control characters (newlines included), bidi and other format characters, line and paragraph
                  separators and lone surrogates as escapes (\\x0a, \\u202e); every run of more than RUN characters
                  without a space cut to its first RUN with "...(N chars)"; the whole text cut at LINE characters

Every line the CLI prints goes through it (irsurgeon.cli: errors, notes, warnings, reports), so a tensor name, a
config value or a server's answer can neither forge a second line, reorder the terminal's text, nor flood it.
"""
from __future__ import annotations

import re
import unicodedata

RUN = 300
LINE = 4000
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_LONG = re.compile(r"\S{%d,}" % (RUN + 1))


def _escape(ch: str) -> str:
    if unicodedata.category(ch) not in _UNSAFE:
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _cut(match: re.Match) -> str:
    run = match.group(0)
    return f"{run[:RUN]}...({len(run)} chars)"


def shown(text: object) -> str:
    """One safe line of `text` (see the module docstring)."""
    value = "".join(_escape(ch) for ch in str(text))
    value = _LONG.sub(_cut, value)
    return value if len(value) <= LINE else f"{value[:LINE]}...({len(value)} chars)"


def silent(_line: str) -> None:
    """The library's default channel for progress lines: nothing (the CLI passes its own)."""


def a(noun: str) -> str:
    """The noun with its indefinite article, by its first letter ("an EAGLE-3 draft", "a Gemma 4 assistant")."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
