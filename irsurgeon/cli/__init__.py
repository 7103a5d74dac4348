"""cli: the `irsurgeon` command line (imports flows/ and anything below): a click group, one module per command, errors turned into one line here."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import click

from irsurgeon import __version__, _json_to_stdout, _words
from irsurgeon.core.errors import CommitError, Interrupted, IRSurgeonError, cause
from irsurgeon.core.signals import PRESSES, deferred_sigint, on_own_stack
from irsurgeon.core.text import shown
from irsurgeon.cli.options import JSON_ASKED, JSON_TO, LOST, RESULT, SAID, JsonHelp, said_or_document, write
from irsurgeon.families import registry
from irsurgeon.ir.files import parsed_once

DEBUG_ENV = "IRSURGEON_DEBUG"


AFTER_COMPLETION = "interrupted after the command completed: what it did is done"
ENDED: list[int] = []  # the exit code each invocation decided, appended once its end is being said (irsurgeon.entry)


class Group(JsonHelp, click.Group):
    """Runs a command and turns every failure into `Error: ...` on one line and a non-zero exit."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode: bool = True, **extra):
        """click's standalone mode, but a Ctrl-C outside the command (while click parses the arguments or closes
        the context) is `Error: interrupted` and 130 like any other, not click's "Aborted!" and exit 1."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        ENDED.clear()
        LOST.clear()  # what an earlier in-process invocation could not write
        words = [str(w) for w in (sys.argv[1:] if args is None else args)]
        try:
            done = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:  # --help, --version: raised by some click releases, returned by others
            done = e.exit_code
        except click.ClickException as e:  # a usage error: click's message here; its document is out if invoke ran
            ctx = getattr(e, "ctx", None)
            if ctx is None or not ctx.meta.get(SAID):  # before the group ran a command: from the words
                error = self.missing_command() if isinstance(e, click.exceptions.NoArgsIsHelpError) else \
                    e.format_message()
                said(words, {"ok": False, "error": shown(error), "exit_code": e.exit_code})
            ENDED.append(e.exit_code)
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:  # click's form of a KeyboardInterrupt (or EOF) it met outside invoke
            if ENDED and ENDED[-1]:  # after the command's own failure was said: its one line and code stand
                sys.exit(ENDED[-1])
            fail(AFTER_COMPLETION if ENDED else "interrupted", 130, words=None if ENDED else words)
        done = done if isinstance(done, int) else 0
        if LOST and not done:  # --help's or --version's text (or document) could not be written: said_or_document
            fail(f"the help or version could not be written to stdout ({LOST[0].lower()})", 1, words=words)
        sys.exit(done)

    def missing_command(self) -> str:
        """The usage error of no command (`irsurgeon`, `irsurgeon --json`: click shows the help)."""
        return f"missing command: give one of {', '.join(sorted(self.commands))} (--help describes them)"

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """The group's context; a Ctrl-C while click parses the arguments is ours to say (click would print a blank
        line and "Aborted!")."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            fail("interrupted", 130, words=args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """--json before the command is the command's own (`irsurgeon --json show X` is `irsurgeon show X --json`:
        option order never matters); alone, it leaves no command: the usage error of none, with its document."""
        ctx.meta[JSON_ASKED] = _words(args)[1]  # --help and --version answer with the document then (options)
        at = next((i for i, word in enumerate(args) if not word.startswith("-")), len(args))
        if "--json" in args[:at]:
            before = [word for word in args[:at] if word != "--json"]
            after = [args[at], "--json=-" if args[at] == "verify" else "--json"] if at < len(args) else []
            args = [*before, *after, *args[at + 1:]]  # verify's --json takes a FILE: "-" is stdout
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        LOST.clear()  # what an earlier in-process invocation (the Python API's CliRunner, tests) could not write
        seen, pressed = _watch_sigint(), len(PRESSES)

        def interrupted() -> bool:  # a Ctrl-C came during this invocation (our handler's, or NativeCalls')
            return bool(seen) or len(PRESSES) > pressed
        # what the subcommand was given (click >= 8.2 keeps the command name in _protected_args, 8.1 in protected_args)
        protected = ctx.__dict__.get("_protected_args", ctx.__dict__.get("protected_args", []))
        ctx.meta["irsurgeon.args"] = [*protected, *ctx.args]
        completed: list[bool] = []
        try:
            with parsed_once():  # each unchanged IR parsed once in a command (irsurgeon.ir.files)
                done = super().invoke(ctx)
            completed.append(True)
            problem = document(ctx, {"ok": True})
            if LOST:  # the command did its work; only its report to stdout (the document too) could not be written
                fail(f"{ctx.invoked_subcommand} completed, but its output could not be written to stdout "
                     f"({LOST[0].lower()}): what it did is done; run it again to see its report", 1)
            if problem:
                fail(f"{ctx.invoked_subcommand} completed, but {problem}: what it did is done", 1)
            ENDED.append(0)
            return done
        except click.UsageError as e:  # click prints the usage and exits 2; --json also gets its one document
            document(ctx, {"ok": False, "error": shown(e.format_message()), "exit_code": e.exit_code})
            raise
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except IRSurgeonError as e:
            # a Ctrl-C that a C++ call turned into an error of its own (pybind11's "Unable to cast ..." from
            # openvino's save_model) is an interruption; a failed commit's line says the target's state: kept
            if interrupted() and not isinstance(e, CommitError):
                fail(interruption(ctx), 130, ctx)
            fail(str(e) + _hint(ctx, e), 1, ctx)
        except KeyboardInterrupt as e:
            if completed:  # while the command's report was being said: what it did is done
                fail(AFTER_COMPLETION, 130, ctx)
            fail(f"interrupted: {e}" if isinstance(e, Interrupted) else interruption(ctx), 130, ctx)
        except OSError as e:
            if interrupted():
                fail(interruption(ctx), 130, ctx)
            where = f"{e.filename}: " if e.filename else ""
            fail(f"{where}{e.strerror or e}", 1, ctx)
        except Exception as e:  # the last line of defence: report, never hide, and point at the traceback switch
            if interrupted():  # a Ctrl-C a library turned into its own error
                fail(interruption(ctx), 130, ctx)
            if os.environ.get(DEBUG_ENV):
                raise
            fail(f"unexpected {type(e).__name__}: {cause(e)} "
                 f"(set {DEBUG_ENV}=1 for the traceback)", 1, ctx)  # a failure like any other: 2 is click's usage error


def _hint(ctx: click.Context, e: IRSurgeonError) -> str:
    """The error's advice, when the command that ran has the option it names (see errors.with_hint)."""
    if e.hint is None:
        return ""
    option, text = e.hint
    command = _subcommand(ctx)
    names = {name for p in command.params for name in (*p.opts, *p.secondary_opts)} if command else set()
    return f" ({text})" if option in names else ""


def _subcommand(ctx: click.Context) -> click.Command | None:
    """The subcommand this group invocation ran."""
    name = ctx.invoked_subcommand
    return ctx.command.get_command(ctx, name) if name and isinstance(ctx.command, click.Group) else None


def _watch_sigint() -> list:
    """Record Ctrl-C (then raise KeyboardInterrupt as Python does), so that a library that converts it into an
    error of its own is still reported as an interruption. Returns the record (non-empty once interrupted)."""
    seen: list = []

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started with Ctrl-C ignored (`nohup`, a shell's `&`):
        return seen  # kept so, as Python keeps it: SIGINT becomes KeyboardInterrupt only "if the parent process has
        # not changed it" (the `signal` module's documentation, "General rules")
    try:
        signal.signal(signal.SIGINT, handler)
        on_own_stack()  # not on a stale alternate stack openvino-genai may leave (irsurgeon.core.signals)
    except ValueError:  # not the main thread (embedded use): leave signal handling to the host
        pass
    return seen


# The commands that change a directory only through one transaction (irsurgeon.commit), which holds Ctrl-C through its
# commit and says in its own words when the commit was made (errors.Interrupted): any other Ctrl-C came before it
TRANSACTIONAL = ("patch", "tune")  # tune: its own commit, or patch's when it rebuilds the winner


def interruption(ctx: click.Context) -> str:
    """The line of a Ctrl-C during a command; for one that changes the directory only by its commit, that it did not
    (a rollback of an earlier run's leftovers, done first, says so in its own line)."""
    if ctx.invoked_subcommand in TRANSACTIONAL:
        return "interrupted before the commit: the directory is as it was"
    return "interrupted"


def fail(message: str, code: int, ctx: click.Context | None = None, words: list[str] | None = None) -> None:
    """One `Error:` line on stderr and the exit code; a command run with --json also gets its one JSON document,
    saying what failed (document; `words`: an end before the group had a context, the document read from them).
    Ctrl-C is held while the end is said: one that comes meanwhile changes nothing (the end being said stands; it
    used to cut the line off, leaving exit 1 with neither the line nor the document)."""
    try:
        with deferred_sigint():
            line = shown(" ".join(message.split(" ")))
            ENDED.append(code)
            outcome = {"ok": False, "error": line, "exit_code": code}
            try:
                problem = document(ctx, outcome) if ctx is not None else said(words, outcome) if words is not None \
                    else None
            except KeyboardInterrupt:  # re-delivered as its own held section ended, the document out: held on here
                problem = None
            click.echo(f"Error: {line}" + (f"; and {problem}" if problem else ""), err=True)  # still one line
    except KeyboardInterrupt:  # re-delivered once the end was said
        pass
    sys.exit(code)


def document(ctx: click.Context, outcome: dict) -> str | None:
    """The one JSON document of a command run with --json, whatever its end (docs/cli.md, "The JSON document"):
    {ok, command, result} and, on failure, {error, exit_code}; `result` is what the command reported
    (options.report), null when it ended before it had anything to say. To stdout (a lost stdout: options.LOST),
    or to verify's --json FILE: returns why that file could not be written, for the caller's one line."""
    to = ctx.meta.get(JSON_TO) or _json_in_args(ctx)
    if not to or ctx.meta.get(SAID):  # one document per run: a Ctrl-C after it is out changes only the exit
        return None
    with deferred_sigint():  # made, written whole and marked said, or not at all; a Ctrl-C meanwhile comes after
        text = json.dumps({"ok": outcome["ok"], "command": ctx.invoked_subcommand, "result": ctx.meta.get(RESULT),
                           **{k: v for k, v in outcome.items() if k != "ok"}}, indent=1)
        ctx.meta[SAID] = True
        if to == "-":
            write(text, False)
            return None
        try:
            Path(to).write_text(text + "\n")
        except OSError as e:
            return f"{shown(to)}: cannot write the JSON document: {e.strerror or e}"
    return None


def said(words: list[str], outcome: dict) -> None:
    """The document of an end before the group had a command's context to record where it goes (click reading the
    group's own words: no command, an unknown option before it, a Ctrl-C then), from the words (irsurgeon._words):
    its command when the words name one, else null; its result null."""
    command, to_stdout = _words(words)
    if to_stdout:
        with deferred_sigint():
            write(json.dumps({"ok": outcome["ok"], "command": command, "result": None,
                              **{k: v for k, v in outcome.items() if k != "ok"}}, indent=1), False)


def _json_in_args(ctx: click.Context) -> str | None:
    """Where --json sends the document when the command never ran to record it (a usage error): stdout for the
    flag, and for verify's --json given no FILE; None when a FILE follows (its file is written only by a run)."""
    args = ctx.meta.get("irsurgeon.args", [])
    return "-" if args and _json_to_stdout(args[0], args[1:]) else None


def _version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        said_or_document(ctx, f"irsurgeon, version {__version__}", {"version": __version__})


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]},
             help=f"Graph surgery on OpenVINO IR: build speculative-decoding drafts ({registry.titles()}) from "
                  f"safetensors (or pytorch_model.bin) without PyTorch, and attach them to exported model "
                  f"directories.")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, help="Show the version and exit.",
              callback=_version)
def main() -> None:
    """The command group (its help names every registered family: families.registry.titles)."""


from irsurgeon.cli import annotate, build_mtp, patch, show, synth, tune, verify  # noqa: E402  (commands added to main below)

for _module in (build_mtp, patch, verify, tune, annotate, show, synth):
    main.add_command(_module.command)
