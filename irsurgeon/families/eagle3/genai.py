"""How openvino-genai runs an EAGLE-3 pair, for `verify --genai` (irsurgeon.flows.genai asks the family).

    pipeline    LLMPipeline(TARGET, device, scheduler_config=sc, draft_model=draft_model(TARGET/eagle3_draft, device));
                genai 2026.4.1 runs EAGLE-3 on CPU on the paged-attention (continuous batching) path. A VLM target:
                VLMPipeline with the same arguments (visual_language/pipeline.cpp: a draft_model or scheduler_config
                makes it a VLMContinuousBatchingAdapter, whose ContinuousBatchingPipeline takes the draft)
    scheduler   prefix caching off, one sequence, cache_size 1 GiB (the bundled pairs need a few MiB)
    properties  INFERENCE_PRECISION_HINT=f32: the equivalence runs demand exact tokens
    drafted     get_num_draft_tokens() is filled for EAGLE-3 (unlike DFlash)
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.families.eagle3.layout import DRAFT_DIR, is_vlm_target
from irsurgeon.draft.protocol import GenaiRuntime


def equivalence_properties(target: Path) -> dict:
    return {"INFERENCE_PRECISION_HINT": "f32"}


def pipeline(g, target: Path, device: str, props: dict, draft: bool, max_assistant_tokens: int = 0):
    for where in (target, target / DRAFT_DIR):
        limits.check_directory_files(where, IRSurgeonError)  # genai opens its files itself: a FIFO would block it
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.max_num_seqs, sc.cache_size = 1, 1
    try:
        extra = {"draft_model": g.draft_model(str(target / DRAFT_DIR), device, **props)} if draft else {}
        if is_vlm_target(target):
            return OnePrompt(g.VLMPipeline(str(target), device, scheduler_config=sc, **extra, **props))
        return g.LLMPipeline(str(target), device, scheduler_config=sc, **extra, **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the EAGLE-3 pair on {device}: {cause(e)}") from None


class OnePrompt:
    """A VLMPipeline as the family's runtime calls it (as_batch: a one-prompt list), which VLMPipeline.generate
    takes as a str only; it returns VLMDecodedResults with the extended metrics either way."""

    def __init__(self, pipe):
        self.pipe = pipe

    def generate(self, prompt, **kwargs):
        return self.pipe.generate(prompt[0] if isinstance(prompt, list) else prompt, **kwargs)


# how the house runs this family (draft.protocol.Family.genai)
RUNTIME = GenaiRuntime(pipeline, equivalence_properties, as_batch=True)
