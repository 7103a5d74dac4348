"""The only place an MTP `ov.Model` is made and written: checkpoint -> weights -> graph -> model -> files."""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops

import irsurgeon
from irsurgeon import contract, limits, rtinfo
from irsurgeon.config import MTPConfig, load_config
from irsurgeon.errors import CheckpointError, OutputError
from irsurgeon.models.qwen35_mtp import Inputs, mtp_head
from irsurgeon.ops.core import WeightFormat, weight
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import MTP_PREFIX, dense_shapes, load_weights


def expected_shapes(cfg: MTPConfig) -> dict[str, tuple[int, ...]]:
    if cfg.is_moe:
        from irsurgeon.weights.moe import moe_shapes
        return moe_shapes(cfg)
    return dense_shapes(cfg)


def load_mtp(checkpoint: str | Path, config: str | Path | None = None, allow_nonfinite: bool = False,
             warn=print) -> tuple[MTPConfig, dict[str, np.ndarray], Checkpoint]:
    """Open a checkpoint, validate its config, and load the `mtp.*` tensors (only their shards are opened)."""
    ckpt = Checkpoint.open(checkpoint, config)
    if ckpt.config_path is None or not ckpt.config_path.exists():  # a FIFO or device is refused by its reader
        raise CheckpointError(f"{checkpoint}: no config.json beside the weights; pass --config")
    try:
        cfg = load_config(ckpt.config_path)
        if cfg.is_moe:
            from irsurgeon.weights.moe import load_moe_weights
            weights = load_moe_weights(ckpt, cfg, allow_nonfinite, warn)
        else:
            weights = load_weights(ckpt, expected_shapes(cfg), cfg, allow_nonfinite, warn)
        # the headers now match the config; no tensor is read yet, and none is if the head cannot fit
        limits.check_memory(memory_need(expected_shapes(cfg)), f"{checkpoint}: building its MTP head",
                            CheckpointError)
    except BaseException:
        ckpt.close()
        raise
    return cfg, weights, ckpt


def memory_need(shapes: dict[str, tuple[int, ...]]) -> int:
    """A lower bound of a build's peak memory: every weight kept at 2 bytes (f16 is the smallest form a head is
    built in; int4/int8 are compressed from it) and the largest one decoded to float32 at the same time."""
    sizes = [math.prod(s) for s in shapes.values()]
    return 2 * sum(sizes) + 4 * max(sizes, default=0)


def make_parameters(cfg: MTPConfig) -> tuple[list[ov.Node], Inputs]:
    params = []
    for port in contract.INPUTS:
        p = ops.parameter(contract.partial_shape(port, cfg.hidden_size), port.dtype, name=port.name)
        p.output(0).set_names({port.name})
        params.append(p)
    return params, Inputs(*(p.output(0) for p in params))


def build_model(cfg: MTPConfig, weights: dict[str, np.ndarray], fmt: str | WeightFormat = WeightFormat.F16) -> ov.Model:
    """The stateful MTP head as an ov.Model from float32 weights keyed by their names relative to `mtp.`."""
    fmt = WeightFormat(fmt)
    params, inputs = make_parameters(cfg)

    def w(name: str) -> ov.Output:
        return weight(weights[name[len(MTP_PREFIX):]], name, fmt)

    out, sinks = mtp_head(inputs, w, cfg)
    result = ops.result(out)
    result.set_friendly_name(contract.OUTPUT)
    result.output(0).get_tensor().set_names({contract.OUTPUT})
    out.set_names({contract.OUTPUT})
    model = ov.Model([result], sinks, params, "qwen3_5_mtp")
    model.set_rt_info("True", rtinfo.MTP_MODE)
    return model


def build_mtp_model(checkpoint: str | Path, config: str | Path | None = None,
                    weight_format: str | WeightFormat = WeightFormat.F16, allow_nonfinite: bool = False,
                    warn=print) -> ov.Model:
    """Build the MTP head of a checkpoint directory (or a .safetensors file with its config.json)."""
    fmt = WeightFormat(weight_format)
    cfg, weights, ckpt = load_mtp(checkpoint, config, allow_nonfinite, warn)
    try:
        model = build_model(cfg, weights, fmt)
    finally:
        ckpt.close()
    rtinfo.set_provenance(model, version=irsurgeon.__version__, source=str(checkpoint), weight_format=fmt.value,
                          model_type=cfg.model_type)
    return model


def name_anonymous_nodes(model: ov.Model) -> None:
    """Name every node left with openvino's default name after its position; keep only the I/O tensor names.

    Default node names (and the tensor names openvino's compression pass copies from them) embed a process-wide
    instance counter, so without this two identical builds in one process serialize differently.
    """
    public = {n for port in [*model.inputs, *model.outputs] for n in port.get_names()}
    counts: dict[str, int] = {}
    for node in model.get_ordered_ops():
        for out in node.outputs():
            if out.get_names() - public:
                out.get_tensor().set_names(out.get_names() & public)
        if node.get_friendly_name() != node.get_name():
            continue
        kind = node.get_type_name()
        counts[kind] = counts.get(kind, 0) + 1
        node.set_friendly_name(f"{kind}_{counts[kind]}")


def save_mtp_model(model: ov.Model, out_dir: str | Path, stem: str = "openvino_mtp_model") -> Path:
    """Write `<stem>.xml/.bin` into out_dir: staged in a temporary folder there, then renamed into place.

    Weights are written exactly as built (no implicit fp16 compression). On failure nothing is left behind.
    """
    out_dir = Path(out_dir)
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".irsurgeon-", dir=out_dir))
    except OSError as e:
        raise OutputError(f"{out_dir}: cannot create output directory: {e.strerror}") from None
    try:
        xml = stage / f"{stem}.xml"
        name_anonymous_nodes(model)
        ov.save_model(model, xml, compress_to_fp16=False)
        for f in (xml, xml.with_suffix(".bin")):
            with open(f, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(xml.with_suffix(".bin"), out_dir / f"{stem}.bin")
        os.replace(xml, out_dir / f"{stem}.xml")
    except (OSError, RuntimeError) as e:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise OutputError(f"{out_dir}: cannot write {stem}.xml/.bin: {e}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out_dir / f"{stem}.xml"
