"""ops: small graph builders on `ov.Output` (imports core/ and weights/): each takes outputs and plain numbers, and
returns an output.

Every node they create gets a friendly name under the `name` prefix they are given (a checkpoint path such as
`mtp.layers.0.self_attn`), so the graph speaks the checkpoint's language.
"""
from irsurgeon.ops.core import WeightFormat, const, linear, rms_norm, weight  # noqa: F401
from irsurgeon.ops.rope import apply_rope, rope_cos_sin  # noqa: F401
from irsurgeon.ops.attention import attention_mask_bias, expand_kv, sdpa  # noqa: F401
from irsurgeon.ops.kvcache import kv_cache  # noqa: F401
from irsurgeon.ops.mlp import swiglu  # noqa: F401
