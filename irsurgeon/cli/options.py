"""Options spelled the same way on every command: choices in one order, case-insensitive, and --json."""
from __future__ import annotations

import errno
import functools
import math
import os
import sys

import click

from irsurgeon.quant.formats import KV_CACHE_PRECISIONS, WEIGHT_FORMATS
from irsurgeon.core.text import shown


def choice(values) -> click.Choice:
    """Case-insensitive choice: `F16` is `f16`; click hands the command the value as listed."""
    return click.Choice(list(values), case_sensitive=False)


class FiniteFloat(click.FloatRange):
    """click.FloatRange refusing NaN and the infinities: NaN compares false with every bound, so click's range check
    (click 8.x types.py, _NumberRangeBase.convert) lets `nan` through, and an unbounded side lets `inf` through."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{shown(str(value))[:40]} is not a finite number", param, ctx)
        return number


def weight_format_option(default: str, values=None, text: str = ""):

    return click.option("--weight-format", type=choice(values or WEIGHT_FORMATS), default=default,
                        show_default=True, help=text)


def kv_cache_option(f):

    return click.option("--kv-cache-precision", type=choice(KV_CACHE_PRECISIONS), default="f16", show_default=True,
                        help="KV cache precision recorded in the head's rt_info runtime_options.")(f)


RESULT = "irsurgeon.result"  # ctx.meta: what the command did, the `result` of its JSON document (report)
JSON_TO = "irsurgeon.json"   # ctx.meta: where its JSON document goes: "-" (stdout) or a file (verify --json FILE)


def json_flag(f):
    return click.option("--json", "as_json", is_flag=True, callback=json_to,
                        help="Print one JSON document on stdout when the command ends (docs/cli.md: its envelope); "
                             "the text goes to stderr.")(f)


def json_to(ctx: click.Context, _param, value):
    """Record where the command's JSON document goes (a flag: stdout; verify's --json FILE: that file)."""
    if value:
        ctx.meta[JSON_TO] = "-" if value is True else str(value)
    return value


def report(result: dict) -> None:
    """What the command did, for the `result` of the one JSON document the group writes when it ends, whatever
    the end (cli.Group.invoke): set it as soon as there is something to say, again when there is more."""
    click.get_current_context().meta[RESULT] = result


def echo_for(as_json: bool):
    """click.echo of one safe line (irsurgeon.core.text.shown), sent to stderr when stdout carries the JSON document."""
    return functools.partial(safe_echo, err=as_json)


LOST: list[str] = []  # why stdout could not be written (a closed pipe, a full device): said once the command ends


def safe_echo(message: object = "", err: bool = False) -> None:
    """`message` as one safe terminal line (a newline in it is shown as \\x0a): what the library reports may quote
    files and servers. A stdout that cannot be written (`| head`, /dev/full) never stops the command: what it does is
    done, and the group says at the end that its report was lost (cli.Group.invoke)."""
    write(shown(message), err)


def write(text: str, err: bool) -> None:
    if not err and LOST:
        return
    if not err and sys.stdout is None:  # started with stdout closed (`>&-`): click.echo would drop it silently
        LOST.append("stdout is closed")
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


JSON_ASKED = "irsurgeon.json_asked"  # ctx.meta: the words asked for the JSON document on stdout (cli.Group.parse_args)
SAID = "irsurgeon.said"  # ctx.meta: the JSON document is out


def said_or_document(ctx: click.Context, text: str, result: dict) -> None:
    """What --help and --version say, then the end of the run: the text, or with --json the one document with this
    result (docs/cli.md, "The JSON document"); its `command` is the subcommand's name, null for the group's own."""
    if ctx.meta.get(JSON_ASKED) and not ctx.meta.get(SAID):
        import json
        command = ctx.info_name if ctx.parent is not None else None
        ctx.meta[SAID] = True
        write(json.dumps({"ok": True, "command": command, "result": result}, indent=1), False)
    else:
        write(text, False)  # a closed or full stdout: LOST, said by cli.Group.main (click's echo raised a traceback)
    ctx.exit()


def _help(ctx: click.Context, param, value) -> None:
    if value and not ctx.resilient_parsing:
        text = ctx.get_help()
        said_or_document(ctx, text, {"help": text})


class JsonHelp:
    """Mixed into every command and the group: --help says its text as every output is said (said_or_document: with
    --json, one document holding it). click's own help option, its callback replaced: the option's names, its place
    in the help and click's usage hints stay."""

    def get_help_option(self, ctx: click.Context):
        option = super().get_help_option(ctx)
        if option is not None:
            option.callback = _help
        return option


class Command(JsonHelp, click.Command):
    """Every irsurgeon command's class (JsonHelp)."""
