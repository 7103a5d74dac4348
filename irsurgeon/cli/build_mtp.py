"""irsurgeon build-mtp CHECKPOINT -o OUT_DIR: the draft of a standalone family (Family.standalone: the Qwen3.5 MTP
head) as its own IR.

    --weight-format f32|f16              float weights, no nncf
    --weight-format int8|int4            built as f16, then compressed with nncf (see irsurgeon.quant.compress)
    --weight-format auto --target DIR    the format of DIR's language model (read, never written)

An OUT_DIR that already holds a head is refused unless --force, as `patch` refuses to rebuild a ready head.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import click

from irsurgeon.cli.hub_options import hub_options, make_hub
from irsurgeon.core.signals import NativeCalls
from irsurgeon.cli.options import (Command, choice, echo_for, json_flag, kv_cache_option, report,
                                   weight_format_option)
from irsurgeon.families import registry

STANDALONE = registry.standalone()  # the family whose draft stands alone


@click.command("build-mtp", cls=Command)
@click.argument("checkpoint")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path),
              help=f"Directory that receives the draft ({STANDALONE.layout.draft_xml} and its .bin).")
@click.option("--config", type=click.Path(path_type=Path), default=None,
              help="config.json, when CHECKPOINT is a single .safetensors file without one beside it.")
@weight_format_option("f16", text="Weight storage: f32/f16 floats, int8/int4 through nncf, or auto (mirror --target). "
                                  "Activations stay f32.")
@click.option("--target", type=click.Path(path_type=Path), default=None,
              help="Target model directory whose language model precision `auto` mirrors (only read).")
@click.option("--group-size", type=int, default=None, help="int4 group size (default 64; -1: per channel).")
@click.option("--ratio", type=float, default=None, help="int4 share of weights at 4 bits, the rest at backup (default 1.0).")
@click.option("--backup-precision", "backup", type=choice(("none", "int8_sym", "int8_asym")), default=None,
              help="int4: precision of the layers nncf keeps above 4 bits (default int8_sym).")
@click.option("--sym/--asym", default=None, help="Symmetric quantization (default asymmetric).")
@click.option("--all-layers/--no-all-layers", default=None,
              help="int4: also put the last MatMul (mlp.down_proj) in 4 bits (default: kept at backup).")
@kv_cache_option
@click.option("--allow-nonfinite", is_flag=True, help="Build even if the head's weights hold NaN or Inf (warns).")
@click.option("--force", is_flag=True, help="Replace a head OUT_DIR already holds.")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run writing into OUT_DIR to finish.")
@json_flag
@hub_options
def command(checkpoint: str, out_dir: Path, config: Path | None, weight_format: str, target: Path | None,
            group_size: int | None, ratio: float | None, backup: str | None, sym: bool | None,
            all_layers: bool | None, kv_cache_precision: str, allow_nonfinite: bool, force: bool, wait: bool,
            as_json: bool, revision: str | None, token: str | None, cache_dir: Path | None) -> None:
    """Build the draft of CHECKPOINT alone (a checkpoint directory, a .safetensors file, or a Hugging Face repo id)."""
    # the library is loaded here, not with the CLI: it imports openvino (and nncf to compress), which `--help` and
    # every other command do not need
    from irsurgeon.draft.save import existing_draft
    from irsurgeon.flows.standalone import build_head
    from irsurgeon.commit.journal import STAGE_DIR
    from irsurgeon.quant.precision import choose_format

    start, echo = time.perf_counter(), echo_for(as_json)
    # refused before any work (building takes minutes), unless an interrupted run's leftovers may account for the
    # head: save_draft checks again once they are undone
    draft = STANDALONE.layout.draft_xml
    if not force and os.path.lexists(out_dir / draft) and not os.path.lexists(out_dir / STAGE_DIR):
        raise existing_draft(out_dir, draft)
    choice_ = choose_format(weight_format, target, group_size=group_size, ratio=ratio, backup=backup, sym=sym,
                            all_layers=all_layers)
    if choice_.note:
        echo(choice_.note)
    with NativeCalls(raising=True):  # Ctrl-C said at once inside a long C++ step (nncf, a save); again: exits
        xml = build_head(checkpoint, out_dir, choice_, config=config, kv_cache_precision=kv_cache_precision,
                         allow_nonfinite=allow_nonfinite, hub=make_hub(revision, token, cache_dir), wait=wait,
                         replace=force, echo=echo)
    size = xml.with_suffix(".bin").stat().st_size
    seconds = time.perf_counter() - start
    echo(f"wrote {xml} ({size / 1e6:.2f} MB of {choice_.weight_format} weights) in {seconds:.1f} s")
    report({"output": str(xml), "written": [str(xml), str(xml.with_suffix(".bin"))],
            "weight_format": choice_.weight_format, "bin_bytes": size, "kv_cache_precision": kv_cache_precision,
            "seconds": round(seconds, 3)})
