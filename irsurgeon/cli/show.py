"""irsurgeon show PATH [--context N] [--json]: an IR's ports, states, rt_info, hidden states, weights; a directory's
draft readiness and memory footprint."""
from __future__ import annotations

import textwrap
from pathlib import Path

import click

from irsurgeon.cli.options import Command, json_to, report, safe_echo
from irsurgeon.ir.footprint import human, shape_text
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS


@click.command("show", cls=Command)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, callback=json_to,
              help="Print one JSON document instead of text (its result: stable keys; docs/cli.md).")
@click.option("--context", type=click.IntRange(1), default=4096, show_default=True,
              help="Tokens per sequence for the KV-cache footprint of a directory.")
@click.pass_context
def command(ctx: click.Context, path: Path, as_json: bool, context: int) -> None:
    """Describe PATH: an OpenVINO IR .xml, or an exported model directory (draft readiness, memory footprint)."""
    from irsurgeon.flows.show import show  # on use: it imports openvino (~0.2 s of every other command's start)

    info = show(path, context=context)
    if info["kind"] == "ir" and ctx.get_parameter_source("context") != click.core.ParameterSource.DEFAULT:
        click.echo(f"note: --context sizes a directory's KV cache; ignored for the single IR {path} "
                   f"(show its directory for the footprint)", err=True)
    report(info)
    if not as_json:
        text = {"directory": directory_text, "checkpoint": checkpoint_text}.get(info["kind"], ir_text)
        for line in text(info):
            safe_echo(line)  # names and rt_info values come from the files


def checkpoint_text(info: dict) -> list[str]:
    from irsurgeon.families import registry

    cfg = info["config"] or {}
    lines = [f"checkpoint {info['path']}: {info['tensors']} tensors, config.json model_type {cfg.get('model_type')}"]
    if info["family"] is None:
        return lines + [f"no draft family takes it: {info['error']}"]
    lines += [f"draft family: {registry.by_key(info['family']).describe}", *info["reading"]]
    if info["stored"]:
        lines.append(f"its draft's weights are stored as {info['stored']}")
    if info["error"]:
        return lines + [f"not readable as one: {info['error']}"]
    return lines + [f"build it into a target: irsurgeon patch TARGET --checkpoint {info['path']}"]


def _table(rows: list[tuple[str, str, str]]) -> list[str]:
    """Name, type, shape rows, the name column as wide as its longest entry (state ids run to 60+ characters)."""
    width = max((len(r[0]) for r in rows), default=0)
    return [f"   {name:<{width}}  {etype:<6} {shape}" for name, etype, shape in rows]


def ir_text(info: dict) -> list[str]:
    ports = [*info["inputs"], *info["outputs"]]
    width = max((len(p["name"]) for p in ports), default=0)
    lines = [f"IR {info['path']}", "-- inputs"]
    lines += [f"   {p['name']:<{width}}  {p['dtype']:<6} {shape_text(p['shape'])}" for p in info["inputs"]]
    lines.append("-- outputs")
    lines += [f"   {p['name']:<{width}}  {p['dtype']:<6} {shape_text(p['shape'])}" for p in info["outputs"]]
    lines.append(f"-- states ({len(info['states'])})")
    lines += _table([(s["id"], s["dtype"], shape_text(s["shape"])) for s in info["states"]])
    lines.append("-- rt_info")
    lines += _tree(info["rt_info"], 3)
    if info["hidden_states"] is not None:
        lines.append(f"-- {HIDDEN_STATES_LAYERS}")
        for row in info["hidden_states"]:
            what = row["problem"] or f"{row['op']:<10} {row['dtype']:<6} {shape_text(row['shape'])}"
            lines.append(f"   {row['layer']:>4}  {what:<32} {row['producer']}:{row['output_index']}")
    lines.append("-- runtime_options")
    lines += [f"   {k} = {v}" for k, v in info["runtime_options"].items()] or ["   (none)"]
    lines.append("-- op histogram")
    lines += [f"   {k:<40} {n}" for k, n in info["op_histogram"].items()]
    lines.append("-- constants (all)")
    lines += [f"   {k:<8} count={t['count']:<6} bytes={t['bytes']}" for k, t in info["constants"].items()]
    if info["role"]:
        return lines + [f"-- weights: none (a {info['role']}: string ops over vocabulary tables)"]
    return lines + weights_text(info["weights"])


def weights_text(w: dict) -> list[str]:
    """Weights by storage mode (how many), then the bytes their constants take per element type, once each."""

    groups = ", ".join(f"{'per-channel' if g == '-1' else g}: {n}" for g, n in w["group_sizes"].items())
    lines = [f"-- weights ({w['count']}): " + (f"compressed, int{w['bits']}, group sizes {groups}"
                                                if w["compressed"] else "not compressed")]
    if w["modes"]:
        lines.append("   " + ", ".join(f"{m} x{n}" for m, n in w["modes"].items()) + "; stored as "
                     + ", ".join(f"{k} {human(t['bytes'])} ({t['count']} constants)" for k, t in w["by_type"].items()))
    return lines


def directory_text(info: dict) -> list[str]:
    from irsurgeon.families import registry

    family = registry.by_key(info["family"])
    lines = [f"directory {info['path']} (layout: {info['layout']}, draft family: {family.describe})"]
    cfg = info["config"]
    if cfg is None:
        lines.append("config.json: absent")
    elif cfg["error"]:
        lines.append(f"config.json: {cfg['error']}")
    else:
        mtp = cfg["mtp_num_hidden_layers"]
        lines.append(f"config.json: model_type {cfg['model_type']} (text: {cfg['text_model_type']}), "
                     f"{cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}"
                     + ("" if mtp is None else f", mtp_num_hidden_layers {mtp}"))
    lines.append("IRs:")
    lines += [f"   {r['file']}: {'' if r['ok'] else 'ERROR '}{r['summary']}" for r in info["irs"]] or ["   (none)"]
    draft = info["draft"]
    lines.append(f"speculative decoding with the {family.title} (openvino-genai): "
                 f"{'READY' if draft['ready'] else 'NOT READY'}")
    lines += [f"   [{'ok' if c['ok'] else 'FAIL'}] {c['name']}: {c['detail']}" for c in draft["checks"]]
    lines += [f"   reason: {r}" for r in draft["reasons"] if not draft["checks"]]
    return lines + tuning_text(info["tuning"]) + footprint_text(info["footprint"])


def tuning_text(t: dict | None) -> list[str]:
    """What `irsurgeon tune` measured and chose, from the draft's record; nothing when it was never tuned."""
    if t is None:
        return []
    m, k, fmt = (t.get(key) if isinstance(t.get(key), dict) else {} for key in ("machine", "k", "format"))
    readings = [r for r in t.get("readings") or [] if isinstance(r, dict)] if isinstance(t.get("readings"), list) \
        else []
    reading = next((r for r in readings if r.get("chosen")), None)
    lines = [f"Tuned {t.get('date', '?')} on {m.get('cpu', '?')} ({m.get('logical_cores', '?')} logical cores, "
             f"{m.get('device', '?')}, openvino-genai {m.get('openvino_genai', '?')}): {t.get('prompts', '?')} "
             f"prompt(s) x {t.get('max_new_tokens', '?')} tokens, {t.get('rounds', '?')} alternating round(s)"]
    if reading is not None and len(readings) > 1:
        lines.append(f"   reading: {reading.get('label')} (accepted {reading.get('accepted')}/"
                     f"{reading.get('drafted')} drafts; {len(readings)} readings counted)")
    tps, plain = k.get("tokens_per_second"), k.get("plain_tokens_per_second")
    if k.get("chosen") is not None and all(isinstance(v, list) and len(v) == 3 for v in (tps, plain)):
        lines.append(f"   num_assistant_tokens {k['chosen']}: {tps[0]} tok/s ({tps[1]}-{tps[2]}) against plain "
                     f"{plain[0]} ({plain[1]}-{plain[2]}), {k.get('speedup')}x"
                     + ("" if k.get("genai_reads_generation_config") else
                        "; this family's pipeline takes it only from a GenerationConfig given to generate()"))
    else:
        lines.append(f"   num_assistant_tokens: none chosen ({k.get('why') or 'not measured'})")
    lines.append(f"   format: {fmt.get('chosen')} ({fmt.get('why')})")
    return lines


def footprint_text(fp: dict) -> list[str]:

    n = fp["context"]
    lines = [f"Footprint (from the IRs' shapes and types; batch 1, context {n} tokens):"]
    for part, label in (("target", "target weights"), ("draft", "draft weights"), ("vision", "vision weights"),
                        ("other", "other IRs")):
        w = fp["weights"][part]
        if w["files"]:
            types = ", ".join(f"{t} {human(b)}" for t, b in sorted(w["by_type"].items(), key=lambda x: -x[1]))
            lines.append(f"   {label:<18} {human(w['bytes']):>10}   ({types}; {', '.join(w['files'])})")
    for part, label in (("target", "target KV cache"), ("draft", "draft KV cache")):
        kv = fp["kv"][part]
        if kv is None:
            lines.append(f"   {label:<18} {'-':>10}   (no {'language model' if part == 'target' else 'draft'})")
            continue
        if part == "draft" and not kv["growing_states"] and not kv["constant_states"]:  # Gemma 4's assistant
            lines.append(f"   {label:<18} {'0 B':>10}   (the draft has no KV cache of its own: it attends over the "
                         f"target's)")
            continue
        lines.append(f"   {label:<18} {human(kv['bytes_per_token']):>10}/token, {human(kv['bytes_at_context'])} at "
                     f"{n} tokens ({kv['layers']} attention layer(s) x K,V, {kv['precision']} from "
                     f"{kv['precision_source']})")
        if kv["constant_states"]:
            lines.append(f"   {'':<18} {human(kv['constant_bytes']):>10}   constant-size states "
                         f"({kv['constant_states']}: linear-attention conv/ssm), independent of context")
        lines += [f"   {'':<18} problem: {p}" for p in kv["problems"]]
    oh = fp["runtime_overhead"]
    basis = textwrap.wrap(f"({oh['basis']})", 120 - 35)  # the basis is a paragraph: wrap it under its column
    lines.append(f"   {'runtime overhead':<18} {human(oh['bytes']):>10}   {basis[0]}")
    lines += [f"   {'':<18} {'':>10}   {more}" for more in basis[1:]]
    lines.append(f"   {'total at ' + str(n):<18} {human(fp['total_at_context']):>10}   (weights + KV cache + constant "
                 "states; runtime overhead not included)")
    return lines


def _tree(node: dict, indent: int) -> list[str]:
    lines = []
    for key, value in node.items():
        if isinstance(value, dict):
            lines.append(f"{' ' * indent}{key}:")
            lines += _tree(value, indent + 3)
        elif key == HIDDEN_STATES_LAYERS:
            lines.append(f"{' ' * indent}{key} = <JSON, {len(value)} chars; decoded below>")
        else:
            lines.append(f"{' ' * indent}{key} = {value}")
    return lines
