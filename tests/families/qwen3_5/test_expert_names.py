"""Per-expert tensor names against the loader's rules, generated: any set of `experts.<i>.<proj>.weight` names is
accepted exactly when it is the full canonical set, and refused in one line naming what is wrong.

The checkpoints are header-only (tests/helpers/checkpoints.write_header_only): the tensor-set checks read names,
shapes and dtypes only, so nothing is decoded.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irsurgeon.flows.standalone import load_mtp
from irsurgeon.core.errors import CheckpointError
from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint
from irsurgeon.weights.safetensors_io import SafetensorsFile
from helpers.checkpoints import write_header_only

SPEC = SynthSpec(num_experts=4, top_k=2, expert_size=32, shared_expert_size=24)
E, I, H = SPEC.num_experts, SPEC.expert_size, SPEC.hidden
EXPERTS = "mtp.layers.0.mlp.experts."
PROJECTIONS = {"gate_proj": [I, H], "up_proj": [I, H], "down_proj": [H, I]}  # table order
# index spellings beyond 0..E-1: out of range, non-canonical, or not an index at all
ODD = ["4", "01", "00", "+1", "-1", "1e0", " 1", "\u0661", "9" * 30, "9" * 5000]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, tuple[str, list[int]]]:
    """The non-expert tensors of a MoE head (name -> (dtype, shape)) and its config, in a folder."""
    d = tmp_path_factory.mktemp("moe")
    write_checkpoint(d, SPEC, seed=3)
    f = SafetensorsFile(d / "model.safetensors")
    tensors = {n: (i.dtype, list(i.shape)) for n, i in f.tensors.items() if not n.startswith(EXPERTS)}
    f.close()
    return {"dir": d, "tensors": tensors}


def full_set() -> set[tuple[str, str]]:
    return {(str(e), p) for e in range(E) for p in PROJECTIONS}


edits = st.tuples(st.sets(st.sampled_from(sorted(full_set()))),  # dropped
                  st.sets(st.tuples(st.sampled_from(ODD), st.sampled_from(sorted(PROJECTIONS))), max_size=2))


def first_gap(names: set[tuple[str, str]]) -> tuple[int, str, bool]:
    """(expert, projection, whole expert absent) the loader must name first: lowest expert, then table order."""
    for e in range(E):
        for p in PROJECTIONS:
            if (str(e), p) not in names:
                return e, p, not any((str(e), q) in names for q in PROJECTIONS)
    raise AssertionError("no gap")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(change=edits)
def test_expert_name_sets_are_accepted_only_when_complete(base, change):
    dropped, added = change
    names = (full_set() - dropped) | added
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        shutil.copy(base["dir"] / "config.json", d / "config.json")
        write_header_only(d / "model.safetensors", {**base["tensors"], **{
            f"{EXPERTS}{i}.{p}.weight": ("BF16", PROJECTIONS[p]) for i, p in names}})
        if names == full_set():
            load_mtp(d)[2].close()
            return
        with pytest.raises(CheckpointError) as err:
            load_mtp(d)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400 + len(max(ODD, key=len)), message
    # digit spellings are this layout's names with a bad index: named before any gap; other spellings are
    # foreign names, refused as unexpected once the set has no gap
    bad_index = {(i, p) for i, p in added if i.isdigit()}
    if not (names & full_set()) and not bad_index:
        assert "no routed experts found" in message, message
    elif bad_index or not dropped:
        assert any(f"experts.{i}.{p}.weight" in message for i, p in bad_index or added), message
    else:
        e, p, whole = first_gap(names)
        assert f"missing expert {e} of {E}: no tensor {EXPERTS}{e}.{p}.weight" in message, message
        assert ("whole expert" in message) == whole, message
