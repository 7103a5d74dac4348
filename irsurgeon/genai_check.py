"""Run openvino-genai MTP speculative decoding against plain greedy decoding on a target directory.

Both pipelines are `VLMPipeline`s with the paged-attention backend and prefix caching off (genai's MTP path needs
that); the MTP one gets `draft_model(dir)`, which loads `dir/openvino_mtp_model.xml`. Token ids are collected with a
streamer. The equivalence check runs at INFERENCE_PRECISION_HINT=f32, plus KV_CACHE_PRECISION=f16 and
DYNAMIC_QUANTIZATION_GROUP_SIZE=0 for int4 targets: at the CPU defaults even two plain backends disagree on tiny
models whose top-2 logits differ by ~1e-4, so only the f32 run can demand identical tokens.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from irsurgeon.errors import IRSurgeonError

PROMPTS = (
    "Hello world, the quick brown fox",
    "Once upon a time there was a little robot who liked to count",
    "What is the capital of France?",
    "one two three four five six seven eight nine ten",
    "def main(): print(",
    "The weather today is sunny with a chance of rain in the afternoon. Please write a short poem about the sea.",
)
LANGUAGE_MODEL = "openvino_language_model.xml"


@dataclass
class Run:
    prompt: int
    num_assistant_tokens: int
    identical: bool
    first_diff: int | None
    tokens: int
    accepted: int
    draft_tokens: int
    seconds: float
    plain_seconds: float


@dataclass
class Report:
    properties: dict
    runs: list[Run] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return all(r.identical for r in self.runs)

    @property
    def acceptance(self) -> float:
        drafts = sum(r.draft_tokens for r in self.runs)
        return sum(r.accepted for r in self.runs) / drafts if drafts else 0.0

    def as_dict(self) -> dict:
        return {"properties": self.properties, "identical": self.identical, "acceptance_rate": self.acceptance,
                "runs": [asdict(r) for r in self.runs]}


def has_int4_weights(target: Path) -> bool:
    """Whether the language model stores 4-bit weights (a text scan of the XML; the weights are not read)."""
    with open(target / LANGUAGE_MODEL, encoding="utf-8", errors="replace") as f:
        return any('element_type="u4"' in line or 'element_type="i4"' in line for line in f)


def equivalence_properties(target: Path) -> dict:
    props = {"INFERENCE_PRECISION_HINT": "f32"}
    if has_int4_weights(target):
        props.update(KV_CACHE_PRECISION="f16", DYNAMIC_QUANTIZATION_GROUP_SIZE="0")
    return props


def _genai():
    try:
        import openvino_genai
    except ImportError:
        raise IRSurgeonError("openvino-genai is not installed: pip install 'openvino-genai==2026.4.1.0' "
                             "'openvino-tokenizers==2026.4.1.0'") from None
    return openvino_genai


def _scheduler(g):
    sc = g.SchedulerConfig()
    sc.enable_prefix_caching = False
    sc.cache_size = 1
    return sc


def _config(g, max_new_tokens: int, nat: int | None):
    c = g.GenerationConfig()
    c.max_new_tokens, c.do_sample, c.apply_chat_template, c.ignore_eos = max_new_tokens, False, False, True
    if nat:
        c.num_assistant_tokens = nat
    return c


def _generate(g, pipe, prompt: str, config) -> tuple[list[int], object, float]:
    ids: list[int] = []

    class Collector(g.StreamerBase):
        def write(self, token):
            ids.extend([token] if isinstance(token, int) else [int(t) for t in token])
            return g.StreamingStatus.RUNNING

        def end(self):
            return None

    start = time.perf_counter()
    result = pipe.generate(prompt, generation_config=config, streamer=Collector())
    return ids, result, time.perf_counter() - start


def run_equivalence(target: str | Path, prompts: int = 3, nats: tuple[int, ...] = (1, 2, 3, 4),
                    max_new_tokens: int = 40, device: str = "CPU",
                    echo: Callable[[str], None] = print) -> Report:
    target = Path(target)
    g = _genai()
    props = equivalence_properties(target)
    report = Report(properties=props)
    try:
        plain = g.VLMPipeline(str(target), device, scheduler_config=_scheduler(g), **props)
        mtp = g.VLMPipeline(str(target), device, scheduler_config=_scheduler(g),
                            draft_model=g.draft_model(str(target), device, **props), **props)
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot load the directory: {str(e).splitlines()[0]}") from None
    for i, prompt in enumerate(PROMPTS[:prompts]):
        ref, _, plain_s = _generate(g, plain, prompt, _config(g, max_new_tokens, None))
        for nat in nats:
            ids, result, secs = _generate(g, mtp, prompt, _config(g, max_new_tokens, nat))
            ext = result.extended_perf_metrics
            diff = None if ids == ref else next((j for j, (a, b) in enumerate(zip(ids, ref)) if a != b),
                                                min(len(ids), len(ref)))
            run = Run(i, nat, ids == ref, diff, len(ids), ext.get_num_accepted_tokens() if ext else 0,
                      ext.get_num_draft_tokens() if ext else 0, secs, plain_s)
            report.runs.append(run)
            echo(f"prompt {i} num_assistant_tokens {nat}: {'identical' if run.identical else f'DIFFERENT at token {diff}'}"
                 f" ({run.tokens} tokens, accepted {run.accepted}/{run.draft_tokens} drafts, "
                 f"{run.tokens / secs:.1f} tok/s vs plain {len(ref) / plain_s:.1f} tok/s)")
    return report
