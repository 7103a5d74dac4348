"""irsurgeon annotate TARGET: write the hidden_states_decoder_layers rt_info into a target's language model."""
from __future__ import annotations

from pathlib import Path

import click

from irsurgeon.cli.options import Command, echo_for, json_flag, report
from irsurgeon.core.errors import IRError
from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS


@click.command("annotate", cls=Command)
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Replace an existing annotation that differs from the discovered one.")
@click.option("--dry-run", is_flag=True, help="Print the annotation that would be written; write nothing.")
@click.option("--num-layers", type=click.IntRange(min=1), default=None,
              help="Decoder layer count, when config.json is absent or wrong.")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run writing into the directory to finish.")
@json_flag
def command(target: Path, force: bool, dry_run: bool, num_layers: int | None, wait: bool, as_json: bool) -> None:
    """Annotate TARGET (an exported model directory or an .xml) with its decoder layers' hidden states.

    Only the .xml's net-level <rt_info> changes; the .bin is never touched.
    """
    from irsurgeon.flows.annotate import Status, annotate_ir  # on use: it imports openvino (~0.2 s of every command's start)

    echo = echo_for(as_json)
    result = annotate_ir(target, force=force, dry_run=dry_run, num_layers=num_layers, wait=wait)
    for note in result.notes:
        echo(note)
    echo(f"{result.xml}: {result.num_layers} decoder layers (from {result.layer_source}), "
               f"hidden size {result.hidden_size}")
    for layer, (producer, index) in sorted(result.layers.items()):
        echo(f"  {layer:>4}  {producer}:{index}")
    plan = [f"write {HIDDEN_STATES_LAYERS} = {result.value}"] if result.status is Status.DRY_RUN else []
    report({"xml": str(result.xml), "status": result.status.value, "num_layers": result.num_layers,
            "layer_source": result.layer_source, "hidden_size": result.hidden_size,
            "layers": [{"layer": k, "producer": p, "output_index": i} for k, (p, i) in sorted(result.layers.items())],
            "changed": result.status in (Status.WRITTEN, Status.REWRITTEN), "dry_run": dry_run, "plan": plan})
    if result.status is Status.KEPT:
        raise IRError(f"{result.xml}: already carries a different {HIDDEN_STATES_LAYERS} annotation; "
                      f"left as is (rerun with --force to replace it)")
    if result.status is Status.DRY_RUN:
        echo(f"would {plan[0]}")
        return
    echo({Status.WRITTEN: f"wrote {HIDDEN_STATES_LAYERS}",
          Status.REWRITTEN: f"replaced {HIDDEN_STATES_LAYERS} (--force)",
          Status.UNCHANGED: f"{HIDDEN_STATES_LAYERS} already present and identical; nothing changed"}[result.status])
