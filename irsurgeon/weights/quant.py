"""Which quantized layout, if any, a head's tensors use: the one table of layouts the loader reads, and refuses.

Evidence comes from the tensor names (each scheme adds its own companions to a linear layer's `weight`) and from
config.json's `quantization_config` (`quant_method`; MLX writes `group_size`/`bits` and no `quant_method`):

    scheme               tensors beside (or instead of) `<module>.weight`         quant_method          read by
    FP8 block-scaled     weight (F8_E4M3) + weight_scale_inv                      fp8                   fp8.py
    compressed-tensors   weight_packed, weight_scale, weight_zero_point,          compressed-tensors    int4.py
                         weight_shape (format pack-quantized, 4 bits)
    AWQ (GEMM)           qweight, qzeros, scales                                  awq                   int4.py
    GPTQ                 qweight, qzeros, scales, g_idx                           gptq                  int4.py
    MLX                  weight (U32, packed) + scales, biases                    (none; group_size, bits)  refused
    bitsandbytes         weight.absmax, weight.quant_map, weight.quant_state.*,   bitsandbytes          refused
                         SCB

A packed layout is read only when the tensors and the config's quant_method agree (int4.py refuses, by key and
value, the variants it does not decode); a release may pack some modules and keep others (`mtp.fc`, norms) in
bf16, which are read as they are. A config that names a foreign scheme while the head's tensors are plain floats
builds: quantizers commonly leave the MTP head unquantized, and the tensors are what is read.
"""
from __future__ import annotations

from irsurgeon.core.config import read_json, text_section
from irsurgeon.core.errors import CheckpointError, ConfigError
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.fp8 import SCALE_SUFFIX, FP8Scheme, parse_scheme
from irsurgeon.weights.int4 import FORMAT_NAMES, Int4Layout
from irsurgeon.weights.safetensors_io import FLOAT_DTYPES

SUPPORTED = ("supported: bf16, f16, f32, f64, FP8 e4m3 with block scales (quant_method 'fp8', weight_scale_inv), "
             "and int4 packed as compressed-tensors pack-quantized, AutoAWQ GEMM or GPTQ")
PACKED = {"compressed-tensors": ("compressed-tensors",), "GPTQ/AWQ": ("awq", "gptq")}  # signature -> quant_method

# (scheme, leaf names that only it writes), checked in order: GPTQ/AWQ before MLX, as both write `scales`
SIGNATURES = [
    ("compressed-tensors", ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape",
                            "weight_global_scale", "input_global_scale")),
    ("GPTQ/AWQ", ("qweight", "qzeros", "g_idx")),
    ("MLX", ("scales", "biases")),
    ("bitsandbytes", ("absmax", "quant_map", "quant_state", "SCB", "weight_format", "nested_absmax",
                      "nested_quant_map")),
]


def quantization_config(ckpt: Checkpoint) -> dict | None:
    """config.json's quantization_config (top level or text_config); MLX's `quantization` when that is all."""
    try:
        cfg = read_json(ckpt.config_path)
    except ConfigError as e:
        raise CheckpointError(str(e)) from None
    return quantization_section(cfg)


def quantization_section(cfg: dict) -> dict | None:
    """quantization_config (top level or text_config) of a config.json read, or MLX's `quantization`."""
    for section in (cfg, text_section(cfg)):
        for key in ("quantization_config", "quantization"):
            if isinstance(section.get(key), dict):
                return section[key]
    return None


def config_scheme(qc: dict | None) -> str | None:
    """The scheme a quantization_config names: its quant_method, or 'MLX' for MLX's group_size/bits form."""
    if not qc:
        return None
    method = qc.get("quant_method")
    if isinstance(method, str):
        return method
    if "group_size" in qc and "bits" in qc:
        return "MLX"
    return None


def tensor_scheme(names: list[str]) -> tuple[str, str] | None:
    """(scheme, the tensor that shows it) from the stored names, or None when they are a float/FP8 layout."""
    for scheme, leaves in SIGNATURES:
        for name in names:
            if set(name.split(".")[-2:]) & set(leaves):  # two parts: bitsandbytes writes `weight.absmax`, ...
                return scheme, name
    return None


def plain(name: str, dtype: str) -> bool:
    """A name and dtype a float or FP8 block-scaled head uses (fused experts are stored without `.weight`)."""
    return dtype in FLOAT_DTYPES and name.endswith((".weight", SCALE_SUFFIX, ".experts.gate_up_proj",
                                                    ".experts.down_proj"))


def describe(qc: dict) -> str:
    """A short description of a foreign quantization_config: its method and bit width / group size if given."""
    bits = qc.get("bits", qc.get("num_bits", qc.get("w_bit")))
    group = qc.get("group_size", qc.get("q_group_size"))
    extra = ", ".join(f"{k} {v}" for k, v in (("bits", bits), ("group_size", group), ("mode", qc.get("mode")))
                      if v is not None)
    return f" ({extra})" if extra else ""


def stored_scheme(ckpt: Checkpoint, names: list[str]) -> tuple[FP8Scheme, Int4Layout | None]:
    """How to read `names` (full names under a head's prefix): the FP8 scheme, and the int4 layout of the packed
    modules when the config's quant_method and the tensors agree on one; any other quantized layout is refused."""
    qc = quantization_config(ckpt)
    named = config_scheme(qc)
    found = tensor_scheme(names)
    if found and named in PACKED.get(found[0], ()):
        return FP8Scheme(), Int4Layout(named, qc, f"{ckpt.config_path}: quantization_config")
    refuse_foreign(ckpt, names, qc, found)
    if named == "fp8":
        return parse_scheme(qc, ckpt.config_path), None
    return FP8Scheme(), None


def refuse_foreign(ckpt: Checkpoint, names: list[str], qc: dict | None, found: tuple[str, str] | None) -> None:
    """A quantized layout no reader takes, named by its scheme and the tensor that shows it."""
    named = config_scheme(qc)
    if found is None and named not in (None, "fp8"):  # a scheme without a known signature: any odd tensor shows it
        found = next(((named, n) for n in names if not plain(n, ckpt.info(n).dtype)), None)
    if found:
        scheme = named if named and named != "fp8" else found[0]
        raise CheckpointError(f"{ckpt.root}: the draft's weights are quantized as {scheme}{describe(qc or {})} "
                              f"(tensor {found[1]}); {SUPPORTED}")


def source_format(fp8: bool, int4: Int4Layout | None, declared: str | None) -> str:
    """What a head was read from, for provenance and `show`: "int4 (AutoAWQ GEMM, quant_method awq)", "FP8
    e4m3 block-scaled", or its float dtype."""
    if int4 is not None:
        return f"int4 ({FORMAT_NAMES[int4.method]}, quant_method {int4.method})"
    if fp8:
        return "FP8 e4m3 block-scaled"
    return declared or "float"


def held_format(qc: dict | None, names: list[str], declared: str | None) -> str:
    """What a head's tensors (full names, no data read) are stored as, in source_format's words; a layout no
    reader takes is named so."""
    named, found = config_scheme(qc), tensor_scheme(names)
    if found and named in PACKED.get(found[0], ()):
        return f"int4 ({FORMAT_NAMES[named]}, quant_method {named})"
    if found:
        return f"{named or found[0]} (not read: {SUPPORTED})"
    return source_format(any(n.endswith(SCALE_SUFFIX) for n in names), None, declared)
