"""The MoE head's tensors: every expert layout real releases use, detected from the names, loaded into one layout.

Stored layouts of the routed experts (E experts, I = moe_intermediate_size, H = hidden_size), names under
`mtp.layers.0.mlp.`:
    fused       experts.gate_up_proj [E, 2I, H] (gate rows first), experts.down_proj [E, H, I]
    per_expert  experts.<e>.gate_proj.weight [I, H], experts.<e>.up_proj.weight [I, H],
                experts.<e>.down_proj.weight [H, I]                                      for e = 0 .. E-1
Any matrix may instead be FP8 block-scaled (`fp8.py`, read through `spec.read_tensor` as in the dense head).
The loaded (canonical) layout stacks each projection over the experts, the form the graph consumes:
    experts.gate_proj.weight [E, I, H], experts.up_proj.weight [E, I, H], experts.down_proj.weight [E, H, I]
plus the router `gate.weight [E, H]`, the shared expert and its `shared_expert_gate.weight [1, H]`.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from irsurgeon.config import MTPConfig
from irsurgeon.errors import CheckpointError
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.half import Tally, round_slice
from irsurgeon.weights.spec import (LAYER, MTP_PREFIX, LazyWeights, Stored, _common_shapes, check_dtypes,
                                    check_tensor_set, inspect_stored, read_half, read_tensor, round_rows)

MLP = f"{LAYER}mlp."
EXPERTS = f"{MLP}experts."
PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
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


def load_moe_weights(ckpt: Checkpoint, cfg: MTPConfig, allow_nonfinite: bool = False,
                     warn=print) -> LazyWeights:
    """All `mtp.*` tensors of a MoE head as float32 (decoded when read), in the canonical layout of `moe_shapes`."""
    stored = inspect_stored(ckpt)
    layout = detect_layout(stored.names, cfg, ckpt.root)
    expected = stored_shapes(cfg, layout)
    check_tensor_set(ckpt, expected, stored.names, f"{layout} expert layout")
    check_dtypes(ckpt, expected, stored, cfg, warn)

    def read(name: str) -> Callable[[], np.ndarray]:
        return lambda: read_tensor(ckpt, name, stored, allow_nonfinite, warn)

    readers = {n: read(n) for n in expected if not n.startswith(EXPERTS)}
    halves = {n: (lambda n=n: read_half(ckpt, n, stored)) for n in readers}
    if layout == "fused":
        gate_up, I = read(f"{EXPERTS}gate_up_proj"), cfg.moe.expert_size
        readers[f"{EXPERTS}gate_proj.weight"] = lambda: np.ascontiguousarray(gate_up()[:, :I])
        readers[f"{EXPERTS}up_proj.weight"] = lambda: np.ascontiguousarray(gate_up()[:, I:])
        readers[f"{EXPERTS}down_proj.weight"] = read(f"{EXPERTS}down_proj")
        halves.update(fused_halves(ckpt, cfg, stored))
        return LazyWeights(readers, warn, halves)

    def stacked(p: str, shape: tuple[int, int]) -> Callable[[], np.ndarray]:
        def make() -> np.ndarray:
            out = np.empty((cfg.moe.num_experts, *shape), np.float32)
            for e in range(cfg.moe.num_experts):
                out[e] = read(f"{EXPERTS}{e}.{p}.weight")()
            return out
        return make
    for p, shape in expert_shapes(cfg).items():
        readers[f"{EXPERTS}{p}.weight"] = stacked(p, shape)
        halves[f"{EXPERTS}{p}.weight"] = lambda p=p, shape=shape: stacked_half(ckpt, cfg, stored, p, shape)
    return LazyWeights(readers, warn, halves)


def fused_halves(ckpt: Checkpoint, cfg: MTPConfig, stored: Stored) -> dict[str, Callable[[], np.ndarray | None]]:
    """float16 readers of the fused layout's projections, each decoded expert by expert into its final array."""
    E, I, H = cfg.moe.num_experts, cfg.moe.expert_size, cfg.hidden_size
    gate_up, down = f"{EXPERTS}gate_up_proj", f"{EXPERTS}down_proj"

    def part(stored_name: str, shape: tuple[int, ...], select) -> Callable[[], np.ndarray | None]:
        def make() -> np.ndarray | None:
            if stored_name in stored.scaled:
                return None
            out, tally = np.empty(shape, np.float16), Tally()
            round_rows(ckpt, stored_name, out, tally, select)
            return out if tally.fits else None
        return make
    return {f"{EXPERTS}gate_proj.weight": part(gate_up, (E, I, H), lambda raw: raw[:, :I]),
            f"{EXPERTS}up_proj.weight": part(gate_up, (E, I, H), lambda raw: raw[:, I:]),
            f"{EXPERTS}down_proj.weight": part(down, (E, H, I), lambda raw: raw)}


def stacked_half(ckpt: Checkpoint, cfg: MTPConfig, stored: Stored, p: str,
                 shape: tuple[int, int]) -> np.ndarray | None:
    """One projection of the per-expert layout stacked over the experts, built directly in float16 (each expert
    decoded to float32 alone, FP8 through its scales), or None when openvino would keep the stack f32."""
    out, tally = np.empty((cfg.moe.num_experts, *shape), np.float16), Tally()
    for e in range(cfg.moe.num_experts):
        name = f"{EXPERTS}{e}.{p}.weight"
        if name in stored.scaled:
            round_slice(read_tensor(ckpt, name, stored, allow_nonfinite=True, warn=lambda _: None), out[e], tally)
        else:
            round_rows(ckpt, name, out[e], tally)
        if tally.veto or tally.beyond or tally.nonfinite:
            return None  # the f32 path reads it again and reports
    return out if tally.fits else None
