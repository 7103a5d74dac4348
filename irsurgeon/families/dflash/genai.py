"""How openvino-genai runs a DFlash pair, for `verify --genai` (irsurgeon.genai_check asks the family).

    pipeline    LLMPipeline(TARGET, device, scheduler_config=sc) (VLMPipeline for a decomposed VLM target), with
                draft_model=draft_model(TARGET/dflash_draft, device) for the DFlash one; genai 2026.4.1 runs DFlash
                only on the paged-attention backend with prefix caching off, one sequence at a time
    scheduler   prefix caching off, max_num_seqs 1 and cache_size (GiB) sized from the target's and the draft's KV
                growth (footprint.kv_cache, at f32) for CONTEXT_TOKENS tokens
    properties  INFERENCE_PRECISION_HINT=f32: there every pair tried was token-identical to plain greedy
    drafted     genai's DFlash path leaves get_num_draft_tokens() at 0; the drafted count is
                get_num_draft_processed_tokens()
    as_batch    LLMPipeline.generate(str) returns text only: a one-prompt list gets the metrics; VLMPipeline takes
                only a str (and returns its metrics with it), so its one-prompt list is handed on as that str
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon import limits
from irsurgeon.errors import IRSurgeonError, cause
from irsurgeon.families.dflash.layout import DRAFT_DIR, LANGUAGE_XML, MODEL_XML, target_xml_name
from irsurgeon.footprint import kv_cache
from irsurgeon.ir.describe import show_ir

GIB = 1 << 30
SEQUENCES = 1
CONTEXT_TOKENS = 4096


def equivalence_properties(target: Path) -> dict:
    return {"INFERENCE_PRECISION_HINT": "f32"}


def drafted(ext) -> int:
    return ext.get_num_draft_processed_tokens()


def cache_size(target: Path, context: int = CONTEXT_TOKENS) -> int:
    """GiB for SEQUENCES sequences of `context` tokens of the target and the draft (f32 KV: an upper bound)."""
    parts = [target / target_xml_name(target), target / DRAFT_DIR / MODEL_XML]
    kv = [kv_cache(str(p), {**show_ir(p), "runtime_options": {}}, 1, "f32") for p in parts if p.is_file()]
    per_sequence = sum(k["constant_bytes"] + context * k["bytes_per_token"] for k in kv)
    return max(1, -(-SEQUENCES * per_sequence // GIB))


def scheduler_config(g, target: Path):
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.max_num_seqs, sc.cache_size = SEQUENCES, cache_size(target)
    return sc


class OnePrompt:
    """A VLMPipeline that takes the one-prompt list the runtime gives (as_batch) as its str."""

    def __init__(self, pipe):
        self.pipe = pipe

    def generate(self, prompt, *args, **kwargs):
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        return self.pipe.generate(prompt, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.pipe, name)


def pipeline(g, target: Path, device: str, props: dict, draft: bool):
    """The target's pipeline on the paged backend, with TARGET/dflash_draft as its DFlash draft when `draft`."""
    for where in (target, target / DRAFT_DIR):
        limits.check_directory_files(where, IRSurgeonError)  # genai opens its files itself: a FIFO would block it
    vlm = (target / LANGUAGE_XML).is_file()
    try:
        extra = {"draft_model": g.draft_model(str(target / DRAFT_DIR), device, **props)} if draft else {}
        pipe = (g.VLMPipeline if vlm else g.LLMPipeline)(str(target), device,
                                                         scheduler_config=scheduler_config(g, target), **extra, **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the DFlash pair on {device}: {cause(e)}") from None
    return OnePrompt(pipe) if vlm else pipe
