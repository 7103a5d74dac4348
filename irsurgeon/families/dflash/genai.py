"""How openvino-genai runs a DFlash pair, for `verify --genai` (irsurgeon.flows.genai asks the family).

    pipeline    LLMPipeline(TARGET, device, scheduler_config=sc) (VLMPipeline for a decomposed VLM target), with
                draft_model=draft_model(TARGET/dflash_draft, device) for the DFlash one; genai 2026.4.1 runs DFlash
                only on the paged-attention backend with prefix caching off, one sequence at a time
    scheduler   prefix caching off, max_num_seqs 1 and cache_size (GiB) sized from the target's and the draft's KV
                growth (footprint.kv_cache, at f32) for CONTEXT_TOKENS tokens; for a hybrid target (constant-size
                linear-attention states: Qwen3.5) also num_linear_attention_blocks for the largest K the pipeline
                will be asked for (linear_attention_blocks), and their bytes in cache_size
    properties  INFERENCE_PRECISION_HINT=f32: there every pair tried was token-identical to plain greedy
    drafted     genai's DFlash path leaves get_num_draft_tokens() at 0; the drafted count is
                get_num_draft_processed_tokens()
    as_batch    LLMPipeline.generate(str) returns text only: a one-prompt list gets the metrics; VLMPipeline takes
                only a str (and returns its metrics with it), so its one-prompt list is handed on as that str
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.families.dflash.layout import DRAFT_DIR, LANGUAGE_XML, MODEL_XML, target_xml_name
from irsurgeon.ir.footprint import kv_cache
from irsurgeon.ir.describe import show_ir
from irsurgeon.draft.protocol import GenaiRuntime

GIB = 1 << 30
SEQUENCES = 1
CONTEXT_TOKENS = 4096
GENAI_DEFAULT_K = 5  # DEFAULT_NUM_ASSISTANT_TOKENS of openvino.genai's dflash_strategy_utils.hpp


def equivalence_properties(target: Path) -> dict:
    return {"INFERENCE_PRECISION_HINT": "f32"}


def drafted(ext) -> int:
    return ext.get_num_draft_processed_tokens()


def kv_parts(target: Path) -> list[dict]:
    """footprint.kv_cache of the target IR, then of the draft when it is there (f32: an upper bound)."""
    parts = [target / target_xml_name(target), target / DRAFT_DIR / MODEL_XML]
    return [kv_cache(str(p), {**show_ir(p), "runtime_options": {}}, 1, "f32") for p in parts if p.is_file()]


def linear_attention_blocks(target_kv: dict, max_assistant_tokens: int) -> int:
    """Linear-attention blocks genai needs to verify up to `max_assistant_tokens` drafts of SEQUENCES sequences;
    0 (genai's own choice) without drafts, or for a target without linear attention (genai refuses the setting there).

    openvino.genai (master da1db864d, 2026-08-21) dflash_strategy.cpp DFlashDecodingImpl sizes the pool once, from the
    pipeline's own num_assistant_tokens (GENAI_DEFAULT_K unless set): max(num_linear_attention_blocks, K + 2)
    (dflash_strategy_utils.hpp adjusted_linear_attention_block_count); 2026.4.1 then refuses a generate whose K
    needs more: "needs 1 committed recurrent-state rows (one per concurrently live sequence) plus 7 borrowed scratch
    rows (1 + num_assistant_tokens) ... raise num_linear_attention_blocks to at least 8" (K = 6).
    """
    if not target_kv["constant_states"] or not max_assistant_tokens:
        return 0
    return SEQUENCES + 1 + max(max_assistant_tokens, GENAI_DEFAULT_K)


def cache_size(kv: list[dict], blocks: int, context: int = CONTEXT_TOKENS) -> int:
    """GiB for SEQUENCES sequences of `context` tokens of the parts in `kv` (kv_parts), plus the constant-size states
    of `blocks` linear-attention blocks (genai reserves them out of cache_size first: cache_orchestrator.hpp
    normalize_block_counts)."""
    total = sum(max(blocks, SEQUENCES) * k["constant_bytes"] + SEQUENCES * context * k["bytes_per_token"] for k in kv)
    return max(1, -(-total // GIB))


def scheduler_config(g, target: Path, max_assistant_tokens: int = 0):
    """Prefix caching off, one sequence, the cache sized for it (and the linear-attention blocks of a hybrid)."""
    kv = kv_parts(target)
    blocks = linear_attention_blocks(kv[0], max_assistant_tokens) if kv else 0
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.max_num_seqs, sc.cache_size = SEQUENCES, cache_size(kv, blocks)
    if blocks:
        sc.num_linear_attention_blocks = blocks
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


def pipeline(g, target: Path, device: str, props: dict, draft: bool, max_assistant_tokens: int = 0):
    """The target's pipeline on the paged backend, with TARGET/dflash_draft as its DFlash draft when `draft`, sized
    for up to `max_assistant_tokens` drafts per step."""
    for where in (target, target / DRAFT_DIR):
        limits.check_directory_files(where, IRSurgeonError)  # genai opens its files itself: a FIFO would block it
    vlm = (target / LANGUAGE_XML).is_file()
    sc = scheduler_config(g, target, max_assistant_tokens if draft else 0)
    try:
        extra = {"draft_model": g.draft_model(str(target / DRAFT_DIR), device, **props)} if draft else {}
        pipe = (g.VLMPipeline if vlm else g.LLMPipeline)(str(target), device, scheduler_config=sc, **extra, **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the DFlash pair on {device}: {cause(e)}") from None
    return OnePrompt(pipe) if vlm else pipe


# how the house runs this family (draft.protocol.Family.genai)
RUNTIME = GenaiRuntime(pipeline, equivalence_properties, as_batch=True, drafted=drafted)
