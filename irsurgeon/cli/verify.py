"""irsurgeon verify TARGET_DIR [--genai]: check a directory against the MTP contract; optionally run genai."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("verify")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--genai", "with_genai", is_flag=True,
              help="Also run openvino-genai MTP speculative decoding against plain greedy decoding.")
@click.option("--prompts", type=click.IntRange(1, 6), default=3, show_default=True, help="Prompts to run with --genai.")
@click.option("--num-assistant-tokens", "nats", type=click.IntRange(1, 16), multiple=True, default=(1, 2, 3, 4),
              show_default=True, help="Draft lengths to try (repeatable).")
@click.option("--max-new-tokens", type=click.IntRange(1, 4096), default=40, show_default=True)
@click.option("--device", default="CPU", show_default=True)
@click.option("--json", "json_out", type=click.Path(path_type=Path), default=None, help="Write the results here.")
def command(target: Path, with_genai: bool, prompts: int, nats: tuple[int, ...], max_new_tokens: int, device: str,
            json_out: Path | None) -> None:
    """Check TARGET (an exported model directory) is ready for MTP speculative decoding."""
    from irsurgeon.errors import IRSurgeonError
    from irsurgeon.verify import verify_directory

    checks = verify_directory(target)
    for c in checks:
        click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    results = {"checks": [c.__dict__ for c in checks]}
    failed = [c.name for c in checks if not c.ok]
    if not failed and with_genai:
        from irsurgeon.genai_check import run_equivalence

        report = run_equivalence(target, prompts, nats, max_new_tokens, device, echo=click.echo)
        results["genai"] = report.as_dict()
        same = sum(r.identical for r in report.runs)
        click.echo(f"openvino-genai at {report.properties}: {same}/{len(report.runs)} MTP runs token-identical to "
                   f"plain greedy; draft acceptance {report.acceptance:.1%}")
        if not report.identical:
            failed.append("genai equivalence")
    if json_out:
        json_out.write_text(json.dumps(results, indent=1))
    if failed:
        raise IRSurgeonError(f"{target}: not ready for MTP speculative decoding: failed {', '.join(failed)}")
    click.echo(f"{target}: ready for MTP speculative decoding")
