"""What `irsurgeon verify [--genai]` runs, and its Python call (verify_genai): the family's contract checks
(flows.verify), then, when they all hold, openvino-genai: equivalence (speculative tokens == plain greedy tokens, at
the contract's f32 properties) for every K of the sweep and the share of drafts accepted, which must reach
min_acceptance (a draft that is not the target's, built wrong or untrained stays token-identical, since the target
checks every draft, but is almost never accepted); then, when both hold, the speed sweep at the device's default
precision (flows.genai). Imports nothing heavy until it runs: the CLI reads MIN_ACCEPTANCE as it starts.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from irsurgeon.core.text import silent
from irsurgeon.draft.protocol import Check

# Below this share of accepted drafts the draft cannot pay for itself at any K (each rejected draft costs a draft step)
# and is almost surely not the target's: random drafts are accepted ~0% of the time on a 256-token vocabulary
# (0/75 for a foreign Gemma 4 assistant of the same geometry), the bundled pairs 25-60%.
MIN_ACCEPTANCE = 0.05


@dataclass
class Verification:
    """What verify found, field for field the `result` of `irsurgeon verify --genai --json` (docs/cli.md):
    target; ready (every check held, and genai's equivalence and acceptance); failed (each failed step with what
    failed in it); checks (flows.verify's Check rows); genai (the equivalence runs: properties, identical,
    acceptance_rate, runs, min_acceptance; None when the checks failed first); speed (the speed sweep, None when
    it was not measured)."""
    target: str
    ready: bool = False
    failed: list[str] = field(default_factory=list)
    checks: list = field(default_factory=list)
    genai: dict | None = None
    speed: dict | None = None

    def as_dict(self) -> dict:
        """The document's `result`, as the CLI writes it."""
        return {"target": self.target, "ready": self.ready, "failed": list(self.failed),
                "checks": [c.__dict__ for c in self.checks], "genai": self.genai, "speed": self.speed}


@dataclass
class GenaiRun:
    """How the genai part runs: the prompts (N built-in ones, or texts), the K values, tokens per prompt, the
    device, the timed passes, the acceptance floor (0: none)."""
    prompts: int | Sequence[str] = 3
    sweep: tuple[int, ...] = (1, 2, 3, 4)
    max_new_tokens: int = 40
    device: str = "CPU"
    rounds: int = 3
    min_acceptance: float = MIN_ACCEPTANCE


@dataclass
class Wording:
    """How a low acceptance is said: the floor's name, and advice after "untrained" (the CLI names its options)."""
    floor: str = "the minimum acceptance"
    advice: str = (" (a random draft is accepted about never by construction: min_acceptance=0 checks its "
                   "plumbing; a trained draft is accepted)")


def verify_genai(target: str | Path, checkpoint: str | Path | None = None, *, prompts: int | Sequence[str] = 3,
                 sweep: Sequence[int] = (1, 2, 3, 4), max_new_tokens: int = 40, device: str = "CPU", rounds: int = 3,
                 min_acceptance: float = MIN_ACCEPTANCE, hub=None,
                 echo: Callable[[str], None] = silent) -> Verification:
    """`irsurgeon verify TARGET --genai` in Python: the contract checks (with `checkpoint`, also that TARGET was
    exported from it; `hub`: weights.hub.HubOptions for a repo id), then openvino-genai's equivalence, acceptance and
    speed, as the command runs them (openvino-genai must be installed). A directory that is not ready is a result
    with ready False and what failed, not an error; a path that is not a directory raises IRSurgeonError. `echo`
    takes the progress lines (none by default)."""
    results: dict = {}
    run(target, checkpoint, hub=hub, echo=echo, genai=GenaiRun(prompts, tuple(sweep), max_new_tokens, device, rounds,
                                                                 min_acceptance), into=results)
    return Verification(results["target"], results["ready"], results["failed"],
                        [Check(**c) for c in results["checks"]], results.get("genai"), results.get("speed"))


def run(target: str | Path, checkpoint=None, *, hub=None, echo: Callable[[str], None] = silent,
        genai: GenaiRun | None = None, into: dict, wording: Wording = Wording(),
        held: Callable[[], object] = nullcontext) -> list[str]:
    """verify, filling `into` as it goes (the CLI reports it before it starts: a run that ends early still says how
    far it got): target, ready, failed, checks (the Check rows) and, when genai runs, genai and speed. Returns the
    failed steps. `held`: the context genai's C++ calls run in (the CLI's Ctrl-C watcher)."""
    from irsurgeon.flows.verify import verify_directory  # on use: it imports openvino (~0.2 s of every command's start)

    into.update({"target": str(target), "ready": False, "failed": [], "checks": []})
    checks = verify_directory(target, checkpoint, hub=hub, echo=echo)
    for c in checks:
        echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    into["checks"] = [c.__dict__ for c in checks]
    failed = [f"{c.name} ({c.detail})" for c in checks if not c.ok]
    if not failed and genai is not None:
        with held():
            failed += genai_steps(Path(target), genai, into, echo, wording)
    into["ready"], into["failed"] = not failed, failed
    return failed


def genai_steps(target: Path, how: GenaiRun, into: dict, echo: Callable[[str], None], wording: Wording) -> list[str]:
    """Equivalence and acceptance, then (when both hold) the speed sweep; fills `into`, returns the failed steps,
    each named with what failed in it."""
    from irsurgeon.flows.genai import run_equivalence, run_speed  # on use: openvino-genai

    report = run_equivalence(target, how.prompts, how.sweep, how.max_new_tokens, how.device, echo=echo)
    into["genai"] = report.as_dict()
    same = sum(r.identical for r in report.runs)
    echo(f"equivalence at {settings(report.properties)}: {same}/{len(report.runs)} speculative runs token-identical to "
         f"plain greedy; draft acceptance {report.acceptance:.1%}")
    if not report.identical:
        into["speed"] = None
        echo("speed not measured: the speculative output differs from plain greedy")
        return [f"genai equivalence ({len(report.runs) - same}/{len(report.runs)} speculative runs differ from "
                f"plain greedy)"]
    accepted, drafted = sum(r.accepted for r in report.runs), sum(r.draft_tokens for r in report.runs)
    into["genai"]["min_acceptance"] = how.min_acceptance
    if how.min_acceptance and (not drafted or accepted / drafted < how.min_acceptance):
        into["speed"] = None
        echo(f"warning: the target accepted {accepted}/{drafted} drafted tokens ({report.acceptance:.1%}), below "
             f"{wording.floor} {how.min_acceptance:.0%}: the draft is not this target's, built wrong, or "
             f"untrained{wording.advice}; tokens stay identical because the target checks every draft; speed not "
             f"measured")
        return [f"draft acceptance ({accepted}/{drafted} drafted tokens accepted, below {wording.floor} "
                f"{how.min_acceptance:.0%})"]
    tuned = tuned_k(target)
    into["genai"]["tuned"] = tuned
    sweep = tuple(sorted({*how.sweep, tuned["num_assistant_tokens"]})) if tuned else how.sweep
    speed = run_speed(target, how.prompts, sweep, how.max_new_tokens, how.device, how.rounds, echo=echo)
    into["speed"] = speed.as_dict()
    for line in speed_table(into["speed"]):
        echo(line)
    if tuned:
        here = next(m for m in speed.measurements if m.num_assistant_tokens == tuned["num_assistant_tokens"])
        echo(f"tuned {tuned['date']}: num_assistant_tokens {tuned['num_assistant_tokens']} ran at "
             f"{tuned['speedup']}x plain generation there (irsurgeon show {target} has its record); here it ran at "
             f"{here.speedup:.2f}x")
    return []


def tuned_k(target: Path) -> dict | None:
    """The K `irsurgeon tune` chose for this directory and the speed-up it measured (the draft's tuning record),
    None when it chose none or the draft was never tuned."""
    from irsurgeon.families import registry
    from irsurgeon.flows.show import tuning

    family = registry.for_directory(target)
    record = tuning(target / family.layout.draft_xml)
    k = (record or {}).get("k")
    if not isinstance(k, dict) or not isinstance(k.get("chosen"), int) or not 1 <= k["chosen"] <= 16:
        return None
    return {"num_assistant_tokens": k["chosen"], "speedup": k.get("speedup"), "date": str(record.get("date"))[:20]}


def settings(values: dict) -> str:
    """Properties as the rest of the output spells them: KEY=value pairs (a value None: the device has none)."""
    return " ".join(f"{k}={'-' if v is None else v}" for k, v in values.items()) or "(none)"


def _rate(m: dict) -> str:
    return "-" if m["acceptance_rate"] is None else f"{m['acceptance_rate']:.1%}"


COLUMNS = (  # header, second header line, width, cell
    ("config", "", -9, lambda m: m["label"]),
    ("tok/s", "median", 8, lambda m: f"{m['tokens_per_second']:.1f}"),
    ("min-max", "", 13, lambda m: f"{m['tokens_per_second_min']:.0f}-{m['tokens_per_second_max']:.0f}"),
    ("speed-up", "", 8, lambda m: f"{m['speedup']:.2f}x" if m["speedup"] is not None else "-"),
    ("TTFT ms", "", 8, lambda m: f"{m['ttft_ms']:.1f}"),
    ("target", "evals", 7, lambda m: str(m["target_evaluations"])),
    ("draft", "evals", 6, lambda m: str(m["draft_evaluations"] or "-")),
    ("accepted", "/proposed", 13,
     lambda m: f"{m['draft_accepted']}/{m['draft_proposed']}" if m["num_assistant_tokens"] else "-"),
    ("accept", "", 7, _rate),
    ("peak MiB", "", 9, lambda m: f"{m['peak_memory_bytes'] / 2**20:.1f}"),
    ("KV B/token", "target+draft", 14, lambda m: f"{m['kv_bytes_per_token_target']}+{m['kv_bytes_per_token_draft']}"),
)


def _row(cells) -> str:
    return " ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, (_, _, w, _) in zip(cells, COLUMNS))


RT_INFO = "rt_info runtime_options"  # footprint.kv_precision's name for a precision an IR's rt_info sets


def kv_settings(speed: dict) -> str:
    """The KV cache the speed runs used, and where that came from, in one statement: an IR's rt_info runtime_options
    (which the CPU plugin applies over the device's own default, named then as what an IR without one gets), or
    the device default."""
    values, sources = speed["kv_precision"], speed["kv_precision_source"]
    kinds = set(sources.values())
    if kinds == {RT_INFO}:
        said = f"{settings(values)}, as the IRs' {RT_INFO} set it"
    elif len(kinds) == 1:
        said = f"{settings(values)}, the {next(iter(kinds))}"
    else:
        said = " ".join(f"{p}={v} ({sources.get(p, '?')})" for p, v in values.items())
    device_kv = speed["device_defaults"].get("KV_CACHE_PRECISION")
    if RT_INFO in kinds and device_kv:
        said += f" (the device's own default, KV_CACHE_PRECISION={device_kv}, applies to an IR that sets none)"
    return said


def speed_table(speed: dict) -> list[str]:
    """The speed sweep as one table, with the precision it ran at and the verdict."""
    others = {k: v for k, v in speed["device_defaults"].items() if k != "KV_CACHE_PRECISION"}  # said with the KV
    lines = [f"speed on {speed['device']} at the device's default {settings(others) if others else 'precision'}; "
             f"KV cache {kv_settings(speed)}",
             f"equivalence above ran at {settings(speed['equivalence_properties'])}",
             _row(c[0] for c in COLUMNS), _row(c[1] for c in COLUMNS)]
    lines += [_row(c[3](m) for c in COLUMNS) for m in speed["measurements"]]
    rounds = speed["measurements"][0]["rounds"] if speed["measurements"] else 0
    lines.append(f"tok/s: median of {rounds} timed pass(es) over the prompts; peak memory: {speed['memory_method']}; "
                 f"KV growth: {speed['kv_method']}")
    lines.append(speed["verdict"])
    return lines
