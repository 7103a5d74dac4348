"""The f16 Constant + decompression Convert of a weight rounded by `irsurgeon.weights.half` (the rule and the
rounding are there; this is the openvino side: the graph form openvino's own compression pass makes)."""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino._offline_transformations import compress_model_transformation


def decompression_convert() -> ov.Node:
    """A Convert(f32) carrying openvino's own `decompression` mark, made by the compression pass on one value.

    Python cannot create the mark (ov::mark_as_decompression is not bound), so the pass makes the node and the
    caller rewires its input to the real f16 constant: the same graph the pass builds for a full-size weight.
    """
    holder = ov.Model([ops.result(ops.constant(np.zeros(1, np.float32)))], [], "decompression")
    compress_model_transformation(holder)
    node = holder.get_results()[0].input_value(0).get_node()
    if node.get_type_name() != "Convert":  # pragma: no cover - openvino changed its pass
        raise RuntimeError("openvino's compression pass no longer makes a decompression Convert")
    return node


def half_constant(data: np.ndarray, name: str) -> ov.Output:
    """An f16 weight (the array's memory shared, not copied) decompressed to f32, as the pass would store it."""
    const = ov.op.Constant(np.ascontiguousarray(data, dtype=np.float16), shared_memory=True)
    const.set_friendly_name(name)
    return decompressed(const.output(0), name)


def decompressed(source: ov.Output, name: str) -> ov.Output:
    """An f16 source (a constant, or a placeholder its bytes are written for) behind the decompression Convert the
    pass would put there, named after the weight."""
    convert = decompression_convert()
    convert.input(0).replace_source_output(source)
    convert.validate_and_infer_types()
    convert.set_friendly_name(f"{name}/decompress")
    convert.output(0).get_tensor().set_names(set())
    return convert.output(0)
