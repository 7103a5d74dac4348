"""The bandwidth floor of a draft step: the bytes a head's weight MatMuls read, streamed once through numpy's BLAS.

Every one-token step reads each 2-D MatMul weight of the head once (as stored: f16 2 bytes per value, int8/int4 with
their scales and zero points), so no graph form steps faster than the memory delivers those bytes. `Floor` is a f32
matrix of that many bytes and a vector: `w @ x` (sgemv on all cores, as the CPU plugin runs the head) reads every
byte once and does nothing else. A MoE head's expert stacks are not counted: a step reads only the chosen experts.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import openvino as ov


def weight_bytes(model: ov.Model) -> int:
    """Bytes of the Constants feeding 2-D MatMul weights (through Convert, Subtract, Multiply, Reshape: the stored
    weight, its scales and zero points), each counted once."""
    seen, total = set(), 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or len(op.input_value(1).get_partial_shape()) != 2:
            continue
        todo = [op.input_value(1).get_node()]
        while todo:
            node = todo.pop()
            if node.get_friendly_name() in seen:
                continue
            seen.add(node.get_friendly_name())
            if node.get_type_name() == "Constant":
                total += node.get_byte_size()
            elif node.get_type_name() in ("Convert", "Subtract", "Multiply", "Reshape"):
                todo += [v.get_node() for v in node.input_values()]
    return total


class Floor:
    """A f32 matrix of a head's weight bytes and a vector: `w @ x` reads every byte once (numpy's BLAS, all cores)."""

    def __init__(self, nbytes: int, width: int):
        rows = max(1, nbytes // 4 // width)
        self.w = np.random.default_rng(3).standard_normal((rows, width), dtype=np.float32)
        self.x = np.ones(width, np.float32)
        self.nbytes = self.w.nbytes

    def run(self, steps: int) -> float:
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            self.w @ self.x
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3
