"""tune's decisions and writes on made-up speeds: the spread rule (flows/measure.py) on synthetic rounds, the reading
choice on synthetic counts, the K and the record committed, config edits through patch, a directory tune refuses;
genai runs only to read back a committed K. Never a timed assertion: every speed here is made up. The runs on a
trained pair are in tests/families/eagle3/test_eagle3_tune.py."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from helpers.cli import invoke, refused
from irsurgeon.core.errors import ConfigError, IRSurgeonError
from irsurgeon.flows import measure
from irsurgeon.flows.measure import FASTER, NOISE, SLOWER, Spread, choose_k, judge
from irsurgeon.flows.tune import Candidate, choose_reading, write_k
from lab.families import FAMILIES, FIXTURE_PAIRS
from helpers.tiers import every_nth

ROOT = Path(__file__).resolve().parents[1]


def rounds(median: float, half_width: float, n: int = 3) -> Spread:
    """n rounds spread evenly over median +- half_width (three: below measure.TRIM_FROM, the whole range judged)."""
    if n == 1:
        return Spread.of([median])
    return Spread.of(median - half_width + 2 * half_width * i / (n - 1) for i in range(n))


# ---- the spread rule -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,verdict", [
    (rounds(120, 5), rounds(100, 5), FASTER),      # 115..125 above 95..105
    (rounds(100, 5), rounds(120, 5), SLOWER),
    (rounds(108, 5), rounds(100, 5), NOISE),       # 103..113 overlaps 95..105
    (rounds(200, 0, 1), rounds(100, 0, 1), NOISE),  # one round: no spread measured, nothing beyond noise
    (rounds(200, 1), rounds(100, 0, 1), NOISE),
])
def test_judge(a, b, verdict):
    assert judge(a, b) == verdict


def test_from_five_rounds_one_stalled_or_lucky_round_does_not_decide():
    k = Spread.of([150, 152, 155, 158, 40])      # one round stalled by another job
    plain = Spread.of([100, 101, 103, 104, 160])  # one lucky round
    assert judge(k, plain) == FASTER and k.judged == (150, 155) and plain.judged == (101, 104)
    assert judge(Spread.of([150, 152, 155, 40]), Spread.of([100, 101, 103, 104])) == NOISE  # four: all judged
    assert judge(Spread.of([150, 152, 155, 158, 99]), Spread.of([100, 101, 103, 104, 105])) == FASTER
    assert judge(Spread.of([150, 152, 102, 158, 99]), Spread.of([100, 101, 103, 104, 105])) == NOISE  # two low


def test_spread_states_median_and_range():
    s = Spread.of([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.text()) == (2.0, 1.0, 3.0, "2.0 (1-3)")


def test_a_k_is_chosen_only_beyond_the_spread_of_plain_and_the_smallest_within_noise_of_the_fastest():
    plain = rounds(100, 5)
    chosen = choose_k(plain, {1: rounds(130, 5), 2: rounds(160, 5), 3: rounds(140, 5)})
    assert chosen.k == 2 and "1.60x" in chosen.why and "every other K" in chosen.why
    close = choose_k(plain, {1: rounds(130, 5), 2: rounds(160, 5), 3: rounds(155, 5)})
    assert close.k == 2 and "within noise of K=3" in close.why
    smaller = choose_k(plain, {1: rounds(152, 5), 2: rounds(160, 5), 3: rounds(120, 5)})
    assert smaller.k == 1 and "K=1 (1.52x), is chosen" in smaller.why, smaller.why
    best_only = choose_k(plain, {1: rounds(104, 5), 2: rounds(112, 5), 3: rounds(90, 5)})
    assert best_only.k == 2, best_only.why  # K=1 within noise of K=2 but not beyond plain's spread
    noisy = choose_k(plain, {1: rounds(104, 5), 2: rounds(106, 5)})
    assert noisy.k is None and "within noise of it" in noisy.why
    slower = choose_k(plain, {1: rounds(70, 5), 2: rounds(60, 5)})
    assert slower.k is None and "slower" in slower.why
    once = choose_k(rounds(100, 0, 1), {1: rounds(300, 0, 1)})
    assert once.k is None
    assert choose_k(plain, {}).k is None


def test_the_rule_is_stated_where_it_is_applied():
    assert measure.RULE in measure.K_RULE
    assert "slowest round is faster than" in (ROOT / "irsurgeon" / "flows" / "measure.py").read_text()


# ---- the reading choice ----------------------------------------------------------------------------------------------

def cand(label, accepted, drafted, identical=True):
    return Candidate(label, {} if label == "default" else {"k": label}, accepted=accepted, drafted=drafted,
                     identical=identical)


def test_a_tie_keeps_the_default():
    index, why = choose_reading([cand("default", 30, 100), cand("other", 60, 200)])  # the same share
    assert index == 0 and "strictly more" in why


def test_a_strictly_larger_share_replaces_the_default():
    index, why = choose_reading([cand("default", 30, 100), cand("a", 31, 100), cand("b", 40, 120)])
    assert index == 2 and why.startswith("b accepts 40/120")  # 1/3 beats 31/100 and 30/100


def test_the_reading_verdict_says_on_how_many_prompts_the_winner_leads():
    default = Candidate("a", {}, accepted=30, drafted=100, identical=True, per_prompt=[(10, 40), (15, 30), (5, 30)])
    other = Candidate("b", {"x": 1}, accepted=36, drafted=100, identical=True,
                      per_prompt=[(20, 40), (10, 30), (6, 30)])
    index, why = choose_reading([default, other])
    assert index == 1 and "on 2 of 3 prompts" in why  # 20/40 > 10/40, 10/30 < 15/30, 6/30 > 5/30


def test_a_candidate_that_differs_from_plain_greedy_is_never_chosen():
    index, _ = choose_reading([cand("default", 30, 100), cand("wrong", 90, 100, identical=False)])
    assert index == 0
    index, why = choose_reading([cand("default", 90, 100, identical=False), cand("other", 10, 100)])
    assert index == 1 and "differ" in why
    with pytest.raises(IRSurgeonError, match="token-identical"):
        choose_reading([cand("default", 1, 10, identical=False)])


# ---- K in generation_config.json -------------------------------------------------------------------------------------

def test_write_k_keeps_every_other_key(tmp_path):
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps({"do_sample": False, "eos_token_id": [2, 0], "num_assistant_tokens": 9}))
    write_k(path, 3)
    assert json.loads(path.read_text()) == {"do_sample": False, "eos_token_id": [2, 0], "num_assistant_tokens": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["generation_config.json"]  # nothing left beside it


def test_write_k_leaves_a_file_genai_would_refuse_as_it_was(tmp_path):
    path = tmp_path / "generation_config.json"
    path.write_text('{"eos_token_id": "two"}')
    with pytest.raises(ConfigError, match="eos_token_id"):
        write_k(path, 3)
    assert path.read_text() == '{"eos_token_id": "two"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["generation_config.json"]


# ---- config edits through patch --------------------------------------------------------------------------------------

def test_config_edits_are_built_recorded_and_compared(tmp_path):
    from irsurgeon.families.eagle3 import rope
    from irsurgeon.flows.patch import Options, patch, recorded_edits

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    lines = []
    edits = {rope.BASE_KEY: 500000.0}
    patch(target, ckpt, options=Options(config_edits=edits), echo=lines.append)
    draft = target / "eagle3_draft"
    assert recorded_edits(draft / "openvino_model.xml") == edits
    assert json.loads((draft / "config.json").read_text())[rope.BASE_KEY] == 500000.0
    assert any("RoPE base 500000" in line for line in lines)
    said = []
    patch(target, ckpt, options=Options(config_edits=edits), echo=said.append)
    assert any("nothing to do" in line for line in said)  # the same edits: ready
    patch(target, ckpt, echo=said.append)
    assert "nothing to do" in said[-1]  # no edits asked: a tuned draft is kept
    again = []
    patch(target, ckpt, options=Options(config_edits={rope.BASE_KEY: 10000.0}), echo=again.append)
    assert any("rebuilding it" in line for line in again)
    assert recorded_edits(draft / "openvino_model.xml") == {rope.BASE_KEY: 10000.0}


@pytest.mark.parametrize("edits,message", [({"k": float("nan")}, "not JSON values"), ({1: 2}, "mapping")])
def test_config_edits_that_are_not_json_are_refused(tmp_path, edits, message):
    from irsurgeon.flows.patch import Options, patch

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    with pytest.raises(ConfigError, match=message):
        patch(target, ckpt, options=Options(config_edits=edits))


# ---- what tune refuses -----------------------------------------------------------------------------------------------

def test_tune_refuses_a_directory_without_a_draft(tmp_path):
    source, _ = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    line = refused(["tune", target], target)
    assert "holds no draft to tune" in line and f"irsurgeon patch {target}" in line


def documented_schema() -> dict:
    section = (ROOT / "docs" / "cli.md").read_text().split("## The JSON document")[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def test_tune_refusal_is_one_json_document(tmp_path):
    doc = json.loads(invoke("tune", tmp_path / "missing", "--json").stdout)
    jsonschema.Draft202012Validator(documented_schema()).validate(doc)
    assert doc["command"] == "tune" and doc["ok"] is False and doc["result"] is None and "missing" in doc["error"]


def test_a_count_of_no_draft_accepted_is_taken_again(monkeypatch, tmp_path):
    """openvino.genai issue 4425: a freshly built pipeline now and then accepts no draft, tokens unchanged; such a
    count is taken again in fresh pipelines (here: run_equivalence made up, zero once, then 7)."""
    from types import SimpleNamespace

    import irsurgeon.flows.tune as flow

    answers = iter([0, 7])

    def equivalence(*_a, **_k):
        return SimpleNamespace(identical=True, runs=[SimpleNamespace(prompt=0, accepted=next(answers),
                                                                     draft_tokens=40)])
    monkeypatch.setattr(flow, "run_equivalence", equivalence)
    c, said = Candidate("default", {}), []
    flow.count(c, tmp_path, flow.Settings(), said.append)
    assert (c.accepted, c.drafted, c.identical) == (7, 40, True) and "issue 4425" in said[0]


def test_another_format_replaces_the_present_one_only_beyond_the_spread():
    from irsurgeon.flows.measure import choose_fastest

    assert choose_fastest({"f16": rounds(100, 5), "int8": rounds(130, 5), "int4": rounds(115, 5)}, "f16") == \
        ("int8", "int8 runs at 1.30x f16, beyond the rounds' spread of every other")
    kept, why = choose_fastest({"f16": rounds(100, 5), "int8": rounds(130, 5), "int4": rounds(127, 5)}, "f16")
    assert kept == "f16" and "within noise of int4" in why
    assert choose_fastest({"f16": rounds(100, 5), "int8": rounds(100, 5)}, "f16")[0] == "f16"  # a tie: present


@pytest.mark.parametrize("value", ["auto", "f16,fp8", ","])
def test_formats_option_names_only_formats_a_draft_is_built_in(tmp_path, value):
    result = invoke("tune", tmp_path, "--formats", value)
    assert result.exit_code == 2 and "expected comma-separated weight formats" in result.output


# ---- what tune writes: one commit, the record in the draft's provenance ------------------------------------------

def measured(label: str, k: int | None, rates: list[float]):
    """A Measurement whose rounds ran at `rates` tokens per second (100 tokens a round), made up."""
    from irsurgeon.flows.genai import Measurement
    m = Measurement(label, k, 0, 0, generated_tokens=100, round_seconds=[100 / r for r in rates])
    return m


def made_up_report(target: Path, family, k_rates: dict[int, list[float]], plain: list[float]):
    """A TuneReport as tune leaves it before persisting: the present draft chosen, K by choose_k."""
    from irsurgeon.flows.patch import draft_format
    from irsurgeon.flows.tune import TuneReport

    report = TuneReport(target, family.key, "ckpt", False)
    report.candidates = [Candidate("as built", {}, present=True, accepted=7, drafted=40, identical=True,
                                   chosen=True)]
    report.measurements = [measured("plain", None, plain)] + [measured(f"draft K={k}", k, r)
                                                             for k, r in k_rates.items()]
    report.k = choose_k(report.measurements[0].spread, {m.num_assistant_tokens: m.spread
                                                        for m in report.measurements[1:]})
    report.genai_reads_k = family.key in ("gemma4", "dflash")
    report.present_format = draft_format(target / family.layout.draft_xml) or "auto"
    return report


@pytest.mark.parametrize("family", every_nth(FAMILIES, 2))  # the others: CI's extended tier
def test_tune_commits_k_and_its_record_at_once_for_every_family(tmp_path, family):
    from irsurgeon.flows import tune as flow
    from irsurgeon.flows.patch import patch
    from irsurgeon.flows.show import show
    from irsurgeon.flows.verify import verify_directory
    from lab.dirsnap import snapshot

    source, ckpt = FIXTURE_PAIRS[family.key]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    gen = target / "generation_config.json"
    before = json.loads(gen.read_text()) if gen.exists() else {}
    report = made_up_report(target, family, {1: [150, 152, 154], 2: [170, 171, 175], 3: [160, 161, 162]},
                            plain=[100, 101, 103])
    assert report.k.k == 2
    untouched = {k: v for k, v in snapshot(target).items()
                 if k not in ("generation_config.json", family.layout.draft_xml)}
    flow.persist(report, family, target, flow.Settings(prompts=2), None, False, [].append)
    assert sorted(report.written) == sorted(["generation_config.json", family.layout.draft_xml])
    assert json.loads(gen.read_text()) == {**before, "num_assistant_tokens": 2}
    after = snapshot(target)
    assert {k: v for k, v in after.items() if k in untouched} == untouched  # nothing else changed, no leftover
    assert set(after) == set(untouched) | {"generation_config.json", family.layout.draft_xml}
    shown = show(target)["tuning"]
    assert shown["k"]["chosen"] == 2 and shown["k"]["tokens_per_second"] == [171.0, 170.0, 175.0]
    assert shown["prompts"] == 2 and shown["readings"][0]["accepted"] == 7 and shown["machine"]["logical_cores"]
    assert all(c.ok for c in verify_directory(target, family=family))
    said = []
    patch(target, ckpt, echo=said.append)
    assert "nothing to do" in said[-1]  # the record is provenance, not a reason to rebuild
    text = invoke("show", target)
    assert "num_assistant_tokens 2: 171.0 tok/s (170.0-175.0) against plain 101.0 (100.0-103.0)" in text.output


def test_a_rebuilt_winner_and_its_k_are_one_commit(tmp_path):
    """A winner other than the present draft (here: another weight format) is re-patched with the K and the record
    in patch's one transaction."""
    from irsurgeon.families import registry
    from irsurgeon.flows import tune as flow
    from irsurgeon.flows.patch import draft_format, patch, recorded
    from irsurgeon.core import rtinfo

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    report = made_up_report(target, family, {1: [150, 152, 154]}, plain=[100, 101, 103])
    report.checkpoint = str(ckpt)
    report.formats = [flow.FormatRow(report.present_format), flow.FormatRow("f16", chosen=True)]
    assert report.chosen_format == "f16" != report.present_format
    flow.persist(report, family, target, flow.Settings(prompts=2), None, False, [].append)
    xml = target / family.layout.draft_xml
    assert "generation_config.json" in report.written and family.layout.draft_xml in report.written
    assert draft_format(xml) == "f16" and json.loads(recorded(xml, rtinfo.PROVENANCE, rtinfo.TUNING))["k"]["chosen"] == 1
    assert json.loads((target / "generation_config.json").read_text())["num_assistant_tokens"] == 1


def test_a_draft_rebuilt_while_tune_measured_it_gets_no_record(tmp_path):
    """Another run (patch --force) replaces the draft between tune's measurements and its commit: the record and K
    of the draft measured are not written into the one there now (was: an f16 draft recorded as 'format: f32')."""
    from irsurgeon.draft.protocol import Options
    from irsurgeon.families import registry
    from irsurgeon.flows import tune as flow
    from irsurgeon.flows.patch import patch
    from lab.dirsnap import snapshot

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    report = made_up_report(target, family, {1: [150, 152, 154], 2: [170, 171, 175]}, plain=[100, 101, 103])
    report.measured = flow.draft_identity(target, family)
    patch(target, ckpt, options=Options(weight_format="f16", force=True))  # the other run
    before = snapshot(target)
    with pytest.raises(IRSurgeonError, match="replaced while tune measured it"):
        flow.persist(report, family, target, flow.Settings(prompts=2), None, False, [].append)
    assert snapshot(target) == before
    untouched = made_up_report(target, family, {1: [150, 152, 154]}, plain=[100, 101, 103])
    untouched.measured = flow.draft_identity(target, family)
    flow.persist(untouched, family, target, flow.Settings(prompts=2), None, False, [].append)
    assert family.layout.draft_xml in untouched.written


def test_a_ctrl_c_held_through_tunes_commit_says_what_was_written(tmp_path, monkeypatch):
    """A Ctrl-C that comes during tune's commit is held until the commit is done; then it says the record and K are
    written (was a bare 'Error: interrupted', the directory changed), as patch says its patch is complete."""
    from irsurgeon.commit.transaction import DirectoryTransaction
    from irsurgeon.core.errors import Interrupted
    from irsurgeon.families import registry
    from irsurgeon.flows import tune as flow
    from irsurgeon.flows.patch import patch

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    report = made_up_report(target, family, {1: [150, 152, 154], 2: [170, 171, 175]}, plain=[100, 101, 103])
    committing = DirectoryTransaction.commit

    def commit_then_ctrl_c(self):
        committing(self)
        raise KeyboardInterrupt  # the Ctrl-C the commit held, delivered as it ends
    monkeypatch.setattr(DirectoryTransaction, "commit", commit_then_ctrl_c)
    with pytest.raises(Interrupted, match="tune's choice is written .committed .*generation_config.json"):
        flow.persist(report, family, target, flow.Settings(prompts=2), None, False, [].append)
    assert json.loads((target / "generation_config.json").read_text())["num_assistant_tokens"] == 2


def test_a_ctrl_c_before_tunes_commit_says_the_directory_is_as_it_was():
    from irsurgeon.cli import TRANSACTIONAL

    assert "tune" in TRANSACTIONAL  # it changes the directory only through one commit (its own, or patch's)


def test_a_directory_tune_cannot_write_is_refused_before_it_measures(tmp_path, monkeypatch):
    """Read-only (a read-only mount, no write permission): refused before the first measurement, not after an hour of
    them at the commit; a dry run, which writes nothing, still measures."""
    from irsurgeon.flows import patch as patch_flow
    from irsurgeon.flows import tune as flow

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch_flow.patch(target, ckpt)
    real_access = os.access
    monkeypatch.setattr(patch_flow.os, "access", lambda p, mode: False if Path(p) == target else real_access(p, mode))
    measured = []
    monkeypatch.setattr(flow, "candidates", lambda *a, **k: measured.append(1) or [])
    with pytest.raises(IRSurgeonError, match="not writable by this user"):
        flow.tune(target, str(ckpt))
    assert not measured
    with pytest.raises(IRSurgeonError):
        flow.tune(target, str(ckpt), dry_run=True)  # past the check: refused later (no candidates, made up here)
    assert measured


def test_a_tuning_record_that_is_not_json_is_shown_as_none(tmp_path):
    from irsurgeon.families import registry
    from irsurgeon.flows.patch import patch
    from irsurgeon.flows.show import show
    from irsurgeon.ir import files
    from irsurgeon.core import rtinfo

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    files.write_rt_info(target / family.layout.draft_xml, {(rtinfo.PROVENANCE, rtinfo.TUNING): "[1, 2"})
    assert show(target)["tuning"] is None
    assert "Tuned" not in invoke("show", target).output


@pytest.mark.parametrize("record", ["[" * 100000 + "]" * 100000, '{"k": ' + "1" * 5000 + "}"],
                         ids=["deep", "long-number"])
def test_a_tuning_record_nested_too_deep_or_with_a_huge_number_is_shown_as_none(tmp_path, record):
    """A record json.loads cannot take (RecursionError, int()'s digit limit) is no record, as one that is not JSON;
    verify's tuned line (readiness.tuned_k) reads it through the same function; a config_edits record as deep is
    no edits (patch's comparison and tune's present candidate)."""
    from irsurgeon.families import registry
    from irsurgeon.flows.patch import CONFIG_EDITS, patch, recorded_edits
    from irsurgeon.flows.readiness import tuned_k
    from irsurgeon.flows.show import show
    from irsurgeon.ir import files
    from irsurgeon.core import rtinfo

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    xml = target / family.layout.draft_xml
    files.write_rt_info(xml, {(rtinfo.PROVENANCE, rtinfo.TUNING): record, (rtinfo.PROVENANCE, CONFIG_EDITS): record})
    assert show(target)["tuning"] is None and tuned_k(target) is None and recorded_edits(xml) == {}
    result = invoke("show", target)
    assert result.exit_code == 0 and "Tuned" not in result.output and "unexpected" not in result.output


def test_a_spent_budget_leaves_out_the_steps_after_the_default_and_says_so(tmp_path, monkeypatch):
    """A budget already spent once the default reading is counted: the K sweep is not run, the record and the
    report say so, and nothing is written but that record (genai's counts made up)."""
    from types import SimpleNamespace

    import irsurgeon.flows.tune as flow
    from irsurgeon.flows.patch import patch
    from irsurgeon.flows.show import show

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    monkeypatch.setattr(flow, "run_equivalence", lambda *_a, **_k: SimpleNamespace(
        identical=True, runs=[SimpleNamespace(prompt=0, accepted=3, draft_tokens=9)]))

    def no_sweep(*_a, **_k):
        raise AssertionError("the K sweep ran past the budget")
    monkeypatch.setattr(flow, "run_sweep", no_sweep)
    monkeypatch.setattr(flow.Clock, "spent", lambda self: True)
    said = []
    report = flow.tune(target, settings=flow.Settings(prompts=2, budget=5), echo=said.append)
    left = ["the K sweep", "the formats f16, int8, int4"]  # the present draft is f32: every format is left
    assert report.not_tried == left and report.k is None
    assert any(line.startswith("not tried within the budget of 5 s: the K sweep") for line in said)
    record = show(target)["tuning"]
    assert record["not_tried"] == left and record["k"]["chosen"] is None
    assert report.written == ["eagle3_draft/openvino_model.xml"]


def test_the_clock_is_spent_only_past_its_seconds():
    assert not measure_free_clock(None).spent() and not measure_free_clock(60).spent()
    assert measure_free_clock(1, start=0.0).spent()


def measure_free_clock(seconds, start=None):
    from irsurgeon.flows.tune import Clock
    return Clock(seconds) if start is None else Clock(seconds, start)


def test_the_formats_option_none_keeps_the_present_format_and_no_option_tries_the_default_set():
    from irsurgeon.cli.tune import formats
    from irsurgeon.flows.tune import WORTH_TRYING

    assert formats(None) is None and formats("none") == () and formats("int4,F16,int4") == ("int4", "f16")
    assert set(WORTH_TRYING) == {"f16", "int8", "int4"}


@pytest.mark.genai
@pytest.mark.parametrize("key", ["dflash", pytest.param("gemma4", marks=pytest.mark.extended)])  # extended: CI's
def test_where_genai_reads_k_generate_without_arguments_drafts_at_the_k_tune_wrote(tmp_path, key):
    """The DFlash and Gemma 4 pipelines of openvino-genai 2026.4.1 read num_assistant_tokens from the target's
    generation_config.json: after tune's commit of K, generate() given no config drafts K tokens a step (its drafted
    per target step grows with K; the pipeline's own config names it). Run in a child process (flows.isolated's
    reason)."""
    import subprocess
    import sys

    from irsurgeon.families import registry
    from irsurgeon.flows import tune as flow
    from irsurgeon.flows.patch import patch

    family = registry.by_key(key)
    source, ckpt = FIXTURE_PAIRS[key]
    drafted = {}
    for k in (1, 3):
        target = shutil.copytree(source, tmp_path / f"k{k}")
        patch(target, ckpt)
        report = made_up_report(target, family, {}, plain=[100, 101, 103])
        report.k = measure.KChoice(k, "made up")
        flow.persist(report, family, target, flow.Settings(prompts=1), None, False, [].append)
        code = ("import sys, openvino_genai as g\n"
                "from irsurgeon.families import registry\n"
                f"fam = registry.by_key({key!r}).genai()\n"
                f"pipe = fam.pipeline(g, __import__('pathlib').Path({str(target)!r}), 'CPU', {{}}, True, 8)\n"
                "inner = getattr(pipe, 'pipe', pipe)\n"
                "c = inner.get_generation_config(); c.max_new_tokens = 12; c.ignore_eos = True\n"
                "r = pipe.generate(fam.prompt('Hello world'), max_new_tokens=24, ignore_eos=True)\n"
                "e = r.extended_perf_metrics\n"
                "print(c.num_assistant_tokens, fam.drafted(e) / len(e.main_model_metrics.raw_metrics.m_batch_sizes))\n")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
        configured, per_step = proc.stdout.split()[-2:]
        assert int(configured) == k
        drafted[k] = float(per_step)  # tokens drafted per target step
    assert drafted[3] > 2 * drafted[1], drafted  # three drafts a step against one


def test_the_json_candidates_carry_counts_and_the_chosen_ones_speed(tmp_path):
    """result.candidates: accepted, drafted, tokens_per_s, speedup and chosen, exactly one chosen; the chosen one's
    speed is the sweep's at the chosen K (the others are judged by counts, never timed)."""
    from irsurgeon.families import registry

    family = registry.by_key("eagle3")
    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    from irsurgeon.flows.patch import patch
    patch(target, ckpt)
    report = made_up_report(target, family, {1: [150, 152, 154], 2: [170, 171, 175]}, plain=[100, 101, 103])
    report.candidates.append(Candidate("other", {"x": 1}, accepted=5, drafted=40, identical=True))
    for m in report.measurements:
        m.speedup = m.tokens_per_second / report.measurements[0].tokens_per_second
    rows = report.as_dict()["candidates"]
    assert all({"accepted", "drafted", "tokens_per_s", "speedup", "chosen"} <= set(r) for r in rows)
    assert [r["chosen"] for r in rows] == [True, False]
    assert (rows[0]["num_assistant_tokens"], rows[0]["tokens_per_s"]) == (2, 171.0)
    assert rows[0]["speedup"] == pytest.approx(171 / 101) and rows[1]["tokens_per_s"] is None


def test_a_budget_cuts_the_default_count_short_and_every_later_step_measures_its_prompts(tmp_path, monkeypatch):
    """A prompts file longer than the budget allows: the default reading's count stops adding prompts once half the
    budget has passed (here at once), and the K sweep then runs on the prompts it counted; the rest is said."""
    import time
    from types import SimpleNamespace

    import irsurgeon.flows.tune as flow
    from irsurgeon.flows.genai import Measurement, Sweep
    from irsurgeon.flows.patch import patch

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    patch(target, ckpt)
    counted = []

    def equivalence(_where, prompts, *_a, until=None, **_k):
        n = 1 if until is not None and time.monotonic() >= until else len(prompts)
        counted.append(n)
        return SimpleNamespace(identical=True, runs=[SimpleNamespace(prompt=i, accepted=1, draft_tokens=4)
                                                     for i in range(n)])
    swept = []

    def sweep(_where, prompts, *_a, **_k):
        swept.append(list(prompts))
        plain = Measurement("plain", None, 0, 0, generated_tokens=10, round_seconds=[1.0])
        return Sweep([plain], None, 1)
    monkeypatch.setattr(flow, "run_equivalence", equivalence)
    monkeypatch.setattr(flow, "run_sweep", sweep)
    # half the budget passed at once, the whole of it an hour away
    monkeypatch.setattr(flow.Clock, "share", lambda self, part: self.start + (3600 if part >= 1 else 0))
    report = flow.tune(target, settings=flow.Settings(prompts=["a", "b", "c"], budget=60, formats=(), chat=False),
                       dry_run=True)
    assert counted == [1] and swept == [["a"]]
    assert report.not_tried[0].startswith("prompts 2-3 (the default reading's count reached 50% of the budget)")
