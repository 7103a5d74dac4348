"""Gemma 4 MTP: the `gemma4_assistant` drafter built from safetensors, and the target surgery genai needs.

    irsurgeon patch TARGET --checkpoint ASSISTANT_DIR [--weight-format auto|f16|f32|int8|int4] [--dry-run] [--force]

TARGET is a text-only stateful export of a `gemma4_text` / `gemma4` model (optimum-intel
`--task text-generation-with-past`); ASSISTANT_DIR a local `gemma4_assistant` checkpoint (config.json +
safetensors) or a Hugging Face repo id of one (fetched whole, with --revision/--token/--cache-dir).
Afterwards TARGET/openvino_model.xml has the five `mtp_*` outputs (its .bin untouched) and TARGET/mtp_assistant/
holds the assistant IR, config.json and generation_config.json:

    openvino_genai.LLMPipeline(TARGET, "CPU", draft_model=openvino_genai.draft_model(TARGET/mtp_assistant, "CPU"),
                               ATTENTION_BACKEND="SDPA")

    assistant.py  checkpoint -> checked tensors -> ov.Model (irsurgeon.models.gemma4_assistant)
    target.py     the five extra outputs of the target, added to its .xml only
    patch.py      the pair check and the all-or-nothing patch of TARGET (+ TARGET/mtp_assistant/)
`irsurgeon synth OUT --kind gemma4` (irsurgeon.synth.gemma4) writes a tiny pair that openvino-genai runs.
"""
