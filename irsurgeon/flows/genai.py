"""Run openvino-genai speculative decoding (any family's draft) against plain greedy decoding on a target directory.

The directory's family (families.registry.for_directory) says how genai runs it (Family.genai: the plain and the
speculative pipeline, the properties under which exact tokens can be demanded, whether the equivalence runs honour
EOS) and which IRs' KV grows (Family.layout). Token ids are collected with a streamer.

The speed sweep (`run_speed`) runs afterwards at the device's default precision (no properties: the IRs'
rt_info runtime_options and the plugin defaults apply), plain greedy first, then speculative decoding for each num_assistant_tokens K
on one speculative pipeline. Per configuration: one untimed warm-up generate, then `rounds` passes over the prompts (EOS
ignored, so every configuration produces the same tokens; greedy decoding repeats the counts exactly, so counts are
those of the first pass and times are over all passes):
    tokens_per_second   median over passes of generated tokens / wall seconds of the pass's generate calls
                        (prefill included); tokens_per_second_min / _max give the spread
    ttft_ms             genai's time to first token, mean over all calls
    target_evaluations  target-model inferences: entries of raw_metrics.m_batch_sizes, one per generation step
                        (prefill included; main_model_metrics' for MTP); each step emits m_batch_sizes[i] tokens
    draft_evaluations   draft-model inferences, the same count on draft_model_metrics
    draft_proposed / draft_accepted   the family's GenaiRuntime.drafted (get_num_draft_tokens by default) /
                        extended_perf_metrics get_num_accepted_tokens
    peak_memory_bytes   peak RSS while that configuration runs with its pipeline loaded: VmHWM, reset through
                        /proc/self/clear_refs before it (else the process-lifetime ru_maxrss, said so); the plain
                        pipeline is freed before the MTP one loads, but the allocator may keep some of its pages
    kv_bytes_per_token  KV-cache growth per generated token, computed from the IRs' states (footprint.kv_cache) at
                        the KV precision the runtime uses; the draft's is zero for plain greedy
The best K is the fastest; it pays when it beats plain greedy by flows/measure.py's RULE (its slowest round faster
than plain greedy's fastest), the rule `tune` judges by too.

The alternating sweep (`run_sweep`, for `tune`) loads the plain and the speculative pipeline side by side and runs
them in rounds at the device's default precision: each round is one pass of plain generation, then one pass per K,
so that what slows the machine during a round slows every configuration in it. Round 1 grows the Ks: K = 1, 2, ...
while the round's speed still rises (the first K not faster than the best before it is the last one), up to max_k;
the later rounds time plain generation and those Ks again. Each configuration gets one untimed warm-up generate
before its first timed pass; counts are those of its first pass, as above. `run_alternatives` times several
directories' speculative pipelines (one draft in several weight formats) at one K the same way.
"""
from __future__ import annotations

import gc
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from irsurgeon.core.config import check_generation_config
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.families import registry
from irsurgeon.draft.protocol import num_draft_tokens
from irsurgeon.ir.footprint import kv_cache
from irsurgeon.ir.describe import show_ir
from irsurgeon.core.signals import check_interrupted, interrupted
from irsurgeon.flows.measure import FASTER, NOISE, RULE, Spread, judge
from irsurgeon.flows.prompts import Prompt, prompt_list, rendered
from irsurgeon.flows.verify import generation_configs

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")
MEASUREMENT_KEYS = ("label", "num_assistant_tokens", "prompts", "rounds", "generated_tokens", "seconds",
                    "tokens_per_second", "tokens_per_second_min", "tokens_per_second_max", "speedup", "ttft_ms",
                    "target_evaluations", "draft_evaluations", "draft_proposed",
                    "draft_accepted", "acceptance_rate", "peak_memory_bytes", "kv_bytes_per_token_target",
                    "kv_bytes_per_token_draft")
SPEED_KEYS = ("device", "equivalence_properties", "speed_properties", "device_defaults", "kv_precision",
              "kv_precision_source", "memory_method", "kv_method", "measurements", "best", "pays", "verdict")


@dataclass
class Run:
    prompt: int
    num_assistant_tokens: int
    identical: bool
    first_diff: int | None
    tokens: int
    accepted: int
    draft_tokens: int


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


def genai_module():
    try:  # here, not at module level: openvino-genai takes ~240 ms to import and is the optional `test` extra
        import openvino_genai
    except ImportError:
        raise IRSurgeonError("openvino-genai is not installed: pip install 'openvino-genai==2026.4.1.0' "
                             "'openvino-tokenizers==2026.4.1.0'") from None
    return openvino_genai


def _config(g, max_new_tokens: int, nat: int | None, ignore_eos: bool = True):
    c = g.GenerationConfig()
    c.max_new_tokens, c.do_sample, c.apply_chat_template, c.ignore_eos = max_new_tokens, False, False, ignore_eos
    if nat:
        c.num_assistant_tokens = nat
    return c


def runtime_of(target: Path):
    """(the directory's family, how genai runs it), once the files genai parses itself are known to be sane."""
    family = registry.for_directory(target)
    for path in generation_configs(target, family):  # verify checked them too; the directory may have changed since
        check_generation_config(path)
    return family, family.genai()


def _generate(g, pipe, prompt: str | list[str], config) -> tuple[list[int], object]:
    ids: list[int] = []

    class Collector(g.StreamerBase):
        def write(self, token):
            ids.extend([token] if isinstance(token, int) else [int(t) for t in token])
            return g.StreamingStatus.CANCEL if interrupted() else g.StreamingStatus.RUNNING

        def end(self):
            return None

    return ids, generate(pipe, prompt, config, streamer=Collector())


def generate(pipe, prompt, config, **kwargs):
    """pipe.generate, a failure inside openvino-genai (a RuntimeError from its C++) one error line naming it."""
    try:
        result = pipe.generate(prompt, generation_config=config, **kwargs)
    except RuntimeError as e:
        check_interrupted()  # a cancelled generation may end in genai's own error
        raise IRSurgeonError(f"openvino-genai failed while generating: {cause(e)}") from None
    check_interrupted()
    return result


def reached(until: float | None) -> bool:
    """`until` (a time.monotonic() moment) has passed; never when there is none. The runs below check it before
    each prompt or round after their first."""
    return until is not None and time.monotonic() >= until


def texts_of(g, target: Path, prompts: int | Sequence[Prompt]) -> list[str]:
    """The prompts as both pipelines get them (flows.prompts: a conversation through the chat template)."""
    return rendered(g, target, prompt_list(prompts), chat=False)[0]


def run_equivalence(target: str | Path, prompts: int | Sequence[str] = 3, nats: tuple[int, ...] = (1, 2, 3, 4),
                    max_new_tokens: int = 40, device: str = "CPU",
                    echo: Callable[[str], None] = print, until: float | None = None) -> Report:
    """Each prompt through plain greedy, then speculative decoding at each K of `nats`; no prompt after the first
    starts after `until` (time.monotonic()): the report then holds the prompts run, in order."""
    target = Path(target)
    g, (_, fam) = genai_module(), runtime_of(target)
    props = fam.equivalence_properties(target)
    report = Report(properties=props)
    echo(f"equivalence: loading the plain and the speculative pipeline on {device}")  # minutes for a large model
    plain = fam.pipeline(g, target, device, props, False)
    check_interrupted()
    mtp = fam.pipeline(g, target, device, props, True, max_assistant_tokens=max(nats))
    check_interrupted()
    keep_going = not fam.honours_eos
    for i, prompt in enumerate(texts_of(g, target, prompts)):
        if i and reached(until):
            break
        ref, _ = _generate(g, plain, fam.prompt(prompt), _config(g, max_new_tokens, None, keep_going))
        for nat in nats:
            ids, result = _generate(g, mtp, fam.prompt(prompt), _config(g, max_new_tokens, nat, keep_going))
            ext = result.extended_perf_metrics
            diff = None if ids == ref else next((j for j, (a, b) in enumerate(zip(ids, ref)) if a != b),
                                                min(len(ids), len(ref)))
            run = Run(i, nat, ids == ref, diff, len(ids), ext.get_num_accepted_tokens() if ext else 0,
                      fam.drafted(ext) if ext else 0)
            report.runs.append(run)
            verdict = "identical" if run.identical else f"DIFFERENT at token {diff}"
            # no speed here: these runs are at the equivalence settings and a few tokens; run_speed measures it
            echo(f"prompt {i} num_assistant_tokens {nat}: {verdict}"
                 f" ({run.tokens} tokens, accepted {run.accepted}/{run.draft_tokens} drafts)")
    return report


@dataclass
class Measurement:
    label: str
    num_assistant_tokens: int | None
    kv_bytes_per_token_target: int
    kv_bytes_per_token_draft: int
    prompts: int = 0
    generated_tokens: int = 0
    round_seconds: list[float] = field(default_factory=list)
    ttft_ms: float = 0.0
    target_evaluations: int = 0
    draft_evaluations: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    peak_memory_bytes: int = 0
    speedup: float | None = None
    calls: int = 0
    drafted: Callable = field(default=num_draft_tokens, repr=False)  # GenaiRuntime.drafted of the directory

    @property
    def rounds(self) -> int:
        return len(self.round_seconds)

    @property
    def seconds(self) -> float:
        return sum(self.round_seconds)

    @property
    def spread(self) -> Spread:
        """The rounds' rates: (tokens of one pass over the prompts) / (seconds of that pass)."""
        return Spread.of(self.generated_tokens / s for s in self.round_seconds if s > 0)

    @property
    def tokens_per_second(self) -> float:
        """Median over rounds (measure.Spread)."""
        return self.spread.median

    @property
    def tokens_per_second_min(self) -> float:
        return self.spread.low

    @property
    def tokens_per_second_max(self) -> float:
        return self.spread.high

    @property
    def acceptance_rate(self) -> float | None:
        return self.draft_accepted / self.draft_proposed if self.draft_proposed else None

    def add(self, result, seconds: float, first_round: bool) -> None:
        """One generate call: its time goes to the current round, its counts only from the first round."""
        pm, ext = result.perf_metrics, result.extended_perf_metrics
        if ext is not None and not pm.get_num_generated_tokens():  # openvino-genai 2026.4.1's Gemma 4 MTP
            pm = ext.main_model_metrics                               # LLMPipeline fills only the per-model metrics
        self.ttft_ms = (self.ttft_ms * self.calls + pm.get_ttft().mean) / (self.calls + 1)
        self.calls += 1
        self.round_seconds[-1] += seconds
        if not first_round:
            return
        self.prompts += 1
        self.generated_tokens += pm.get_num_generated_tokens()
        if ext is None:
            self.target_evaluations += len(pm.raw_metrics.m_batch_sizes)
            return
        self.target_evaluations += len(ext.main_model_metrics.raw_metrics.m_batch_sizes)
        self.draft_evaluations += len(ext.draft_model_metrics.raw_metrics.m_batch_sizes)
        self.draft_proposed += self.drafted(ext)
        self.draft_accepted += ext.get_num_accepted_tokens()

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in MEASUREMENT_KEYS}


@dataclass
class SpeedReport:
    device: str
    equivalence_properties: dict
    device_defaults: dict
    kv_precision: dict
    memory_method: str
    kv_method: str
    measurements: list[Measurement] = field(default_factory=list)
    speed_properties: dict = field(default_factory=dict)
    kv_precision_source: dict = field(default_factory=dict)  # part -> where kv_precision's value comes from
    target_weight_bytes: int = 0  # the target IR's weights file: a tiny pair is said to be one (verdict)

    @property
    def best(self) -> Measurement | None:
        mtp = [m for m in self.measurements if m.num_assistant_tokens]
        return max(mtp, key=lambda m: m.tokens_per_second) if mtp else None

    @property
    def plain(self) -> Measurement | None:
        return next((m for m in self.measurements if not m.num_assistant_tokens), None)

    @property
    def versus_plain(self) -> str | None:
        """measure.judge of the best K against plain greedy (None: either was not measured)."""
        best, plain = self.best, self.plain
        return None if best is None or plain is None else judge(best.spread, plain.spread)

    @property
    def pays(self) -> bool:
        return self.versus_plain == FASTER

    @property
    def verdict(self) -> str:
        best = self.best
        if best is None or best.speedup is None:
            return "no speculative configuration was measured"
        if self.pays:
            return (f"best num_assistant_tokens on this machine: {best.num_assistant_tokens} "
                    f"({best.speedup:.2f}x the tokens/s of plain greedy, beyond the rounds' spread)")
        plain = self.plain
        (p_low, p_high), (b_low, b_high) = plain.spread.judged, best.spread.judged
        ranges = f"plain {p_low:.0f}-{p_high:.0f} tok/s, K={best.num_assistant_tokens} {b_low:.0f}-{b_high:.0f}"
        if self.versus_plain == NOISE:
            said = (f"speculative decoding is not shown to pay here: the fastest num_assistant_tokens "
                    f"({best.num_assistant_tokens}) ran at {best.speedup:.2f}x the median tokens/s of plain greedy, "
                    f"within the rounds' noise ({ranges}; {RULE}); more rounds narrow it")
        else:
            said = (f"speculative decoding does not pay here: the fastest num_assistant_tokens "
                    f"({best.num_assistant_tokens}) runs at {best.speedup:.2f}x the tokens/s of plain greedy, slower "
                    f"beyond the rounds' spread ({ranges})")
        if 0 < self.target_weight_bytes < TINY_TARGET_BYTES:
            said += (f"; on a target this small ({self.target_weight_bytes / 2**20:.1f} MiB of weights) the draft "
                     f"costs about as much as the target, so this run shows that the pipeline works and its tokens "
                     f"match, not the speed a full-size model gets")
        return said

    def as_dict(self) -> dict:
        best = self.best
        values = {"measurements": [m.as_dict() for m in self.measurements], "verdict": self.verdict,
                  "best": {"num_assistant_tokens": best.num_assistant_tokens, "speedup": best.speedup}
                  if best else None, "pays": self.pays}
        return {k: values[k] if k in values else getattr(self, k) for k in SPEED_KEYS}


def weight_bytes(xml: Path) -> int:
    """The size of an IR's weights file (0: none there)."""
    try:
        return xml.with_suffix(".bin").stat().st_size
    except OSError:
        return 0


TINY_TARGET_BYTES = 64 << 20  # below this, a target's step costs about what a draft's does (the bundled pairs)


def reset_peak_memory() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where that is not possible."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_memory_bytes() -> int:
    """VmHWM from /proc, else the process-lifetime peak from getrusage."""
    if STATUS.is_file():
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def device_defaults(device: str) -> dict:
    """The precision properties the device uses when none are given (what the speed runs get)."""
    import openvino as ov  # ~120 ms, needed only by the speed runs

    core, out = ov.Core(), {}
    for key in ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION"):
        try:
            out[key] = core.get_property(device, key).get_type_name()
        except RuntimeError:
            out[key] = None
    return out


def kv_growth(target: Path, kv_default: str | None, files: tuple[str, str] | None = None) -> dict[str, dict]:
    """footprint.kv_cache of the target IR and the draft (default: the directory's family's) at the runtime's KV
    precision."""
    if files is None:
        layout = registry.for_directory(target).layout
        files = (layout.target_in(target), layout.draft_xml)
    return {part: kv_cache(f, show_ir(target / f), 1, kv_default) for part, f in zip(("target", "draft"), files)}


def _timed_pass(pipe, prompts: list, config, m: Measurement) -> float:
    """One round of `m`: every prompt once, each generate call timed; returns the round's tokens per second. The
    first round also counts (Measurement.add) and is preceded by an untimed warm-up: first-call compilation is not
    speed."""
    first = not m.round_seconds
    if first:
        generate(pipe, prompts[0], config)
    m.round_seconds.append(0.0)
    for prompt in prompts:
        start = time.perf_counter()
        result = generate(pipe, prompt, config)
        m.add(result, time.perf_counter() - start, first_round=first)
    return m.generated_tokens / m.round_seconds[-1] if m.round_seconds[-1] > 0 else 0.0


def _measure(pipe, prompts: list[str], config, rounds: int, m: Measurement,
             echo: Callable[[str], None]) -> Measurement:
    for r in range(rounds):
        rate = _timed_pass(pipe, prompts, config, m)
        echo(f"   {m.label}: round {r + 1}/{rounds}, {rate:.1f} tok/s")
    m.peak_memory_bytes = peak_memory_bytes()
    return m


def run_speed(target: str | Path, prompts: int | Sequence[str] = 3, sweep: tuple[int, ...] = (1, 2, 3, 4),
              max_new_tokens: int = 40, device: str = "CPU", rounds: int = 3,
              echo: Callable[[str], None] = print) -> SpeedReport:
    """Plain greedy, then speculative decoding at each K of `sweep`, at the device's default precision (see the module docstring)."""
    target, g = Path(target), genai_module()
    family, fam = runtime_of(target)
    texts, defaults = [fam.prompt(p) for p in texts_of(g, target, prompts)], device_defaults(device)
    kv = kv_growth(target, defaults["KV_CACHE_PRECISION"], (family.layout.target_in(target), family.layout.draft_xml))
    kv_target, kv_draft = kv["target"]["bytes_per_token"], kv["draft"]["bytes_per_token"]
    resettable = reset_peak_memory()
    report = SpeedReport(device, fam.equivalence_properties(target), defaults, {p: k["precision"] for p, k in kv.items()},
                         "peak RSS (VmHWM) during the configuration's runs, reset before each" if resettable else
                         "process-lifetime peak RSS (ru_maxrss): VmHWM cannot be reset here",
                         "computed from the IRs' KV states at the runtime's KV precision, batch 1",
                         kv_precision_source={p: k["precision_source"] for p, k in kv.items()},
                         target_weight_bytes=weight_bytes(target / family.layout.target_in(target)))
    gc.collect()
    echo(f"speed [1/{len(sweep) + 1}] plain greedy")
    plain = fam.pipeline(g, target, device, {}, False)
    check_interrupted()
    reset_peak_memory()
    report.measurements.append(_measure(plain, texts, _config(g, max_new_tokens, None), rounds,
                                        Measurement("plain", None, kv_target, 0, drafted=fam.drafted), echo))
    del plain
    gc.collect()
    echo("speed: loading the speculative pipeline")
    mtp = fam.pipeline(g, target, device, {}, True, max_assistant_tokens=max(sweep))
    check_interrupted()
    for j, nat in enumerate(sweep):
        echo(f"speed [{j + 2}/{len(sweep) + 1}] speculative, num_assistant_tokens {nat}")
        reset_peak_memory()
        report.measurements.append(_measure(mtp, texts, _config(g, max_new_tokens, nat), rounds,
                                            Measurement(f"draft K={nat}", nat, kv_target, kv_draft, drafted=fam.drafted),
                                            echo))
    base = report.measurements[0].tokens_per_second
    for m in report.measurements:
        m.speedup = m.tokens_per_second / base if base else None
    return report


@dataclass
class Sweep:
    """What run_sweep measured: plain generation first, then each K; and the K the loaded speculative pipeline's own
    generation config names (get_generation_config().num_assistant_tokens: what generate() without a config would
    use, None where it names none)."""
    measurements: list[Measurement]
    configured_k: int | None
    rounds_run: int = 0


def run_sweep(target: str | Path, prompts: int | Sequence[Prompt] = 6, max_new_tokens: int = 48, device: str = "CPU",
              rounds: int = 5, max_k: int = 8, echo: Callable[[str], None] = print,
              until: float | None = None) -> Sweep:
    """Plain generation and speculative decoding at K = 1, 2, ... in alternating rounds (the module docstring); no
    round starts after `until` (time.monotonic()), the first excepted."""
    target, g = Path(target), genai_module()
    _, fam = runtime_of(target)
    texts = [fam.prompt(p) for p in texts_of(g, target, prompts)]
    echo(f"speed: loading the plain and the speculative pipeline on {device}")
    plain_pipe = fam.pipeline(g, target, device, {}, False)
    check_interrupted()
    spec_pipe = fam.pipeline(g, target, device, {}, True, max_assistant_tokens=max_k)
    check_interrupted()
    plain = Measurement("plain", None, 0, 0, drafted=fam.drafted)
    ks: list[Measurement] = []
    for r in range(rounds):
        if r and reached(until):
            break
        rates = [_timed_pass(plain_pipe, texts, _config(g, max_new_tokens, None), plain)]
        for m in ks:
            rates.append(_timed_pass(spec_pipe, texts, _config(g, max_new_tokens, m.num_assistant_tokens), m))
        while r == 0 and len(ks) < max_k and (len(ks) < 2 or rates[-1] > max(rates[1:-1])):
            ks.append(Measurement(f"draft K={len(ks) + 1}", len(ks) + 1, 0, 0, drafted=fam.drafted))
            rates.append(_timed_pass(spec_pipe, texts, _config(g, max_new_tokens, len(ks)), ks[-1]))
        echo(f"   round {r + 1}/{rounds}: " + ", ".join(f"{m.label} {rate:.1f}" for m, rate in
                                                       zip([plain, *ks], rates)) + " tok/s")
    base = plain.tokens_per_second
    for m in (plain, *ks):
        m.speedup = m.tokens_per_second / base if base else None
    return Sweep([plain, *ks], configured_k(spec_pipe), plain.rounds)


def configured_k(pipe) -> int | None:
    """num_assistant_tokens of a pipeline's own generation config (a VLM wrapper's pipeline's); None: unset."""
    config = getattr(pipe, "pipe", pipe).get_generation_config()
    return config.num_assistant_tokens or None


def run_alternatives(targets: dict[str, Path], k: int, prompts: int | Sequence[Prompt] = 6, max_new_tokens: int = 48,
                     device: str = "CPU", rounds: int = 5, echo: Callable[[str], None] = print,
                     until: float | None = None) -> list[Measurement]:
    """Speculative decoding at K = k on each directory of `targets` (label -> directory: the same target, other
    drafts), every pipeline loaded side by side, in alternating rounds as run_sweep runs them (and, as there, no
    round after `until` but the first)."""
    g = genai_module()
    _, fam = runtime_of(next(iter(targets.values())))
    texts = [fam.prompt(p) for p in texts_of(g, next(iter(targets.values())), prompts)]
    echo(f"speed: loading {len(targets)} speculative pipelines on {device}")
    pipes = {}
    for label, target in targets.items():
        pipes[label] = runtime_of(Path(target))[1].pipeline(g, Path(target), device, {}, True, max_assistant_tokens=k)
        check_interrupted()
    found = {label: Measurement(label, k, 0, 0, drafted=fam.drafted) for label in targets}
    for r in range(rounds):
        if r and reached(until):
            break
        rates = [_timed_pass(pipes[label], texts, _config(g, max_new_tokens, k), m) for label, m in found.items()]
        echo(f"   round {r + 1}/{rounds}: " + ", ".join(f"{label} {rate:.1f}" for label, rate in zip(found, rates))
             + " tok/s")
    return list(found.values())
