"""The prompts speed and acceptance are measured on: a bundled set, or the user's file, and how each becomes text.

    PROMPTS     the bundled set, written for irsurgeon and under its license (setup.cfg), each with its kind: chat,
                code or prose. `verify --genai --prompts N` and `tune --prompts N` take the first N; tune takes all
                by default. The first six are the set every recorded acceptance figure of docs/ was measured on
    a file      one prompt per line, or JSON Lines: one object per line, {"prompt": "text"} or {"messages": [{"role":
                "user", "content": "text"}, ...]} (a conversation, rendered with the target's chat template)
    rendered    a prompt as the pipelines get it: a text as it is, or (chat=True, tune's default) a text as one user
                message, rendered with the target tokenizer's chat template (openvino_genai.Tokenizer
                .apply_chat_template, add_generation_prompt) where the tokenizer has one; a conversation always
                through the template (a tokenizer without one is refused). Generation then runs with
                apply_chat_template off (flows.genai), so both pipelines get exactly the same text
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence, Union

from irsurgeon.core import limits
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.core.text import shown
from irsurgeon.ir import files
from irsurgeon.ir.export import DETOKENIZER, TOKENIZER

Prompt = Union[str, tuple[tuple[str, str], ...]]  # a text, or a conversation: (role, content) pairs

PROMPTS: tuple[tuple[str, str], ...] = (
    ("prose", "Hello world, the quick brown fox"),
    ("prose", "Once upon a time there was a little robot who liked to count"),
    ("chat", "What is the capital of France?"),
    ("prose", "one two three four five six seven eight nine ten"),
    ("code", "def main(): print("),
    ("chat", "The weather today is sunny with a chance of rain in the afternoon. Please write a short poem about the "
             "sea."),
    ("code", "Write a Python function that returns the n-th Fibonacci number, with a docstring and a test."),
    ("chat", "Explain in three sentences why the sky is blue, for a ten-year-old."),
    ("prose", "The old lighthouse keeper climbed the stairs every evening, and on the last night of the year he"),
)
TEXTS = tuple(text for _, text in PROMPTS)


def prompt_list(prompts: int | Sequence[Prompt]) -> list[Prompt]:
    """The first N bundled prompts for an int, else the given prompts."""
    return list(TEXTS[:prompts]) if isinstance(prompts, int) else list(prompts)


def read_prompts(path: Path, text: str) -> list[Prompt]:
    """The prompts of a file's text (the module docstring): JSON Lines when its first non-blank line opens an
    object, else one prompt per non-blank line. A line that is not a prompt is an IRSurgeonError naming it."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark, as Windows editors save one: not the text's
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise IRSurgeonError(f"{path}: no prompts (one per line, or JSON Lines with \"prompt\" or \"messages\")")
    if not lines[0][1].startswith("{"):
        return [line for _, line in lines]
    return [json_prompt(path, n, line) for n, line in lines]


def json_prompt(path: Path, n: int, line: str) -> Prompt:
    """One JSON Lines prompt: {"prompt": text} or {"messages": [{"role": r, "content": c}, ...]}."""
    where = f"{path}: line {n}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise IRSurgeonError(f"{where}: not JSON ({e.msg})") from None
    except RecursionError:  # json.loads recurses per level
        raise IRSurgeonError(f"{where}: JSON nested too deeply for a prompt") from None
    except ValueError:  # int()'s digit limit (sys.get_int_max_str_digits)
        raise IRSurgeonError(f"{where}: holds a number too long to read; expected a prompt") from None
    if isinstance(obj, dict) and isinstance(obj.get("prompt"), str) and obj["prompt"].strip():
        return obj["prompt"]
    messages = obj.get("messages") if isinstance(obj, dict) else None
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        return tuple((m["role"], m["content"]) for m in messages)
    raise IRSurgeonError(f"{where}: expected {{\"prompt\": text}} or {{\"messages\": [{{\"role\": ..., \"content\": "
                         f"...}}, ...]}}, found {shown(line[:60])}")


def rendered(g, target: Path, prompts: Sequence[Prompt], chat: bool) -> tuple[list[str], bool]:
    """The prompts as text for both pipelines (the module docstring), and whether a chat template was applied."""
    talks = any(not isinstance(p, str) for p in prompts)
    tokenizer = tokenizer_of(g, target) if chat or talks else None
    template = tokenizer is not None and bool(tokenizer.chat_template)
    if talks and not template:
        raise IRSurgeonError(f"{target}: its tokenizer has no chat template, and a prompt is a conversation "
                             f"(messages): give plain text prompts")
    out = []
    for i, p in enumerate(prompts, 1):
        if isinstance(p, str) and not (chat and template):
            out.append(p)
            continue
        messages = [("user", p)] if isinstance(p, str) else p
        try:
            out.append(tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                                     add_generation_prompt=True))
        except RuntimeError as e:  # the template's raise_exception ("roles must alternate"), or minja's own
            raise IRSurgeonError(f"{target}: its tokenizer's chat template refused prompt {i} (roles "
                                 f"{shown(', '.join(r for r, _ in messages)[:80])}): {template_error(e)}") from None
    return out, template and (chat or talks)


def tokenizer_of(g, target: Path):
    """openvino_genai.Tokenizer of the target, its files checked first (genai opens them itself: a FIFO would block
    it, a 2 GiB file be read whole); what genai cannot read is one line naming the target."""
    limits.check_directory_files(target, IRSurgeonError)
    for name in (TOKENIZER, DETOKENIZER):  # an IR, or OpenVINO's other frontends try it and log to stderr
        if os.path.lexists(target / name):
            files.read_ir_bytes(target / name)
    try:
        return g.Tokenizer(str(target))
    except RuntimeError as e:
        raise IRSurgeonError(f"{target}: openvino-genai cannot read its tokenizer: {shown(cause(e)[:200])}") from None


def template_error(e: RuntimeError) -> str:
    """The words of a chat template's refusal: openvino-genai 2026.4.1 (src/cpp/src/tokenizer/tokenizer_impl.cpp,
    apply_chat_template) raises a dozen lines, advice and the template with carets, around one "Minja's error: WHAT
    at row R, column C:" line; that WHAT, else the exception's first informative line."""
    for line in str(e).splitlines():
        if line.startswith("Minja's error:"):
            return shown(line.removeprefix("Minja's error:").strip().split(" at row ")[0][:200])
    return shown(cause(e)[:200])
