"""`show DIR --json`: each IR as fields a script can read, checked against a schema and against the files themselves.

The expected values come from OpenVINO's own reading of each IR (ports, variables), the raw rt_info text of the XML
(annotation, runtime options) and openvino_config.json (the quantization optimum-intel recorded), not from show.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import openvino as ov
import openvino_tokenizers  # noqa: F401  (registers the tokenizer ops, before CORE below is made)
import pytest
from click.testing import CliRunner

from helpers.cli import invoke
from irsurgeon.cli import main
from irsurgeon.ir import xmlsafe
from helpers.cli import result_of

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_5"
OPTIONAL = type(None)
SHAPE = (list, OPTIONAL)
SCHEMA = {  # field -> accepted types
    "entry": {"file": str, "ok": bool, "error": (str, OPTIONAL), "summary": str, "ops": int, "inputs": list,
              "outputs": list, "states": list, "weights": dict, "runtime_options": dict,
              "annotation": (dict, OPTIONAL)},
    "port": {"name": str, "names": list, "dtype": str, "shape": SHAPE},
    "state": {"id": str, "dtype": str, "shape": SHAPE},
    "weights": {"precision": (str, OPTIONAL), "compressed": bool, "bits": (int, OPTIONAL), "count": int,
                "modes": dict, "group_sizes": dict},
    "layer": {"layer": int, "producer": str, "output_index": int, "dtype": (str, OPTIONAL), "shape": SHAPE,
              "problem": (str, OPTIONAL)},
}
LANGUAGE_MODEL = "openvino_language_model.xml"
ANNOTATION = ("hidden_states_decoder_layers",)
CORE = ov.Core()  # outlives every model read here: a tokenizer model freed after its Core crashes the process


def conforms(value: dict, kind: str) -> None:
    schema = SCHEMA[kind]
    assert tuple(value) == tuple(schema), (kind, tuple(value))
    for key, types in schema.items():
        assert isinstance(value[key], types), (kind, key, value[key])
    if "shape" in schema and value["shape"] is not None:
        assert all(d is None or (isinstance(d, int) and d >= 0) for d in value["shape"]), value


def entry_conforms(entry: dict) -> None:
    conforms(entry, "entry")
    for port in entry["inputs"] + entry["outputs"]:
        conforms(port, "port")
    for state in entry["states"]:
        conforms(state, "state")
    conforms(entry["weights"], "weights")
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in entry["runtime_options"].items())
    if entry["annotation"] is not None:
        assert tuple(entry["annotation"]) == ("layers",)
        for layer in entry["annotation"]["layers"]:
            conforms(layer, "layer")


def shown(directory: Path) -> dict:
    res = CliRunner().invoke(main, ["show", str(directory), "--json"])
    assert res.exit_code == 0, res.output
    return {e["file"]: e for e in result_of(res.stdout)["irs"]}


def dims(partial_shape) -> list | None:
    if partial_shape.rank.is_dynamic:
        return None
    return [d.get_length() if d.is_static else None for d in partial_shape]


def agrees_with_openvino(directory: Path, entry: dict) -> None:
    model = CORE.read_model(directory / entry["file"])
    for ports, listed in ((model.inputs, entry["inputs"]), (model.outputs, entry["outputs"])):
        assert [(p.get_any_name() if p.get_names() else "", p.get_element_type().get_type_name(),
                 dims(p.get_partial_shape()))
                for p in ports] == [(p["name"], p["dtype"], p["shape"]) for p in listed]
    variables = sorted((v.get_info().variable_id, v.get_info().data_type.get_type_name(), dims(v.get_info().data_shape))
                       for v in model.get_variables())
    assert variables == [(s["id"], s["dtype"], s["shape"]) for s in entry["states"]]
    assert entry["ops"] == len(model.get_ops())


def annotated_layers(xml: Path) -> dict[int, tuple[str, int]]:
    body = json.loads(xmlsafe.get_value(xml.read_bytes(), ANNOTATION))["layers"]
    return {int(k): (v["producer"], v["output_index"]) for k, v in body.items()}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("show-json") / "target"
    shutil.copytree(DEMO / "target", target)
    for p in [target, *target.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    res = CliRunner().invoke(main, ["patch", str(target), "--checkpoint", str(DEMO / "ckpt")])
    assert res.exit_code == 0, res.output
    return target


def test_demo_directory_entries_follow_the_schema_and_the_files(demo):
    entries = shown(demo)
    assert set(entries) == {p.name for p in demo.glob("*.xml")}
    for entry in entries.values():
        entry_conforms(entry)
        assert entry["ok"] and entry["error"] is None
        agrees_with_openvino(demo, entry)
    config = json.loads((demo / "config.json").read_text())
    layers = config.get("text_config", config)["num_hidden_layers"]
    lm = entries[LANGUAGE_MODEL]
    listed = {r["layer"]: (r["producer"], r["output_index"]) for r in lm["annotation"]["layers"]}
    assert listed == annotated_layers(demo / LANGUAGE_MODEL) and sorted(listed) == list(range(layers))
    assert all(r["problem"] is None and r["shape"][-1] == config.get("text_config", config)["hidden_size"]
               for r in lm["annotation"]["layers"])
    head = entries["openvino_mtp_model.xml"]
    assert head["annotation"] is None and len(head["states"]) == 2
    assert head["runtime_options"]["KV_CACHE_PRECISION"] == "f16"
    assert {e["weights"]["precision"] for e in entries.values() if e["weights"]["count"]} == {"f16"}
    assert entries["openvino_tokenizer.xml"]["weights"] == {**entries["openvino_tokenizer.xml"]["weights"],
                                                            "precision": None, "count": 0}


def test_reference_int4_export_entries(export):
    directory = export("dense-int4")
    entries = shown(directory)
    for entry in entries.values():
        entry_conforms(entry)
    lm = entries[LANGUAGE_MODEL]
    agrees_with_openvino(directory, lm)
    quant = json.loads((directory / "openvino_config.json").read_text())["quantization_config"]
    bits = quant["quantization_configs"]["lm_model"]["bits"]
    assert lm["weights"]["precision"] == f"int{bits}" and lm["weights"]["compressed"]
    assert str(quant["quantization_configs"]["lm_model"]["group_size"]) in lm["weights"]["group_sizes"]
    listed = {r["layer"]: (r["producer"], r["output_index"]) for r in lm["annotation"]["layers"]}
    assert listed == annotated_layers(directory / LANGUAGE_MODEL)
    kv = xmlsafe.get_value((directory / LANGUAGE_MODEL).read_bytes(), ("runtime_options", "KV_CACHE_PRECISION"))
    assert lm["runtime_options"].get("KV_CACHE_PRECISION") == kv


def test_unannotated_and_unreadable_entries(tmp_path):
    target = tmp_path / "t"
    shutil.copytree(DEMO / "target", target)
    (target / "junk.xml").write_text("<graph/>")
    entries = shown(target)
    assert entries[LANGUAGE_MODEL]["annotation"] is None
    junk = entries["junk.xml"]
    good = entries[LANGUAGE_MODEL]  # an unreadable IR's entry has a readable one's fields, in the same order
    assert tuple(junk) == tuple(good) and not junk["ok"] and isinstance(junk["error"], str)
    assert all(junk[k] is None for k in good if k not in ("file", "ok", "error", "summary"))


# --- one form of a port, for an IR and for a directory ------------------------------------------------------------

@pytest.mark.usefixtures("no_hang")
def test_show_json_spells_ports_alike_for_an_ir_and_for_its_directory(patched_demo):
    def document(path):
        result = invoke("show", path, "--json")
        assert result.exit_code == 0, result.output
        return result_of(result.stdout)

    directory = {e["file"]: e for e in document(patched_demo)["irs"]}
    for name in ("openvino_language_model.xml", "openvino_mtp_model.xml"):
        ir = document(patched_demo / name)
        for key in ("inputs", "outputs", "states"):
            assert ir[key] == directory[name][key], (name, key)
        assert all(isinstance(p["dtype"], str) and isinstance(p["shape"], list) for p in ir["inputs"])
    assert [None, None, 64] in [p["shape"] for p in directory["openvino_mtp_model.xml"]["inputs"]]
