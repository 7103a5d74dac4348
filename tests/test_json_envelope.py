"""--json: one document per run, in one envelope for every command and every end (docs/cli.md, "The JSON document"):
each command's success, refusal, usage error, dry run, Ctrl-C and held lock, validated against the schema the docs
give, and each command's result keys against the docs' table."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from irsurgeon.cli import main
from lab.procs import lock_held
from helpers.tiers import every_nth

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "cli.md").read_text()
TARGET, CKPT = ROOT / "fixtures" / "qwen3_5" / "target", ROOT / "fixtures" / "qwen3_5" / "ckpt"


def documented_schema() -> dict:
    section = DOC[DOC.index("## The JSON document"):]
    return json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))


def documented_keys() -> dict[str, set[str]]:
    """The docs' table: command (or `show of a directory` / `show of an IR`) -> its result's keys."""
    section = DOC[DOC.index("## The JSON document"):]
    rows = re.findall(r"^\| `([a-z-]+)`( of an? [a-zA-Z ]+)? \| (.+) \|$", section, re.M)
    return {name + extra: set(re.findall(r"`([a-z_]+)`", keys.split(", and with")[0])) for name, extra, keys in rows}


SCHEMA = documented_schema()
KEYS = documented_keys()


def run(*args, expect: int) -> dict:
    """The one document of `irsurgeon args`, checked against the schema; stdout holds nothing else."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == expect, (result.exit_code, result.output, result.exception)
    doc = json.loads(result.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert doc["command"] == (args[0] if args[0] in main.commands else None)
    if expect:
        assert doc["ok"] is False and doc["exit_code"] == expect
        if expect == 1:
            assert result.stderr.strip().splitlines()[-1] == f"Error: {doc['error']}"
    else:
        assert doc["ok"] is True
    return doc


def keys_of(doc: dict, row: str) -> None:
    extra = {"genai", "speed"} if row == "verify" else set()  # "and with --genai": present only then
    assert KEYS[row] <= set(doc["result"]) <= KEYS[row] | extra, (row, sorted(doc["result"]))


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("patched") / "t"
    shutil.copytree(TARGET, target)
    keys_of(run("patch", target, "--checkpoint", CKPT, "--weight-format", "f32", "--json", expect=0), "patch")
    return target


def test_the_docs_schema_and_table_cover_every_command():
    assert set(SCHEMA["properties"]["command"]["enum"]) == {*main.commands, None}  # None: no command recognised
    assert {row.split(" ")[0] for row in KEYS} == {*main.commands, "--help", "--version"}


def test_patch(patched, tmp_path):
    again = run("patch", patched, "--checkpoint", CKPT, "--json", expect=0)
    assert again["result"]["changed"] is False and again["result"]["written"] == []
    fresh = shutil.copytree(TARGET, tmp_path / "t")
    plan = run("patch", fresh, "--checkpoint", CKPT, "--dry-run", "--json", expect=0)["result"]
    assert plan["dry_run"] and plan["plan"] and plan["plan"][0].startswith("build ") and not plan["written"]
    refused = run("patch", fresh, "--checkpoint", tmp_path / "missing", "--json", expect=1)
    assert refused["result"] is None and "missing" in refused["error"]
    usage = run("patch", fresh, "--checkpoint", CKPT, "--hidden-layers", "1,2", "--json", expect=2)
    assert usage["result"] is None and "three non-negative integers" in usage["error"]
    with lock_held(fresh, tmp_path / "gate"):
        held = run("patch", fresh, "--checkpoint", CKPT, "--json", expect=1)
    assert "another irsurgeon run holds" in held["error"]


def test_patch_interrupted(tmp_path, monkeypatch):
    import irsurgeon.flows.patch as flow

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt
    monkeypatch.setattr(flow, "build", interrupted)
    fresh = shutil.copytree(TARGET, tmp_path / "t")
    doc = run("patch", fresh, "--checkpoint", CKPT, "--json", expect=130)
    assert doc["error"] == "interrupted before the commit: the directory is as it was"


def test_verify(patched, tmp_path):
    ready = run("verify", patched, "--json", expect=0)
    keys_of(ready, "verify")
    assert ready["result"]["ready"] is True and ready["result"]["failed"] == []
    unpatched = run("verify", TARGET, "--json", expect=1)
    keys_of(unpatched, "verify")
    failed = unpatched["result"]["failed"]
    assert unpatched["result"]["ready"] is False and failed and all(f in unpatched["error"] for f in failed)
    assert any(not c["ok"] for c in unpatched["result"]["checks"])
    file = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["verify", str(TARGET), "--json", str(file)])
    assert result.exit_code == 1 and "{" not in result.stdout
    doc = json.loads(file.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    assert doc == unpatched
    usage = run("verify", patched, "--prompts", "2", "--json", expect=2)
    assert "--genai" in usage["error"]


def test_build_mtp(tmp_path):
    doc = run("build-mtp", CKPT, "-o", tmp_path / "head", "--weight-format", "f32", "--json", expect=0)
    keys_of(doc, "build-mtp")
    assert all(Path(p).is_file() for p in doc["result"]["written"])
    again = run("build-mtp", CKPT, "-o", tmp_path / "head", "--json", expect=1)
    assert "--force" in again["error"]


def test_annotate(tmp_path):
    fresh = shutil.copytree(TARGET, tmp_path / "t")
    dry = run("annotate", fresh, "--dry-run", "--json", expect=0)
    keys_of(dry, "annotate")
    assert dry["result"]["plan"] and not dry["result"]["changed"]
    done = run("annotate", fresh, "--json", expect=0)
    assert done["result"]["changed"] and done["result"]["plan"] == []
    missing = run("annotate", tmp_path / "nothing", "--json", expect=1)
    assert missing["result"] is None


def test_show(tmp_path):
    keys_of(run("show", TARGET, "--json", expect=0), "show of a directory")
    keys_of(run("show", TARGET / "openvino_language_model.xml", "--json", expect=0), "show of an IR")
    keys_of(run("show", TARGET.parent / "ckpt", "--json", expect=0), "show of a checkpoint")
    (tmp_path / "empty").mkdir()
    assert "not an export" in run("show", tmp_path / "empty", "--json", expect=1)["error"]


def test_synth(tmp_path):
    keys_of(run("synth", tmp_path / "s", "--kind", "llama", "--json", expect=0), "synth")
    assert "--force" in run("synth", tmp_path / "s", "--kind", "llama", "--json", expect=1)["error"]
    assert run("synth", tmp_path / "u", "--kind", "nope", "--json", expect=2)["result"] is None


@pytest.mark.parametrize("command", every_nth(["patch", "show", "synth", "verify", "annotate"], 2, ids=str))
def test_a_closed_stdout_is_never_exit_0_without_the_document(tmp_path, command):
    """`irsurgeon COMMAND --json >&-`: Python starts with sys.stdout None and click.echo drops what it is given, so the
    command used to end with exit 0 and no document. Now one stderr line says the report was lost, exit 1."""
    import os
    import shutil
    import subprocess
    import sys

    from lab.families import FIXTURE_PAIRS

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path / "t")
    if command == "verify":  # a ready directory: verify would end 0
        from helpers.cli import invoke
        assert invoke("patch", target, "--checkpoint", ckpt).exit_code == 0
    args = {"show": [target], "verify": [target], "annotate": [target], "synth": [tmp_path / "s", "--kind", "eagle3"],
            "patch": [target, "--checkpoint", ckpt]}[command]
    proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", command, *map(str, args), "--json"],
                          preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, text=True, timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error: ")]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_command_that_does_not_exist_is_a_usage_error_document_of_the_schema():
    """`irsurgeon pach --json`: no command was recognised, so `command` is null, as the schema allows."""
    doc = run("pach", "--json", expect=2)
    assert doc["command"] is None and doc["result"] is None and "No such command 'pach'" in doc["error"]


@pytest.mark.parametrize("args", [["--json", "--help"], ["patch", "--help", "--json"], ["verify", "--json", "-h"],
                                  ["--help", "show", "--json"]], ids=" ".join)
def test_help_with_json_is_one_document_holding_the_help_text(args):
    """--help with --json, in any order: the document (`command` the subcommand's, null for the group's help) whose
    result is the text --help prints alone."""
    doc = run(*args, expect=0)
    keys_of(doc, "--help")
    plain = CliRunner().invoke(main, [a for a in args if a != "--json"])
    assert plain.exit_code == 0 and doc["result"]["help"] + "\n" == plain.stdout and "{" not in plain.stdout[:1]


def test_version_with_json_is_one_document():
    from irsurgeon import __version__

    for args in (["--json", "--version"], ["--version", "--json"]):
        doc = run(*args, expect=0)
        keys_of(doc, "--version")
        assert doc["result"] == {"version": __version__} and doc["command"] is None
    plain = CliRunner().invoke(main, ["--version"])
    assert plain.stdout == f"irsurgeon, version {__version__}\n"


@pytest.mark.parametrize("args, stdout", [(["--help"], "closed"), (["patch", "--help", "--json"], "full"),
                                          (["--version", "--json"], "closed")], ids=str)
def test_help_or_version_that_cannot_be_written_is_one_line_and_exit_1(args, stdout):
    """As every command's report: stdout closed (`>&-`) or full (/dev/full) is one `Error:` line and exit 1, never
    exit 0 with nothing said (--help used to), nor a traceback (--help > /dev/full used to)."""
    import os
    import subprocess
    import sys

    with open(os.devnull if stdout == "closed" else "/dev/full", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", *args], stdout=out, stderr=subprocess.PIPE,
                              text=True, timeout=60, preexec_fn=(lambda: os.close(1)) if stdout == "closed" else None)
    reason = "stdout is closed" if stdout == "closed" else "no space left on device"
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"Error: the help or version could not be written to stdout ({reason})"], proc.stderr
