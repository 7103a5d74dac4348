"""patch's one-step check runs the staged head (or DFlash draft) with its feed-forward matrices narrowed: still the
staged graph, and still failing on a broken one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from irsurgeon.draft.build import build_model

from irsurgeon.draft.load import load_with
from irsurgeon.flows.standalone import load_mtp
from irsurgeon.core.errors import IRError
from irsurgeon.quant.compress import compress_model, resolve_params
from irsurgeon.families.qwen35_mtp.smoke import smoke_test
from irsurgeon.ir.narrow import SMOKE_WIDTH, feed_forward, narrow_feed_forward


def staged(ckpt_dir, tmp_path, fmt="f16", edit=None):
    """The head of a reference checkpoint written as patch stages it; `edit(weights)` changes float32 tensors first."""
    cfg, lazy, handle = load_mtp(ckpt_dir)
    weights = {name: lazy[name] for name in lazy}
    handle.close()
    if edit:
        edit(weights)
    xml = tmp_path / "openvino_mtp_model.xml"
    ov.save_model(build_model(cfg, weights, fmt), xml, compress_to_fp16=False)
    return xml, cfg


@pytest.mark.parametrize("name, cut", [("qwen35-dense", 3), ("qwen35-moe", 6)])
def test_narrowing_keeps_every_op_and_cuts_only_the_feed_forward(ckpt, tmp_path, name, cut):
    xml, cfg = staged(ckpt(name), tmp_path)
    model = ov.Core().read_model(xml)
    before = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
    assert narrow_feed_forward(model) == cut
    assert {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()} == before
    widths = [op.get_output_shape(0) for op in model.get_ops()
              if op.get_type_name() == "Constant" and op.get_friendly_name().endswith("proj.weight")
              and ".mlp." in op.get_friendly_name()]
    assert len(widths) == cut and all(SMOKE_WIDTH in list(s) for s in widths)
    smoke_test(xml, cfg)  # a sound head passes


@pytest.mark.parametrize("name, fmt, group, cut", [("qwen35-dense", "int4", None, 3), ("qwen35-dense", "int8", None, 3),
                                                  ("qwen35-moe", "int4", None, 3), ("qwen35-moe", "int8", None, 6),
                                                  ("qwen35-moe", "int4", 16, 6)])
def test_nncf_compressed_feed_forward_is_narrowed_too(ckpt, tmp_path, name, fmt, group, cut):
    """int4 (grouped, with zero points) and int8 (per channel) matrices are cut with their scales, zero points and
    Reshape, whole groups at a time: the same ops, the three matrices of an MLP at one width, and the step runs.
    The MoE int4 head's shared expert (intermediate 32, its down_proj in groups of 32) has no narrower shape and is
    left whole; in groups of 16 it is cut to one group."""
    cfg, lazy, handle = load_mtp(ckpt(name))
    model = build_model(cfg, lazy, "f16")
    handle.close()
    model, _ = compress_model(model, resolve_params(fmt, group_size=group))
    xml = tmp_path / "openvino_mtp_model.xml"
    ov.save_model(model, xml, compress_to_fp16=False)
    model = ov.Core().read_model(xml)
    before = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
    full = {mlp: {m.width for m in matrices} for mlp, matrices in feed_forward(model).items()}
    assert narrow_feed_forward(model) == cut
    assert {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()} == before
    widths = {mlp: {m.width for m in matrices} for mlp, matrices in feed_forward(model).items()}
    cut_to = [w for mlp, w in widths.items() if w != full[mlp]]
    assert 3 * len(cut_to) == cut and all(w in ({SMOKE_WIDTH}, {group}) for w in cut_to), (full, widths)
    smoke_test(xml, cfg)


@pytest.mark.parametrize("name, tensor", [("qwen35-dense", "layers.0.self_attn.q_proj.weight"),
                                          ("qwen35-dense", "layers.0.mlp.down_proj.weight"),
                                          ("qwen35-moe", "layers.0.mlp.experts.gate_proj.weight"),
                                          ("qwen35-moe", "fc.weight")])
def test_a_non_finite_weight_still_fails_the_check(ckpt, tmp_path, name, tensor):
    """NaN at the start of a matrix (inside what the narrowed check runs) makes the step non-finite. An f32 head: in
    an f16 one openvino's compression would clamp NaN to f16's largest value."""
    def poison(weights):
        weights[tensor] = weights[tensor].copy()
        weights[tensor].reshape(-1)[:4] = np.nan
    xml, cfg = staged(ckpt(name), tmp_path, fmt="f32", edit=poison)
    with pytest.raises(IRError, match=r"NaN or Inf value\(s\) among its \d+ outputs"):
        smoke_test(xml, cfg)


DFLASH_CKPT = Path(__file__).resolve().parents[1] / "fixtures" / "dflash" / "ckpt"


def staged_dflash(tmp_path, edit=None):
    """The bundled DFlash draft built f32 and written as patch stages it; `edit(weights)` as in staged()."""
    from irsurgeon.families.dflash.model import RECIPE

    cfg, lazy, handle = load_with(RECIPE, DFLASH_CKPT)
    weights = {name: lazy[name] for name in lazy}
    handle.close()
    if edit:
        edit(weights)
    xml = tmp_path / "openvino_model.xml"
    ov.save_model(build_model(cfg, weights, "f32", recipe=RECIPE), xml, compress_to_fp16=False)
    return xml, cfg


def test_dflash_check_narrows_each_layers_mlp_and_passes_a_sound_draft(tmp_path):
    from irsurgeon.families.dflash.patch import smoke_test as dflash_smoke_test

    xml, cfg = staged_dflash(tmp_path)
    model = ov.Core().read_model(xml)
    before = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
    assert narrow_feed_forward(model) == 3 * len(cfg.layers)
    assert {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()} == before
    dflash_smoke_test(xml, cfg)


@pytest.mark.parametrize("tensor", ["fc.weight", "layers.1.self_attn.v_proj.weight", "layers.0.mlp.up_proj.weight"])
def test_dflash_check_still_fails_on_a_non_finite_weight(tmp_path, tensor):
    from irsurgeon.families.dflash.patch import smoke_test as dflash_smoke_test

    def poison(weights):
        weights[tensor] = weights[tensor].copy()
        weights[tensor].reshape(-1)[:4] = np.nan
    xml, cfg = staged_dflash(tmp_path, edit=poison)
    with pytest.raises(IRError, match=r"gave \d+ NaN or Inf value\(s\) among its \d+ outputs"):
        dflash_smoke_test(xml, cfg)


def test_the_one_call_check_names_the_staged_file_as_the_user_spelled_it_and_what_is_wrong(tmp_path):
    """Not /proc/self/fd/N/... (the held staging folder's path) and not a shape compared with itself."""
    from irsurgeon.commit.transaction import DirectoryTransaction
    from irsurgeon.draft.save import check_call
    from lab.families import WRITABLE
    with DirectoryTransaction(tmp_path, writable=WRITABLE) as tx:
        staged = tx.stage("dflash_draft/openvino_model.xml")
        assert str(staged).startswith("/proc/")
        with pytest.raises(IRError) as nonfinite:
            check_call(staged, "outputs", np.array([[1.0, np.nan, np.inf]]), (1, 3))
        with pytest.raises(IRError) as shape:
            check_call(staged, "outputs", np.zeros((1, 2)), (1, 3))
    assert str(nonfinite.value).startswith(str(tmp_path / ".irsurgeon-staging")), nonfinite.value
    assert "2 NaN or Inf value(s) among its 3 outputs" in str(nonfinite.value)
    assert "of shape (1, 2), expected (1, 3)" in str(shape.value) and "/proc/" not in str(shape.value)

