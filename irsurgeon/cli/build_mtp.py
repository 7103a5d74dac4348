"""irsurgeon build-mtp CHECKPOINT -o OUT_DIR: the MTP head of a checkpoint as openvino_mtp_model.xml/.bin."""
from __future__ import annotations

import time
from pathlib import Path

import click

from irsurgeon.ops.core import WeightFormat


@click.command("build-mtp")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Directory that receives openvino_mtp_model.xml/.bin.")
@click.option("--config", type=click.Path(path_type=Path), default=None,
              help="config.json, when CHECKPOINT is a single .safetensors file without one beside it.")
@click.option("--weight-format", type=click.Choice([f.value for f in WeightFormat]), default=WeightFormat.F16.value,
              show_default=True, help="Storage precision of the weights; activations stay f32.")
def command(checkpoint: Path, out_dir: Path, config: Path | None, weight_format: str) -> None:
    """Build the MTP head of CHECKPOINT (a Hugging Face checkpoint directory or .safetensors file)."""
    from irsurgeon.build import build_mtp_model, save_mtp_model

    start = time.perf_counter()
    model = build_mtp_model(checkpoint, config, weight_format)
    xml = save_mtp_model(model, out_dir)
    size = xml.with_suffix(".bin").stat().st_size
    click.echo(f"wrote {xml} ({size / 1e6:.2f} MB of {weight_format} weights) in {time.perf_counter() - start:.1f} s")
