"""irsurgeon patch TARGET_DIR --checkpoint SRC: give an exported directory its draft in place, all or nothing."""
from __future__ import annotations

from pathlib import Path

import click

from irsurgeon.cli.hub_options import hub_options, make_hub
from irsurgeon.core.signals import NativeCalls
from irsurgeon.cli.options import Command, choice, echo_for, json_flag, report, weight_format_option
from irsurgeon.quant.formats import KV_CACHE_PRECISIONS
from irsurgeon.families import registry


@click.command("patch", cls=Command,
               help=f"Make TARGET ready for the draft of --checkpoint's family ({registry.titles()}), verified before "
                    f"anything moves, all of it in one commit.")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--checkpoint", "source", required=True,
              help="The draft's checkpoint: a directory, a .safetensors file, or a Hugging Face repo id (only the "
                   "draft's tensors are fetched, by byte range, into irsurgeon's folder of the cache); its "
                   "config.json's model_type picks the family.")
@weight_format_option("auto", text="Storage of the draft's weights; auto mirrors the target's language model. "
                                    "A ready draft in another format than one given here is rebuilt.")
@click.option("--kv-cache-precision", type=choice(KV_CACHE_PRECISIONS), default=None,
              help="KV cache precision recorded in the draft's rt_info runtime_options [default: f16]; refused for a "
                   "family whose draft has no KV cache of its own (the Gemma 4 assistant reads the target's).")
@click.option("--dry-run", is_flag=True, help="Print the plan and write nothing.")
@click.option("--force", is_flag=True, help="Rebuild even when the directory already has its draft.")
@click.option("--wait", is_flag=True, help="Wait for another irsurgeon run on the same directory to finish.")
@click.option("--allow-nonfinite", is_flag=True, help="Build even if the draft's weights hold NaN or Inf (warns).")
@click.option("--allow-foreign-checkpoint", is_flag=True,
              help="Build even if the checkpoint's token embeddings differ from the target's (a fine-tune that "
                   "knowingly reuses its base model's head); recorded in the head's rt_info.")
@click.option("--hidden-layers", callback=lambda _c, _p, v: layer_ids(v), default=None, metavar="I,J,K",
              help="EAGLE-3: the target layers whose outputs the draft is fed from (0-based, as openvino-genai "
                   "counts them), instead of the taps its checkpoint's trainer used.")
@json_flag
@hub_options
def command(target: Path, source: str, weight_format: str, kv_cache_precision: str, dry_run: bool, force: bool,
            wait: bool, allow_nonfinite: bool, allow_foreign_checkpoint: bool, hidden_layers: tuple[int, ...] | None,
            as_json: bool, revision: str | None, token: str | None, cache_dir: Path | None) -> None:
    """`irsurgeon patch` (its help: the decorator's, which names every registered family)."""
    from irsurgeon.flows.patch import Options, patch  # on use: it imports openvino and the build (~0.3 s of every start)

    options = Options(weight_format=weight_format, kv_cache_precision=kv_cache_precision, force=force,
                      dry_run=dry_run, wait=wait, allow_nonfinite=allow_nonfinite,
                      allow_foreign_checkpoint=allow_foreign_checkpoint, hub=make_hub(revision, token, cache_dir),
                      hidden_layers=hidden_layers)
    echo = echo_for(as_json)
    with NativeCalls(raising=True):  # Ctrl-C said at once inside a long C++ step (nncf, a save); again: exits
        result = patch(target, source, options=options, echo=echo)
    report({"target": str(result.target), "family": result.family, "changed": bool(result.written),
            "written": result.written, "dry_run": dry_run, "plan": result.plan})
    if not as_json and not result.skipped:
        echo(f"check it: irsurgeon verify {target} --genai")
        echo(result.run_hint)


def layer_ids(text: str | None) -> tuple[int, ...] | None:
    """--hidden-layers I,J,K: three layer indices (a usage error, exit 2, otherwise)."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 6 for p in parts):
        raise click.BadParameter(f"{text!r:.40}: expected three non-negative integers below 1000000, as 1,13,24")
    ids = tuple(int(p) for p in parts)
    if len(set(ids)) != 3:
        raise click.BadParameter(f"{text!r:.40}: names a layer twice; expected three distinct layers (openvino-genai "
                                 f"taps three)")
    return ids
