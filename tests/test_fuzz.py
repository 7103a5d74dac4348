"""Fuzzing the commands with mutated inputs: config.json, safetensors headers, index files, IR XML, for every
registered family.

Each example copies a family's pristine folder (lab.hostile.make_family_folder: its bundled checkpoint, single
file and sharded with an index, its target, and the target patched with it), mutates one input with a seeded random
generator, and runs one command that reads it (`show`, `build-mtp` for a family whose draft stands alone,
`annotate`, `patch`, and `verify` on the patched copy) through click's CliRunner. The inputs (`kinds`) come from the
family's layout: the checkpoint's config and weights, the index and the draft's shard, the target's config and IR,
the draft IR of the patched directory and the net-level rt_info of its target IR (the annotation), where the
family rewrites that IR. Whatever the input, the outcome must be success or exit 1 with exactly one `Error: ...`
line (an irsurgeon error: no traceback, no "unexpected" fallback), the checkpoint must be unchanged, the target
unchanged unless the command succeeded in writing it, and nothing may appear outside the output folder.
The default run is seeded and bounded (5 inputs a kind: a sample, every kind of every family); IRSURGEON_FUZZ_EXAMPLES
raises the count (the slow variant uses 16x: 80 inputs a kind).
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.fuzz import KINDS, TARGETS, Bench, Tally
from irsurgeon.families import registry
from helpers.tiers import every_nth

EXAMPLES = int(os.environ.get("IRSURGEON_FUZZ_EXAMPLES", "5"))


@pytest.fixture(scope="module")
def bench(tmp_path_factory, pristine) -> Bench:
    return Bench(tmp_path_factory.mktemp("fuzz"), pristine)


def fuzz(bench: Bench, key: str, kind: str, examples: int) -> Tally:
    tally = Tally()
    commands = KINDS[key][kind].commands

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 2 ** 32 - 1), command=st.sampled_from(commands))
    def run(seed: int, command: str) -> None:
        bench.example(key, kind, seed, command, tally)

    run()
    return tally


@pytest.mark.parametrize("key, kind", every_nth(TARGETS, 3, ids=lambda t: f"{t[0]}-{t[1]}"))  # the rest: extended
def test_fuzz(bench, key, kind):
    tally = fuzz(bench, key, kind, EXAMPLES)
    assert not tally.problems, "\n".join(tally.problems)
    assert tally.inputs >= min(EXAMPLES, 10) and tally.refused > 0


def test_every_family_is_fuzzed():
    assert {f.key for f in registry.FAMILIES} <= {key for key, _ in TARGETS}, "a family without a bundled pair"
    for family in registry.FAMILIES:
        assert {"ckpt-config", "safetensors", "target-config", "ir-xml", "draft-xml"} <= set(KINDS[family.key])


@pytest.mark.slow
@pytest.mark.parametrize("key, kind", TARGETS, ids=[f"{k}-{kind}" for k, kind in TARGETS])
def test_fuzz_long(bench, key, kind):
    tally = fuzz(bench, key, kind, EXAMPLES * 16)
    assert not tally.problems, "\n".join(tally.problems)
