"""The prompts speed and acceptance are measured on (flows/prompts.py): the bundled set, a prompts file (lines or JSON
Lines), and a prompt rendered through the target's chat template."""
from __future__ import annotations

import json

import pytest

from helpers.cli import invoke
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.flows.prompts import PROMPTS, TEXTS, prompt_list, read_prompts, rendered
from lab.families import FIXTURE_PAIRS


def test_the_bundled_set_has_every_kind_and_keeps_its_first_six():
    assert {kind for kind, _ in PROMPTS} == {"chat", "code", "prose"}
    assert TEXTS[2] == "What is the capital of France?" and len(set(TEXTS)) == len(TEXTS)
    assert prompt_list(3) == list(TEXTS[:3]) and prompt_list(["x"]) == ["x"]


def test_a_file_of_lines_and_one_of_json_lines(tmp_path):
    f = tmp_path / "p.txt"
    assert read_prompts(f, "one\n\n  two  \n") == ["one", "two"]
    lines = [json.dumps({"prompt": "hi"}), "", json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                                                      {"role": "user", "content": "why?"}]})]
    assert read_prompts(f, "\n".join(lines)) == ["hi", (("system", "be brief"), ("user", "why?"))]


@pytest.mark.parametrize("line,says", [
    ("{not json", "line 2: not JSON"),
    ('{"prompt": 3}', "line 2: expected"),
    ('{"messages": []}', "line 2: expected"),
    ('{"messages": [{"role": "user"}]}', "line 2: expected"),
    ('["a"]', "line 2: expected"),
    pytest.param('{"messages": ' + "[" * 100000 + "]" * 100000 + "}", "line 2: JSON nested too deeply", id="deep"),
    pytest.param('{"prompt": "x", "n": ' + "1" * 5000 + "}", "line 2: holds a number too long", id="long-number"),
])
def test_a_json_line_that_is_not_a_prompt_is_named(tmp_path, line, says):
    with pytest.raises(IRSurgeonError, match=says):
        read_prompts(tmp_path / "p.jsonl", '{"prompt": "fine"}\n' + line)


def test_the_cli_takes_a_number_up_to_the_bundled_count_and_names_a_bad_file(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "a"}\n{"nope": 1}\n')
    result = invoke("verify", tmp_path, "--genai", "--prompts", bad)
    assert result.exit_code == 2 and f"{bad}: line 2: expected" in result.output
    too_many = invoke("verify", tmp_path, "--genai", "--prompts", str(len(PROMPTS) + 1))
    assert too_many.exit_code == 2 and f"a number from 1 to {len(PROMPTS)}" in too_many.output


def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path):
    """A file saved with a UTF-8 byte order mark (Windows editors) reads as without: JSON Lines stay JSON Lines (was
    taken as a file of lines, the JSON text measured as a prompt), and a line's first prompt carries no U+FEFF."""
    f = tmp_path / "p.jsonl"
    assert read_prompts(f, '\ufeff{"prompt": "hi"}\r\n{"prompt": "there"}\r\n') == ["hi", "there"]
    assert read_prompts(f, "\ufeffone\ntwo\n") == ["one", "two"]


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling-link"])
def test_a_prompts_path_that_is_not_a_regular_file_is_named_as_what_it_is(tmp_path, kind):
    import os

    path = tmp_path / "prompts.txt"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone.txt")
    said = {"fifo": "is a FIFO", "directory": "is a directory", "dangling-link": "file not found"}[kind]
    result = invoke("verify", tmp_path, "--genai", "--prompts", path)
    assert result.exit_code == 2 and f"{path}: {said}" in result.output, result.output


def test_a_prompt_goes_through_the_chat_template_only_where_there_is_one(tmp_path):
    import openvino_genai as g
    with_template = FIXTURE_PAIRS["eagle3"][0]   # synth's tokenizer carries a ChatML template
    without = FIXTURE_PAIRS["gemma4"][0]         # this one carries none
    texts, applied = rendered(g, with_template, ["Hi", (("system", "s"), ("user", "u"))], chat=True)
    assert applied and texts[0].startswith("<|im_start|>user\nHi<|im_end|>") and texts[0].endswith("assistant\n")
    assert texts[1].startswith("<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu")
    assert rendered(g, with_template, ["Hi"], chat=False) == (["Hi"], False)
    assert rendered(g, without, ["Hi"], chat=True) == (["Hi"], False)
    with pytest.raises(IRSurgeonError, match="no chat template"):
        rendered(g, without, [(("user", "u"),)], chat=False)


def test_a_chat_template_that_refuses_a_conversation_is_one_line_naming_the_prompt():
    """A template's raise_exception (Llama's and Gemma's 'roles must alternate', a role they do not know) comes out
    of openvino-genai as a RuntimeError of a dozen lines; it is one IRSurgeonError naming the prompt and the
    template's own words (was 'Error: unexpected RuntimeError')."""
    import openvino_genai as g
    from types import SimpleNamespace

    target = FIXTURE_PAIRS["eagle3"][0]
    tokenizer = g.Tokenizer(str(target))
    tokenizer.set_chat_template("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                                "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}{{ m['content'] }}"
                                "{% endfor %}")
    fake = SimpleNamespace(Tokenizer=lambda _path: tokenizer)
    with pytest.raises(IRSurgeonError) as e:
        rendered(fake, target, ["fine", (("user", "u"), ("wizard\u202e", "x"))], chat=True)
    said = str(e.value)
    assert "prompt 2" in said and "unknown role wizard" in said and "\n" not in said and "row 1" not in said, said


@pytest.mark.parametrize("form", ["directory", "not-an-ir", "fifo", "text"])
def test_a_tokenizer_genai_cannot_read_is_one_line_and_a_fifo_never_blocks(tmp_path, form):
    """tune renders its prompts through the target's tokenizer in its own process: a FIFO there blocked it for ever,
    a folder or a file that is no IR was 'Error: unexpected RuntimeError' (tune, after its readings' check)."""
    import os
    import shutil

    import openvino_genai as g

    target = shutil.copytree(FIXTURE_PAIRS["eagle3"][0], tmp_path / "t")
    tokenizer = target / "openvino_tokenizer.xml"
    tokenizer.unlink()
    if form == "fifo":
        os.mkfifo(tokenizer)
    elif form == "directory":
        tokenizer.mkdir()
    elif form == "text":
        tokenizer.write_text("CANARY: 1\n")  # OpenVINO's TensorFlow frontend tried it, logging it to stderr
    else:
        tokenizer.write_text('<?xml version="1.0"?>\n<net name="t" version="11"><layers><layer id="0" name="x" '
                             'type="NoSuchOp" version="opset1"/></layers><edges/></net>\n')
    with pytest.raises(IRSurgeonError) as e:
        rendered(g, target, ["Hi"], chat=True)
    said = {"fifo": "openvino_tokenizer.xml: is a FIFO", "directory": "openvino_tokenizer.xml: is a directory",
            "not-an-ir": "cannot read its tokenizer", "text": "openvino_tokenizer.xml: not an OpenVINO IR"}[form]
    assert said in str(e.value) and "\n" not in str(e.value), str(e.value)
