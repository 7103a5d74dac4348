"""How openvino-genai runs a Qwen3.5 directory, for `verify --genai` (irsurgeon.flows.genai asks the family).

    pipeline    VLMPipeline(dir, device) on the paged-attention backend with prefix caching off (genai's MTP path
                needs that); the MTP one gets `draft_model(dir)`, which loads `dir/openvino_mtp_model.xml`
    scheduler   sized from the directory (scheduler_size): one sequence at a time and a cache budget that holds the
                linear-attention states genai reserves per sequence, which its 256-sequence default does not fit
                for real hybrid models
    properties  INFERENCE_PRECISION_HINT=f32, plus KV_CACHE_PRECISION=f16 and DYNAMIC_QUANTIZATION_GROUP_SIZE=0 for
                int4 targets: at the CPU defaults even two plain backends disagree on tiny models whose top-2
                logits differ by ~1e-4, so only the f32 run can demand identical tokens

"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.ir.footprint import kv_cache
from irsurgeon.families.qwen35_mtp.layout import MTP_XML
from irsurgeon.ir.export import LANGUAGE_MODEL
from irsurgeon.quant.precision import detect_target_format
from irsurgeon.ir.describe import show_ir
from irsurgeon.draft.protocol import GenaiRuntime

FILES = (LANGUAGE_MODEL, MTP_XML)  # (target, draft): the KV growth of each
GIB = 1 << 30
SEQUENCES = 1  # every generate() here decodes one prompt greedily: one sequence at a time
CONTEXT_TOKENS = 4096  # KV budget per sequence: built-in prompts are short; a --prompts FILE may be long


def equivalence_properties(target: Path) -> dict:
    """f32 inference; plus an f16 KV cache and no dynamic quantization when the target is int4 (the module docstring)."""
    props = {"INFERENCE_PRECISION_HINT": "f32"}
    if detect_target_format(target).weight_format == "int4":
        props.update(KV_CACHE_PRECISION="f16", DYNAMIC_QUANTIZATION_GROUP_SIZE="0")
    return props


def scheduler_size(target: Path, sequences: int = SEQUENCES, context: int = CONTEXT_TOKENS) -> tuple[int, int]:
    """(max_num_seqs, cache_size in GiB) that fit `sequences` sequences of `context` tokens of this directory.

    openvino-genai 2026.4's cache orchestrator (src/cpp/src/continuous_batching/cache/cache_orchestrator.hpp,
    normalize_block_counts; the file its refusal names)
    reserves, with prefix caching off and cache_size set, one linear-attention block (every linear-attention
    layer's conv + recurrent state of one sequence) per schedulable sequence, max_num_seqs of them, out of the
    cache_size budget before any KV block, and refuses the pipeline when `reserved_la_bytes <= budget_in_bytes`
    fails. Its default max_num_seqs of 256 does not fit a real hybrid model in a few GiB (Qwen3.5-0.8B: 18 x 1.1
    MiB per sequence), so both follow the model and the batch used: the constant-size states and the KV growth per
    token of the language model and the head (footprint.kv_cache, at f32, an upper bound of any runtime precision).
    """
    files = [f for f in FILES if (target / f).is_file()]
    # f32 whatever rt_info says: an upper bound of the precision the runtime picks
    kv = [kv_cache(f, {**show_ir(target / f), "runtime_options": {}}, 1, "f32") for f in files]
    per_sequence = sum(k["constant_bytes"] + context * k["bytes_per_token"] for k in kv)
    return sequences, max(1, -(-sequences * per_sequence // GIB))


def scheduler_config(g, target: Path):
    """genai's SchedulerConfig for `target`: prefix caching off, sized by scheduler_size."""
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.max_num_seqs, sc.cache_size = scheduler_size(target)
    return sc


def pipeline(g, target: Path, device: str, props: dict, draft: bool, max_assistant_tokens: int = 0):
    """A VLMPipeline on the paged backend, with the directory's MTP head as draft model when `draft`
    (max_assistant_tokens is not read: the scheduler is sized without it)."""
    limits.check_directory_files(target, IRSurgeonError)  # genai opens its files itself: a FIFO would block it
    try:
        extra = {"draft_model": g.draft_model(str(target), device, **props)} if draft else {}
        return g.VLMPipeline(str(target), device, scheduler_config=scheduler_config(g, target), **extra, **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the directory on {device}: {cause(e)}") from None


# how the house runs this family (draft.protocol.Family.genai)
RUNTIME = GenaiRuntime(pipeline, equivalence_properties)
