"""What a new user meets on every command: errors that keep their cause, hints that name real options, one spelling of
choices, what overwrites and what needs --force, exit codes, --json, and speed printed only where it was measured."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from click.testing import CliRunner
from helpers.checkpoints import read_tensors, write_variant
from helpers.cli import one_error, refused
from lab.demo import DEMO_CKPT, DEMO_TARGET, writable_copy
from lab.families import FAMILIES, FIXTURE_PAIRS
from lab.procs import env

from irsurgeon import build_mtp_model

from irsurgeon.core import rtinfo
from irsurgeon.cli import main
from irsurgeon.quant.formats import WEIGHT_FORMATS
from irsurgeon.core.errors import IRSurgeonError, cause
from irsurgeon.ir import xmlsafe
from irsurgeon.ir.hidden_states import annotation_json
from irsurgeon.synth import synthesize
from helpers.cli import result_of

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_5"
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
OTHER_TOOL = re.compile(r"`(?!irsurgeon )[a-z][\w-]* [^`]*`")  # a quoted command line of another program


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def copy_demo(directory: Path) -> Path:
    shutil.copytree(DEMO / "target", directory)
    for p in [directory, *directory.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return directory


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    target = copy_demo(tmp_path_factory.mktemp("conventions") / "target")
    res = invoke("patch", target, "--checkpoint", DEMO / "ckpt")
    assert res.exit_code == 0, res.output
    return target


def one_error_line(res) -> str:
    """The failure's `Error:` line: the last line, and the only one (progress lines may come before it)."""
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error")]
    assert res.exit_code == 1 and errors == lines[-1:] and errors[0].startswith("Error: "), res.output
    return lines[-1]


# --- errors keep their cause ----------------------------------------------------------------------------------------

def test_cause_skips_openvino_location_and_assertion_lines():
    with pytest.raises(RuntimeError) as shape_error:
        ops.matmul(ops.constant(np.zeros((2, 3), np.float32)), ops.constant(np.zeros((4, 5), np.float32)), False, False)
    assert cause(shape_error.value).startswith("Incompatible MatMul matrix dimension")
    with pytest.raises(RuntimeError) as read_error:
        ov.Core().read_model("/nonexistent/model.xml")
    assert cause(read_error.value).startswith("ir: Could not open the file")
    plugin = RuntimeError("Exception from src/inference/src/cpp/core.cpp:117:\nCannot load library \"x.so\": "
                          "libOpenCL.so.1: cannot open shared object file: No such file or directory\n")
    assert "libOpenCL.so.1" in cause(plugin)
    assert cause(RuntimeError("")) == "RuntimeError"


@pytest.mark.genai
@pytest.mark.parametrize("device", ["FOO", "gpu"])
def test_unknown_device_is_named_in_the_error(patched, device):
    line = one_error_line(invoke("verify", patched, "--genai", "--device", device, "--prompts", "1"))
    assert f'"{device}" name is not registered' in line and "Exception from" not in line, line


# --- speed only where it was measured; settings as KEY=value --------------------------------------------------------

@pytest.mark.extended  # CI's extended tier: test_metrics.py's verify --genai reads these lines in the default tier
@pytest.mark.genai
def test_equivalence_lines_carry_no_speed_and_settings_read_as_pairs(patched):
    res = invoke("verify", patched, "--genai", "--prompts", "1", "--sweep", "1", "--rounds", "1",
                 "--max-new-tokens", "8", "--json")
    assert res.exit_code == 0, res.output
    doc = result_of(res.stdout)  # stdout holds the document alone; the text went to stderr
    runs = [ln for ln in res.stderr.splitlines() if ln.startswith("prompt ")]
    assert runs and not any("tok/s" in ln for ln in runs), runs
    assert "{" not in res.stderr and "equivalence at INFERENCE_PRECISION_HINT=f32" in res.stderr, res.stderr
    speed = doc["speed"]
    for key, value in speed["device_defaults"].items():
        assert f"{key}={value}" in res.stderr
    assert set(speed["kv_precision"]) == set(speed["kv_precision_source"]) == {"target", "draft"}
    assert f"target={speed['kv_precision']['target']}" in res.stderr
    assert doc["ready"] and not any("seconds" in r for r in doc["genai"]["runs"])


# --- patch: an explicit format is honoured; the checkpoint is checked before the plan -------------------------------

def head_weight_format(target: Path) -> str:
    data = (target / "openvino_mtp_model.xml").read_bytes()
    return xmlsafe.get_value(data, (rtinfo.PROVENANCE, "weight_format"))


def test_explicit_weight_format_rebuilds_a_ready_head_of_another_format(tmp_path):
    target = copy_demo(tmp_path / "t")
    assert invoke("patch", target, "--checkpoint", DEMO / "ckpt").exit_code == 0
    assert head_weight_format(target) == "f16"
    res = invoke("patch", target, "--checkpoint", DEMO / "ckpt", "--weight-format", "INT4")
    assert res.exit_code == 0 and "rebuilding" in res.output, res.output
    assert head_weight_format(target) == "int4"
    for fmt in ("int4", "auto"):  # the asked format, or none asked: nothing to do
        res = invoke("patch", target, "--checkpoint", DEMO / "ckpt", "--weight-format", fmt)
        assert res.exit_code == 0 and "nothing to do" in res.output, res.output


def test_bad_checkpoint_is_the_only_line(tmp_path):
    target = copy_demo(tmp_path / "t")
    for extra in ([], ["--dry-run"]):
        res = invoke("patch", target, "--checkpoint", tmp_path / "missing", *extra)
        assert len(res.output.splitlines()) == 1 and str(tmp_path / "missing") in one_error_line(res), res.output


# --- overwriting: one rule ------------------------------------------------------------------------------------------

def test_build_mtp_replaces_a_head_only_with_force(tmp_path):
    out = tmp_path / "out"
    assert invoke("build-mtp", DEMO / "ckpt", "-o", out).exit_code == 0
    before = (out / "openvino_mtp_model.xml").read_bytes()
    line = one_error_line(invoke("build-mtp", DEMO / "ckpt", "-o", out, "--kv-cache-precision", "u8"))
    assert "--force" in line and (out / "openvino_mtp_model.xml").read_bytes() == before
    assert invoke("build-mtp", DEMO / "ckpt", "-o", out, "--kv-cache-precision", "U8", "--force").exit_code == 0
    assert (out / "openvino_mtp_model.xml").read_bytes() != before


def test_synth_refuses_a_directory_holding_an_export(tmp_path):
    export = copy_demo(tmp_path / "export")
    before = sorted(p.name for p in export.iterdir())
    line = one_error_line(invoke("synth", export, "--kind", "llama"))
    assert "--force" in line and sorted(p.name for p in export.iterdir()) == before
    assert invoke("synth", export, "--kind", "llama", "--force").exit_code == 0
    assert (export / "target").is_dir() and (export / "ckpt").is_dir()


# --- hints name options of the command that printed them ------------------------------------------------------------

def named_options(text: str) -> set[str]:
    return set(OPTION.findall(OTHER_TOOL.sub("", text)))


def options_of(command: str) -> set[str]:
    params = main.commands[command].params
    return {o.split("/")[0] for p in params for o in (*p.opts, *p.secondary_opts)}


def nonfinite_checkpoint(directory: Path) -> Path:
    tensors = read_tensors(DEMO / "ckpt")
    raw, dtype = tensors["mtp.norm.weight"]
    bad = np.full(raw.shape, 0x7FC0, np.uint16) if dtype == "BF16" else np.full(raw.shape, np.nan, raw.dtype)
    return write_variant(DEMO / "ckpt", directory, {**tensors, "mtp.norm.weight": (bad, dtype)})


def lone_safetensors(directory: Path) -> Path:
    directory.mkdir()
    return Path(shutil.copy(DEMO / "ckpt" / "model.safetensors", directory / "head.safetensors"))


HINTED = {  # command -> failure paths that carry advice: (make arguments from tmp_path, text the error must hold)
    "build-mtp": [
        (lambda t: [lone_safetensors(t / "c"), "-o", t / "o"], "--config"),
        (lambda t: [nonfinite_checkpoint(t / "c"), "-o", t / "o"], "--allow-nonfinite"),
        (lambda t: [DEMO / "ckpt", "-o", t / "o", "--weight-format", "auto"], "--target"),
        (lambda t: [DEMO / "ckpt", "-o", t / "o", "--weight-format", "int8", "--group-size", "32"], "--group-size"),
        (lambda t: [DEMO / "ckpt", "-o", DEMO / "target", "--weight-format", "f32", "--target", DEMO / "target"],
         "--target"),
    ],
    "patch": [
        (lambda t: [copy_demo(t / "d"), "--checkpoint", lone_safetensors(t / "c")], ""),
        (lambda t: [copy_demo(t / "d"), "--checkpoint", nonfinite_checkpoint(t / "c")], "--allow-nonfinite"),
        (lambda t: [synthesize(t / "s", "llama", with_mtp=False).target, "--checkpoint", DEMO / "ckpt"], "optimum-cli"),
        (lambda t: [synthesize(t / "a", seed=1).target, "--checkpoint", synthesize(t / "b", seed=2).ckpt],
         "--allow-foreign-checkpoint"),
    ],
    "synth": [
        (lambda t: [copy_demo(t / "d")], "--force"),
        (lambda t: [t / "s", "--heads", "3"], "--heads"),
        (lambda t: [t / "s", "--kind", "llama", "--with-mtp"], "--no-mtp"),
    ],
}


@pytest.mark.parametrize("command, case", [(c, i) for c, cases in HINTED.items() for i in range(len(cases))])
def test_every_hint_names_an_option_of_its_command(tmp_path, command, case):
    make_args, needle = HINTED[command][case]
    res = invoke(command, *make_args(tmp_path))
    line = one_error_line(res)
    assert needle in line, line
    assert named_options(line) <= options_of(command), (line, named_options(line) - options_of(command))


def test_annotate_hint_names_its_force(tmp_path):
    target = copy_demo(tmp_path / "t")
    assert invoke("annotate", target).exit_code == 0
    xml = target / "openvino_language_model.xml"
    other = annotation_json({0: ("some/other/op", 0)})
    xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), ("hidden_states_decoder_layers",), other))
    res = invoke("annotate", target)
    assert res.exit_code == 1 and "--force" in one_error_line(res)
    assert named_options(res.output) <= options_of("annotate")


# --- one spelling of choices; help; --json; exit codes --------------------------------------------------------------

def test_weight_formats_in_one_order_and_any_case():
    for name in ("patch", "build-mtp", "synth"):
        param = next(p for p in main.commands[name].params if p.name == "weight_format")
        assert isinstance(param.type, click.Choice) and not param.type.case_sensitive
        listed = list(param.type.choices)
        assert listed == [f for f in WEIGHT_FORMATS if f in listed], (name, listed)


def test_every_option_has_help_and_every_reporting_command_has_json():
    for name, command in main.commands.items():
        assert all(p.help for p in command.params if isinstance(p, click.Option)), name
        assert "--json" in options_of(name), name


def test_exit_codes_usage_2_failure_1_unexpected_1(tmp_path, monkeypatch):
    assert invoke("show", tmp_path, "--no-such-option").exit_code == 2
    assert invoke("show", tmp_path / "missing").exit_code == 1

    def boom(*args, **kwargs):
        raise ValueError("first line\nsecond line")
    monkeypatch.setattr("irsurgeon.flows.show.show", boom)
    res = invoke("show", tmp_path)
    assert res.exit_code == 1 and "unexpected ValueError: first line" in res.output
    assert "second line" not in res.output


def test_python_api_refuses_an_unknown_format_with_the_package_error():
    with pytest.raises(IRSurgeonError, match="int3"):
        build_mtp_model(DEMO / "ckpt", weight_format="int3")


# --- the command as `python -m irsurgeon`; --json on a failure; an unknown weight format before any note ------------

def test_python_m_irsurgeon_is_the_command_and_names_both_families():
    out = subprocess.run([sys.executable, "-m", "irsurgeon", "--help"], capture_output=True, text=True, env=env(),
                         timeout=60)
    assert out.returncode == 0 and "Qwen3.5" in out.stdout and "Gemma 4" in out.stdout, out.stderr


def test_a_failing_command_with_json_prints_its_document_too(tmp_path):
    result = invoke("patch", tmp_path / "missing", "--checkpoint", DEMO_CKPT, "--json")
    document = json.loads(result.stdout)
    assert result.exit_code == 1 and document["ok"] is False and "missing" in document["error"]
    assert document["exit_code"] == 1 and result.stderr.startswith("Error: ")


def test_an_unknown_weight_format_is_refused_before_any_note():
    from irsurgeon import Options, patch_directory
    from irsurgeon.core.errors import CompressionError

    said = []
    try:
        patch_directory(DEMO_TARGET, DEMO_CKPT, options=Options(weight_format="int3"), echo=said.append)
    except CompressionError as e:
        assert "int3" in str(e)
    else:
        raise AssertionError("int3 accepted")
    assert said == []


# --- a --checkpoint or --json that cannot be what was meant, refused before any check or note ----------------------

@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.key)
def test_the_target_given_as_its_own_checkpoint_is_one_line_before_any_note(family, tmp_path):
    target = Path(shutil.copytree(FIXTURE_PAIRS[family.key][0], tmp_path / "t"))
    line = refused(["patch", target, "--checkpoint", target], target)
    assert "is the target directory itself" in line


@pytest.mark.usefixtures("no_hang")
def test_a_checkpoints_config_json_given_as_the_checkpoint_is_named_as_not_safetensors(tmp_path):
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    line = refused(["patch", target, "--checkpoint", DEMO_CKPT / "config.json"], target)
    assert "config.json: not a .safetensors or .bin file" in line and "header" not in line


@pytest.mark.usefixtures("no_hang")
def test_a_folder_without_weights_is_one_line_before_any_note(tmp_path):
    target, ckpt = writable_copy(DEMO_TARGET, tmp_path / "t"), tmp_path / "c"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    line = refused(["patch", target, "--checkpoint", ckpt], target)
    assert "neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor" in line


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_verify_json_to_a_place_it_cannot_write_is_refused_before_the_checks(patched_demo, tmp_path, where):
    dest = tmp_path / "nowhere" / "x.json" if where == "missing folder" else tmp_path
    result = invoke("verify", patched_demo, "--json", dest)
    line = one_error(result)
    assert str(dest) in line and "ok " not in result.output  # no check ran before the refusal


@pytest.mark.parametrize("args", [["--prompts", "2"], ["--sweep", "1,2"], ["--rounds", "2"], ["--device", "GPU"],
                                  ["--num-assistant-tokens", "3"], ["--max-new-tokens", "8"],
                                  ["--min-acceptance", "0"]])
def test_a_genai_option_without_genai_is_a_usage_error(args):
    """Options that only --genai reads are never silently ignored: exit 2, naming the option."""
    from helpers.cli import invoke
    from lab.families import FIXTURE_PAIRS

    result = invoke("verify", FIXTURE_PAIRS["eagle3"][0], *args)
    flag = args[0]
    assert result.exit_code == 2 and f"{flag} applies only with --genai" in result.output, result.output


@pytest.mark.parametrize("args", [["tune", "--budget", "nan"], ["tune", "--budget", "inf"],
                                  ["tune", "--budget", "NaN"], ["verify", "--genai", "--min-acceptance", "nan"],
                                  ["patch", "--checkpoint", "x", "--hub-timeout", "nan"]])
def test_a_number_option_refuses_nan_and_infinity(tmp_path, args):
    """NaN passes every comparison click's range makes (a --budget nan was no budget, a --min-acceptance nan no
    threshold): a usage error naming the option, before the target is looked at."""
    from helpers.cli import invoke

    command, *rest = args
    result = invoke(command, tmp_path / "missing", *rest)
    assert result.exit_code == 2 and f"'{rest[-2]}'" in result.output and "not a finite number" in result.output, \
        result.output


def test_a_kv_cache_precision_for_a_draft_without_its_own_kv_is_refused(tmp_path):
    """The Gemma 4 assistant reads the target's KV: --kv-cache-precision there used to be accepted and ignored."""
    import shutil

    from helpers.cli import invoke
    from lab.dirsnap import snapshot
    from lab.families import FIXTURE_PAIRS

    source, ckpt = FIXTURE_PAIRS["gemma4"]
    target = shutil.copytree(source, tmp_path / "t")
    before = snapshot(target)
    result = invoke("patch", target, "--checkpoint", ckpt, "--kv-cache-precision", "f32")
    assert result.exit_code == 1 and "the KV cache precision option applies to" in result.output, result.output
    assert "Gemma 4 MTP assistant's" in result.output and snapshot(target) == before


def test_a_closed_stdout_after_the_commit_says_the_patch_is_done(tmp_path):
    """`patch ... | head -1`: the commit happens, the rest of the report cannot be written; the one error line says the
    command completed (it used to say only 'Error: Broken pipe' over a patched directory)."""
    import shutil
    import subprocess
    import sys

    from lab.families import FIXTURE_PAIRS

    source, ckpt = FIXTURE_PAIRS["qwen3_5"]
    target = shutil.copytree(source, tmp_path / "t")
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint", str(ckpt)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error: ")]
    assert proc.returncode == 1 and len(errors) == 1 and "patch completed" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and (target / "openvino_mtp_model.xml").is_file()


@pytest.mark.parametrize("args", [["patch", "t", "--checkpoint", "c", "--hidden-layers", "1,2", "--json"],
                                  ["synth", "out", "--kind", "nope", "--json"],
                                  ["annotate", "t", "--num-layers", "x", "--json"]])
def test_a_usage_error_with_json_is_one_document_too(args):
    """Exit 2 (click's usage error) and, with --json, its one document on stdout, as every other end has."""
    from click.testing import CliRunner

    from irsurgeon.cli import main

    result = CliRunner().invoke(main, args)
    doc = json.loads(result.stdout)
    assert result.exit_code == 2 and doc["ok"] is False and doc["exit_code"] == 2 and doc["error"], result.output


@pytest.mark.parametrize("command", ["patch", "patch-dflash", "verify", "show", "annotate"])
def test_a_missing_target_is_said_in_the_same_words_by_every_command(tmp_path, command):
    """"no such file or directory" for a path that is not there, whichever command and family (patch and verify
    used to say "not a directory")."""
    from lab.families import FIXTURE_PAIRS
    missing = tmp_path / "nope"
    args = {"patch": ["patch", missing, "--checkpoint", FIXTURE_PAIRS["qwen3_5"][1]],
            "patch-dflash": ["patch", missing, "--checkpoint", FIXTURE_PAIRS["dflash"][1]],
            "verify": ["verify", missing], "show": ["show", missing], "annotate": ["annotate", missing]}[command]
    result = invoke(*args)
    assert result.exit_code == 1 and f"{missing}: no such file or directory" in result.stderr, result.stderr


def test_the_library_names_no_cli_flag_outside_a_hint():
    """What the library says (errors, progress lines) names no command-line flag: the Python API has no flags. Advice
    that does is attached with errors.with_hint, which the CLI shows only on a command that has the flag; a command
    line quoted whole (`irsurgeon verify DIR --genai`) is fine. Docstrings and comments are not said."""
    import ast
    flag = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
    library = Path(__file__).resolve().parents[1] / "irsurgeon"
    found = []
    for module in sorted(library.rglob("*.py")):
        if module.parent.name == "cli":
            continue
        tree = ast.parse(module.read_text())
        skip: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                    isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
            if isinstance(node, ast.FunctionDef) and node.name in ("_interrupted_early", "_words", "_json_to_stdout",
                                                                    "_verify_json_target"):  # argv
                skip.update(id(sub) for sub in ast.walk(node))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "with_hint":
                skip.update(id(sub) for arg in node.args[1:] for sub in ast.walk(arg))
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "").endswith("_HINT") for t in node.targets):
                skip.update(id(sub) for sub in ast.walk(node.value))
        texts = []
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr) and id(node) not in skip:
                skip.update(id(v) for v in node.values)
                texts.append((node.lineno, "".join(v.value for v in node.values if isinstance(v, ast.Constant))))
        texts += [(n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]
        found += [f"{module.relative_to(library.parent)}:{line}: {text[:80]!r}" for line, text in texts
                  if flag.search(text) and "irsurgeon " not in text and "optimum-cli" not in text]
    assert not found, "\n".join(found)
