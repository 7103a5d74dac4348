"""irsurgeon verify TARGET_DIR [--genai]: check a directory against its draft family's contract; optionally run and time genai.

With --genai: equivalence (MTP tokens == plain greedy tokens, at the contract's f32 properties) for every K of the
sweep and the share of drafts accepted, which must reach --min-acceptance (a draft that is not the target's, or
built wrong, stays token-identical but is almost never accepted); then, when both hold, the speed sweep at the
device's default precision: one table, the best K or a plain "speculative decoding does not pay here", and everything in --json.
The flow is flows.readiness, which the Python API's verify_genai runs too; here its options and its words.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path

import click

from irsurgeon import _verify_json_target
from irsurgeon.cli.hub_options import hub_options, make_hub
from irsurgeon.cli.options import Command, FiniteFloat, json_to, report, safe_echo
from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.core.signals import NativeCalls
from irsurgeon.core.text import shown
from irsurgeon.flows.readiness import MIN_ACCEPTANCE, speed_table  # noqa: F401  (speed_table: the table verify prints)

# How a draft accepted below the floor is said here: by the option, with what to do (synth's random kinds, the trained)
WORDING = ("--min-acceptance", ": synth's random drafts (--kind eagle3, dflash) are accepted about never by "
           "construction, so check their plumbing with --min-acceptance 0, or use a trained kind (eagle3-trained, "
           "dflash-cycle)")


class PromptsParam(click.ParamType):
    """A number N (the first N bundled prompts) or a prompts file (flows.prompts: one per line, or JSON Lines)."""

    name = "N|FILE"

    def convert(self, value, param, ctx):
        from irsurgeon.flows.prompts import PROMPTS, read_prompts

        if isinstance(value, (int, list)):
            return value
        path, most = Path(value), len(PROMPTS)
        number = value.isascii() and value.isdigit() and len(value) <= 2 and 1 <= int(value) <= most
        if path.is_file() or (os.path.lexists(path) and not number):  # a FIFO, folder, dangling link: named so
            try:
                return read_prompts(path, limits.read_text(path, limits.TEXT_BYTES, IRSurgeonError, "prompts"))
            except IRSurgeonError as e:
                self.fail(str(e), param, ctx)
        if number:
            return int(value)
        if not value.isdigit() and not os.path.lexists(path):  # a file name that is not there: say so
            self.fail(f"{shown(value)}: no such prompts file (or give a number from 1 to {most})", param, ctx)
        self.fail(f"{value!r:.40} is neither a number from 1 to {most} nor a prompts file", param, ctx)


class SweepParam(click.ParamType):
    """Comma-separated num_assistant_tokens values, e.g. 1,2,3,4,5."""

    name = "K,K,..."

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        parts = [p.strip() for p in str(value).split(",") if p.strip()]
        if not parts or not all(p.isdigit() and 1 <= int(p) <= 16 for p in parts):
            self.fail(f"{value!r}: expected comma-separated integers from 1 to 16, e.g. 1,2,3,4,5", param, ctx)
        return tuple(dict.fromkeys(int(p) for p in parts))


class VerifyCommand(Command):
    """verify, whose --json takes an optional FILE: `verify --json DIR` (the option first) means the document on
    stdout and DIR as TARGET when DIR is the only word that can be TARGET, as `verify DIR --json` does: option order
    never matters (irsurgeon._verify_json_target reads the words as click's parser does)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        at = _verify_json_target(args)
        if at is not None:
            args = [*args[:at], "--json=-", *args[at + 1:]]
        return super().parse_args(ctx, args)


GENAI_ONLY = ("prompts", "sweep", "nats", "max_new_tokens", "device", "rounds", "min_acceptance")  # its parameters


@click.command("verify", cls=VerifyCommand)
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--genai", "with_genai", is_flag=True,
              help="Also run openvino-genai speculative decoding with the draft against plain greedy decoding, then time it.")
@click.option("--prompts", type=PromptsParam(), default="3", show_default=True,
              help="With --genai: a number N (the first N of 6 built-in prompts) or a file with one prompt per line.")
@click.option("--sweep", type=SweepParam(), default=None,
              help="num_assistant_tokens values to check and time, e.g. 1,2,3,4,5 (replaces --num-assistant-tokens).")
@click.option("--num-assistant-tokens", "nats", type=click.IntRange(1, 16), multiple=True, default=(1, 2, 3, 4),
              show_default=True, help="Draft lengths to try (repeatable).")
@click.option("--max-new-tokens", type=click.IntRange(1, 4096), default=40, show_default=True,
              help="With --genai: tokens generated per prompt (EOS ignored in the speed runs).")
@click.option("--device", default="CPU", show_default=True,
              help="With --genai: the OpenVINO device both pipelines run on (CPU, GPU, ...).")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="With --genai: timed passes over the prompts per configuration (the median is reported).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), is_flag=False, flag_value="-", default=None,
              callback=lambda ctx, param, value: json_to(ctx, param, writable_document(value)),
              help="Print the results as one JSON document (docs/cli.md: its envelope; the text goes to stderr); "
                   "--json FILE writes it to FILE and keeps the text on stdout.")
@click.option("--min-acceptance", type=FiniteFloat(0.0, 1.0), default=MIN_ACCEPTANCE, show_default=True,
              help="With --genai: the share of drafted tokens the target must accept (0 turns the check off). Random "
                   "or foreign drafts are accepted ~0% of the time; a working draft far more often.")
@click.option("--checkpoint", default=None,
              help="Also check that this checkpoint (path or Hugging Face repo id) is the one TARGET was exported "
                   "from: 16 rows of its token embeddings against the target's (a repo id: read by range requests).")
@hub_options
@click.pass_context
def command(ctx: click.Context, target: Path, with_genai: bool, prompts, sweep, nats: tuple[int, ...],
            max_new_tokens: int, device: str, rounds: int, min_acceptance: float, json_out: Path | None,
            checkpoint: str | None, revision: str | None, token: str | None, cache_dir: Path | None) -> None:
    """Check TARGET (an exported model directory) is ready for speculative decoding with its draft."""
    from irsurgeon.flows import readiness

    if sweep and ctx.get_parameter_source("nats") != click.core.ParameterSource.DEFAULT:
        raise click.UsageError("give either --sweep or --num-assistant-tokens, not both")
    given = [f"--{name.replace('_', '-')}" for name in GENAI_ONLY
             if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
    if given and not with_genai:  # never silently ignored
        raise click.UsageError(f"{', '.join(given).replace('--nats', '--num-assistant-tokens')} "
                               f"{'applies' if len(given) == 1 else 'apply'} only with --genai")
    to_stdout = json_out == Path("-")
    echo = functools.partial(safe_echo, err=to_stdout)  # stdout carries only the JSON document then
    results = {"target": str(target), "ready": False, "failed": [], "checks": []}
    report(results)  # filled by the flow: the document says how far the run got, whatever its end
    how = readiness.GenaiRun(prompts, sweep or nats, max_new_tokens, device, rounds, min_acceptance)
    failed = readiness.run(target, checkpoint, hub=make_hub(revision, token, cache_dir), echo=echo,
                           genai=how if with_genai else None, into=results, wording=readiness.Wording(*WORDING),
                           held=NativeCalls)  # Ctrl-C inside genai's C++: said at once, acted on when the call returns
    if failed:
        raise IRSurgeonError(f"{target}: not ready for speculative decoding: failed {'; '.join(failed)}")
    echo(f"{target}: ready for speculative decoding")


def writable_document(path: Path | None) -> Path | None:
    """--json FILE refused before any check when FILE cannot be written there (its folder missing, or a folder);
    returns the value (a flag's "-" and no --json pass)."""
    if path is None or path == Path("-"):
        return path
    if path.is_dir():
        raise IRSurgeonError(f"{path}: --json names a folder; give a file name for the JSON document")
    if not path.parent.is_dir():
        raise IRSurgeonError(f"{path}: --json cannot write the JSON document there: no folder {path.parent}")
    return path
