"""Gemma 4 MTP: the `gemma4_assistant` drafter built from safetensors, and the target surgery genai needs.

    irsurgeon patch TARGET --checkpoint ASSISTANT_DIR [--weight-format auto|f16|f32|int8|int4] [--dry-run] [--force]

TARGET is a text-only stateful export of a `gemma4_text` / `gemma4` model (optimum-intel
`--task text-generation-with-past`); ASSISTANT_DIR a local `gemma4_assistant` checkpoint (config.json +
safetensors) or a Hugging Face repo id of one (every tensor fetched by byte range, with --revision/--token/
--cache-dir).
Afterwards TARGET/openvino_model.xml has the five `mtp_*` outputs (its .bin untouched) and TARGET/mtp_assistant/
holds the assistant IR, config.json and generation_config.json, all moved in by one transaction:

    openvino_genai.LLMPipeline(TARGET, "CPU", draft_model=openvino_genai.draft_model(TARGET/mtp_assistant, "CPU"),
                               ATTENTION_BACKEND="SDPA")

    layout.py   names: model types, the files written, recognition (no openvino)
    model.py    config as transformers reads it, tensor table (tied or untied lm_head), the assistant's graph
    target.py   the five extra outputs of the target, added to its .xml only
    pairing.py  the target described, and the assistant's geometry against it
    patch.py    finish (compress, lm_head kept float) and what is staged, each file checked where it is staged
    verify.py   the contract openvino-genai's Gemma 4 MTP path reads, without genai
    genai.py    how openvino-genai runs the pair
    synth.py    a tiny text-only Gemma 4 target and an assistant whose drafts are accepted
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.draft.protocol import Family, Layout, Match, Pairing, Staging, refuse_sizing
from irsurgeon.families.gemma4_mtp import layout as names

UNPROVEN = ("a Gemma 4 assistant shares no tensor with its target: only its geometry (widths, vocabulary, head dims "
            "and KV heads of the store layers) was checked; `irsurgeon verify {target} --genai` measures how often "
            "its drafts are accepted")


class Gemma4MTP(Family):
    key = "gemma4"
    title = "Gemma 4 MTP assistant"
    runtime_overhead = 199  # MiB: benchmarks/measure_overhead.py, median of 3 alternating rounds (2026-12-05)
    model_types = (names.MODEL_TYPE, names.UNIFIED_TYPE)
    describe = "Gemma 4 MTP assistant (gemma4_assistant checkpoint)"
    layout = Layout(writes=names.WRITES, draft_xml=f"{names.ASSISTANT_DIR}/{names.MODEL_XML}",
                    target_xml=names.MODEL_XML)
    hub_prefix = ""  # every tensor of the (small) checkpoint: the table's prefix is ""
    synth_kinds = {"gemma4": "a text-only Gemma 4 target and an MTP assistant whose drafts are accepted"}

    def recognise(self, directory: Path) -> Match:
        if names.target_type(directory) is None:
            return Match.NONE
        return Match.DRAFT if (Path(directory) / names.ASSISTANT_DIR).exists() else Match.TARGET

    def inspect(self, directory: Path):
        from irsurgeon.families.gemma4_mtp.patch import inspect_for_patch
        return inspect_for_patch(directory)

    def pair(self, target, staging: Staging) -> Pairing:
        from irsurgeon.families.gemma4_mtp.pairing import check_pair
        check_pair(target.info, staging.cfg)
        return Pairing(unproven=UNPROVEN.format(target=target.path))

    def plan_steps(self, target, choice) -> list[str]:
        from irsurgeon.families.gemma4_mtp.target import OUTPUTS
        outputs = ", ".join(OUTPUTS)
        return [f"build {names.ASSISTANT_DIR}/ as {choice.weight_format}",
                f"add {outputs} to {names.MODEL_XML}" if target.new_xml else f"keep {names.MODEL_XML} ({outputs} "
                                                                               f"present)"]

    def finish(self, model, staging: Staging):
        from irsurgeon.families.gemma4_mtp.patch import finish
        return finish(model, staging.choice, staging.echo, **staging.provenance)

    def stage(self, tx, target, staging: Staging) -> None:
        from irsurgeon.families.gemma4_mtp.patch import stage
        stage(tx, target, staging.take(), staging.cfg, staging.root)

    def run_hint(self, directory: Path) -> str:
        asst = Path(directory) / names.ASSISTANT_DIR
        return (f"run it: openvino_genai.LLMPipeline('{directory}', 'CPU', draft_model=openvino_genai."
                f"draft_model('{asst}', 'CPU'), ATTENTION_BACKEND='SDPA')")

    def synth(self, kind: str, out_dir: Path, seed: int, wait: bool, **options) -> dict[str, Path]:
        """A fixed tiny pair: no option but the seed, --wait and --force applies."""
        from irsurgeon.families.gemma4_mtp.synth import synthesize_gemma4
        refuse_sizing(kind, options)
        target, assistant = synthesize_gemma4(out_dir, seed, wait, options.get("force", False))
        return {"target": target, "ckpt": assistant}


FAMILY = Gemma4MTP()
