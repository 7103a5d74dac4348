"""The package-level API: every name `irsurgeon` exports resolves to the same object on every access, is not
shadowed by a submodule of the same name, and does its job on the bundled tiny demo (fixtures/qwen3_5)."""
from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

import json

import openvino as ov
import pytest
from click.testing import CliRunner

from irsurgeon.cli import main as cli_main

import irsurgeon

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_5"


def api(name: str):
    """An exported name, spelled api("X") so that the last test can check every export is used here."""
    return getattr(irsurgeon, name)


def writable_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for p in [dest, *dest.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def test_an_exported_name_is_the_same_object_before_and_after_its_module_is_imported():
    first = {name: getattr(irsurgeon, name) for name in irsurgeon.__all__}
    for module in ("irsurgeon.flows.patch", "irsurgeon.flows.show", "irsurgeon.flows.verify", "irsurgeon.draft.build", "irsurgeon.draft.save",
                   "irsurgeon.flows.standalone"):
        importlib.import_module(module)
    assert {name: getattr(irsurgeon, name) for name in irsurgeon.__all__} == first
    assert irsurgeon.flows.show.__name__ == "irsurgeon.flows.show" and irsurgeon.flows.patch.__name__ == "irsurgeon.flows.patch"  # modules
    assert not set(irsurgeon.__all__) & {"show", "patch", "verify", "build", "head", "annotate"}


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        irsurgeon.nothing_here  # noqa: B018  (the access itself is the test: it must raise)


def test_config_and_error(tmp_path):
    cfg = api("load_config")(DEMO / "ckpt" / "config.json")
    assert isinstance(cfg, api("MTPConfig")) and cfg.hidden_size > 0
    with pytest.raises(api("IRSurgeonError"), match="missing.json"):
        irsurgeon.load_config(tmp_path / "missing.json")


def test_build_and_save(tmp_path):
    model = api("build_mtp_model")(DEMO / "ckpt", weight_format="f32", warn=lambda _: None)
    assert isinstance(model, ov.Model) and [o.get_any_name() for o in model.outputs] == ["last_hidden_state"]
    xml = api("save_draft")(model, tmp_path / "out")
    assert xml == tmp_path / "out" / "openvino_mtp_model.xml" and xml.with_suffix(".bin").stat().st_size > 0


def test_build_head_writes_the_chosen_format(tmp_path):
    from irsurgeon.quant.precision import choose_format
    from irsurgeon.core.rtinfo import PROVENANCE, RUNTIME_OPTIONS

    xml = api("build_head")(DEMO / "ckpt", tmp_path / "out", choose_format("f32"), kv_cache_precision="u8",
                            echo=lambda _: None)
    model = ov.Core().read_model(xml)
    assert model.get_rt_info([PROVENANCE, "weight_format"]).astype(str) == "f32"
    assert model.get_rt_info([RUNTIME_OPTIONS, "KV_CACHE_PRECISION"]).astype(str) == "u8"


def test_patch_verify_show_annotate(tmp_path):
    target = writable_copy(DEMO / "target", tmp_path / "target")
    lines: list[str] = []
    result = api("patch_directory")(target, DEMO / "ckpt", options=api("Options")(), echo=lines.append)
    assert "openvino_mtp_model.xml" in result.written and not result.skipped, lines
    checks = api("verify_directory")(target)
    assert checks and all(c.ok for c in checks), [(c.name, c.detail) for c in checks if not c.ok]
    shown = api("show_path")(target)
    assert shown["kind"] == "directory" and shown["draft"]["ready"] is True
    assert api("annotate_ir")(target).status == "unchanged"  # patch wrote the annotation annotate would


def test_every_exported_name_is_exercised_here():
    assert set(re.findall(r'api\("(\w+)"\)', Path(__file__).read_text())) - {"X"} == set(irsurgeon.__all__)


def test_the_library_is_silent_unless_given_a_channel(tmp_path):
    """patch_directory, verify_directory and build_mtp_model print nothing by default (they used to print the patch's
    progress to stdout); echo= / warn= takes the lines."""
    import subprocess
    import sys

    target = shutil.copytree(DEMO / "target", tmp_path / "t")
    code = ("import irsurgeon as i, sys\n"
            f"r = i.patch_directory({str(target)!r}, {str(DEMO / 'ckpt')!r})\n"
            f"i.verify_directory({str(target)!r})\n"
            f"i.build_mtp_model({str(DEMO / 'ckpt')!r})\n"
            f"i.patch_directory({str(target)!r}, {str(DEMO / 'ckpt')!r}, "
            "options=i.Options(weight_format='int4', force=True))\n"  # nncf's progress bar: not here either
            "said = []\n"
            f"i.patch_directory({str(target)!r}, {str(DEMO / 'ckpt')!r}, echo=said.append)\n"
            "sys.stderr.write(str(len(said)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=DEMO.parents[1], timeout=300)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr.strip().isdigit() and int(proc.stderr) >= 1, \
        (proc.stdout, proc.stderr[-2000:])


@pytest.mark.parametrize("name, positional", [("patch_directory", 2), ("verify_directory", 2), ("show_path", 1),
                                              ("build_mtp_model", 1), ("save_draft", 2), ("annotate_ir", 1),
                                              ("verify_genai", 2)])
def test_public_functions_take_keywords_beyond_their_first_one_or_two(name, positional):
    """A caller names every argument past the first one or two (options, echo, hub, ...), so a new parameter can never
    shift what a positional call means."""
    import inspect
    params = inspect.signature(api(name)).parameters.values()
    assert sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in params) == positional, list(params)


def test_dir_lists_the_public_api_and_hub_options_reach_a_patch(tmp_path):
    """dir(irsurgeon) was ['import_module', 'sys']: the lazy names were invisible; Options.hub needs HubOptions."""
    assert set(irsurgeon.__all__) | {"__version__"} == set(dir(irsurgeon))
    hub = api("HubOptions")(revision="main", timeout=5)
    options = api("Options")(hub=hub)
    assert options.hub.revision == "main"
    with pytest.raises(api("IRSurgeonError"), match="not a branch, tag or commit name"):
        api("HubOptions")(revision="../x")


def test_verify_genai_stops_at_the_checks_as_the_command_does(tmp_path):
    """The Python call of `verify --genai` (it did not exist): an unpatched target fails its checks, so genai never
    runs; the result is the command's --json result; a path that is not there raises, in every command's words."""
    result = api("verify_genai")(DEMO / "target")
    assert isinstance(result, api("Verification")) and result.ready is False and result.genai is None
    assert result.failed == [f"{c.name} ({c.detail})" for c in result.checks if not c.ok] and result.failed
    assert [c.name for c in result.checks] == [c.name for c in api("verify_directory")(DEMO / "target")]
    document = CliRunner().invoke(cli_main, ["verify", str(DEMO / "target"), "--json"])
    assert {**json.loads(document.stdout)["result"], "genai": None, "speed": None} == result.as_dict()
    with pytest.raises(api("IRSurgeonError"), match="nope: no such file or directory"):
        api("verify_genai")(tmp_path / "nope")


GENAI_CALL = r"""
import json, sys
from click.testing import CliRunner
import irsurgeon
from irsurgeon.cli import main
target = sys.argv[1]
said = []
result = irsurgeon.verify_genai(target, prompts=1, sweep=(1, 2), rounds=1, max_new_tokens=8, echo=said.append)
words = ["verify", target, "--genai", "--prompts", "1", "--sweep", "1,2", "--rounds", "1", "--max-new-tokens", "8"]
document = CliRunner().invoke(main, [*words, "--json"])
print(json.dumps({"api": result.as_dict(), "cli": json.loads(document.stdout)["result"], "said": said}))
"""


@pytest.mark.genai
@pytest.mark.slow
def test_verify_genai_runs_the_commands_flow(tmp_path):
    """verify_genai on the bundled pair, patched: what `verify --genai --json` says, field for field (the timings
    aside: both measure), with the progress lines given to echo. In a process of its own, as every genai run. Slow:
    two genai runs (~6 s of CPU); the default tier runs the same flow through the command's genai tests, and
    verify_genai's own result above."""
    import subprocess
    import sys

    target = writable_copy(DEMO / "target", tmp_path / "target")
    api("patch_directory")(target, DEMO / "ckpt")
    proc = subprocess.run([sys.executable, "-c", GENAI_CALL, str(target)], capture_output=True, text=True,
                          timeout=600, cwd=DEMO.parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    api_result, cli_result = out["api"], out["cli"]
    assert api_result["ready"] is True and api_result["failed"] == [], api_result["failed"]
    assert set(api_result) == set(cli_result) == {"target", "ready", "failed", "checks", "genai", "speed"}
    for key in ("target", "ready", "failed", "checks", "genai"):  # at f32, greedy: the same tokens and acceptance
        assert api_result[key] == cli_result[key], key
    assert [m["label"] for m in api_result["speed"]["measurements"]] == ["plain", "draft K=1", "draft K=2"]
    assert set(api_result["speed"]) == set(cli_result["speed"])
    assert any(line.startswith("equivalence at ") for line in out["said"]), out["said"]
