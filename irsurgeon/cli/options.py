"""Options spelled the same way on every command: choices in one order, case-insensitive, and --json."""
from __future__ import annotations

import errno
import functools
import json
import os
import sys

import click

from irsurgeon.quant.formats import KV_CACHE_PRECISIONS, WEIGHT_FORMATS
from irsurgeon.core.text import shown


def choice(values) -> click.Choice:
    """Case-insensitive choice: `F16` is `f16`; click hands the command the value as listed."""
    return click.Choice(list(values), case_sensitive=False)


def weight_format_option(default: str, values=None, text: str = ""):

    return click.option("--weight-format", type=choice(values or WEIGHT_FORMATS), default=default,
                        show_default=True, help=text)


def kv_cache_option(f):

    return click.option("--kv-cache-precision", type=choice(KV_CACHE_PRECISIONS), default="f16", show_default=True,
                        help="KV cache precision recorded in the head's rt_info runtime_options.")(f)


def json_flag(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON document on stdout at the end; the text goes to stderr.")(f)


def echo_for(as_json: bool):
    """click.echo of one safe line (irsurgeon.core.text.shown), sent to stderr when stdout carries the JSON document."""
    return functools.partial(safe_echo, err=as_json)


LOST: list[str] = []  # why stdout could not be written (a closed pipe, a full device): said once the command ends


def safe_echo(message: object = "", err: bool = False) -> None:
    """`message` as one safe terminal line (a newline in it is shown as \\x0a): what the library reports may quote
    files and servers. A stdout that cannot be written (`| head`, /dev/full) never stops the command: what it does is
    done, and the group says at the end that its report was lost (cli.Group.invoke)."""
    write(shown(message), err)


def print_json(document: dict) -> None:
    write(json.dumps(document, indent=1), False)


def write(text: str, err: bool) -> None:
    if not err and LOST:
        return
    try:
        click.echo(text, err=err)
    except OSError as e:
        if err or e.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO):
            raise
        LOST.append(e.strerror or str(e))
        try:  # later writes, and the interpreter's flush at exit, go nowhere instead of failing again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # no descriptor to redirect (an embedded stdout): LOST already silences later writes
