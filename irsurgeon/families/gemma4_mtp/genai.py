"""How openvino-genai runs a Gemma 4 pair, for `verify --genai` (irsurgeon.flows.genai asks the family).

    pipeline    LLMPipeline(TARGET, device, ATTENTION_BACKEND="SDPA"), with
                draft_model=draft_model(TARGET/mtp_assistant, device) for the MTP one; genai 2026.4.1 pairs the two
                by the target's mtp_* outputs (gemma4_mtp_strategy.cpp is_gemma4_mtp_model_pair) and runs the
                stateful SDPA backend, so no paged-attention scheduler is configured
    properties  f32 inference and an f32 KV cache: the equivalence runs compare exact greedy tokens; for an int4
                target also DYNAMIC_QUANTIZATION_GROUP_SIZE=0, as for a Qwen int4 target (irsurgeon.families.qwen35_mtp.genai):
                the CPU plugin otherwise quantizes the activations fed to int4 MatMuls, differently per shape
    honours EOS genai's Gemma 4 MTP path stops at EOS even with ignore_eos (openvino-genai 2026.4.1, seen on
                tests/families/gemma4/test_gemma4_genai.py's pairs), so the equivalence runs honour EOS in both pipelines
"""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.families.gemma4_mtp.layout import ASSISTANT_DIR, MODEL_XML
from irsurgeon.quant.precision import detect_target_format
from irsurgeon.draft.protocol import GenaiRuntime

FILES = (MODEL_XML, f"{ASSISTANT_DIR}/{MODEL_XML}")  # (target, draft): the KV growth of each
HONOURS_EOS = True


def equivalence_properties(target: Path) -> dict:
    props = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    if detect_target_format(target).weight_format == "int4":
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    return props


def pipeline(g, target: Path, device: str, props: dict, draft: bool, max_assistant_tokens: int = 0):
    """A target-only LLMPipeline on the SDPA backend, or the MTP one with TARGET/mtp_assistant as draft
    (max_assistant_tokens is not read: the SDPA backend has no scheduler to size)."""
    for where in (target, target / ASSISTANT_DIR):
        limits.check_directory_files(where, IRSurgeonError)  # genai opens its files itself: a FIFO would block it
    try:
        extra = {"draft_model": g.draft_model(str(target / ASSISTANT_DIR), device, **props)} if draft else {}
        return g.LLMPipeline(str(target), device, ATTENTION_BACKEND="SDPA", **extra, **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the Gemma 4 pair on {device}: {cause(e)}") from None


# how the house runs this family (draft.protocol.Family.genai)
RUNTIME = GenaiRuntime(pipeline, equivalence_properties, HONOURS_EOS, as_batch=True)
