"""The MoE head's tensors: every expert layout real releases use, detected from the names, loaded into one layout.

Stored layouts of the routed experts (E experts, I = moe_intermediate_size, H = hidden_size), names under
`mtp.layers.0.mlp.`:
    fused       experts.gate_up_proj [E, 2I, H] (gate rows first), experts.down_proj [E, H, I]
    per_expert  experts.<e>.gate_proj.weight [I, H], experts.<e>.up_proj.weight [I, H],
                experts.<e>.down_proj.weight [H, I]                                      for e = 0 .. E-1
Any float tensor may instead be FP8 (`float8_e4m3fn`) with a companion `<name>_scale_inv` holding one scale per
b0 x b1 block (`quantization_config.weight_block_size`, 128 x 128 in the official FP8 releases):
    W[..., i, j] = fp8(W)[..., i, j] * scale_inv[..., i // b0, j // b1]
The loaded (canonical) layout stacks each projection over the experts, the form the graph consumes:
    experts.gate_proj.weight [E, I, H], experts.up_proj.weight [E, I, H], experts.down_proj.weight [E, H, I]
plus the router `gate.weight [E, H]`, the shared expert and its `shared_expert_gate.weight [1, H]`.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from irsurgeon.config import MTPConfig, read_json, text_section
from irsurgeon.errors import CheckpointError, ConfigError
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import (LAYER, MTP_PREFIX, LazyWeights, _common_shapes, check_dtype, check_tensor_set,
                                    finite, transform)

MLP = f"{LAYER}mlp."
EXPERTS = f"{MLP}experts."
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
SCALE_SUFFIX = "_scale_inv"
FP8_DTYPE = "F8_E4M3"
DEFAULT_BLOCK = (128, 128)
PER_EXPERT = re.compile(re.escape(EXPERTS) + r"(\d+)\.(\w+)\.weight$")


def expert_shapes(cfg: MTPConfig) -> dict[str, tuple[int, int]]:
    """One expert's [out, in] per projection."""
    H, I = cfg.hidden_size, cfg.moe.expert_size
    return {"gate_proj": (I, H), "up_proj": (I, H), "down_proj": (H, I)}


def moe_shapes(cfg: MTPConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor `load_moe_weights` returns, in the canonical layout, with its shape."""
    H, E, SI = cfg.hidden_size, cfg.moe.num_experts, cfg.moe.shared_expert_size
    return {
        **_common_shapes(cfg),
        **_router_and_shared(H, E, SI),
        **{f"{EXPERTS}{p}.weight": (E, *shape) for p, shape in expert_shapes(cfg).items()},
    }


def _router_and_shared(H: int, E: int, SI: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{MLP}gate.weight": (E, H),
        f"{MLP}shared_expert.gate_proj.weight": (SI, H),
        f"{MLP}shared_expert.up_proj.weight": (SI, H),
        f"{MLP}shared_expert.down_proj.weight": (H, SI),
        f"{MLP}shared_expert_gate.weight": (1, H),
    }


def stored_shapes(cfg: MTPConfig, layout: str) -> dict[str, tuple[int, ...]]:
    """The tensors a checkpoint of `layout` must hold (FP8 scales aside), with their shapes."""
    H, I, E = cfg.hidden_size, cfg.moe.expert_size, cfg.moe.num_experts
    shapes = {**_common_shapes(cfg), **_router_and_shared(H, E, cfg.moe.shared_expert_size)}
    if layout == "fused":
        shapes[f"{EXPERTS}gate_up_proj"] = (E, 2 * I, H)
        shapes[f"{EXPERTS}down_proj"] = (E, H, I)
    else:
        for e in range(E):
            for p, shape in expert_shapes(cfg).items():
                shapes[f"{EXPERTS}{e}.{p}.weight"] = shape
    return shapes


def detect_layout(names: set[str], cfg: MTPConfig, root: object) -> str:
    """'fused' or 'per_expert', from the tensor names (relative to `mtp.`); a mixture or neither is an error."""
    fused = sorted(n for n in names if n in (f"{EXPERTS}gate_up_proj", f"{EXPERTS}down_proj"))
    per_expert = sorted(n for n in names if PER_EXPERT.match(n))
    if fused and per_expert:
        raise CheckpointError(f"{root}: experts mix the fused layout ({MTP_PREFIX}{fused[0]}) and the per-expert "
                              f"layout ({MTP_PREFIX}{per_expert[0]}); expected exactly one")
    if per_expert:
        _check_expert_indices(per_expert, cfg, root)
        return "per_expert"
    if fused:
        return "fused"
    raise CheckpointError(f"{root}: no routed experts found: expected {MTP_PREFIX}{EXPERTS}gate_up_proj + "
                          f"down_proj (fused) or {MTP_PREFIX}{EXPERTS}<e>.{{gate,up,down}}_proj.weight (per expert)")


def _check_expert_indices(per_expert: list[str], cfg: MTPConfig, root: object) -> None:
    E = cfg.moe.num_experts
    for name in per_expert:
        index, proj = PER_EXPERT.match(name).groups()
        if int(index) >= E or proj not in PROJECTIONS or index != str(int(index)):
            raise CheckpointError(f"{root}: tensor {MTP_PREFIX}{name} is not one of experts 0..{E - 1} "
                                  f"(num_experts {E}) x {{gate,up,down}}_proj")
    present = set(per_expert)
    found = {int(PER_EXPERT.match(n).group(1)) for n in per_expert}
    for e in range(E):
        for p in PROJECTIONS:
            if f"{EXPERTS}{e}.{p}.weight" not in present:
                raise CheckpointError(f"{root}: missing expert {e} of {E}: no tensor "
                                      f"{MTP_PREFIX}{EXPERTS}{e}.{p}.weight"
                                      + ("" if e in found else " (the whole expert is absent)"))


def block_size(ckpt: Checkpoint) -> tuple[int, int]:
    """FP8 block size from config.json `quantization_config.weight_block_size`, else 128 x 128."""
    try:
        cfg = read_json(ckpt.config_path)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    qc = cfg.get("quantization_config") or text_section(cfg).get("quantization_config") or {}
    block = qc.get("weight_block_size", list(DEFAULT_BLOCK)) if isinstance(qc, dict) else list(DEFAULT_BLOCK)
    if not (isinstance(block, list) and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise CheckpointError(f"{ckpt.config_path}: quantization_config.weight_block_size must be two positive "
                              f"integers, found {block!r}")
    return block[0], block[1]


def dequantize_blocks(values: np.ndarray, scale_inv: np.ndarray, block: tuple[int, int], name: str) -> np.ndarray:
    """values [..., O, I] * scale_inv [..., ceil(O/b0), ceil(I/b1)] broadcast over b0 x b1 blocks."""
    *lead, rows, cols = values.shape
    want = (*lead, -(-rows // block[0]), -(-cols // block[1]))
    if scale_inv.shape != want:
        raise CheckpointError(f"tensor {MTP_PREFIX}{name}{SCALE_SUFFIX}: expected shape {list(want)} for "
                              f"{list(values.shape)} in {block[0]}x{block[1]} blocks, found {list(scale_inv.shape)}")
    full = np.repeat(np.repeat(scale_inv.astype(np.float32), block[0], axis=-2), block[1], axis=-1)
    return values * full[..., :rows, :cols]


def split_scales(names: set[str], ckpt: Checkpoint) -> tuple[set[str], set[str]]:
    """(weights, names that carry an FP8 scale); every FP8 tensor needs its scale and every scale its FP8 tensor."""
    scales = {n for n in names if n.endswith(SCALE_SUFFIX)}
    weights = names - scales
    for s in sorted(scales):
        base = s[: -len(SCALE_SUFFIX)]
        if base not in weights or ckpt.info(MTP_PREFIX + base).dtype != FP8_DTYPE:
            raise CheckpointError(f"tensor {MTP_PREFIX}{s}: block scale without a {FP8_DTYPE} tensor "
                                  f"{MTP_PREFIX}{base} to scale")
    for w in sorted(weights):
        if ckpt.info(MTP_PREFIX + w).dtype == FP8_DTYPE and w + SCALE_SUFFIX not in scales:
            raise CheckpointError(f"tensor {MTP_PREFIX}{w}: stored as {FP8_DTYPE} but "
                                  f"{MTP_PREFIX}{w}{SCALE_SUFFIX} (its block scales) is missing")
    return weights, {s[: -len(SCALE_SUFFIX)] for s in scales}


def read_tensor(ckpt: Checkpoint, name: str, scaled: set[str], block: tuple[int, int] | None,
                allow_nonfinite: bool = False, warn=print) -> np.ndarray:
    """One tensor as float32: FP8 dequantized by its block scales, the table's transforms applied, finite."""
    w = np.asarray(ckpt.get(MTP_PREFIX + name), dtype=np.float32)
    if name in scaled:
        w = dequantize_blocks(w, np.asarray(ckpt.get(MTP_PREFIX + name + SCALE_SUFFIX)), block, name)
    return finite(MTP_PREFIX + name, transform(name, w), allow_nonfinite, warn)


def load_moe_weights(ckpt: Checkpoint, cfg: MTPConfig, allow_nonfinite: bool = False,
                     warn=print) -> LazyWeights:
    """All `mtp.*` tensors of a MoE head as float32 (decoded when read), in the canonical layout of `moe_shapes`."""
    names = {n[len(MTP_PREFIX):] for n in ckpt.names(MTP_PREFIX)}
    if not names:
        raise CheckpointError(f"{ckpt.root}: no '{MTP_PREFIX}*' tensors: this checkpoint carries no MTP head")
    names, scaled = split_scales(names, ckpt)
    layout = detect_layout(names, cfg, ckpt.root)
    expected = stored_shapes(cfg, layout)
    check_tensor_set(ckpt, expected, names, f"{layout} expert layout")
    for name in expected:
        check_dtype(ckpt, MTP_PREFIX + name, cfg)
    block = block_size(ckpt) if scaled else None

    def read(name: str) -> Callable[[], np.ndarray]:
        return lambda: read_tensor(ckpt, name, scaled, block, allow_nonfinite, warn)

    readers = {n: read(n) for n in expected if not n.startswith(EXPERTS)}
    if layout == "fused":
        gate_up, I = read(f"{EXPERTS}gate_up_proj"), cfg.moe.expert_size
        readers[f"{EXPERTS}gate_proj.weight"] = lambda: np.ascontiguousarray(gate_up()[:, :I])
        readers[f"{EXPERTS}up_proj.weight"] = lambda: np.ascontiguousarray(gate_up()[:, I:])
        readers[f"{EXPERTS}down_proj.weight"] = read(f"{EXPERTS}down_proj")
        return LazyWeights(readers)

    def stacked(p: str, shape: tuple[int, int]) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            out = np.empty((cfg.moe.num_experts, *shape), np.float32)
            for e in range(cfg.moe.num_experts):
                out[e] = read(f"{EXPERTS}{e}.{p}.weight")()
            return out
        return make
    for p, shape in expert_shapes(cfg).items():
        readers[f"{EXPERTS}{p}.weight"] = stacked(p, shape)
    return LazyWeights(readers)
