"""The weights irsurgeon appends to a draft's .bin itself (irsurgeon.draft.save.save_appended, stage_ir), as openvino
would have written them, each case stating a rule of docs/reliability.md or of the docstrings of those modules: models
a user builds (names, collisions, shared buffers, the model afterwards), stage_ir's spent model (each constant freed
as soon as it is written, the journal's digest still the file's), whole patches of every family with every constant
appended, and a real-sized head's matrices never held whole.

Every case runs with every constant of the draft appended (`draft.save.DETACH_BYTES = 1`: the `every_constant_appended`
fixture of conftest.py), unless it sets another threshold itself.
"""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from helpers.cli import invoke
from helpers.staging import QWEN_HEAD_BIN, QWEN_HEAD_XML, copy_target, patch
from irsurgeon.flows.standalone import save_draft
from lab.families import WRITABLE
from lab.dirsnap import snapshot
from lab.families import FIXTURE_PAIRS
from irsurgeon.draft import save as draft_save
from irsurgeon.commit import transaction
from irsurgeon.ir import streamed

pytestmark = pytest.mark.usefixtures("every_constant_appended")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journaled(monkeypatch) -> list[dict]:
    """The entries of every journal written from now on."""
    entries: list[dict] = []
    real = transaction.DirectoryTransaction._write_journal

    def write(tx, found):
        entries.extend(found)
        return real(tx, found)
    monkeypatch.setattr(transaction.DirectoryTransaction, "_write_journal", write)
    return entries


# --- save_appended on models a user builds: names, collisions, shared buffers, the model afterwards -------------


def graph(model: ov.Model) -> dict:
    """Every op by name: type, outputs (type, shape), inputs (producer name and port), a constant's bytes."""
    return {op.get_friendly_name(): (
        op.get_type_name(), [(str(o.get_element_type()), str(o.get_partial_shape())) for o in op.outputs()],
        [(i.get_source_output().get_node().get_friendly_name(), i.get_source_output().get_index())
         for i in op.inputs()],
        op.get_data().tobytes() if op.get_type_name() == "Constant" else None) for op in model.get_ops()}


def chain_model(names: list[str], seed: int = 0, input_name: str = "x", output_name: str = "y") -> ov.Model:
    """x [1, 8] -> MatMul by one [8, 8] constant per name, in order -> y."""
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name=input_name)
    x.output(0).get_tensor().set_names({input_name})
    rng, out = np.random.default_rng(seed), x.output(0)
    for name in names:
        c = ov.opset13.constant(rng.standard_normal((8, 8)).astype(np.float32))
        c.set_friendly_name(name)
        out = ov.opset13.matmul(out, c, False, False).output(0)
    result = ov.opset13.result(out)
    result.set_friendly_name(output_name)
    result.output(0).get_tensor().set_names({output_name})
    return ov.Model([result], [x], "chain")


def theirs_and_ours(model: ov.Model, tmp_path: Path) -> tuple[ov.Model, ov.Model]:
    draft_save.name_anonymous_nodes(model)  # as save_draft does first
    ov.save_model(model, tmp_path / "saved.xml", compress_to_fp16=False)
    xml = save_draft(model, tmp_path / "out")
    return ov.Core().read_model(tmp_path / "saved.xml"), ov.Core().read_model(xml)


SPECIAL = {"quote": 'w"q', "amp": "a&b", "lt-gt": "<w>", "apos": "it's", "tab": "a\tb", "newline": "a\nb",
           "cr": "a\rb", "non-ascii": "poids.ß.重み", "cdata end": "x]]>y", "spaces": " a  b ",
           "entity-like": "&amp;", "regex-like": 'w" type="Parameter'}


def appended_names(monkeypatch) -> list[str]:
    names, real = [], streamed.Tail.append
    monkeypatch.setattr(streamed.Tail, "append", lambda self, name, *a: names.append(name) or real(self, name, *a))
    return names


@pytest.mark.parametrize("name", list(SPECIAL.values()), ids=list(SPECIAL))
def test_a_weight_named_with_xml_special_characters_is_written_as_openvino_writes_it(tmp_path, monkeypatch, name):
    """Rule: save_draft saves any model openvino saves, as openvino would (the placeholder's layer is found
    by its name as the serializer escaped it): the same graph read back, the same bytes in each constant."""
    model = chain_model([name, "plain"])
    appended = appended_names(monkeypatch)
    theirs, ours = theirs_and_ours(model, tmp_path)
    assert graph(ours) == graph(theirs) and sorted(appended) == sorted([name, "plain"])
    assert (tmp_path / "out" / QWEN_HEAD_XML).read_text().count('type="Parameter"') == 1  # the input alone


@pytest.mark.parametrize("clash", ["input", "output", "both"])
def test_a_weight_named_as_a_graph_input_or_output_is_written_as_openvino_writes_it(tmp_path, clash):
    """Rule: a constant whose name is also the name of the model's input or output (a name a placeholder would
    share) is left to openvino's serializer; the model reads back with the same inputs and graph."""
    names = {"input": ["x", "w"], "output": ["y", "w"], "both": ["x", "y"]}[clash]
    model = chain_model(names)
    theirs, ours = theirs_and_ours(model, tmp_path)
    assert graph(ours) == graph(theirs)
    assert [p.get_friendly_name() for p in ours.get_parameters()] == ["x"]


def infer(model: ov.Model) -> np.ndarray:
    x = np.random.default_rng(9).standard_normal((1, 8)).astype(np.float32)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled.create_infer_request().infer({"x": x})[0]


def test_save_draft_leaves_the_model_whole_for_a_second_save_and_for_inference(tmp_path):
    """Rule (save_draft): the model stays whole: the same graph and outputs afterwards, and saving it again
    writes byte-identical files."""
    model = chain_model(["a", "b", "c"])
    draft_save.name_anonymous_nodes(model)
    before, y = graph(model), infer(model)
    first = save_draft(model, tmp_path / "one")
    second = save_draft(model, tmp_path / "two")
    assert graph(model) == before and np.array_equal(infer(model), y)
    assert [p.read_bytes() for p in (first, first.with_suffix(".bin"))] == \
        [p.read_bytes() for p in (second, second.with_suffix(".bin"))]


def test_a_failed_save_draft_leaves_the_model_whole_and_the_next_save_as_the_first(tmp_path, monkeypatch):
    """Rule: a save that fails in the middle of the appended weights (ENOSPC) raises one OutputError, creates no
    output folder, and the model is as it was: it infers the same and the next save writes what a clean one does."""
    from irsurgeon.core.errors import OutputError
    model = chain_model(["a", "b", "c"])
    draft_save.name_anonymous_nodes(model)
    clean = save_draft(model, tmp_path / "clean")
    before, y = graph(model), infer(model)
    real, count = streamed.Tail._write, []

    def write(self, piece):
        count.append(1)
        if len(count) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, piece)
    monkeypatch.setattr(streamed.Tail, "_write", write)
    with pytest.raises(OutputError, match="No space left on device"):
        save_draft(model, tmp_path / "failed")
    monkeypatch.setattr(streamed.Tail, "_write", real)
    assert not (tmp_path / "failed").exists() and graph(model) == before and np.array_equal(infer(model), y)
    again = save_draft(model, tmp_path / "again")
    assert again.read_bytes() == clean.read_bytes() and again.with_suffix(".bin").read_bytes() == \
        clean.with_suffix(".bin").read_bytes()


# --- stage_ir's spent model: each constant freed as written, the digest still the file's ------------------------


def shared_chain(arrays: list[np.ndarray]) -> ov.Model:
    """x [1, 8] -> MatMul by a constant over each array's own memory (no copy) -> y."""
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    out = x.output(0)
    for i, a in enumerate(arrays):
        c = ov.op.Constant(a, shared_memory=True)
        c.set_friendly_name(f"w{i}")
        out = ov.opset13.matmul(out, c, False, False).output(0)
    result = ov.opset13.result(out)
    result.output(0).get_tensor().set_names({"y"})
    return ov.Model([result], [x], "shared")


def staged_into(directory: Path, model: ov.Model) -> Path:
    """stage_ir of the model as openvino_mtp_model.xml into a transaction on directory, committed."""
    directory.mkdir(exist_ok=True)
    with transaction.DirectoryTransaction(directory, writable=WRITABLE) as tx:
        draft_save.stage_ir(tx, QWEN_HEAD_XML, model)
        tx.commit()
    return directory / QWEN_HEAD_XML


def test_each_constant_is_freed_as_soon_as_it_is_written(tmp_path):
    """Rule (save_appended's spend): a constant's buffer is released once it is written and hashed: when the k-th
    constant is appended, every one appended before it but the AHEAD pieces (and their padding) the hash may lag
    behind is gone from memory, and all are once the save is done."""
    import weakref
    n = 12
    freed: set[int] = set()
    arrays = [np.full((8, 8), i, np.float32) for i in range(n)]
    for i in range(n):
        weakref.finalize(arrays[i], freed.add, i)
    model = shared_chain(arrays)
    del arrays
    order, seen = [], []
    real = streamed.Tail.append

    def append(self, name, *args):
        order.append(int(name[1:]))
        seen.append(set(freed))
        return real(self, name, *args)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(streamed.Tail, "append", append)
        xml = staged_into(tmp_path / "d", model)
    assert sorted(order) == list(range(n))
    late = {k: sorted(set(order[:max(0, k - streamed.AHEAD - 1)]) - seen[k]) for k in range(n)}
    assert all(not v for v in late.values()), late
    assert freed == set(range(n))
    got = {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
           if op.get_type_name() == "Constant"}
    assert all(np.array_equal(got[f"w{i}"], np.full((8, 8), i, np.float32)) for i in range(n))


def test_the_journaled_digest_of_a_spent_model_written_in_tiny_pieces_is_the_files(tmp_path, monkeypatch):
    """Rule: with every constant released as soon as it is written, the hashing thread (lagging AHEAD pieces) still
    hashes the bytes written, not freed memory: the journal's sha256 is the committed .bin's."""
    monkeypatch.setattr(streamed, "PIECE", 24)  # several pieces per constant, many in flight
    rng = np.random.default_rng(4)
    model = shared_chain([rng.standard_normal((8, 8)).astype(np.float32) for _ in range(10)])
    entries = journaled(monkeypatch)
    xml = staged_into(tmp_path / "d", model)
    entry = next(e for e in entries if e["name"] == QWEN_HEAD_BIN)
    assert entry["new"]["sha256"] == sha(xml.with_suffix(".bin"))


@pytest.mark.parametrize("layout", ["one buffer twice", "a view into another", "one buffer reshaped"])
def test_constants_sharing_memory_are_each_staged_with_their_own_values(tmp_path, layout):
    """Rule: constants over one buffer (written once), over part of another's buffer, or over one buffer in two
    shapes each read back with their own values when the model is spent as it is written (the first one freed
    before the next is looked up)."""
    base = np.random.default_rng(6).standard_normal((16, 8)).astype(np.float32)
    x = ov.opset13.parameter([1, 8], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"x"})
    if layout == "one buffer twice":
        parts = [base[:8], base[:8]]
    elif layout == "a view into another":
        parts = [base[:8], base[4:12]]
    else:
        parts = [base[:8], base[:8].reshape(4, 16)]
    consts = [ov.op.Constant(np.ascontiguousarray(p), shared_memory=True) for p in parts]
    out = ov.opset13.matmul(x, consts[0], False, False)
    other = consts[1] if consts[1].get_shape() == consts[0].get_shape() else ov.opset13.reshape(
        consts[1], ov.opset13.constant(np.array([8, 8], np.int64)), False)
    out = ov.opset13.matmul(out, other, False, True)
    for i, c in enumerate(consts):
        c.set_friendly_name(f"w{i}")
    result = ov.opset13.result(out)
    result.output(0).get_tensor().set_names({"y"})
    model = ov.Model([result], [x], "m")
    want = {f"w{i}": np.array(p) for i, p in enumerate(parts)}
    del consts, other, out
    xml = staged_into(tmp_path / "d", model)
    got = {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
           if op.get_type_name() == "Constant" and op.get_friendly_name() in want}
    assert sorted(got) == sorted(want) and all(np.array_equal(got[n], want[n]) for n in want)


# --- whole patches with every constant appended: f16 fallbacks, compressed heads, every family ------------------


def head_constants(xml: Path) -> dict[str, np.ndarray]:
    return {op.get_friendly_name(): op.get_data() for op in ov.Core().read_model(xml).get_ops()
            if op.get_type_name() == "Constant"}


def test_a_weight_kept_f32_in_an_f16_head_is_appended_with_its_exact_values(tmp_path):
    """Rule: a weight whose values overflow f16 stays f32 in an f16 head (and is said); appended, it reads back
    as an f32 constant holding the checkpoint's values exactly, beside f16 neighbours."""
    from helpers.checkpoints import read_tensors, write_variant
    from irsurgeon.weights.safetensors_io import bf16_to_f32, f32_to_bf16
    tensors = read_tensors(FIXTURE_PAIRS["qwen3_5"][1])
    raw, dtype = tensors["mtp.fc.weight"]
    values = bf16_to_f32(raw).copy()
    values[0, :4] = [1.0e5, -3.0e6, 7.0e4, 1.5e9]  # beyond f16's 65504
    tensors["mtp.fc.weight"] = (f32_to_bf16(values), dtype)
    ckpt = write_variant(FIXTURE_PAIRS["qwen3_5"][1], tmp_path / "ckpt", tensors)
    target = copy_target(tmp_path)
    result = invoke("patch", target, "--checkpoint", ckpt, "--weight-format", "f16")
    assert result.exit_code == 0, result.output
    assert "mtp.fc.weight" in result.output  # said
    got = head_constants(target / QWEN_HEAD_XML)
    assert got["mtp.fc.weight"].dtype == np.float32
    assert np.array_equal(got["mtp.fc.weight"], bf16_to_f32(f32_to_bf16(values)))
    assert got["mtp.layers.0.self_attn.q_proj.weight"].dtype == np.float16


KEEP = {("qwen3_5", "f16")}  # in the default tier; CI's extended tier: EXTENDED; make test-all runs all
EXTENDED = {("gemma4", "int4"), ("dflash", "f32")}


@pytest.mark.parametrize("key, fmt", [pytest.param(k, f, marks=() if (k, f) in KEEP else
                                                   pytest.mark.extended if (k, f) in EXTENDED else pytest.mark.slow)
                                      for k, f in [("qwen3_5", "f16"), ("qwen3_5", "int8"), ("gemma4", "int4"),
                                                   ("gemma4", "f16"), ("dflash", "int8"), ("dflash", "f32")]])
def test_a_patch_with_every_constant_appended_is_the_patch_openvino_would_have_written(tmp_path, monkeypatch, key,
                                                                                       fmt):
    """Rule: appending the weights changes where bytes sit in the .bin, never the head: a patch with every constant
    appended (DETACH_BYTES = 1) passes its verify and holds the graph and constants of one with none appended."""
    ours, theirs = copy_target(tmp_path / "ours", key), copy_target(tmp_path / "theirs", key)
    assert patch(ours, key, "--weight-format", fmt).exit_code == 0
    monkeypatch.setattr(draft_save, "DETACH_BYTES", 1 << 62)
    assert patch(theirs, key, "--weight-format", fmt).exit_code == 0
    pristine, patched = snapshot(FIXTURE_PAIRS[key][0]), snapshot(theirs)
    drafts = [rel for rel, h in patched.items() if rel.endswith(".xml") and pristine.get(rel) != h]
    assert drafts
    for rel in drafts:
        assert graph(ov.Core().read_model(ours / rel)) == graph(ov.Core().read_model(theirs / rel)), rel
    assert invoke("verify", ours).exit_code == 0


# --- memory of a real-sized head, in a child process (slow) -------------------------------------------------------

# Runs argv[3:] as the irsurgeon CLI and writes to argv[1] the resident set just before and after the head's save
# (stage_ir, as the Qwen3.5 flow calls it) and the peak (VmHWM: the child's own pages, not the forking parent's).
RSS_CHILD = """
import atexit, sys
def status(key):
    with open("/proc/self/status") as s:
        return int(next(l for l in s if l.startswith(key)).split()[1]) * 1024
out = open(sys.argv[1], "w")
atexit.register(lambda: out.write(f"peak {status('VmHWM')}\\n") or out.close())
import openvino, nncf
if sys.argv[2] == "patch":
    from irsurgeon.families.qwen35_mtp import patch as p
    stage = p.stage_ir
    def stage_ir(*a):
        before = status("VmRSS")
        xml = stage(*a)
        out.write(f"save {before} {status('VmRSS')}\\n")
        return xml
    p.stage_ir = stage_ir
    sys.argv = ["irsurgeon"] + sys.argv[3:]
    from irsurgeon.cli import main
    main()
"""


@pytest.mark.slow
def test_a_real_sized_heads_matrices_are_never_held_whole(tmp_path):
    """Rule (draft.stream.Stream: an uncompressed patch streams the draft's matrices into the staged .bin block by block):
    patching a 172 MB f16 head, the resident set before the save holds none of the head (a model of placeholders),
    across the save it grows by far less than the head's bytes (the blocks in flight and what the allocator keeps),
    and the patch's peak above the imports (the one-step check's compile of the staged copy) stays within 1.5x the
    head, as before the matrices were streamed."""
    import subprocess
    import sys
    from lab.procs import env
    from irsurgeon.synth import synthesize
    from irsurgeon.synth.registry import default_spec
    spec = default_spec("qwen35").with_(hidden=2048, heads=16, kv_heads=2, head_dim=256, intermediate=8192,
                                        vocab=1024, layers=1, full_attention_interval=1, vlm=False, bigram=False)
    pair = synthesize(tmp_path / "big", "qwen35", spec, seed=0)

    def child(*args) -> dict[str, list[int]]:
        report = tmp_path / f"rss-{args[0] if args else 'base'}"
        run = subprocess.run([sys.executable, "-c", RSS_CHILD, str(report), *args], env=env(), capture_output=True,
                             text=True)
        assert run.returncode == 0, run.stdout + run.stderr
        return {k: [int(v) for v in rest] for k, *rest in (ln.split() for ln in report.read_text().splitlines())}
    base = child("none")["peak"][0]
    got = child("patch", "patch", str(pair.target), "--checkpoint", str(pair.ckpt), "--weight-format", "f16")
    head = (pair.target / QWEN_HEAD_BIN).stat().st_size
    before, after = got["save"]
    shown = f"{before / 1e6:.0f} MB -> {after / 1e6:.0f} MB, peak {got['peak'][0] / 1e6:.0f} MB, base " \
            f"{base / 1e6:.0f} MB, head {head / 1e6:.0f} MB"
    assert before - base < 0.25 * head and after - before < 0.25 * head, shown
    assert (got["peak"][0] - base) / head <= 1.5, shown


