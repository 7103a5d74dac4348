"""The EAGLE-3 draft against optimum-intel 2.2.0's export of the same checkpoint: the same logits over stateful calls,
the same d2t, and a .bin without the vocabulary table optimum's export carries.

tests/data/eagle3 is written by scripts/make_eagle3_reference.py in optimum-intel's own environment (its docstring
has the venv): optimum/ is `optimum-cli export openvino --task text-generation-with-past --trust-remote-code
--weight-format fp32` of fixtures/eagle3/ckpt (openvino_model.xml/.bin only); golden.npz is that IR run for calls of
S = 3, 1, 2 new tokens (KV state carried) after genai's share_vocabulary gave it fixtures/eagle3/target's embedding
table, with the feeds. Both IRs run here in f32 with an f32 KV cache (the plugin's default cache precision moves the
S = 1 logits by ~7e-4). Tolerance: both graphs compute one f32 Llama layer of width 64 from the same f32 weights;
they differ only in op order and fusion (optimum traces torch's ops, irsurgeon builds its own), which moves logits of
O(1) by ~1e-6 (measured 6e-7; optimum's IR against its PyTorch module: 2.2e-6); 1e-4 leaves room for another CPU's
kernels, while a wrong norm or residual moves them by O(0.1) (test_eagle3_draft.py's negative control).
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from helpers.eagle3 import target_embed
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft.build import build_model
from irsurgeon.draft.load import load_with
from irsurgeon.families.eagle3 import model as eagle3
from irsurgeon.families.eagle3 import surgery

TARGET, CKPT = FIXTURE_PAIRS["eagle3"]
DATA = Path(__file__).resolve().parents[2] / "data" / "eagle3"
OPTIMUM = DATA / "optimum" / "openvino_model.xml"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}  # the plugin's default KV cache is not f32
FEEDS = ("input_ids", "position_ids", "attention_mask", "hidden_states", "beam_idx")
TOLERANCE = 1e-4
SMALL_CONSTANTS = 1024  # bytes of shape/axis constants and the one-row placeholder, which each exporter spells its way


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(DATA / "golden.npz", allow_pickle=False) as z:
        return dict(z)


@pytest.fixture(scope="module")
def table(golden) -> np.ndarray:
    t = target_embed(TARGET)
    assert hashlib.sha256(t.tobytes()).hexdigest() == str(golden["table_sha256"]), \
        "fixtures/eagle3/target's table is not the one the golden was made with: rerun make_eagle3_reference.py"
    return t


def calls(golden: dict) -> list[dict[str, np.ndarray]]:
    return [{k: golden[f"c{c}_{k}"] for k in FEEDS} for c in range(len(golden["calls"]))]


def built() -> ov.Model:
    cfg, weights, handle = load_with(eagle3.RECIPE, CKPT, warn=lambda _: None)
    try:
        return build_model(cfg, weights, "f32", warn=lambda _: None, recipe=eagle3.RECIPE)
    finally:
        handle.close()


def with_target_table(model: ov.Model, table: np.ndarray) -> ov.Model:
    """What genai's share_vocabulary does: the draft's embedding Gather reads the target's table."""
    gather = surgery.embedding_gather(model)
    gather.input_value(0).get_node().output(0).replace(ov.opset13.constant(table).output(0))
    model.validate_nodes_and_infer_types()
    return model


def run(model: ov.Model, feeds: list[dict]) -> tuple[list[np.ndarray], np.ndarray]:
    """The calls in order on one request (the KV state carried); each call's logits and the d2t output."""
    request = ov.Core().compile_model(model, "CPU", F32).create_infer_request()
    request.reset_state()
    logits = []
    for feed in feeds:
        request.infer(feed)
        logits.append(request.get_tensor(eagle3.LOGITS).data.copy())
    return logits, request.get_tensor(eagle3.D2T).data.copy()


@pytest.fixture(scope="module")
def ours(golden, table) -> tuple[list[np.ndarray], np.ndarray]:
    return run(with_target_table(built(), table), calls(golden))


def test_logits_match_optimums_export_over_stateful_calls(golden, ours):
    logits, _ = ours
    for c, got in enumerate(logits):
        want = golden[f"c{c}_logits"]
        assert got.shape == want.shape == (1, int(golden["calls"][c]), want.shape[-1])
        assert np.abs(got - want).max() < TOLERANCE, (c, float(np.abs(got - want).max()))


def test_d2t_is_optimums(golden, ours):
    _, d2t = ours
    assert d2t.dtype == golden["d2t"].dtype == np.int64
    assert np.array_equal(d2t, golden["d2t"])


def test_the_kept_export_gives_the_golden_here(golden, table):
    """The golden is the kept IR's output under this openvino: the comparison above is with optimum's IR."""
    logits, d2t = run(with_target_table(ov.Core().read_model(str(OPTIMUM)), table), calls(golden))
    assert max(float(np.abs(x - golden[f"c{c}_logits"]).max()) for c, x in enumerate(logits)) < 1e-5
    assert np.array_equal(d2t, golden["d2t"])


def test_the_draft_bin_is_smaller_by_the_vocabulary_table(tmp_path):
    """optimum's .bin carries embed_tokens [vocab, H] f32 (random: the checkpoint has none), which genai replaces at
    load; irsurgeon's carries a one-row placeholder. Same f32 weights otherwise, so the saving is the table less the
    placeholder row and the exporters' own small constants."""
    target = Path(shutil.copytree(TARGET, tmp_path / "t"))
    result = invoke("patch", target, "--checkpoint", CKPT, "--weight-format", "f32")
    assert result.exit_code == 0, result.output
    ours_bin = (target / "eagle3_draft" / "openvino_model.bin").stat().st_size
    theirs_bin = OPTIMUM.with_suffix(".bin").stat().st_size
    cfg = eagle3.parse_config(json.loads((CKPT / "config.json").read_text()))
    vocab_table = cfg.vocab_size * cfg.hidden_size * 4
    shapes = {}
    for name, xml in (("ours", target / "eagle3_draft" / "openvino_model.xml"), ("optimum", OPTIMUM)):
        data = surgery.embedding_gather(ov.Core().read_model(str(xml))).input_value(0).get_node()
        shapes[name] = (data.get_type_name(), list(data.get_output_shape(0)), data.get_element_type().get_type_name())
    assert shapes == {"ours": ("Constant", [1, cfg.hidden_size], "f32"),
                      "optimum": ("Constant", [cfg.vocab_size, cfg.hidden_size], "f32")}
    assert ours_bin < theirs_bin
    assert theirs_bin - ours_bin >= vocab_table - SMALL_CONSTANTS, (theirs_bin, ours_bin, vocab_table)
