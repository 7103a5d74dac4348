"""Int4 weights packed into int32 words, unpacked exactly: compressed-tensors `pack-quantized`, AutoAWQ GEMM, GPTQ.

A packed linear layer `<m>` stores no `<m>.weight`; its W [O, I] is rebuilt from (q: the 4-bit codes, z: the zero
points, s: the scales of each group of g inputs):

    format (quant_method)   tensors of <m>                                            W[o, i]
    compressed-tensors      weight_packed I32 [O, I/8], weight_scale [O, I/g],         (q - z) * s[o, i // g]
                            weight_zero_point I32 [O/8, I/g] (asymmetric only),        q, z in [-8, 7]
                            weight_shape [2]
    awq (GEMM)              qweight I32 [I, O/8], qzeros I32 [I/g, O/8],                (q - z) * s[i // g, o]
                            scales F16 [I/g, O]                                        q, z in [0, 15]
    gptq                    qweight I32 [I/8, O], qzeros I32 [I/g, O/8],                (q - z) * s[g_idx[i], o]
                            scales F16 [I/g, O], g_idx I32 [I]                         z stored minus 1 (v1)

Where each code sits in its word, from each format's own code:
- compressed-tensors 0.20.1 compressors/pack_quantized/helpers.py (`pack_to_int32` / `unpack_from_int32`): code k of
  a row at bits 4 (k % 8) of word k // 8, stored as q + 8; zero points packed the same way down the output axis
  (`packed_dim=0`). The same positions as 0.17.1's `pack_to_int32` (a release's config names the version it was
  saved with). Dequantized by quantization/lifecycle/forward_helpers.py `_dequantize`: (q - z) * s in s's dtype.
- AutoAWQ 0.2.9 awq/modules/linear/gemm.py `WQLinear_GEMM.from_linear`: nibble j of word c holds output column
  8c + [0, 2, 4, 6, 1, 3, 5, 7][j], zero points likewise; awq/utils/packing_utils.py `dequantize_gemm`
  (unpack_awq, reverse_awq_order): (q - z) * s in fp16, W = that transposed.
- auto-gptq 0.7.1 nn_modules/qlinear/qlinear_cuda.py `QuantLinear.pack` and its forward: input row i at bits
  4 (i % 8) of qweight row i // 8; zero points along the output axis, stored minus 1 (checkpoint_format "gptq");
  W^T = s[g_idx] * (q - (z + 1)[g_idx]) in fp16. gptqmodel 7.7.0 (nn_modules/qlinear/__init__.py
  `dequantize_weight`, `_dequantize_from_codes`) computes the same. With desc_act, g_idx is a permutation's groups.

Exactly: every library computes (q - z), a small integer exact in any float type, times the scale in the scale's
dtype: one rounding of the exact product. Here the product is taken in float32 (exact: 4 bits times an 11-bit
significand) and rounded once to the scale's dtype (bf16 to nearest even, f16 by numpy), then widened to float32
for the build, so the values are the library's, bit for bit (tests/test_int4_layouts.py checks them against each
library's own dequantization, tests/data/int4).

What is refused, by the key and value of quantization_config: other bit widths, compressed-tensors formats other
than pack-quantized, strategies other than group / channel, activation ordering with a g_idx (`actorder: group`),
quantized activations, AWQ versions other than GEMM or without zero points, GPTQ's asymmetric v1 (auto-gptq 0.7.1's
two QuantLinear kernels and gptqmodel's v1 -> v2 conversion decode a stored zero point of 0xF three different ways),
gptq_v2 and other checkpoint formats, gptqmodel's per-module `dynamic` overrides.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from irsurgeon.core import linear_re
from irsurgeon.core.errors import CheckpointError
from irsurgeon.core.text import shown
from irsurgeon.weights.fp8 import unconverted_by
from irsurgeon.weights.safetensors_io import f32_to_bf16

BITS = 4
PER_WORD = 32 // BITS
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ 0.2.9 awq/utils/packing_utils.py AWQ_ORDER
SCALE_DTYPES = ("BF16", "F16", "F32")

# quant_method -> the leaves of a packed module <m>: (required, optional); `<m>.bias` stays a float tensor
LEAVES = {
    "compressed-tensors": (("weight_packed", "weight_scale", "weight_shape"), ("weight_zero_point",)),
    "awq": (("qweight", "qzeros", "scales"), ()),
    "gptq": (("qweight", "qzeros", "scales"), ("g_idx",)),
}
FORMAT_NAMES = {"compressed-tensors": "compressed-tensors pack-quantized", "awq": "AutoAWQ GEMM",
                "gptq": "GPTQ"}


@dataclass(frozen=True)
class Args:
    """How one packed module was quantized: group size (None: one group per row), zero points stored or not."""
    group: int | None
    symmetric: bool


@dataclass(frozen=True)
class Packed:
    """One packed linear layer: its module name, full stored names and W's shape [O, I]."""
    module: str
    stored: tuple[str, ...]
    shape: tuple[int, int]


def refuse(where: str, key: str, value: object, supported: str) -> CheckpointError:
    return CheckpointError(f"{where}.{key} is {value!r}; int4 packed weights are read with {supported}")


def unpack_rows(words: np.ndarray, count: int) -> np.ndarray:
    """int32 words [R, C] -> the 4-bit fields of each word along its row, low bits first: [R, min(count, 8C)]."""
    u = np.ascontiguousarray(words).view(np.uint32)
    shifts = np.arange(0, 32, BITS, dtype=np.uint32)
    codes = ((u[:, :, None] >> shifts) & 0xF).astype(np.int8)
    return codes.reshape(u.shape[0], -1)[:, :count]


def product(diff: np.ndarray, scale: np.ndarray, dtype: str) -> np.ndarray:
    """(q - z) * s rounded once to the scale's dtype, as float32 (the libraries' arithmetic: module docstring)."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 is NaN in the library too; `finite` reports it
        exact = diff.astype(np.float32) * scale.astype(np.float32)
    if dtype == "BF16":
        return (f32_to_bf16(exact).astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        with np.errstate(over="ignore"):  # an overflow is inf in the library too; `finite` reports it
            return exact.astype(np.float16).astype(np.float32)
    return exact


class Int4Layout:
    """The packed modules of one quant_method under a prefix, read by the rules of that method's config."""

    def __init__(self, method: str, qc: dict, where: str):
        self.method, self.qc, self.where = method, qc, where
        self.check = {"compressed-tensors": self._check_ct, "awq": self._check_awq, "gptq": self._check_gptq}[method]
        self.check()

    # -- configuration -------------------------------------------------------------------------------------------
    def _check_ct(self) -> None:
        groups = self.qc.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            raise refuse(self.where, "config_groups", groups, "at least one config group")
        for key, group in groups.items():
            if not isinstance(group, dict):
                raise refuse(self.where, f"config_groups.{key}", group, "an object with a weights section")
            if not isinstance(group.get("weights"), dict):
                raise refuse(self.where, f"config_groups.{key}.weights", group.get("weights"), "a weights section")
            if not names(group.get("targets", [])):
                raise refuse(self.where, f"config_groups.{key}.targets", group.get("targets"),
                             "a list of module names, re: patterns or class names")
        if not names(self.qc.get("ignore") or []):  # compressed-tensors 0.20.1 quant_config.py: list[str] | None
            raise refuse(self.where, "ignore", self.qc.get("ignore"), "a list of module names or re: patterns")
        listed = [(f"config_groups.{key}.targets", t) for key, g in groups.items() for t in g.get("targets", [])]
        for key, target in listed + [("ignore", t) for t in self.qc.get("ignore") or []]:
            if target.startswith("re:"):
                try:
                    ct_pattern(target)
                except re.error as e:
                    raise CheckpointError(f"{self.where}.{key}: the pattern {shown(target[:200])} is not a regular "
                                          f"expression ({shown(str(e))})") from None
                except linear_re.Unsupported as e:
                    raise CheckpointError(f"{self.where}.{key}: the pattern {shown(target[:200])} uses {e}; "
                                          f"{linear_re.TAKEN}") from None

    def _ct_args(self, module: str) -> Args:
        """compressed-tensors 0.20.1 utils/match.py `match_targets`: exact names first, then regexes (`re:`,
        re.match), then class names, each in sorted order; lifecycle/apply.py takes the first. Packed tensors
        belong to Linear layers."""
        groups = self.qc["config_groups"]
        ignore = self.qc.get("ignore") or []
        if any(ct_match(module, t) for t in ignore):
            listed = next(t for t in ignore if ct_match(module, t))
            raise CheckpointError(f"tensor {module}.weight_packed: packed, but {self.where}.ignore lists {listed!r} "
                                  f"(that module must be unquantized)")
        target_to_group: dict[str, str] = {}
        for key, group in groups.items():
            for target in group.get("targets") or []:
                target_to_group[target] = key  # a later group's target replaces an earlier one (apply.py)
        targets = sorted(target_to_group, key=lambda t: ("re:" in t, t))
        matched = [t for t in targets if ct_match(module, t)] + [t for t in targets if t == "Linear"]
        if not matched:
            raise CheckpointError(f"tensor {module}.weight_packed: packed, but no {self.where}.config_groups "
                                  f"target matches {module}")
        key = target_to_group[matched[0]]
        group = groups[key]
        w, at = group["weights"], f"config_groups.{key}"
        fmt = group.get("format") or self.qc.get("format")
        if fmt != "pack-quantized":
            raise refuse(self.where, f"{at}.format", fmt, "format 'pack-quantized'")
        if w.get("type", "int") != "int":
            raise refuse(self.where, f"{at}.weights.type", w.get("type"), "type 'int'")
        if w.get("num_bits") != BITS:
            raise refuse(self.where, f"{at}.weights.num_bits", w.get("num_bits"), f"num_bits {BITS}")
        if w.get("actorder") not in (None, "static", "weight"):
            raise refuse(self.where, f"{at}.weights.actorder", w.get("actorder"),
                         "actorder null, 'static' or 'weight' (no g_idx)")
        if w.get("dynamic") not in (None, False):
            raise refuse(self.where, f"{at}.weights.dynamic", w.get("dynamic"), "static weights")
        if group.get("input_activations") is not None:
            raise refuse(self.where, f"{at}.input_activations", "...", "weight-only quantization (null)")
        strategy = w.get("strategy")
        if strategy == "group":
            g = w.get("group_size")
            if not (isinstance(g, int) and not isinstance(g, bool) and g > 0):
                raise refuse(self.where, f"{at}.weights.group_size", g, "a positive group size")
            return Args(g, bool(w.get("symmetric", True)))
        if strategy == "channel":
            return Args(None, bool(w.get("symmetric", True)))
        raise refuse(self.where, f"{at}.weights.strategy", strategy, "strategy 'group' or 'channel'")

    def _check_awq(self) -> None:
        qc, w = self.qc, self.where
        bits = qc.get("bits", qc.get("w_bit"))
        if bits != BITS:
            raise refuse(w, "bits", bits, f"bits {BITS}")
        version = qc.get("version", "gemm")
        if not (isinstance(version, str) and version.lower() == "gemm"):
            raise refuse(w, "version", version, "version 'gemm' (AutoAWQ's GEMM packing)")
        if qc.get("zero_point", True) is not True:
            raise refuse(w, "zero_point", qc.get("zero_point"), "zero_point true")
        self._group_size("group_size" if "group_size" in qc else "q_group_size")

    def _check_gptq(self) -> None:
        qc, w = self.qc, self.where
        if qc.get("bits") != BITS:
            raise refuse(w, "bits", qc.get("bits"), f"bits {BITS}")
        fmt = qc.get("checkpoint_format", qc.get("format", "gptq"))
        if fmt != "gptq":
            raise refuse(w, "checkpoint_format", fmt, "checkpoint_format 'gptq'")
        if qc.get("sym", True) is not True:
            raise refuse(w, "sym", qc.get("sym"), "sym true (asymmetric v1 zero points decode differently in "
                                                  "auto-gptq's and gptqmodel's kernels)")
        if qc.get("dynamic"):
            raise refuse(w, "dynamic", "...", "no per-module overrides")
        if qc.get("pack_dtype", "int32") not in ("int32", "torch.int32"):
            raise refuse(w, "pack_dtype", qc.get("pack_dtype"), "pack_dtype int32")
        self._group_size("group_size")

    def _group_size(self, key: str) -> int | None:
        g = self.qc.get(key, 128)
        if g == -1:
            return None
        if not (isinstance(g, int) and not isinstance(g, bool) and g > 0):
            raise refuse(self.where, key, g, "a positive group size or -1")
        return g

    def args(self, module: str) -> Args:
        if self.method == "compressed-tensors":
            return self._ct_args(module)
        skip = self.qc.get("modules_to_not_convert") or []
        listed = unconverted_by(module, tuple(s for s in skip if isinstance(s, str)))
        if listed is not None:
            raise CheckpointError(f"tensor {module}.qweight: packed, but {self.where}.modules_to_not_convert lists "
                                  f"{listed!r} (that module must be unquantized)")
        key = "group_size" if self.method == "gptq" or "group_size" in self.qc else "q_group_size"
        return Args(self._group_size(key), False)  # both store zero points for every group

    # -- tensors --------------------------------------------------------------------------------------------------
    def modules(self, names: set[str]) -> dict[str, list[str]]:
        """module -> its packed leaves found among `names` (full names)."""
        required, optional = LEAVES[self.method]
        found: dict[str, list[str]] = {}
        for name in names:
            module, _, leaf = name.rpartition(".")
            if leaf in required or leaf in optional:
                found.setdefault(module, []).append(leaf)
        return found

    def describe(self, ckpt, module: str, leaves: list[str]) -> Packed:
        """Check one packed module's tensors (set, dtypes, shapes) against its config; its W shape."""
        required, optional = LEAVES[self.method]
        missing = [leaf for leaf in required if leaf not in leaves]
        if missing:
            raise CheckpointError(f"tensor {module}.{leaves[0]}: packed int4 ({self.method}) without "
                                  f"{module}.{missing[0]}")
        info = {leaf: ckpt.info(f"{module}.{leaf}") for leaf in leaves}
        args = self.args(module)
        shape = {"compressed-tensors": self._ct_shape, "awq": self._awq_shape,
                 "gptq": self._gptq_shape}[self.method](ckpt, module, info, args)
        return Packed(module, tuple(f"{module}.{leaf}" for leaf in leaves), shape)

    def _expect(self, module: str, leaf: str, info, dtypes: tuple[str, ...], shape: tuple[int, ...]) -> None:
        if info.dtype not in dtypes:
            raise CheckpointError(f"tensor {module}.{leaf}: stored as {info.dtype}; expected "
                                  f"{' or '.join(dtypes)} ({self.method} int4)")
        if tuple(info.shape) != tuple(shape):
            raise CheckpointError(f"tensor {module}.{leaf}: expected shape {list(shape)} ({self.method} int4), "
                                  f"found {list(info.shape)}")

    def _ct_shape(self, ckpt, module: str, info: dict, args: Args) -> tuple[int, int]:
        """W's shape from the tensors' shapes (no data read): O the packed rows, I the groups times the group size
        (compressed-tensors 0.20.1 pack_quantized/base.py `decompress` on meta: "exact: the scale pins down
        in_features for grouped strategies"), per channel the packed words' width; weight_shape is checked
        against it when the values are read."""
        self._expect(module, "weight_shape", info["weight_shape"], ("I64", "I32"), (2,))
        packed, scale = info["weight_packed"].shape, info["weight_scale"].shape
        if len(packed) != 2 or len(scale) != 2:
            raise CheckpointError(f"tensor {module}.weight_packed: expected a matrix of packed rows, found shapes "
                                  f"{list(packed)} and {list(scale)} ({module}.weight_scale)")
        O = packed[0]
        I = scale[1] * args.group if args.group is not None else packed[1] * PER_WORD
        groups = 1 if args.group is None else scale[1]
        self._expect(module, "weight_packed", info["weight_packed"], ("I32",), (O, -(-I // PER_WORD)))
        self._expect(module, "weight_scale", info["weight_scale"], SCALE_DTYPES, (O, groups))
        if not args.symmetric:
            if "weight_zero_point" not in info:
                raise CheckpointError(f"tensor {module}.weight_packed: asymmetric, but {module}.weight_zero_point "
                                      f"is missing")
            zp = info["weight_zero_point"]
            want = (-(-O // PER_WORD), groups) if zp.dtype == "I32" else (O, groups)
            self._expect(module, "weight_zero_point", zp, ("I32", "I8"), want)
        elif "weight_zero_point" in info:
            raise CheckpointError(f"tensor {module}.weight_zero_point: the config's scheme for {module} is "
                                  f"symmetric (no zero points)")
        return O, I

    def _awq_shape(self, ckpt, module: str, info: dict, args: Args) -> tuple[int, int]:
        """AutoAWQ GEMM packs along the outputs: qweight [I, O/8], qzeros [I/g, O/8], scales [I/g, O]."""
        I, words = info["qweight"].shape if len(info["qweight"].shape) == 2 else (0, 0)
        O = words * PER_WORD
        return self._packed_shape(module, info, args, O, I, (I, O // PER_WORD), (I // (args.group or I or 1),
                                                                              O // PER_WORD))

    def _gptq_shape(self, ckpt, module: str, info: dict, args: Args) -> tuple[int, int]:
        """GPTQ packs along the inputs: qweight [I/8, O], qzeros [I/g, O/8 rounded up], scales [I/g, O], g_idx [I]."""
        words, O = info["qweight"].shape if len(info["qweight"].shape) == 2 else (0, 0)
        I = words * PER_WORD
        O, I = self._packed_shape(module, info, args, O, I, (I // PER_WORD, O), (I // (args.group or I or 1),
                                                                              -(-O // PER_WORD)))
        if "g_idx" in info:
            self._expect(module, "g_idx", info["g_idx"], ("I32", "I64"), (I,))
        return O, I

    def _packed_shape(self, module: str, info: dict, args: Args, O: int, I: int, qweight: tuple, qzeros: tuple):
        """The group size checked against I, then qweight, qzeros and scales [I/g, O] against their shapes."""
        g = args.group or I
        if not I or I % g:
            raise CheckpointError(f"tensor {module}.qweight: {I} inputs are not a multiple of group size {g}")
        self._expect(module, "qweight", info["qweight"], ("I32",), qweight)
        self._expect(module, "qzeros", info["qzeros"], ("I32",), qzeros)
        self._expect(module, "scales", info["scales"], SCALE_DTYPES, (I // g, O))
        return O, I

    # -- values ---------------------------------------------------------------------------------------------------
    def dequantize(self, ckpt, packed: Packed) -> np.ndarray:
        """W [O, I] as float32, the library's values bit for bit."""
        read: Callable = {"compressed-tensors": self._ct_values, "awq": self._awq_values,
                          "gptq": self._gptq_values}[self.method]
        return read(ckpt, packed.module, packed.shape, self.args(packed.module))

    def _ct_values(self, ckpt, m: str, shape: tuple[int, int], args: Args) -> np.ndarray:
        O, I = shape
        held = [int(v) for v in np.asarray(ckpt.get(f"{m}.weight_shape"))]
        if held != [O, I]:
            raise CheckpointError(f"tensor {m}.weight_shape: holds {held}, but its packed tensors and config give "
                                  f"{[O, I]}")
        q = unpack_rows(ckpt.get(f"{m}.weight_packed"), I) - np.int8(8)  # [O, I] in [-8, 7]
        scale, sdtype = ckpt.get(f"{m}.weight_scale"), ckpt.info(f"{m}.weight_scale").dtype
        g = args.group or I
        diff = q.astype(np.int16)
        if not args.symmetric:
            zp = ckpt.get(f"{m}.weight_zero_point")
            if ckpt.info(f"{m}.weight_zero_point").dtype == "I32":  # packed down the output axis (packed_dim=0)
                zp = unpack_rows(np.ascontiguousarray(np.asarray(zp).T), O).T - np.int8(8)  # [O, groups]
            diff = diff - np.repeat(np.asarray(zp, np.int16), g, axis=1)[:, :I]
        return product(diff, np.repeat(np.asarray(scale, np.float32), g, axis=1)[:, :I], sdtype)

    def _awq_values(self, ckpt, m: str, shape: tuple[int, int], args: Args) -> np.ndarray:
        O, I = shape
        g = args.group or I
        back = np.argsort(np.array(AWQ_ORDER))  # field j holds column AWQ_ORDER[j]: column c is field back[c]
        cols = (np.arange(O) // PER_WORD) * PER_WORD + back[np.arange(O) % PER_WORD]
        q = unpack_rows(ckpt.get(f"{m}.qweight"), O)[:, cols]             # [I, O]
        z = unpack_rows(ckpt.get(f"{m}.qzeros"), O)[:, cols]              # [I/g, O]
        diff = q.astype(np.int16) - np.repeat(z.astype(np.int16), g, axis=0)
        scales, sdtype = ckpt.get(f"{m}.scales"), ckpt.info(f"{m}.scales").dtype
        return np.ascontiguousarray(product(diff, np.repeat(np.asarray(scales, np.float32), g, axis=0), sdtype).T)

    def _gptq_values(self, ckpt, m: str, shape: tuple[int, int], args: Args) -> np.ndarray:
        O, I = shape
        g = args.group or I
        groups = I // g
        q = unpack_rows(np.ascontiguousarray(np.asarray(ckpt.get(f"{m}.qweight")).T), I).T   # [I, O]
        stored = unpack_rows(ckpt.get(f"{m}.qzeros"), O).astype(np.int16)
        if (stored == 0xF).any():  # a zero point of 0 stored minus 1: auto-gptq 0.7.1's kernels read it as 0 or 16
            raise CheckpointError(f"tensor {m}.qzeros: holds a zero point stored as 0xF, which auto-gptq's "
                                  f"QuantLinear kernels decode differently (0 or 16); a symmetric GPTQ stores 7")
        z = stored + 1  # checkpoint_format 'gptq' (v1) stores each zero point minus 1
        if f"{m}.g_idx" in ckpt.shard_of:
            g_idx = np.asarray(ckpt.get(f"{m}.g_idx"), np.int64)
            outside = g_idx[(g_idx < 0) | (g_idx >= groups)]
            if outside.size:
                raise CheckpointError(f"tensor {m}.g_idx: holds group {int(outside[0])}, outside 0..{groups - 1}")
        else:
            g_idx = np.arange(I) // g
        diff = q.astype(np.int16) - z[g_idx]
        scales, sdtype = ckpt.get(f"{m}.scales"), ckpt.info(f"{m}.scales").dtype
        return np.ascontiguousarray(product(diff, np.asarray(scales, np.float32)[g_idx], sdtype).T)


def names(value) -> bool:
    """A list of strings, as compressed-tensors 0.20.1 types `targets` (quant_scheme.py) and `ignore`
    (quant_config.py): pydantic refuses a bare string or another type there."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def ct_match(name: str, target: str) -> bool:
    """compressed-tensors 0.20.1 utils/match.py `match_name`: `re:` targets by re.match, others by equality. The
    pattern comes from the checkpoint: it is matched without backtracking (irsurgeon.core.linear_re: `re`'s
    backtracking takes hours on `(a+)+$`); Int4Layout refused the config if a pattern is one it does not take."""
    if target.startswith("re:"):
        try:
            return ct_pattern(target).match(name)
        except linear_re.TooCostly as e:
            raise CheckpointError(f"the compressed-tensors pattern {shown(target[:200])} against the module "
                                  f"{shown(name[:200])}: {e}") from None
    return target == name


@functools.lru_cache(maxsize=256)
def ct_pattern(target: str) -> linear_re.Pattern:
    """A `re:` target compiled (re.error, linear_re.Unsupported)."""
    return linear_re.compile_pattern(target[3:])
