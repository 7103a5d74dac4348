"""irsurgeon tune TARGET_DIR [--checkpoint CKPT]: settle what the checkpoint leaves open by the drafts openvino-genai
accepts, then num_assistant_tokens by speed against plain generation, and write the winners (flows/tune.py)."""
from __future__ import annotations

from pathlib import Path

import click

from irsurgeon.cli.hub_options import hub_options, make_hub
from irsurgeon.cli.options import Command, FiniteFloat, echo_for, json_flag, report
from irsurgeon.cli.verify import PromptsParam
from irsurgeon.core.signals import NativeCalls


@click.command("tune", cls=Command)
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--checkpoint", default=None,
              help="The draft's checkpoint (a directory, a .safetensors file or a Hugging Face repo id) [default: "
                   "the one its provenance names].")
@click.option("--prompts", type=PromptsParam(), default=None,
              help="A number N (the first N bundled prompts: chat, code and prose) or a prompts file: one per line, "
                   "or JSON Lines of {\"prompt\": ...} or {\"messages\": [...]} [default: every bundled prompt].")
@click.option("--chat-template/--no-chat-template", "chat", default=True, show_default=True,
              help="Give each text prompt as a user message through the target tokenizer's chat template, where "
                   "it has one.")
@click.option("--budget", type=FiniteFloat(1, None), default=None, metavar="SECONDS",
              help="Seconds for the whole run, checked between steps: what is left is not tried, and said "
                   "[default: no limit].")
@click.option("--max-new-tokens", type=click.IntRange(1, 4096), default=48, show_default=True,
              help="Tokens generated per prompt (EOS ignored).")
@click.option("--rounds", type=click.IntRange(1, 100), default=5, show_default=True,
              help="Timed rounds per num_assistant_tokens, each alternating with plain generation; one round "
                   "measures no spread, so nothing is chosen on it.")
@click.option("--max-k", type=click.IntRange(1, 16), default=8, show_default=True,
              help="The largest num_assistant_tokens tried (the sweep stops earlier once speed stops rising).")
@click.option("--formats", callback=lambda _c, _p, v: formats(v), default=None, metavar="F,F,...|none",
              help="Weight formats to build the draft in and time against the present one (f32, f16, int8, int4), "
                   "or none to keep the present one untried [default: f16,int8,int4].")
@click.option("--device", default="CPU", show_default=True, help="The OpenVINO device both pipelines run on.")
@click.option("--dry-run", is_flag=True, help="Measure and print what would be written; write nothing.")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run on the same directory to finish.")
@json_flag
@hub_options
def command(target: Path, checkpoint: str | None, prompts, chat: bool, budget: float | None, max_new_tokens: int,
            rounds: int, max_k: int, formats: tuple[str, ...], device: str, dry_run: bool, wait: bool, as_json: bool,
            revision: str | None, token: str | None, cache_dir: Path | None) -> None:
    """Choose what the draft's checkpoint leaves open by the drafts accepted, then num_assistant_tokens and the
    draft's weight format by speed."""
    from irsurgeon.flows.tune import Settings, tune  # on use: openvino and the build

    echo = echo_for(as_json)
    settings = Settings(max_new_tokens=max_new_tokens, rounds=rounds, max_k=max_k, device=device, formats=formats,
                        budget=budget, chat=chat)
    if prompts is not None:
        settings.prompts = prompts
    with NativeCalls(raising=True):  # a pipeline load or a build: Ctrl-C said at once, acted on when it returns
        result = tune(target, checkpoint, settings=settings, hub=make_hub(revision, token, cache_dir),
                      dry_run=dry_run, wait=wait, echo=echo)
    doc = result.as_dict()
    report(doc)
    for line in tables(doc):
        echo(line)


def tables(doc: dict) -> list[str]:
    """The candidates' acceptance, the sweep and what was decided, as printed."""
    lines = [f"{'reading':<56} {'accepted/drafted':>16} {'share':>6} {'tok/s':>8} {'speed-up':>8}  chosen"]
    for c in doc["candidates"]:
        share = "-" if c["acceptance_rate"] is None else f"{c['acceptance_rate']:.1%}"
        counts = f"{c['accepted']}/{c['drafted']}" + ("" if c["identical"] else " DIFFERS")
        speed = "-" if c["tokens_per_s"] is None else f"{c['tokens_per_s']:.1f}"
        up = "-" if c["speedup"] is None else f"{c['speedup']:.2f}x"
        chosen = ("yes" + (f" (speed at K={c['num_assistant_tokens']})" if c["num_assistant_tokens"] else "")) \
            if c["chosen"] else ""
        lines.append(f"{c['label'][:56]:<56} {counts:>16} {share:>6} {speed:>8} {up:>8}  {chosen}")
    lines.append(f"reading: {doc['reading']['why']}")
    k = doc["k"]
    lines.append(f"{'config':<10} {'tok/s':>8} {'min-max':>13} {'speed-up':>8} {'accepted':>12}  vs plain")
    for m in k["measurements"]:
        accepted = f"{m['draft_accepted']}/{m['draft_proposed']}" if m["num_assistant_tokens"] else "-"
        speedup = "-" if m["speedup"] is None else f"{m['speedup']:.2f}x"
        lines.append(f"{m['label']:<10} {m['tokens_per_second']:>8.1f} "
                     f"{m['tokens_per_second_min']:>6.0f}-{m['tokens_per_second_max']:<6.0f} {speedup:>8} "
                     f"{accepted:>12}  {m['versus_plain'] or ''}")
    rounds = k["measurements"][0]["rounds"] if k["measurements"] else 0
    lines.append(f"tok/s: median of {rounds} alternating round(s) at the device's default precision; {k['rule']}")
    lines.append(f"num_assistant_tokens: {k['why']}" + ("" if k["genai_reads_generation_config"] else
                 "; this family's speculative pipeline does not take K from generation_config.json: give "
                 "generate() a GenerationConfig read from that file"))
    lines += format_lines(doc)
    lines += [f"not tried (budget): {what}" for what in doc["not_tried"]]
    lines.append("prompts: " + ("each through the target's chat template" if doc["chat_template"] else "as text"))
    lines.append(("would write: " if doc["dry_run"] else "wrote: ") + (", ".join(written(doc)) or "nothing"))
    return lines


def written(doc: dict) -> list[str]:
    """What the run wrote, or (a dry run) would write."""
    if not doc["dry_run"]:
        return doc["written"]
    chosen = next((c for c in doc["candidates"] if c["chosen"]), None)
    fmt = doc["format"]
    changed = chosen is not None and (not chosen["present"] or fmt["chosen"] != fmt["present"])
    out = [f"the draft as {chosen['label']}, {fmt['chosen']} (patch --force)"] if changed else []
    return out + ([f"num_assistant_tokens {doc['k']['chosen']} into generation_config.json"]
                  if doc["k"]["chosen"] else [])


def format_lines(doc: dict) -> list[str]:
    """The formats timed side by side, and the choice; nothing when none was asked for."""
    if not doc["formats"]:
        return []
    lines = [f"{'format':<8} {'tok/s':>8} {'min-max':>13} {'accepted':>12}  chosen"]
    for f in doc["formats"]:
        if f["tokens_per_second"] is None:
            lines.append(f"{f['format']:<8} {'-':>8} {'-':>13} {'-':>12}  (its tokens differ from plain greedy)")
            continue
        lines.append(f"{f['format']:<8} {f['tokens_per_second']:>8.1f} {f['tokens_per_second_min']:>6.0f}-"
                     f"{f['tokens_per_second_max']:<6.0f} {f['draft_accepted']:>5}/{f['draft_proposed']:<6}  "
                     f"{'yes' if f['chosen'] else ''}")
    k = doc["formats"][0]["num_assistant_tokens"]
    return lines + [f"format (speculative, K={k}, alternating rounds): {doc['format']['why']}"]


def formats(text: str | None) -> tuple[str, ...]:
    """--formats F,F,...|none: weight formats a draft can be built in, or none (a usage error, exit 2, otherwise);
    not given: None, tune's default set."""
    from irsurgeon.quant.formats import WEIGHT_FORMATS

    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    parts = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    allowed = [f for f in WEIGHT_FORMATS if f != "auto"]
    if not parts or any(p not in allowed for p in parts):
        raise click.BadParameter(f"{text!r:.40}: expected comma-separated weight formats from {', '.join(allowed)}")
    return parts
