"""`irsurgeon tune TARGET_DIR`: settle what the draft's checkpoint leaves open by the drafts openvino-genai accepts,
then num_assistant_tokens (K) by speed, and write the winners into the directory.

    target      a patched directory that passes its family's verify; the checkpoint is --checkpoint, else the one
                the draft's provenance names (a repo id is fetched as patch fetches it)
    readings    Family.readings: what the checkpoint leaves open, each a choice of config edits; every combination is
                a candidate. A candidate built as the present draft was (same checkpoint, same edits) is measured in
                the directory itself; each other is built by `patch --force` (the present draft's weight format and
                KV cache precision) into a copy of the directory under the system's temporary folder, whose large
                files are links to the user's (patch replaces entries there, never writes through them)
    acceptance  flows.genai.run_equivalence on each candidate: the same prompts, greedy, f32, K = READING_KS, EOS
                ignored: deterministic counts. A candidate whose tokens differ from plain greedy is never chosen. The
                default (the first: what patch builds) is replaced only by one that accepts a strictly larger share
                of its drafts (accepted / drafted); ties keep the default
    prompts     flows.prompts: the bundled set (or the user's), each text through the target's chat template
                (Settings.chat), rendered once so that every candidate gets the same text
    K           flows.genai.run_sweep on the winner: plain and speculative generation in alternating rounds at the
                device's default precision, K = 1, 2, ... while the speed rises; flows.measure.choose_k chooses the
                smallest K within noise of the fastest that beats plain generation beyond the rounds' spread, only
                when the fastest does (measure.K_RULE)
    formats     Settings.formats (None: WORTH_TRYING) other than the present draft's: the winning reading built in
                each into a copy, its tokens checked against plain greedy at the chosen K (else the fastest), then
                every format's speculative pipeline side by side in alternating rounds at that K
                (flows.genai.run_alternatives); another format replaces the present draft's only when it beats every
                other beyond the rounds' spread (measure.choose_fastest), and K is then swept again on it
    budget      Settings.budget, checked between steps (Clock): the default reading and the present draft are always
                counted; what is left is not tried, and said (TuneReport.not_tried)
    written     (not with dry_run) ONE commit of the directory (commit.transaction, under its lock): a winner
                (reading or format) other than the present draft is re-patched (Options.tuned), else the present
                draft's .xml gets the record; the record (rt_info irsurgeon/tuning: when, where, what was measured
                and chosen) goes into the draft's provenance, and a chosen K into the target's
                generation_config.json as num_assistant_tokens, every other key kept (flows.patch.stage_k). No K
                chosen: that file is left as it is

Every genai run is made in a process of its own (flows.isolated): openvino-genai 2026.4.1 now and then aborts a
process that has built some tens of pipelines, and such an end then costs one measurement, taken again.

Whether the family's speculative pipeline takes K from that file is measured, not assumed: the sweep's copy of the
directory holds PROBE_K there, and the loaded pipeline's get_generation_config() says whether it read it
(openvino-genai 2026.4.1: the Gemma 4 and DFlash pipelines do; the EAGLE-3 and Qwen3.5 MTP ones do not, and run
generate() without a config at their own default). Every copy is removed when the run ends, however it ends.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Callable, Sequence

from irsurgeon.commit.transaction import DirectoryTransaction
from irsurgeon.core import rtinfo
from irsurgeon.core.config import check_generation_config
from irsurgeon.core.errors import ConfigError, Interrupted, IRError, IRSurgeonError, with_hint
from irsurgeon.core.text import a, silent
from irsurgeon.draft.protocol import Family, Match, Options, Tuned
from irsurgeon.families import registry
from irsurgeon.flows import measure
from irsurgeon.flows import isolated
from irsurgeon.flows.genai import Measurement, genai_module, reached
from irsurgeon.flows.prompts import PROMPTS, Prompt, prompt_list, rendered
from irsurgeon.flows.patch import (checkpoint_config, draft_format, patch, recorded, recorded_edits, recorded_kv,
                                   refuse_unwritable, stage_k, with_k)
from irsurgeon.flows.verify import verify_directory
from irsurgeon.ir import files
from irsurgeon.ir.export import GENERATION_CONFIG, directory_problem
from irsurgeon.weights.hub import HubOptions

Echo = Callable[[str], None]
READING_KS = (1, 2, 3, 4)  # the drafts per step a reading's acceptance is counted at (verify --genai's sweep)
ZERO_RETRIES = 2           # fresh pipelines for a count of no draft accepted (count)
DEFAULT_SHARE = 0.5  # of the budget: the default reading's count stops adding prompts past it (the rest use as many)
WORTH_TRYING = ("f16", "int8", "int4")  # the formats tried by default: the CPU plugin runs each its own way
PROBE_K = 3                # written into the sweep's copy: read back, it says whether genai takes K from the file


NONE_ACCEPTED = ("no reading's draft had a draft accepted: the draft may be untrained or made for another target "
                 "(irsurgeon verify TARGET --genai says more)")
NONE_ACCEPTED_CHAT = ("no reading's draft had a draft accepted with the prompts through the target's chat template "
                      "(a template that ends every prompt in the same tokens can leave a draft nothing to predict); "
                      "irsurgeon tune TARGET --no-chat-template gives them as text")


@dataclass
class Settings:
    """How the candidates and the Ks are run."""
    prompts: int | Sequence[Prompt] = len(PROMPTS)  # flows.prompts: the bundled set, or the user's
    max_new_tokens: int = 48
    rounds: int = 5
    max_k: int = 8
    device: str = "CPU"
    formats: tuple[str, ...] | None = None  # weight formats to try besides the present draft's (None: WORTH_TRYING;
                                            # empty: the present format is kept)
    budget: float | None = None    # seconds for the whole run: checked between steps (Clock)
    chat: bool = True              # each text prompt as a user message through the target's chat template


@dataclass
class Clock:
    """The run's budget: spent once `seconds` have passed since it started (None: never). Checked between steps
    (a candidate's count, a round of timing), so a run ends at most one step after its budget."""
    seconds: float | None
    start: float = field(default_factory=time.monotonic)

    @property
    def deadline(self) -> float | None:
        return self.share(1.0)

    def spent(self) -> bool:
        return self.past(1.0)

    def past(self, part: float) -> bool:
        """`part` of the budget has passed (never without a budget)."""
        return reached(self.share(part))

    def share(self, part: float) -> float | None:
        """The moment `part` of the budget will have passed (None: no budget)."""
        return None if self.seconds is None else self.start + part * self.seconds


@dataclass
class Candidate:
    """One combination of the readings' alternatives, and what genai counted on it."""
    label: str
    edits: dict
    present: bool = False  # the present draft is built so: measured in the directory itself
    accepted: int = 0
    drafted: int = 0
    identical: bool | None = None
    chosen: bool = False
    per_prompt: list[tuple[int, int]] = field(default_factory=list)  # (accepted, drafted) of each prompt, all Ks

    @property
    def share(self) -> Fraction | None:
        return Fraction(self.accepted, self.drafted) if self.drafted else None

    def ahead_on(self, other: Candidate) -> tuple[int, int]:
        """(prompts on which this candidate accepts a larger share of its drafts than `other`, prompts both
        counted): how the totals' lead is spread over the prompts, the noise a verdict on a few prompts has."""
        pairs = [(a, b) for a, b in zip(self.per_prompt, other.per_prompt) if a[1] and b[1]]
        return sum(Fraction(*a) > Fraction(*b) for a, b in pairs), len(pairs)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["acceptance_rate"] = float(self.share) if self.share is not None else None
        return out


@dataclass
class TuneReport:
    target: Path
    family: str
    checkpoint: str
    dry_run: bool
    candidates: list[Candidate] = field(default_factory=list)
    reading: str = ""                 # why the chosen candidate is chosen, one line
    measurements: list[Measurement] = field(default_factory=list)
    k: measure.KChoice | None = None
    genai_reads_k: bool | None = None  # the family's speculative pipeline takes K from generation_config.json
    present_format: str = ""
    formats: list[FormatRow] = field(default_factory=list)
    format_why: str = ""
    written: list[str] = field(default_factory=list)
    chat_template: bool = False  # the prompts went through the target's chat template (flows.prompts.rendered)
    not_tried: list[str] = field(default_factory=list)  # what the budget left out, each in a few words
    measured: tuple | None = None  # draft_identity of the present draft when the run began (None: not checked)

    @property
    def chosen_format(self) -> str:
        return next((f.format for f in self.formats if f.chosen), self.present_format)

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.chosen), None)

    def timed(self) -> Measurement | None:
        """The chosen candidate's speed: the sweep's row at the chosen K, else its fastest K (None: not swept)."""
        ks = [m for m in self.measurements if m.num_assistant_tokens]
        chosen = [m for m in ks if self.k is not None and m.num_assistant_tokens == self.k.k]
        return (chosen or sorted(ks, key=lambda m: -m.tokens_per_second) or [None])[0]

    def candidate_rows(self) -> list[dict]:
        """Each reading as --json gives it: its counts, and for the chosen one the speed it was swept at (the
        others are judged by their counts alone, never timed: tokens_per_s and speedup null)."""
        timed, rows = self.timed(), []
        for c in self.candidates:
            row = c.as_dict()
            swept = timed if c.chosen else None
            row.update(num_assistant_tokens=swept.num_assistant_tokens if swept else None,
                       tokens_per_s=swept.tokens_per_second if swept else None,
                       speedup=swept.speedup if swept else None)
            rows.append(row)
        return rows

    def as_dict(self) -> dict:
        plain = self.measurements[0].spread if self.measurements else None
        return {"target": str(self.target), "family": self.family, "checkpoint": self.checkpoint,
                "dry_run": self.dry_run, "candidates": self.candidate_rows(),
                "reading": {"chosen": self.chosen.label if self.chosen else None, "why": self.reading},
                "k": {"rule": measure.K_RULE, "chosen": self.k.k if self.k else None,
                      "why": self.k.why if self.k else "", "genai_reads_generation_config": self.genai_reads_k,
                      "measurements": [k_row(m, plain) for m in self.measurements]},
                "formats": [f.as_dict() for f in self.formats],
                "format": {"present": self.present_format, "chosen": self.chosen_format,
                           "why": self.format_why or "not tried"},
                "chat_template": self.chat_template, "not_tried": self.not_tried, "written": self.written}


@dataclass
class FormatRow:
    """One weight format of the winning reading: its tokens against plain greedy and its speed at one K."""
    format: str
    identical: bool = True
    measurement: Measurement | None = None
    chosen: bool = False

    def as_dict(self) -> dict:
        m = self.measurement
        return {"format": self.format, "identical": self.identical, "chosen": self.chosen,
                "num_assistant_tokens": m.num_assistant_tokens if m else None,
                "tokens_per_second": m.tokens_per_second if m else None,
                "tokens_per_second_min": m.tokens_per_second_min if m else None,
                "tokens_per_second_max": m.tokens_per_second_max if m else None,
                "draft_accepted": m.draft_accepted if m else None, "draft_proposed": m.draft_proposed if m else None}


def k_row(m: Measurement, plain: measure.Spread | None) -> dict:
    """One configuration of the sweep as the JSON document gives it."""
    return {"label": m.label, "num_assistant_tokens": m.num_assistant_tokens, "rounds": m.rounds,
            "tokens_per_second": m.tokens_per_second, "tokens_per_second_min": m.tokens_per_second_min,
            "tokens_per_second_max": m.tokens_per_second_max, "speedup": m.speedup,
            "draft_accepted": m.draft_accepted, "draft_proposed": m.draft_proposed,
            "versus_plain": measure.judge(m.spread, plain) if plain is not None and m.num_assistant_tokens else None}


def tune(target_dir: str | Path, checkpoint: str | None = None, *, settings: Settings = Settings(),
         hub: HubOptions | None = None, dry_run: bool = False, wait: bool = False, echo: Echo = silent) -> TuneReport:
    """The whole run (the module docstring); returns what was measured, chosen and written."""
    clock, target = Clock(settings.budget), Path(target_dir)
    family = patched_family(target)
    if not dry_run:
        refuse_unwritable(target, False)  # before the measurements, not at the commit after them
    source = checkpoint or recorded_source(target, family)
    report = TuneReport(target, family.key, str(source), dry_run, measured=draft_identity(target, family))
    report.candidates = candidates(family, target, source, hub, echo)
    report.present_format = draft_format(target / family.layout.draft_xml) or "auto"
    texts, report.chat_template = rendered(genai_module(), target, prompt_list(settings.prompts), settings.chat)
    run = replace(settings, prompts=texts, chat=False)  # rendered once: every candidate gets the same text
    with tempfile.TemporaryDirectory(prefix="irsurgeon-tune-") as tmp:
        winner_dir = judge_readings(report, family, target, Path(tmp), run, hub, clock, echo)
        if not any(c.accepted for c in report.candidates) and any(c.drafted for c in report.candidates):
            echo(NONE_ACCEPTED_CHAT if report.chat_template else NONE_ACCEPTED)
        where = winner_dir or Path(tmp) / "k"
        if clock.spent():
            report.not_tried.append("the K sweep")
        else:
            measure_k(report, family, target, where, winner_dir is None, run, clock, echo)
        formats = WORTH_TRYING if settings.formats is None else settings.formats
        run = replace(run, formats=tuple(f for f in dict.fromkeys(formats) if f != report.present_format))
        if run.formats and (clock.spent() or not report.measurements):
            report.not_tried.append(f"the formats {', '.join(run.formats)}")
        elif run.formats:
            other = judge_formats(report, family, target, where, Path(tmp), run, hub, clock, echo)
            if other is not None:
                measure_k(report, family, target, other, False, run, clock, echo)
        for what in report.not_tried:
            echo(f"not tried within the budget of {settings.budget:g} s: {what}")
        if not dry_run:
            persist(report, family, target, run, hub, wait, echo)
    return report


def patched_family(target: Path) -> Family:
    """The directory's family, refused in one line unless its draft is there and passes verify."""
    if (problem := directory_problem(target)) is not None:
        raise IRError(problem)
    family = registry.for_directory(target)
    if family.recognise(target) != Match.DRAFT:
        raise IRSurgeonError(f"{target}: holds no draft to tune (irsurgeon patch {target} --checkpoint CKPT "
                             f"gives it one)")
    failed = next((c for c in verify_directory(target, family=family) if not c.ok), None)
    if failed is not None:
        raise IRSurgeonError(f"{target}: does not pass verify ({failed.name}: {failed.detail}); tune measures a "
                             f"directory that does")
    return family


def recorded_source(target: Path, family: Family) -> str:
    """The checkpoint the draft's provenance names (rt_info irsurgeon/source)."""
    xml = target / family.layout.draft_xml
    source = recorded(xml, rtinfo.PROVENANCE, "source")
    if not source:
        raise with_hint(IRSurgeonError(f"{xml}: its provenance names no checkpoint"), "--checkpoint",
                        "name it with --checkpoint CKPT")
    return str(source)


def candidates(family: Family, target: Path, source: str, hub: HubOptions | None, echo: Echo) -> list[Candidate]:
    """Every combination of what the checkpoint leaves open (Family.readings), the default first; one candidate,
    the draft as built, when nothing is open."""
    _, where, config, _, held, owner = checkpoint_config(source, hub, echo)  # as patch reads it
    if owner is not family:
        raise ConfigError(f"{source}: is {a(owner.title)} checkpoint; the draft of {target} is {a(family.title)}")
    family.recipe().parse_config(config, str(where))  # refused here as patch would refuse it
    readings = family.readings(config, held, family.inspect(target))
    for r in readings:
        echo(f"open: {r.why} ({' or '.join(label for label, _ in r.alternatives)})")
    if not readings:
        echo(f"{source}: leaves nothing open for this target")
    xml = target / family.layout.draft_xml
    present_source = recorded(xml, rtinfo.PROVENANCE, "source")
    present = recorded_edits(xml) if present_source == str(source) else None
    out = []
    for combo in itertools.product(*(r.alternatives for r in readings)):
        edits = {k: v for _, e in combo for k, v in e.items()}
        out.append(Candidate(", ".join(label for label, _ in combo) or "as built", edits, present=edits == present))
    return out


def judge_readings(report: TuneReport, family: Family, target: Path, tmp: Path, settings: Settings,
                   hub: HubOptions | None, clock: Clock, echo: Echo) -> Path | None:
    """Build and count every candidate, choose one (choose_reading); returns the directory holding the winner's
    draft when that is not the present one (a copy in tmp), else None."""
    options = rebuild(family, target, draft_format(target / family.layout.draft_xml) or "auto", hub)
    dirs = {}
    for i, c in enumerate(report.candidates):
        if i and not c.present and clock.spent():  # the default and the present draft are always counted
            report.not_tried.append(f"the reading {c.label}")
            continue
        where = target if c.present else shadow(target, family, tmp / f"candidate-{i}")
        if not c.present:
            echo(f"reading [{i + 1}/{len(report.candidates)}] {c.label}: building it in {where}")
            patch(where, report.checkpoint, options=replace(options, config_edits=c.edits or None), echo=silent)
        count(c, where, settings, echo, until=clock.share(DEFAULT_SHARE) if i == 0 else None)
        if i == 0 and clock.past(DEFAULT_SHARE) and len(c.per_prompt) < len(settings.prompts):
            # the budget cut the default's count short: every other step measures the prompts it counted
            left = len(settings.prompts)
            settings.prompts = list(settings.prompts[:len(c.per_prompt)])
            report.not_tried.append(f"prompts {len(c.per_prompt) + 1}-{left} (the default reading's count reached "
                                    f"{DEFAULT_SHARE:.0%} of the budget)")
        echo(f"reading [{i + 1}/{len(report.candidates)}] {c.label}: accepted {c.accepted}/{c.drafted} drafts"
             + ("" if c.identical else "; DIFFERS from plain greedy"))
        dirs[i] = where
    index, report.reading = choose_reading(report.candidates)
    report.candidates[index].chosen = True
    for i, where in dirs.items():
        if i != index and where != target:
            shutil.rmtree(where)  # a copy's draft no longer needed: its space back before the sweep
    return None if report.candidates[index].present else dirs[index]


def count(c: Candidate, where: Path, settings: Settings, echo: Echo, until: float | None = None) -> None:
    """The candidate's drafts accepted and drafted, and whether its tokens are plain greedy's (run_equivalence); a
    count of no draft accepted is taken again in fresh pipelines, up to ZERO_RETRIES times: openvino.genai issue 4425
    (2026.3.1, EAGLE-3 on CPU) reports freshly built pipelines that now and then accept none, tokens unchanged."""
    for attempt in range(ZERO_RETRIES + 1):
        run = run_equivalence(where, settings.prompts, READING_KS, settings.max_new_tokens, settings.device,
                              echo=silent, until=until)
        c.accepted, c.drafted = sum(r.accepted for r in run.runs), sum(r.draft_tokens for r in run.runs)
        c.per_prompt = [(sum(r.accepted for r in run.runs if r.prompt == i),
                         sum(r.draft_tokens for r in run.runs if r.prompt == i))
                        for i in sorted({r.prompt for r in run.runs})]
        c.identical = run.identical
        if c.accepted or not c.drafted or attempt == ZERO_RETRIES:
            return
        echo(f"   {c.label}: no draft accepted; counted again in fresh pipelines (openvino.genai issue 4425)")


def run_equivalence(*args, **kwargs):
    """flows.genai.run_equivalence in a process of its own (flows.isolated: genai's occasional abort costs one
    count, taken again)."""
    return isolated.call("run_equivalence", *args, **kwargs)


def run_sweep(*args, **kwargs):
    """flows.genai.run_sweep in a process of its own (flows.isolated)."""
    return isolated.call("run_sweep", *args, **kwargs)


def run_alternatives(*args, **kwargs):
    """flows.genai.run_alternatives in a process of its own (flows.isolated)."""
    return isolated.call("run_alternatives", *args, **kwargs)


def rebuild(family: Family, target: Path, weight_format: str, hub: HubOptions | None, **more) -> Options:
    """The Options of a forced patch that rebuilds the present draft of `target` in `weight_format`, keeping the KV
    cache precision it records (families that take one)."""
    xml = target / family.layout.draft_xml
    return Options(weight_format=weight_format, force=True, hub=hub, **more,
                   kv_cache_precision=recorded_kv(xml) if "kv_cache_precision" in family.patch_options else None)


def choose_reading(cands: list[Candidate]) -> tuple[int, str]:
    """The candidate to keep and why: the default (the first) unless another token-identical one accepts a strictly
    larger share of its drafts; one that differs from plain greedy is never chosen."""
    fine = [i for i, c in enumerate(cands) if c.identical and c.share is not None]
    if not fine:
        raise IRSurgeonError("no candidate's output is token-identical to plain greedy with drafts accepted: "
                             "nothing to choose from")
    best = fine[0]
    for i in fine[1:]:
        if cands[i].share > cands[best].share:
            best = i
    if len(cands) == 1:
        return best, "nothing is left open: the draft as built"
    default = cands[0]
    if best == 0:
        return 0, f"the default accepts the largest share of its drafts ({default.accepted}/{default.drafted}); " \
                  f"another must accept strictly more to replace it"
    said = f"{default.accepted}/{default.drafted}" if default.identical else "tokens that differ from plain greedy"
    ahead, of = cands[best].ahead_on(default)
    spread = f"; it accepts a larger share than the default on {ahead} of {of} prompts" \
        if default.identical and of else ""
    return best, f"{cands[best].label} accepts {cands[best].accepted}/{cands[best].drafted} drafts, the default " \
                 f"({default.label}) {said}{spread}"


def shadow(target: Path, family: Family, where: Path) -> Path:
    """A copy of `target` patch may rebuild and genai run: the family's draft folders, the files it may write and
    every JSON config copied; every other entry a link to the user's file (read only: patch stages new files and
    renames them in, it never writes through an entry it replaces)."""
    where.mkdir(parents=True)
    copied = set(family.layout.writes)
    for entry in sorted(os.listdir(target)):
        src, dst = target / entry, where / entry
        if entry.startswith("."):
            continue  # a lock or an interrupted commit's folder: the copy starts clean
        if entry in family.layout.subfolders:
            shutil.copytree(src, dst, symlinks=False)
        elif entry in copied or entry.endswith(".json"):
            shutil.copy2(src, dst)
        else:
            os.symlink(src.resolve(), dst)
    return where


def measure_k(report: TuneReport, family: Family, target: Path, where: Path, copy_first: bool, settings: Settings,
              clock: Clock, echo: Echo) -> None:
    """The alternating sweep on the winner's directory (`where`, a copy of the target when the winner is the present
    draft), with PROBE_K in its generation_config.json; the K choice by measure.choose_k."""
    if copy_first:
        shadow(target, family, where)
    write_k(where / GENERATION_CONFIG, PROBE_K)
    sweep = run_sweep(where, settings.prompts, settings.max_new_tokens, settings.device, settings.rounds,
                      settings.max_k, echo=echo, until=clock.deadline)
    if sweep.rounds_run < settings.rounds:
        report.not_tried.append(f"rounds {sweep.rounds_run + 1}-{settings.rounds} of the K sweep")
    report.measurements = sweep.measurements
    report.genai_reads_k = sweep.configured_k == PROBE_K
    plain, *ks = sweep.measurements
    report.k = measure.choose_k(plain.spread, {m.num_assistant_tokens: m.spread for m in ks})


def persist(report: TuneReport, family: Family, target: Path, settings: Settings, hub: HubOptions | None,
            wait: bool, echo: Echo) -> None:
    """One commit: the winner re-patched into the target when it is not the present draft, else the present draft's
    provenance given the record; the chosen K staged into generation_config.json in the same transaction."""
    chosen, xml = report.chosen, target / family.layout.draft_xml
    tuned = Tuned(json.dumps(record(report, settings), separators=(",", ":"), ensure_ascii=True),
                  report.k.k if report.k is not None else None)
    if chosen is not None and (not chosen.present or report.chosen_format != report.present_format):
        options = rebuild(family, target, report.chosen_format, hub, wait=wait, config_edits=chosen.edits or None,
                          tuned=tuned)
        report.written += patch(target, report.checkpoint, options=options, echo=echo).written
        return
    tx = DirectoryTransaction(target, writable=registry.writable(), wait=wait, echo=echo)
    try:
        with tx:
            if report.measured is not None and draft_identity(target, family) != report.measured:  # under the lock
                raise IRSurgeonError(f"{xml}: replaced while tune measured it (another run rebuilt the draft): the "
                                     f"measurements are not of the draft there now; nothing was written, run tune "
                                     f"again")
            name = family.layout.draft_xml
            files.write_rt_info(xml, {(rtinfo.PROVENANCE, rtinfo.TUNING): tuned.record},
                                into=lambda b: tx.write(name, b))
            if tuned.k is not None:
                stage_k(tx, target, tuned.k)
            tx.commit()
    except KeyboardInterrupt:  # a Ctrl-C the commit held: after it, what was written is said (as patch says it)
        if not tx.committed:
            raise
        raise Interrupted(f"{target}: tune's choice is written (committed {', '.join(tx.names)}); only its report "
                          f"was interrupted: irsurgeon show {target} prints the record") from None
    report.written += tx.names
    echo(f"{target}: wrote {', '.join(tx.names)}")


def draft_identity(target: Path, family: Family) -> tuple:
    """The present draft's files as the disk knows them (inode, size, modification time of its .xml and .bin): a
    patch replaces them by rename, so a draft rebuilt while tune measured the one there is told apart."""
    out = []
    for path in (target / family.layout.draft_xml, (target / family.layout.draft_xml).with_suffix(".bin")):
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def record(report: TuneReport, settings: Settings) -> dict:
    """What the draft's provenance keeps of the run (rt_info irsurgeon/tuning; `show` prints it): when and where it
    was measured, on what, and what was chosen with the numbers it was chosen by."""
    k_rows = {m.num_assistant_tokens: m for m in report.measurements}
    plain, best = k_rows.get(None), k_rows.get(report.k.k if report.k else None)
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": measure.machine(settings.device),
        "prompts": len(prompt_list(settings.prompts)), "max_new_tokens": settings.max_new_tokens,
        "chat_template": report.chat_template, "not_tried": report.not_tried,
        "rounds": plain.rounds if plain else 0,
        "readings": [{"label": c.label, "accepted": c.accepted, "drafted": c.drafted, "identical": c.identical,
                      "chosen": c.chosen} for c in report.candidates], "reading_why": report.reading,
        "k": {"chosen": report.k.k if report.k else None, "why": report.k.why if report.k else "",
              "genai_reads_generation_config": report.genai_reads_k,
              "tokens_per_second": spread_of(best), "plain_tokens_per_second": spread_of(plain),
              "speedup": round(best.speedup, 3) if best and best.speedup else None},
        "format": {"chosen": report.chosen_format, "why": report.format_why or "not tried"},
    }


def spread_of(m: Measurement | None) -> list[float] | None:
    """[median, min, max] tokens per second, rounded for the record."""
    return None if m is None else [round(m.tokens_per_second, 1), round(m.tokens_per_second_min, 1),
                                   round(m.tokens_per_second_max, 1)]


def write_k(path: Path, k: int) -> None:
    """A copy's generation_config.json with num_assistant_tokens k (the sweep's probe; the target's own is staged by
    flows.patch.stage_k in tune's commit)."""
    files.write_atomic(path, with_k(path, k), check=check_generation_config)


def judge_formats(report: TuneReport, family: Family, target: Path, where: Path, tmp: Path, settings: Settings,
                  hub: HubOptions | None, clock: Clock, echo: Echo) -> Path | None:
    """The winning reading in each format asked for, timed side by side at one K (the module docstring); returns
    the directory of a format that replaces the present one, else None."""
    k, chosen = report.timed().num_assistant_tokens, report.chosen  # the chosen K, else the fastest
    dirs, rows = {report.present_format: where}, {report.present_format: FormatRow(report.present_format)}
    for fmt in settings.formats:
        if clock.spent():
            report.not_tried.append(f"the format {fmt}")
            continue
        echo(f"format {fmt}: building the draft ({chosen.label}) in {fmt}")
        copy = shadow(target, family, tmp / f"format-{fmt}")
        patch(copy, report.checkpoint, echo=silent,
              options=rebuild(family, target, fmt, hub, config_edits=chosen.edits or None))
        run = run_equivalence(copy, settings.prompts, (k,), settings.max_new_tokens, settings.device, echo=silent)
        rows[fmt] = FormatRow(fmt, identical=run.identical)
        if run.identical:
            dirs[fmt] = copy
        else:
            echo(f"format {fmt}: its tokens DIFFER from plain greedy: never chosen")
    for m in run_alternatives(dirs, k, settings.prompts, settings.max_new_tokens, settings.device, settings.rounds,
                              echo=echo, until=clock.deadline):
        rows[m.label].measurement = m
    best, report.format_why = measure.choose_fastest({f: rows[f].measurement.spread for f in dirs},
                                                     report.present_format)
    rows[best].chosen = True
    report.formats = list(rows.values())
    return None if best == report.present_format else dirs[best]
