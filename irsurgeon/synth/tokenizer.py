"""A byte-level tokenizer / detokenizer pair built from core opset15 string ops (no openvino-tokenizers needed).

Token ids: 0..SPECIAL-1 are special (0 pad/endoftext, 1 im_start, 2 im_end = eos, 3..6 vision), then bytes:

    encode:  "text" [B] -> StringTensorUnpack -> bytes b -> id = SPECIAL + b mod (V - SPECIAL)
             input_ids, attention_mask  i64 [B, L]   (right-padded with 0, L = longest string)
    decode:  ids i64 [B, L] -> keep[id] (drops specials) -> char[id] -> StringTensorPack -> string [B]

`char[id]` maps every non-special id onto printable ASCII (or newline), so any id sequence a random model emits
decodes to valid UTF-8, and ASCII text round-trips exactly when V >= SPECIAL + 128.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import openvino.opset15 as ops15

from irsurgeon.ops.core import const, named

SPECIAL = 8
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHAT_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
I64 = np.int64


def byte_of_id(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(char u8 [V], keep bool [V]): the byte each id decodes to, and whether it decodes to anything."""
    ids = np.arange(vocab)
    raw = (ids - SPECIAL) % 256
    printable = ((raw >= 32) & (raw < 127)) | (raw == 10)
    char = np.where(printable, raw, 33 + raw % 94).astype(np.uint8)
    return char, ids >= SPECIAL


def tokenizer_model(vocab: int) -> ov.Model:
    text = ops.parameter(ov.PartialShape([-1]), ov.Type.string, name="string_input")
    text.output(0).set_names({"string_input"})
    unpacked = ops15.string_tensor_unpack(text)
    begins, ends = (ops.convert(unpacked.output(i), ov.Type.i64) for i in (0, 1))
    lengths = ops.subtract(ends, begins)  # [B]
    longest = ops.reduce_max(ops.concat([lengths, const([0], I64)], 0), const(0, I64), keep_dims=True)
    cols = ops.range(const(0, I64), ops.squeeze(longest, const(0, I64)), const(1, I64), ov.Type.i64)  # [L]
    valid = ops.less(ops.unsqueeze(cols, const(0, I64)), ops.unsqueeze(lengths, const(1, I64)))  # [B, L]
    last = ops.maximum(ops.subtract(ops.shape_of(unpacked.output(2), ov.Type.i64), const(1, I64)), const(0, I64))
    where = ops.minimum(ops.add(ops.unsqueeze(begins, const(1, I64)), cols), last)
    padded = ops.concat([unpacked.output(2), const([0], np.uint8)], 0)  # never gather from an empty tensor
    byte = ops.convert(ops.gather(padded, where, const(0, I64)), ov.Type.i64)
    ids = ops.add(ops.floor_mod(byte, const(vocab - SPECIAL, I64)), const(SPECIAL, I64))
    input_ids = named(ops.select(valid, ids, const(PAD_ID, I64)), "input_ids")
    mask = named(ops.convert(valid, ov.Type.i64), "attention_mask")
    return _model([input_ids, mask], ["input_ids", "attention_mask"], [text], "tokenizer")


def detokenizer_model(vocab: int) -> ov.Model:
    ids = ops.parameter(ov.PartialShape([-1, -1]), ov.Type.i64, name="Parameter_1")
    ids.output(0).set_names({"Parameter_1"})
    char_table, keep_table = byte_of_id(vocab)
    clamped = ops.clamp(ids, 0, vocab - 1)
    keep = ops.gather(const(keep_table, np.bool_), clamped, const(0, I64))  # [B, L]
    counts = ops.reduce_sum(ops.convert(keep, ov.Type.i64), const(1, I64))  # [B]
    ends = ops.cumsum(counts, const(0, I64))
    begins = ops.subtract(ends, counts)
    flat_keep = ops.reshape(keep, const([-1], I64), special_zero=False)
    where = ops.reshape(ops.non_zero(flat_keep, ov.Type.i64), const([-1], I64), special_zero=False)
    kept_ids = ops.gather(ops.reshape(clamped, const([-1], I64), special_zero=False), where, const(0, I64))
    chars = ops.gather(const(char_table, np.uint8), kept_ids, const(0, I64))
    text = named(ops15.string_tensor_pack(begins, ends, chars), "string_output")
    return _model([text], ["string_output"], [ids], "detokenizer")


def _model(outputs: list[ov.Output], names: list[str], params: list[ov.Node], title: str) -> ov.Model:
    results = []
    for out, name in zip(outputs, names):
        r = ops.result(out)
        r.set_friendly_name(f"Result_{name}")
        r.output(0).set_names({name})
        results.append(r)
    return ov.Model(results, params, title)


def tokenizer_rt_info(model: ov.Model, detokenizer: bool) -> None:
    """The rt_info openvino-genai reads from a tokenizer or detokenizer IR."""
    info = {"pad_token_id": PAD_ID, "eos_token_id": EOS_ID, "chat_template": CHAT_TEMPLATE,
            "add_special_tokens": "True", "skip_special_tokens": "True", "number_of_inputs": "1",
            "tokenizer_output_type": "i64", "detokenizer_input_type": "i64", "utf8_replace_mode": "replace"}
    for key, value in info.items():
        model.set_rt_info(str(value), key)
    if detokenizer:
        model.set_rt_info("False", "streaming_detokenizer")
