"""verify --genai metrics: the JSON fields, their consistency on a real run, the table, the verdict, the options.

The real run uses the demo fixture patched with its `-bigram` checkpoint, whose head really predicts (about half of
its drafts are accepted), so MTP must need fewer target-model evaluations than plain greedy for the same tokens.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from lab.demo import patch_demo

from irsurgeon.cli import main
from irsurgeon.ir.footprint import kv_cache
from irsurgeon.flows.genai import Measurement, SpeedReport, peak_memory_bytes
from irsurgeon.flows.prompts import TEXTS as PROMPTS
from irsurgeon.flows.show import show_ir
from helpers.cli import result_of

SWEEP = (1, 3)
MAX_NEW = 30
ROUNDS = 2
# the JSON fields scripts read, in order: spelled here, not imported, so a change to them fails this test
SPEED_FIELDS = ("device", "equivalence_properties", "speed_properties", "device_defaults", "kv_precision",
                "kv_precision_source", "memory_method", "kv_method", "measurements", "best", "pays", "verdict")
MEASUREMENT_FIELDS = ("label", "num_assistant_tokens", "prompts", "rounds", "generated_tokens", "seconds",
                      "tokens_per_second", "tokens_per_second_min", "tokens_per_second_max", "speedup", "ttft_ms",
                      "target_evaluations", "draft_evaluations", "draft_proposed", "draft_accepted", "acceptance_rate",
                      "peak_memory_bytes", "kv_bytes_per_token_target", "kv_bytes_per_token_draft")


TUNED = {"date": "2026-12-07T20:00:00Z", "k": {"chosen": 2, "speedup": 1.42}}  # a record tune would have left
TIMED = (1, 2, 3)  # SWEEP and the tuned K, in order


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> SimpleNamespace:
    """One `verify --genai` on the patched demo: 2 prompts from a file, K in SWEEP, JSON written; its draft carries
    a tuning record (K 2), which verify adds to the sweep."""
    import json

    from irsurgeon.core import rtinfo
    from irsurgeon.ir import files

    base = tmp_path_factory.mktemp("metrics")
    target = patch_demo(base / "target")
    files.write_rt_info(target / "openvino_mtp_model.xml", {(rtinfo.PROVENANCE, rtinfo.TUNING): json.dumps(TUNED)})
    prompts = base / "prompts.txt"
    prompts.write_text(f"{PROMPTS[0]}\n\n{PROMPTS[2]}\n")
    out = base / "out.json"
    res = CliRunner().invoke(main, ["verify", str(target), "--genai", "--prompts", str(prompts), "--max-new-tokens",
                                    str(MAX_NEW), "--sweep", ",".join(map(str, SWEEP)), "--rounds", str(ROUNDS),
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    return SimpleNamespace(target=target, output=res.output, doc=result_of(out.read_text()))


@pytest.mark.genai
def test_json_has_every_field(run):
    speed = run.doc["speed"]
    assert tuple(speed) == SPEED_FIELDS and run.doc["genai"]["identical"]
    assert [m["num_assistant_tokens"] for m in speed["measurements"]] == [None, *TIMED]
    assert all(tuple(m) == MEASUREMENT_FIELDS for m in speed["measurements"])
    assert speed["device_defaults"]["INFERENCE_PRECISION_HINT"] and speed["equivalence_properties"]
    assert {r["num_assistant_tokens"] for r in run.doc["genai"]["runs"]} == set(SWEEP)


@pytest.mark.genai
def test_numbers_are_positive_and_consistent(run):
    plain, *mtp = run.doc["speed"]["measurements"]
    for m in (plain, *mtp):
        assert m["prompts"] == 2 and m["generated_tokens"] == 2 * MAX_NEW  # EOS is ignored: same work everywhere
        assert m["rounds"] == ROUNDS and 0 < m["tokens_per_second_min"] <= m["tokens_per_second"]
        assert m["tokens_per_second"] <= m["tokens_per_second_max"]
        assert m["seconds"] >= ROUNDS * m["generated_tokens"] / m["tokens_per_second_max"] * 0.999
        assert m["ttft_ms"] > 0 and m["peak_memory_bytes"] > 0
        assert m["kv_bytes_per_token_target"] > 0
    assert plain["target_evaluations"] == plain["generated_tokens"] and plain["speedup"] == 1.0
    assert plain["draft_proposed"] == plain["draft_accepted"] == plain["kv_bytes_per_token_draft"] == 0
    assert plain["acceptance_rate"] is None
    for m in mtp:
        k = m["num_assistant_tokens"]
        assert 0 < m["draft_accepted"] <= m["draft_proposed"] <= k * m["target_evaluations"]
        assert m["acceptance_rate"] == pytest.approx(m["draft_accepted"] / m["draft_proposed"])
        assert m["target_evaluations"] < plain["target_evaluations"]
        # every evaluation emits its own token plus the drafts it accepted, at most k + 1 tokens
        assert m["target_evaluations"] + m["draft_accepted"] <= m["generated_tokens"]
        assert m["generated_tokens"] <= (k + 1) * m["target_evaluations"]
        assert m["draft_evaluations"] > 0 and m["kv_bytes_per_token_draft"] > 0
        assert m["speedup"] == pytest.approx(m["tokens_per_second"] / plain["tokens_per_second"])


@pytest.mark.genai
def test_kv_growth_matches_the_footprint(run):
    kv = run.doc["speed"]["kv_precision"]
    for part, file, key in (("target", "openvino_language_model.xml", "kv_bytes_per_token_target"),
                            ("draft", "openvino_mtp_model.xml", "kv_bytes_per_token_draft")):
        want = kv_cache(file, show_ir(run.target / file), 1, run.doc["speed"]["device_defaults"]["KV_CACHE_PRECISION"])
        assert all(m[key] == want["bytes_per_token"] for m in run.doc["speed"]["measurements"][1:])
        assert kv[part].startswith(want["precision"])


@pytest.mark.genai
def test_table_and_verdict(run):
    speed = run.doc["speed"]
    mtp = speed["measurements"][1:]
    fastest = max(mtp, key=lambda m: m["tokens_per_second"])
    assert speed["best"] == {"num_assistant_tokens": fastest["num_assistant_tokens"], "speedup": fastest["speedup"]}
    plain = speed["measurements"][0]
    assert speed["pays"] == (fastest["tokens_per_second_min"] > plain["tokens_per_second_max"])  # measure.RULE
    assert speed["verdict"].startswith("best num_assistant_tokens" if speed["pays"] else "speculative decoding ")
    if not speed["pays"]:
        assert "on a target this small" in speed["verdict"]  # the bundled pair is tiny, and said to be
    assert speed["verdict"] in run.output and "at the device's default INFERENCE_PRECISION_HINT=" in run.output
    kv = " ".join(f"{p}={v}" for p, v in speed["kv_precision"].items())
    assert f"; KV cache {kv}, " in run.output and "KV cache as run" not in run.output  # said once, with its source
    steps = len(TIMED) + 1  # plain generation, then each K timed
    assert all(f"draft K={k}" in run.output for k in SWEEP) and f"speed [{steps}/{steps}]" in run.output
    assert f"round {ROUNDS}/{ROUNDS}" in run.output and f"median of {ROUNDS}" in run.output


def fake_result(batches: list[int], ttft: float, draft: tuple[list[int], int, int] | None = None):
    """The parts of a genai DecodedResults that Measurement.add reads."""
    pm = SimpleNamespace(get_ttft=lambda: SimpleNamespace(mean=ttft), get_num_generated_tokens=lambda: sum(batches),
                         raw_metrics=SimpleNamespace(m_batch_sizes=batches))
    ext = None
    if draft is not None:
        raw = lambda b: SimpleNamespace(raw_metrics=SimpleNamespace(m_batch_sizes=b))
        ext = SimpleNamespace(main_model_metrics=raw(batches), draft_model_metrics=raw(draft[0]),
                              get_num_draft_tokens=lambda: draft[1], get_num_accepted_tokens=lambda: draft[2])
    return SimpleNamespace(perf_metrics=pm, extended_perf_metrics=ext)


def test_measurement_counts_one_pass_and_times_every_round():
    m = Measurement("draft K=2", 2, 100, 50)
    for r, seconds in enumerate((0.5, 2.0, 1.0)):
        m.round_seconds.append(0.0)
        m.add(fake_result([1, 3, 2], 10.0, ([2, 2], 4, 3)), seconds / 2, first_round=r == 0)
        m.add(fake_result([1, 1], 20.0, ([1], 2, 0)), seconds / 2, first_round=r == 0)
    assert (m.prompts, m.generated_tokens, m.target_evaluations, m.draft_evaluations) == (2, 8, 5, 3)
    assert (m.draft_proposed, m.draft_accepted, m.ttft_ms, m.rounds, m.seconds) == (6, 3, 15.0, 3, 3.5)
    assert (m.tokens_per_second_min, m.tokens_per_second, m.tokens_per_second_max) == (4.0, 8.0, 16.0)
    assert m.acceptance_rate == 0.5 and tuple(m.as_dict()) == MEASUREMENT_FIELDS


@pytest.mark.parametrize("fast,rounds,pays,why", [
    (1.3, 3, True, "beyond the rounds' spread"),      # K=2's slowest round (1.2x) above plain's fastest (1.1x)
    (1.15, 3, False, "within noise"),                 # 1.05-1.25x against 0.9-1.1x: the ranges overlap
    (1.3, 1, False, "within noise"),                  # one round measures no spread
    (0.7, 3, False, "slower"),                        # 0.6-0.8x: below plain's slowest round
])
def test_verdict_names_the_best_k_or_says_it_does_not_pay(fast, rounds, pays, why):
    """The verdict by measure.RULE: each configuration's rounds run at its rate x 0.9, 1.0, 1.1 of plain's median
    (plain: 0.9, 1.0, 1.1); the best K pays only when its range clears plain's."""
    report = SpeedReport("CPU", {}, {}, {}, "m", "k")
    for label, nat, rate in (("plain", None, 1.0), ("draft K=1", 1, fast - 0.1), ("draft K=2", 2, fast)):
        spread = [rate - 0.1, rate, rate + 0.1][:rounds] if rounds > 1 else [rate]
        m = Measurement(label, nat, 1, 1, generated_tokens=100, round_seconds=[100 / (100 * r) for r in spread],
                        speedup=rate)
        report.measurements.append(m)
    assert report.best.num_assistant_tokens == 2 and report.pays is pays
    assert ("num_assistant_tokens on this machine: 2" in report.verdict) is pays
    assert ("does not pay" in report.verdict or "not shown to pay" in report.verdict) is not pays
    assert why in report.verdict
    if not pays:  # the ranges the verdict was judged by are in it (rates x 100 tokens per second)
        assert ("plain 90-110 tok/s, K=2" if rounds > 1 else "plain 100-100 tok/s, K=2") in report.verdict
    assert "target this small" not in report.verdict  # no size known: nothing said of it
    report.target_weight_bytes = 2 << 20
    assert ("on a target this small (2.0 MiB of weights)" in report.verdict) is not pays
    assert tuple(report.as_dict()) == SPEED_FIELDS


def test_peak_memory_is_this_process():
    assert peak_memory_bytes() > 10 * 2**20


@pytest.mark.parametrize("args,message", [
    (["--sweep", "0,2"], "integers from 1 to 16"),
    (["--sweep", "1,x"], "integers from 1 to 16"),
    (["--prompts", "10"], "neither a number"),
    (["--prompts", "missing.txt"], "missing.txt: no such prompts file"),
    (["--sweep", "1,2", "--num-assistant-tokens", "3"], "not both"),
])
def test_bad_options(tmp_path, args, message):
    res = CliRunner().invoke(main, ["verify", str(tmp_path), "--genai", *args])
    assert res.exit_code == 2 and message in res.output


def test_empty_prompts_file(tmp_path):
    (tmp_path / "p.txt").write_text("\n  \n")
    res = CliRunner().invoke(main, ["verify", str(tmp_path), "--genai", "--prompts", str(tmp_path / "p.txt")])
    assert res.exit_code == 2 and "no prompts" in res.output


# --- the KV cache precision the speed runs asked for and ran with -------------------------------------------------

@pytest.mark.usefixtures("no_hang")
def test_the_speed_table_states_the_kv_precision_once():
    from irsurgeon.cli.verify import speed_table

    speed = {"device": "CPU", "device_defaults": {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8"},
             "kv_precision": {"target": "f16", "draft": "f16"},
             "kv_precision_source": {"target": "rt_info runtime_options", "draft": "rt_info runtime_options"},
             "equivalence_properties": {"INFERENCE_PRECISION_HINT": "f32"}, "measurements": [],
             "memory_method": "m", "kv_method": "k", "verdict": "v"}
    lines = speed_table(speed)
    assert lines[:2] == [
        "speed on CPU at the device's default INFERENCE_PRECISION_HINT=f32; KV cache target=f16 draft=f16, as the "
        "IRs' rt_info runtime_options set it (the device's own default, KV_CACHE_PRECISION=u8, applies to an IR that "
        "sets none)",
        "equivalence above ran at INFERENCE_PRECISION_HINT=f32"]
    speed["kv_precision"] = {"target": "u8", "draft": "u8"}
    speed["kv_precision_source"] = {"target": "device default", "draft": "device default"}
    assert speed_table(speed)[0] == ("speed on CPU at the device's default INFERENCE_PRECISION_HINT=f32; KV cache "
                                     "target=u8 draft=u8, the device default")


@pytest.mark.genai
def test_a_tuned_k_is_measured_and_set_beside_what_tune_measured(run):
    """A draft tune chose K=2 for: verify --genai adds K=2 to its sweep and says both speed-ups."""
    assert run.doc["genai"]["tuned"] == {"num_assistant_tokens": 2, "speedup": 1.42, "date": "2026-12-07T20:00:00Z"}
    assert [m["num_assistant_tokens"] for m in run.doc["speed"]["measurements"]] == [None, *TIMED]
    assert "tuned 2026-12-07T20:00:00Z: num_assistant_tokens 2 ran at 1.42x plain generation there" in run.output
