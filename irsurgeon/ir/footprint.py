"""Memory footprint of an exported directory, computed from its IRs' shapes and types alone (no weight is read).

Inputs are `show.show_ir` descriptions (constants per type, states, runtime_options), so this module is pure data:

    weights(part)   = sum over the part's IRs of their Constant bytes, per element type (what the .bin holds)
    growing state   = a state [?, a, ?, ..., d] with one dynamic dim besides the batch: it gains one row per token
    KV per token    = sum over growing states of  heads x row(d),  heads = product of the static dims but the last
    row(d)          = d x bits / 8, plus per (head, token) 8 bytes of f32 scale + zero point for u8 / u4 and
                      4 bytes of scale for i4 (the CPU plugin's layout, one group per head when no group size is set)
    target          = 2 x nKV x head_dim x bytes per full-attention layer (a key and a value state each)
    draft           = the same for the draft IR's own states (a draft that attends over the target's KV has none)
    constant states = linear-attention conv / ssm states (no growing dim): product of static dims x the state's type
    KV at context   = KV per token x context  (batch 1; the CPU allocates it in blocks of BLOCK_TOKENS tokens)

The KV element type is what the runtime would choose: the IR's rt_info `runtime_options/KV_CACHE_PRECISION` (the
CPU plugin applies it at compile), else the device default, which on x86 CPUs is u8: then the numbers are an
estimate and say so. Runtime overhead (libraries, compiled buffers, activations) is not in the IRs: `overhead()` is
the family's fixed, labelled estimate (Family.runtime_overhead, measured on its bundled pair); `irsurgeon verify
--genai` measures the real peak.
"""
from __future__ import annotations

import math

from irsurgeon.core.errors import IRError
from irsurgeon.ir.export import LANGUAGE_MODELS, TARGET_MODELS, VISION_MODELS
from irsurgeon.core.rtinfo import KV_CACHE_PRECISION

CPU_DEFAULT_KV = "u8"
BLOCK_TOKENS = 32
BITS = {"f64": 64, "f32": 32, "f16": 16, "bf16": 16, "f8e4m3": 8, "f8e5m2": 8, "u8": 8, "i8": 8, "u4": 4, "i4": 4}
GROUP_EXTRA = {"u8": 8, "u4": 8, "i4": 4}  # bytes per (head, token): f32 scale (+ f32 zero point)
OV_TYPE_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "uint8_t": "u8", "int8_t": "i8",
                 "u4": "u4", "i4": "i4"}
PARTS = ("target", "draft", "vision", "other")
FOOTPRINT_KEYS = ("context", "weights", "kv", "runtime_overhead", "total_at_context")
KV_KEYS = ("file", "precision", "precision_source", "estimate", "layers", "growing_states", "bytes_per_token",
           "bytes_at_context", "constant_states", "constant_bytes", "problems")


def part_of(file: str, draft: str) -> str:
    """Which footprint line an IR belongs to: target, draft (the draft IR `draft`, as its family names it), vision
    or other (tokenizers)."""
    if file in TARGET_MODELS:
        return "target"
    if file == draft:
        return "draft"
    return "vision" if file in VISION_MODELS else "other"


def shape_text(dims: list[int | None] | None) -> str:
    """[None, 2, None, 64] (a shape as `show` lists it) -> "[?,2,?,64]"; a dynamic rank (None) -> "[...]"."""
    return "[...]" if dims is None else "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def element_bytes(etype: str, count: int) -> int:
    if etype not in BITS:
        raise IRError(f"no byte size known for element type {etype!r} (read from the IR's states or rt_info)")
    return math.ceil(count * BITS[etype] / 8)


def row_bytes(etype: str, heads: int, width: int) -> int:
    """Bytes one token adds to a `heads x width` cache slice stored as `etype`, quantization scales included."""
    return heads * (element_bytes(etype, width) + GROUP_EXTRA.get(etype, 0))


def kv_precision(runtime_options: dict, device_default: str | None = None) -> tuple[str, str, bool]:
    """(element type, where it comes from, whether it is an estimate) of the KV cache the runtime would use."""
    value = (runtime_options or {}).get(KV_CACHE_PRECISION)
    if value:
        return OV_TYPE_NAMES.get(value, value), "rt_info runtime_options", False
    if device_default:
        return OV_TYPE_NAMES.get(device_default, device_default), "device default", False
    return CPU_DEFAULT_KV, "CPU default (not in the IR): estimate", True


def kv_cache(file: str, info: dict, context: int, device_default: str | None = None) -> dict:
    """KV growth per token and at `context` for one IR's states (see the module docstring)."""
    precision, source, estimate = kv_precision(info.get("runtime_options") or {}, device_default)
    per_token = growing = constant = constant_bytes = 0
    problems = []
    for state in info["states"]:
        dims = state["shape"]
        dynamic = [i for i, d in enumerate(dims or []) if d is None and i > 0]
        static = [d for i, d in enumerate(dims or []) if i > 0 and d is not None]
        if dims is not None and not dynamic:
            constant += 1
            constant_bytes += element_bytes(state["dtype"], math.prod(static))
        elif dims is not None and len(dynamic) == 1 and static:
            growing += 1
            per_token += row_bytes(precision, math.prod(static[:-1]), static[-1])
        else:
            problems.append(f"state {state['id']}: shape {shape_text(state['shape'])} has no single growing "
                            f"dimension")
    return {"file": file, "precision": precision, "precision_source": source, "estimate": estimate,
            "layers": growing // 2, "growing_states": growing, "bytes_per_token": per_token,
            "bytes_at_context": per_token * context, "constant_states": constant, "constant_bytes": constant_bytes,
            "problems": problems}


def weights(infos: dict[str, dict], draft: str) -> dict[str, dict]:
    """Per part: its IR files, Constant bytes per element type, and their total."""
    out = {p: {"files": [], "bytes": 0, "by_type": {}} for p in PARTS}
    for file, info in sorted(infos.items()):
        part = out[part_of(file, draft)]
        part["files"].append(file)
        for etype, total in info["constants"].items():
            part["by_type"][etype] = part["by_type"].get(etype, 0) + total["bytes"]
            part["bytes"] += total["bytes"]
    for part in out.values():
        part["by_type"] = dict(sorted(part["by_type"].items()))
    return out


def footprint(infos: dict[str, dict], context: int, draft: str, device_default: str | None = None,
              target: str | None = None, runtime: tuple[int, str] = (0, "")) -> dict:
    """The whole footprint of a directory from its readable IRs' `show_ir` descriptions (file name -> info); `target`
    and `draft` name the IRs whose KV counts (target default: the first language model found; draft: the family's
    draft IR, Layout.draft_xml); runtime: the family's runtime overhead in MiB and its fixture (overhead)."""
    w = weights(infos, draft)
    lm = target if target in infos else next((f for f in LANGUAGE_MODELS if f in infos), None)
    found = draft if draft in infos else None
    kv = {"target": kv_cache(lm, infos[lm], context, device_default) if lm else None,
          "draft": kv_cache(found, infos[found], context, device_default) if found else None}
    total = sum(p["bytes"] for p in w.values())
    total += sum(k["bytes_at_context"] + k["constant_bytes"] for k in kv.values() if k)
    return {"context": context, "weights": w, "kv": kv, "runtime_overhead": overhead(*runtime),
            "total_at_context": total}


def overhead(mib: int, fixture: str) -> dict:
    """The runtime-overhead line: the family's fixed estimate (deterministic, so `show` describes files, not this
    process), measured on its bundled pair `fixture`."""
    return {"bytes": mib * 2**20, "measured": False,
            "basis": f"estimate: peak RSS of a Python process running the openvino-genai plain and speculative "
                     f"pipelines on {fixture} (interpreter, OpenVINO and genai libraries, compiled graphs; x86 CPU, "
                     f"openvino 2026.4; benchmarks/measure_overhead.py); activations of long prompts and weight "
                     f"repacking are not included: `irsurgeon verify DIR --genai` measures the peak process memory "
                     f"on this machine"}


def human(n: float) -> str:
    """Bytes in binary units: 512 B, 1.5 KiB, 3.2 MiB, 4.0 GiB."""
    for unit in ("B", "KiB", "MiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
