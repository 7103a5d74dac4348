"""irsurgeon synth OUT_DIR --kind ...: a tiny seeded model directory (OUT_DIR/target) and its checkpoint (OUT_DIR/ckpt)."""
from __future__ import annotations

import time
from pathlib import Path

import click

KINDS = ("qwen35", "qwen35-moe", "llama", "gemma4")
SIZES = (("layers", "Decoder layers."), ("hidden", "Hidden size."), ("heads", "Attention heads."),
         ("kv-heads", "Key/value heads (divides --heads)."),
         ("head-dim", "Head size; with --hidden or --heads alone: hidden / heads."), ("vocab", "Vocabulary size."))


def size_options(f):
    for name, text in reversed(SIZES):
        f = click.option(f"--{name}", type=int, default=None, help=f"{text} Default: the kind's tiny size.")(f)
    return f


@click.command("synth")
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--kind", type=click.Choice(KINDS), default="qwen35", show_default=True,
              help="qwen35 / qwen35-moe: the VLM layout openvino-genai loads; llama: a text-only openvino_model.xml; "
                   "gemma4: a text-only Gemma 4 target and its MTP assistant checkpoint.")
@size_options
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, byte-identical files.")
@click.option("--with-mtp/--no-mtp", default=None,
              help="Write the checkpoint's mtp.* tensors [default: with for qwen35 kinds, without for llama].")
@click.option("--weight-format", type=click.Choice(["f32", "f16", "int4"]), default="f32", show_default=True,
              help="Storage of the IR weights (int4: the language model's MatMuls, through nncf).")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run writing into OUT_DIR to finish.")
def command(out_dir: Path, kind: str, seed: int, with_mtp: bool | None, weight_format: str, wait: bool,
            **sizes) -> None:
    """Write a seeded synthetic model: OUT_DIR/target (OpenVINO IRs) and OUT_DIR/ckpt (Hugging Face checkpoint)."""
    from irsurgeon.synth.registry import default_spec, synthesize

    start = time.perf_counter()
    given = {k: v for k, v in sizes.items() if v is not None}
    if kind == "gemma4":  # a fixed tiny Gemma 4 target and its assistant (irsurgeon.synth.gemma4)
        from irsurgeon.synth.gemma4 import synthesize_gemma4
        if given or with_mtp is not None or weight_format != "f32":
            raise click.UsageError("--kind gemma4 takes only --seed and --wait (its sizes are fixed)")
        target, assistant = synthesize_gemma4(out_dir, seed, wait)
        click.echo(f"wrote {target} and {assistant} (gemma4) in {time.perf_counter() - start:.1f} s")
        return
    spec = default_spec(kind).with_(**given)
    if {"hidden", "heads"} & given.keys() and "head_dim" not in given and spec.hidden % spec.heads == 0:
        spec = spec.with_(head_dim=spec.hidden // spec.heads)
    with_mtp = kind != "llama" if with_mtp is None else with_mtp
    out = synthesize(out_dir, kind, spec, seed=seed, with_mtp=with_mtp, weight_format=weight_format, wait=wait)
    size = sum(f.stat().st_size for f in Path(out_dir).rglob("*") if f.is_file())
    click.echo(f"wrote {out.target} and {out.ckpt} ({kind}, layers {spec.layers}, hidden {spec.hidden}, "
               f"{size / 1e6:.2f} MB) in {time.perf_counter() - start:.1f} s")
