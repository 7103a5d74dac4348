"""irsurgeon build-mtp CHECKPOINT -o OUT_DIR: the MTP head of a checkpoint as openvino_mtp_model.xml/.bin.

    --weight-format f16|f32              float weights, no nncf
    --weight-format int4|int8            built as f16, then compressed with nncf (see irsurgeon.compress)
    --weight-format auto --target DIR    the format of DIR's language model (read, never written)
"""
from __future__ import annotations

import time
from pathlib import Path

import click

from irsurgeon.cli.hub_options import hub_options, make_hub

FORMATS = "f32|f16|int4|int8|auto"


@click.command("build-mtp")
@click.argument("checkpoint")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory that receives openvino_mtp_model.xml/.bin.")
@click.option("--config", type=click.Path(path_type=Path), default=None,
              help="config.json, when CHECKPOINT is a single .safetensors file without one beside it.")
@click.option("--weight-format", default="f16", show_default=True, metavar=f"[{FORMATS}]",
              help="Weight storage: f16/f32 floats, int4/int8 through nncf, or auto (mirror --target). "
                   "Activations stay f32.")
@click.option("--target", type=click.Path(path_type=Path), default=None,
              help="Target model directory whose language model precision `auto` mirrors (only read).")
@click.option("--group-size", type=int, default=None, help="int4 group size (default 64; -1: per channel).")
@click.option("--ratio", type=float, default=None, help="int4 share of weights at 4 bits, the rest at backup (default 1.0).")
@click.option("--backup-precision", "backup", default=None, metavar="[none|int8_sym|int8_asym]",
              help="int4: precision of the layers nncf keeps above 4 bits (default int8_sym).")
@click.option("--sym/--asym", default=None, help="Symmetric quantization (default asymmetric).")
@click.option("--all-layers/--no-all-layers", default=None,
              help="int4: also put the last MatMul (mlp.down_proj) in 4 bits (default: kept at backup).")
@click.option("--kv-cache-precision", default="f16", show_default=True, metavar="[f16|bf16|f32|u8|u4]",
              help="KV cache precision recorded in the head's rt_info runtime_options.")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run writing into OUT_DIR to finish.")
@hub_options
def command(checkpoint: str, out_dir: Path, config: Path | None, weight_format: str, target: Path | None,
            group_size: int | None, ratio: float | None, backup: str | None, sym: bool | None,
            all_layers: bool | None, kv_cache_precision: str, wait: bool, revision: str | None, token: str | None,
            cache_dir: Path | None) -> None:
    """Build the MTP head of CHECKPOINT (a checkpoint directory, a .safetensors file, or a Hugging Face repo id)."""
    from irsurgeon.build import build_mtp_model, save_mtp_model
    from irsurgeon.compress import check_kv_cache_precision, compress_model, set_kv_cache_precision
    from irsurgeon.precision import choose_format

    start = time.perf_counter()
    check_kv_cache_precision(kv_cache_precision)
    choice = choose_format(weight_format, target, group_size=group_size, ratio=ratio, backup=backup, sym=sym,
                           all_layers=all_layers)
    if choice.note:
        click.echo(choice.note)
    model = build_mtp_model(checkpoint, config, "f16" if choice.params else choice.weight_format, warn=click.echo,
                            hub=make_hub(revision, token, cache_dir))
    if choice.params:
        model, report = compress_model(model, choice.params)
        for line in report.lines():
            click.echo(line)
    set_kv_cache_precision(model, kv_cache_precision)
    xml = save_mtp_model(model, out_dir, wait=wait, echo=click.echo)
    size = xml.with_suffix(".bin").stat().st_size
    click.echo(f"wrote {xml} ({size / 1e6:.2f} MB of {choice.weight_format} weights) "
               f"in {time.perf_counter() - start:.1f} s")
