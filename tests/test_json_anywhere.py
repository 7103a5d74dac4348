"""--json anywhere on the command line: every end is one document of the envelope (docs/cli.md), the options are read
in any order (verify's `--json [FILE]` before its TARGET too), and a path that is not there is said in the same words
by every command."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

import irsurgeon
from irsurgeon.cli import main
from lab.families import FIXTURE_PAIRS

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "fixtures" / "qwen3_5" / "target"


def schema() -> dict:
    import re
    section = (ROOT / "docs" / "cli.md").read_text().split("## The JSON document", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def document(*args) -> tuple[dict, object]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    doc = json.loads(result.stdout)  # nothing else on stdout
    jsonschema.Draft202012Validator(schema()).validate(doc)
    return doc, result


def test_json_alone_is_the_usage_error_of_no_command_as_one_document():
    """`irsurgeon --json` printed click's "No such option '--json'" and no document; it is now what `irsurgeon` alone
    is, a usage error (exit 2, the help on stderr), with its document: no command, the commands named."""
    doc, result = document("--json")
    assert result.exit_code == 2 and doc["ok"] is False and doc["exit_code"] == 2, result.output
    assert doc["command"] is None and doc["result"] is None
    assert doc["error"].startswith("missing command: give one of") and all(c in doc["error"] for c in main.commands)
    assert "Commands:" in result.stderr  # the help, as for `irsurgeon` alone


def test_json_before_the_command_is_the_commands_own():
    doc, result = document("--json", "show", TARGET)
    assert result.exit_code == 0 and doc["ok"] is True and doc["command"] == "show", result.output
    assert doc["result"]["family"] == "qwen3_5"
    refused, result = document("--json", "verify", TARGET)  # verify's --json takes a FILE: moved as the flag
    assert result.exit_code == 1 and refused["command"] == "verify" and refused["result"]["target"] == str(TARGET)


def test_a_usage_error_of_the_groups_own_words_is_a_document_too():
    doc, result = document("--json", "--bogus", "show", TARGET)
    assert result.exit_code == 2 and doc["exit_code"] == 2 and "--bogus" in doc["error"], result.output
    assert doc["command"] == "show" and doc["result"] is None


@pytest.mark.parametrize("args", [["--json", "{t}"], ["--json", "{t}", "--checkpoint", "{c}"],
                                  ["--checkpoint", "{c}", "--json", "{t}"], ["--json", "--", "{t}"],
                                  ["{t}", "--json"], ["--json=-", "{t}"]])
def test_verify_reads_its_options_in_any_order(args, tmp_path):
    """`verify --json TARGET` was refused ("Missing argument 'TARGET'": click took TARGET as the FILE of --json);
    the word after --json is TARGET when no other word can be."""
    from irsurgeon.cli.verify import command as verify

    ckpt = FIXTURE_PAIRS["qwen3_5"][1]
    words = [w.format(t=TARGET, c=ckpt) for w in args]
    doc, result = document("verify", *words)
    assert result.exit_code == 1 and doc["command"] == "verify" and doc["result"]["target"] == str(TARGET), \
        result.output
    assert ("checkpoint" in " ".join(c["name"] for c in doc["result"]["checks"])) is ("{c}" in args)
    assert irsurgeon._json_to_stdout("verify", words)  # the words alone say the same (an end before click reads them)
    assert {o for p in verify.params if getattr(p, "is_flag", False) for o in p.opts + p.secondary_opts} | \
        {"-h", "--help"} == {"--genai", "-h", "--help"}  # the flags _verify_json_target knows take no value


def test_verify_json_file_before_the_target_still_names_a_file(tmp_path):
    out = tmp_path / "doc.json"
    result = CliRunner().invoke(main, ["verify", "--json", str(out), str(TARGET)])
    assert result.exit_code == 1 and json.loads(out.read_text())["result"]["target"] == str(TARGET), result.output
    assert not irsurgeon._json_to_stdout("verify", ["--json", str(out), str(TARGET)])


def test_the_words_name_only_commands_that_exist():
    assert set(irsurgeon._COMMANDS) == set(main.commands)


@pytest.mark.parametrize("command", ["patch", "tune", "verify", "show", "annotate"])
def test_a_missing_path_is_one_line_in_the_same_words_for_every_command(command, tmp_path):
    """verify used to say it as a failed check ("FAIL target layout: ..." then "Error: ...: not ready for speculative
    decoding: failed target layout (...)"); every command now says `Error: PATH: no such file or directory`."""
    missing = tmp_path / "nope"
    ckpt = FIXTURE_PAIRS["qwen3_5"][1]
    args = {"patch": ["patch", missing, "--checkpoint", ckpt], "tune": ["tune", missing, "--checkpoint", ckpt],
            "verify": ["verify", missing], "show": ["show", missing], "annotate": ["annotate", missing]}[command]
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 1 and result.stdout == "", result.output
    assert result.stderr.splitlines() == [f"Error: {missing}: no such file or directory"], result.stderr


def test_a_ctrl_c_while_a_failure_is_said_leaves_its_line_and_document(monkeypatch, tmp_path):
    """A Ctrl-C while the failure's document was being made (json.dumps) cut the end off: exit 1 with neither the
    `Error:` line nor the document (found by tests/test_entry_points.py's sweep). The end is held while it is said."""
    import irsurgeon.cli as cli

    dumps, pressed = json.dumps, []

    def ctrl_c_once(*args, **kwargs):
        if not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)
        return dumps(*args, **kwargs)
    monkeypatch.setattr(cli.json, "dumps", ctrl_c_once)
    missing = tmp_path / "nope"
    result = CliRunner().invoke(main, ["show", str(missing), "--json"])
    monkeypatch.undo()
    assert pressed and result.exit_code == 1, (result.exit_code, result.output)
    assert result.stderr.splitlines() == [f"Error: {missing}: no such file or directory"], result.stderr
    assert json.loads(result.stdout)["error"] == f"{missing}: no such file or directory"
