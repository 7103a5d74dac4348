"""The Gemma 4 assistant compressed to mirror its target: `--weight-format auto` on an int4 target gives an int4
assistant whose lm_head (centroids, tied embedding table) stays float; explicit f16 stays as before; an int4 pair runs
in openvino-genai token-identical to target-only greedy with drafts accepted."""
from __future__ import annotations


import openvino as ov
import pytest
from click.testing import CliRunner

from helpers.gemma4 import copy_pair, genai_report
from irsurgeon.cli import main as cli
from irsurgeon.quant.compress import DEFAULTS, compress_model
from irsurgeon.ir.storage import weight_summary

FLOAT = {"masked_embedding.centroids.weight", "model.embed_tokens.weight"}


def int4_target(tmp):
    """A copy of the fixture pair whose target openvino_model.xml/.bin nncf compressed to int4 (group 64)."""
    target, source = copy_pair(tmp)
    xml = target / "openvino_model.xml"
    model, _ = compress_model(ov.Core().read_model(str(xml)), DEFAULTS, keep_float=())
    for name in ("openvino_model.xml", "openvino_model.bin"):
        (target / name).unlink()
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return target, source


def patch(target, source, *extra):
    result = CliRunner().invoke(cli, ["patch", str(target), "--checkpoint", str(source), *extra])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def int4_pair(tmp_path_factory):
    target, source = int4_target(tmp_path_factory.mktemp("g4int4"))
    out = patch(target, source)
    return target, out


def assistant_weights(target):
    return {w.name: w for w in weight_summary(ov.Core().read_model(str(target / "mtp_assistant/openvino_model.xml"))
                                              ).weights}


def test_auto_on_an_int4_target_gives_an_int4_assistant_with_a_float_lm_head(int4_pair):
    target, out = int4_pair
    assert "auto: int4" in out and "compressed" in out
    weights = assistant_weights(target)
    assert {n for n, w in weights.items() if w.bits is None and w.consumer_type in ("MatMul", "Gather")} >= FLOAT
    assert all(weights[n].element_type == "f16" for n in FLOAT)
    assert weights["pre_projection.weight"].bits == 4 and weights["model.layers.1.mlp.up_proj.weight"].bits == 4
    assert CliRunner().invoke(cli, ["verify", str(target)]).exit_code == 0


def test_explicit_f16_is_unchanged_by_an_int4_target(tmp_path):
    """f16 asked for is built as f16 whatever the target, byte-identical to the f16 build of a float target."""
    f32_target, source = copy_pair(tmp_path / "a")
    int4, source4 = int4_target(tmp_path / "b")
    patch(f32_target, source, "--weight-format", "f16")
    patch(int4, source4, "--weight-format", "f16")
    for name in ("openvino_model.xml", "openvino_model.bin"):
        assert (f32_target / "mtp_assistant" / name).read_bytes() == (int4 / "mtp_assistant" / name).read_bytes()
    assert all(w.bits is None and w.element_type == "f16" for w in assistant_weights(int4).values()
               if w.consumer_type == "MatMul")


def test_int8_is_per_channel_and_auto_on_a_float_target_mirrors_it(tmp_path):
    target, source = copy_pair(tmp_path)
    out = patch(target, source, "--weight-format", "int8")
    weights = assistant_weights(target)
    assert weights["pre_projection.weight"].bits == 8 and weights["model.embed_tokens.weight"].bits is None
    float_target, source2 = copy_pair(tmp_path / "f")
    assert "auto: f32" in patch(float_target, source2) and "compressed" in out
    assert all(w.element_type == "f32" for w in assistant_weights(float_target).values() if w.bits is None
               and w.consumer_type == "MatMul")


@pytest.mark.genai
@pytest.mark.slow
def test_genai_runs_the_int4_pair_token_identical_with_drafts_accepted(int4_pair):
    report = genai_report(int4_pair[0])
    assert report["genai"]["properties"]["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == "0"
    runs = report["genai"]["runs"]
    drafted, accepted = sum(r["draft_tokens"] for r in runs), sum(r["accepted"] for r in runs)
    print(f"int4 pair: {sum(r['identical'] for r in runs)}/{len(runs)} identical, drafts accepted {accepted}/{drafted}")
    assert len(runs) == 3 * 4 and all(r["identical"] and r["tokens"] == 40 for r in runs)
    assert drafted > 0 and accepted > 0.5 * drafted
