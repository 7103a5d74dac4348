"""Gemma 4 MTP: the `gemma4_assistant` drafter built from safetensors, and the target surgery genai needs.

    assistant.py  checkpoint -> checked tensors -> ov.Model (irsurgeon.models.gemma4_assistant) -> files
    target.py     the five extra outputs of a text-only Gemma 4 export, added to its .xml only
    patch.py      the pair check and the all-or-nothing patch of TARGET (+ TARGET/mtp_assistant/)
"""
