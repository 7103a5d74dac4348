"""irsurgeon synth OUT_DIR --kind ...: a tiny seeded model directory (OUT_DIR/target) and its checkpoint (OUT_DIR/ckpt)."""
from __future__ import annotations

import time
from pathlib import Path

import click

from irsurgeon.cli.options import Command, choice, echo_for, json_flag, report, weight_format_option
from irsurgeon.core.errors import OutputError
from irsurgeon.core.limits import SYNTH_SIZE_LIMITS
from irsurgeon.families import registry

KINDS = tuple(registry.synth_kinds())  # every family's fixtures
WEIGHT_FORMATS = ("f32", "f16", "int4")  # in the order of compress.WEIGHT_FORMATS
SIZES = (("layers", "Decoder layers."), ("hidden", "Hidden size."), ("heads", "Attention heads."),
         ("kv-heads", "Key/value heads (divides --heads)."),
         ("head-dim", "Head size; with --hidden or --heads alone: hidden / heads."), ("vocab", "Vocabulary size."))


def size_options(f):
    for name, text in reversed(SIZES):
        upper = SYNTH_SIZE_LIMITS[name.replace("-", "_")]  # out of range: a usage error (exit 2), as for every option
        f = click.option(f"--{name}", type=click.IntRange(1, upper), default=None,
                         help=f"{text} Default: the kind's tiny size.")(f)
    return f


def refuse_foreign(out_dir: Path) -> None:
    """OUT_DIR may be absent, empty, or hold only synth's own two folders (synth.output.check_output judges them)."""
    from irsurgeon.synth.output import OWN, STAGING_PREFIX

    if not out_dir.is_dir() or out_dir.is_symlink():
        return  # absent: created; anything else: synthesize reports it
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in OWN and not p.name.startswith(STAGING_PREFIX))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(f"{out_dir}: holds {shown}, not written by synth; pass --force to write "
                          f"{'/, '.join(OWN)}/ into it anyway")


@click.command("synth", cls=Command)
@click.argument("out_dir", type=click.Path(path_type=Path))
@click.option("--kind", type=choice(KINDS), default=next(iter(registry.DEFAULT.synth_kinds)), show_default=True,
              help="; ".join(f"{kind}: {words}" for f in registry.FAMILIES for kind, words in f.synth_kinds.items())
              + ".")
@size_options
@click.option("--layer-types", default=None,
              help="qwen35 kinds: N (every N-th layer full attention, the rest Gated DeltaNet linear attention; 1: "
                   "full attention only) or a comma list of full/linear, one per layer [default: 4, as Qwen3.5].")
@click.option("--seed", type=click.IntRange(0), default=0, show_default=True,
              help="Same seed, byte-identical files (numpy seeds are non-negative).")
@click.option("--with-mtp/--no-mtp", default=None,
              help="Write the checkpoint's mtp.* tensors [default: with for qwen35 kinds, without for llama].")
@weight_format_option("f32", WEIGHT_FORMATS,
                      text="Storage of the IR weights (int4: the language model's MatMuls, through nncf).")
@click.option("--force", is_flag=True, help="Replace an earlier OUT_DIR/target and OUT_DIR/ckpt, and write them into "
                                            "a directory that holds other things (an export, say).")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run writing into OUT_DIR to finish.")
@json_flag
def command(out_dir: Path, kind: str, layer_types: str | None, seed: int, with_mtp: bool | None, weight_format: str,
            force: bool, wait: bool, as_json: bool, **sizes) -> None:
    """Write a seeded synthetic model: OUT_DIR/target (OpenVINO IRs) and OUT_DIR/ckpt (Hugging Face checkpoint)."""
    from irsurgeon.synth.output import check_output, recover

    start = time.perf_counter()
    recover(out_dir, wait)  # a killed run's move rolled back first: the checks then judge what OUT_DIR holds
    if not force:
        refuse_foreign(out_dir)
    check_output(out_dir, force)  # before any work: an earlier output, a link or a file where a folder goes
    given = {k: v for k, v in sizes.items() if v is not None}
    family = registry.synth_kinds()[kind]
    parts = family.synth(kind, out_dir, seed, wait, sizes=given, layer_types=layer_types, with_mtp=with_mtp,
                         weight_format=weight_format, force=force)
    size = sum(f.stat().st_size for f in Path(out_dir).rglob("*") if f.is_file())
    seconds = time.perf_counter() - start
    names = " and ".join(str(p) for p in parts.values())
    echo_for(as_json)(f"wrote {names} ({kind}, {size / 1e6:.2f} MB) in {seconds:.1f} s")
    report({**{k: str(v) for k, v in parts.items()}, "kind": kind, "seed": seed, "weight_format": weight_format,
            "bytes": size, "seconds": round(seconds, 3)})
