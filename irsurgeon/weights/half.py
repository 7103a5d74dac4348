"""f16 weights without a float32 model: round slice by slice, decide as openvino's compression pass decides.

openvino's `compress_model_transformation` (CompressFloatConstantsImpl, openvino 2026.4 src/common/transformations/
.../compress_float_constants.cpp with reference/convert.hpp `check_f16_compression`) turns an f32 Constant into an
f16 Constant + a Convert marked `decompression`, unless
    - any in-range value's f16 round trip is off by more than 1.0 (`f16_compression_max_abs_error`), or
    - at least 75% of the values are rejected: beyond f16's largest, or off by a relative error above the threshold
      after rounding (the build shipped with openvino 2026.4.1 rejects above 1e-3: measured against the pass, see
      tests/test_half.py; in f16's normal range the relative error is at most 2^-11, so only values below
      2^-14 can be rejected).
Rounding is to nearest even, the same as numpy's float32 -> float16 cast (checked against the pass on every bf16
bit pattern in tests/test_half.py). `Tally` collects what the rule looks at while each slice is rounded straight
into the final f16 buffer, so the largest temporary is one slice, never a float32 copy of the tensor.

bf16 straight to f16 (bf16_slice), without float32: a bf16 value of f16's normal range (2^-14 <= |v| <= 65280) is
exact in f16 (bf16 keeps 8 significant bits, f16 11), so its f16 bits are its own re-biased:
    f16 = sign | ((bf16 & 0x7FFF) - ((127 - 15) << 7)) << 3  =  bf16 + 7 * (bf16 & 0x7FFF) + 0x4000  (mod 2^16)
(sign + 8 * (magnitude - rebias), the two parts never overlapping below 2^16). No rounding, no rejection, no veto
can come from those values; the few below 2^-14 (zeros, f16 subnormals: about 0.2% of typical weights) take their
bits and their rejection from a table of round_slice's own results over every such pattern (small_patterns), and a
slice holding a value beyond f16 or NaN/Inf goes to round_slice whole. The bits and the tally are round_slice's of
the same values (every bf16 pattern: tests/test_half.py). Each step is one numpy pass over a slice that stays in
the cache (0.51 ns a value on the machine this was measured on, against 0.85 ns for the sign/shift/or form with
the small values gathered and rounded per slice).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from irsurgeon.weights.safetensors_io import bf16_to_f32

F16_MAX = 65504.0            # largest finite float16
F16_NORMAL = 2.0 ** -14      # smallest normal float16
MAX_ABS_ERROR = 1.0          # openvino's tensor-wide veto
MAX_REL_ERROR = 1e-3         # relative error above which openvino counts a value as not fitting (measured)
KEEP_THRESHOLD = np.float32(0.75)
SLICE = 1 << 18              # elements rounded at a time: 512 KiB of bf16 stays in L2 (1 << 20: ~25% slower)
BF16_NORMAL = 0x3880         # |bf16 bits| of 2^-14, f16's smallest normal (exponent 113)
BF16_BEYOND = 0x4780         # |bf16 bits| of 2^16: every bf16 below it is at most 65280, within f16
REBIAS = (127 - 15) << 7     # exponent bias difference, at bf16's exponent position
UNBIAS = np.uint16(-8 * REBIAS % (1 << 16))  # 0x4000: - 8 * REBIAS in uint16's wrapping arithmetic


@dataclass
class Tally:
    """What openvino's rule counts over a tensor, gathered slice by slice."""

    size: int = 0
    rejected: int = 0
    veto: bool = False       # a value whose round trip is off by more than MAX_ABS_ERROR
    beyond: bool = False     # a value beyond f16's largest: openvino would clamp it; irsurgeon keeps the tensor f32
    nonfinite: bool = False  # NaN/Inf: left to the f32 path, which reports them

    @property
    def fits(self) -> bool:
        """True when the f16 rounding is what openvino's pass would store (and no value needs the f32 path)."""
        if self.veto or self.beyond or self.nonfinite:
            return False
        return not self.size or np.float32(self.rejected) / np.float32(self.size) < KEEP_THRESHOLD


class NotHalf(Exception):
    """A streamed f16 matrix turned out, once its values were seen, to be one the f16 build keeps f32 (Tally.fits):
    raised by the stream's blocks, caught by irsurgeon.draft.save.stage_ir, which builds it the f32 way and saves again.
    Never a user's error."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def round_slice(src: np.ndarray, dst: np.ndarray, tally: Tally) -> None:
    """src (float32, one slice) rounded into dst (float16, same shape); tally updated with openvino's counts."""
    with np.errstate(over="ignore", invalid="ignore"):  # beyond-range and NaN values are tallied, not warned
        np.copyto(dst, src, casting="unsafe")
    tally.size += src.size
    lo, hi = (float(src.min()), float(src.max())) if src.size else (0.0, 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # NaN propagates through min/max
        tally.nonfinite = True
        return
    if max(-lo, hi) > F16_MAX:
        tally.beyond = True
        return
    exponent = dst.view(np.uint16) & 0x7C00
    small = exponent == 0  # zero or subnormal in f16: only these can be off by more than 2^-11 relatively
    if small.any():
        tally.rejected += int(rejected(src[small], dst[small]).sum())
    if max(-lo, hi) >= 4096.0:  # below 4096 the f16 spacing is at most 2: an error of at most 1
        large = np.abs(src) >= 4096.0
        err = np.abs(src[large].astype(np.float64) - dst[large].astype(np.float64))
        tally.veto = tally.veto or bool((err > MAX_ABS_ERROR).any())


def rejected(values: np.ndarray, rounded: np.ndarray) -> np.ndarray:
    """Per value (float32, and its float16 rounding): nonzero and off by more than openvino's relative threshold."""
    v = values.astype(np.float64)
    nonzero = v != 0
    rel = np.abs(v - rounded.astype(np.float64)) / np.where(nonzero, np.abs(v), 1.0)
    return nonzero & (rel > MAX_REL_ERROR)


@functools.cache
def small_patterns() -> tuple[np.ndarray, np.ndarray]:
    """(f16 bits, rejected) indexed by bf16 bit pattern, for the patterns below f16's normal range (both signs;
    the other entries are unused): round_slice's rounding and its rejection rule, computed once."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    small = (patterns & np.uint16(0x7FFF)) < BF16_NORMAL
    values = bf16_to_f32(patterns[small])
    rounded = values.astype(np.float16)  # the cast round_slice makes
    bits, rejects = np.zeros(1 << 16, np.uint16), np.zeros(1 << 16, bool)
    bits[small], rejects[small] = rounded.view(np.uint16), rejected(values, rounded)
    return bits, rejects


def bf16_slice(raw: np.ndarray, dst: np.ndarray, tally: Tally) -> None:
    """bf16 bit patterns (uint16, one slice) into dst (float16, same shape) exactly as
    round_slice(bf16_to_f32(raw), dst, tally) would: re-biased bits where that is exact, the table's below
    (module docstring). raw may be dst's own memory (read there from the file): every value is taken from it before
    it is overwritten."""
    magnitude = np.bitwise_and(raw, np.uint16(0x7FFF), out=np.empty(raw.shape, np.uint16))  # an array, 0-d too
    if raw.size and int(magnitude.max()) >= BF16_BEYOND:  # beyond f16, or NaN/Inf: the float path tallies them
        round_slice(bf16_to_f32(raw), dst, tally)
        return
    tiny = np.flatnonzero(magnitude < BF16_NORMAL)  # zeros and f16 subnormals, by flat (C-order) position
    patterns = raw.reshape(-1).take(tiny) if tiny.size else None
    out = dst.view(np.uint16)
    np.multiply(magnitude, np.uint16(7), out=magnitude)
    np.add(magnitude, raw, out=out)
    np.add(out, UNBIAS, out=out)
    if patterns is not None:
        bits, rejects = small_patterns()
        if out.flags.c_contiguous:
            out.reshape(-1)[tiny] = bits[patterns]
        else:
            out[np.unravel_index(tiny, out.shape)] = bits[patterns]
        tally.rejected += int(np.count_nonzero(rejects[patterns]))
    tally.size += raw.size


def to_half(data: np.ndarray) -> tuple[np.ndarray, Tally]:
    """A float array as float16, slice by slice, with its tally (the caller checks `tally.fits`)."""
    out = np.empty(data.shape, np.float16)
    tally = Tally()
    flat_in, flat_out = data.reshape(-1), out.reshape(-1)
    for lo in range(0, flat_in.size, SLICE):
        part = np.asarray(flat_in[lo:lo + SLICE], dtype=np.float32)
        round_slice(part, flat_out[lo:lo + SLICE], tally)
    return out, tally
