"""ops: small graph builders on `ov.Output` (imports core/ and weights/): each takes outputs and plain numbers, and
returns an output.

Every node they create gets a friendly name under the `name` prefix they are given (a checkpoint path such as
`mtp.layers.0.self_attn`), so the graph speaks the checkpoint's language.
"""
from irsurgeon.ops.core import WeightFormat, const, linear, rms_norm, weight
from irsurgeon.ops.rope import apply_rope, rope_cos_sin
from irsurgeon.ops.attention import attention_mask_bias, expand_kv, sdpa
from irsurgeon.ops.kvcache import kv_cache
from irsurgeon.ops.mlp import swiglu

__all__ = ["WeightFormat", "apply_rope", "attention_mask_bias", "const", "expand_kv", "kv_cache", "linear", "rms_norm",
           "rope_cos_sin", "sdpa", "swiglu", "weight"]
