"""patch: optimum-intel's reference exports with the head removed are restored to MTP-ready directories."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.tiers import default_tier
from lab.demo import DEMO_CKPT, DEMO_TARGET, patch_demo, writable_copy
from lab.dirsnap import full_disk_on_nth_replace, snapshot
from lab.families import FAMILIES, FIXTURE_PAIRS

from irsurgeon.families.qwen35_mtp import contract
from irsurgeon.cli import main
from irsurgeon.flows.verify import verify_directory
from irsurgeon.families.qwen35_mtp.strip import strip_mtp as strip
from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

LM = "openvino_language_model.xml"


def run(*args, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    return result.exit_code, result.output


PAIRS = {"dense-fp16": "qwen35-dense", "dense-int4": "qwen35-dense", "dense-bigram-fp16": "qwen35-dense-bigram",
         "moe-fp16": "qwen35-moe", "moe-int4": "qwen35-moe", "moe-bigram-fp16": "qwen35-moe-bigram"}


@pytest.fixture(scope="module")
def patch_once(export, ckpt, tmp_path_factory):
    """patch_once(name) -> (name, patched copy of the export, patch output); each export is patched once."""
    done = {}

    def get(name):
        if name not in done:
            target = strip(export(name), tmp_path_factory.mktemp(name) / "target")
            code, out = run("patch", target, "--checkpoint", ckpt(PAIRS[name]))
            assert code == 0, out
            done[name] = (name, target, out)
        return done[name]
    return get


@pytest.fixture(params=sorted(PAIRS))
def patched(request, patch_once):
    return patch_once(request.param)


def test_patch_makes_the_directory_pass_verify(patched):
    _, target, _ = patched
    checks = verify_directory(target)
    assert [c.name for c in checks if not c.ok] == []
    assert not (target / ".irsurgeon-staging").exists()


def test_annotation_and_weights_match_optimum_exactly(patched, export):
    """The annotated LM .xml is byte-identical to optimum's own (same producers, indices, serialisation)."""
    name, target, _ = patched
    assert (target / LM).read_bytes() == (export(name) / LM).read_bytes()
    assert (target / "openvino_language_model.bin").read_bytes() == (export(name) / "openvino_language_model.bin").read_bytes()


def test_int4_target_gets_an_int4_head_and_its_config_entry(patch_once):
    name, target, out = patch_once("dense-int4")
    assert "auto: int4" in out
    q = json.loads((target / "openvino_config.json").read_text())["quantization_config"]["quantization_configs"]
    assert q["mtp_model"]["bits"] == 4 and q["mtp_model"]["group_size"] == q["lm_model"]["group_size"]
    import openvino as ov
    head = ov.Core().read_model(target / contract.MTP_XML)
    types = {op.get_element_type().get_type_name() for op in head.get_ops() if op.get_type_name() == "Constant"}
    assert "u4" in types
    assert head.get_rt_info(["runtime_options", "KV_CACHE_PRECISION"]).astype(str) == "f16"


def test_second_run_is_a_no_op(patched, ckpt):
    name, target, _ = patched
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", ckpt(PAIRS[name]))
    assert code == 0 and "already has its draft" in out
    line = next(ln for ln in out.splitlines() if "already has its draft" in ln)
    assert len(line) - len(str(target)) * 2 < 180, line  # one short line: the checks are verify's to list
    assert snapshot(target) == before


def test_a_missing_checkpoint_is_said_first_even_on_a_patched_directory(tmp_path):
    """The checkpoint is read before the target is judged done: a typo is an error, never 'nothing to do'."""
    target = patch_demo(tmp_path / "target")
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", tmp_path / "fixtures" / "ckp")
    assert code == 1 and "no such" in out and "nothing to do" not in out, out
    assert snapshot(target) == before


def test_force_rebuilds_a_ready_head(tmp_path):
    target = patch_demo(tmp_path / "target")
    head = target / contract.MTP_XML
    inode, before = head.stat().st_ino, head.read_bytes()
    code, out = run("patch", target, "--checkpoint", DEMO_CKPT)
    assert code == 0 and "already has its draft" in out and head.stat().st_ino == inode
    code, out = run("patch", target, "--checkpoint", DEMO_CKPT, "--force")
    assert code == 0 and f"wrote {contract.MTP_BIN}, {contract.MTP_XML} in" in out, out
    assert head.stat().st_ino != inode and head.read_bytes() == before  # a new file, built the same way
    assert "annotation already present and identical" in out  # --force rebuilds the head, not a same annotation
    assert [c.name for c in verify_directory(target) if not c.ok] == []


@pytest.mark.genai
@pytest.mark.parametrize("name", default_tier(sorted(PAIRS), keep={"dense-bigram-fp16"}))
def test_genai_mtp_decoding_equals_plain_greedy(patch_once, export, name):
    """Several prompts x num_assistant_tokens 1..4 token-identical; bigram acceptance within 2 points of optimum."""
    from irsurgeon.flows.genai import run_equivalence

    name, target, _ = patch_once(name)
    ours = run_equivalence(target, prompts=3, nats=(1, 2, 3, 4), echo=lambda _: None)
    assert len(ours.runs) == 12 and ours.identical, [r for r in ours.runs if not r.identical]
    if "bigram" in name:
        theirs = run_equivalence(export(name), prompts=3, nats=(1, 2, 3, 4), echo=lambda _: None)
        assert theirs.identical
        assert ours.acceptance > 0.3
        assert abs(ours.acceptance - theirs.acceptance) <= 0.02, (ours.acceptance, theirs.acceptance)


def test_dry_run_writes_nothing(export, ckpt, tmp_path):
    target = strip(export("dense-fp16"), tmp_path / "t")
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", ckpt("qwen35-dense"), "--dry-run")
    assert code == 0 and "would build the MTP head" in out
    assert snapshot(target) == before


@pytest.mark.parametrize("family", FAMILIES)
def test_a_command_parses_each_unchanged_ir_once(family, tmp_path, monkeypatch):
    """Within one command every unchanged IR is parsed once (irsurgeon.ir.files.parsed_once): a DFlash patch parsed
    its target's language model six times, a verify three; for a real target each parse takes seconds."""
    from irsurgeon.ir import files

    source, ckpt = FIXTURE_PAIRS[family.key]
    target = writable_copy(source, tmp_path / "t")
    parsed = []
    real = files._read
    monkeypatch.setattr(files, "_read", lambda ov_, x, b: parsed.append(files.parse_key(Path(x))) or real(ov_, x, b))
    code, out = run("patch", target, "--checkpoint", ckpt)
    assert code == 0, out
    assert len(parsed) == len(set(parsed)), parsed  # a file parsed again had changed (the edit's read-back)
    parsed.clear()
    code, out = run("verify", target)
    assert code == 0 and len(parsed) == len(set(parsed)) and parsed, (out, parsed)


def test_every_reader_gets_its_own_copy_of_a_parse(tmp_path):
    from irsurgeon.ir import files

    xml = writable_copy(DEMO_TARGET, tmp_path / "t") / LM
    with files.parsed_once():
        first = files.read_model(xml)
        first.set_rt_info("changed by the first reader", ["irsurgeon_test"])
        second = files.read_model(xml)
        assert not second.has_rt_info(["irsurgeon_test"]) and second is not first
        xml.write_bytes(xml.read_bytes())  # rewritten: another identity, parsed again
        third = files.read_model(xml)
    assert [op.get_friendly_name() for op in third.get_ordered_ops()] == \
        [op.get_friendly_name() for op in second.get_ordered_ops()]


def test_the_language_model_is_parsed_once_before_and_once_after_its_edit(tmp_path, monkeypatch):
    """The annotation is planned from inspection's parse of the language model, and the committed language model is
    the staged copy OpenVINO read back (same inode, moved in), which verify after the commit gets instead of
    parsing it again. A file changed after the read-back is parsed again, and its verify failure fails the patch."""
    from irsurgeon.flows import patch as flow
    from irsurgeon.ir import files

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    parsed = []
    real = files._read
    monkeypatch.setattr(files, "_read", lambda ov_, x, b: parsed.append(Path(x).name) or real(ov_, x, b))
    code, out = run("patch", target, "--checkpoint", DEMO_CKPT)
    assert code == 0, out
    assert len([n for n in parsed if n.endswith(LM)]) == 2  # inspect (and the plan), the edit's read-back
    other = writable_copy(DEMO_TARGET, tmp_path / "u")
    confirm = flow.confirm

    def tamper_then_confirm(family, path):  # a graph change only a parse of the committed file can see
        xml = path / LM
        xml.write_bytes(xml.read_bytes().replace(b'"inputs_embeds"', b'"inputs_embeds_"'))
        confirm(family, path)
    monkeypatch.setattr(flow, "confirm", tamper_then_confirm)
    code, out = run("patch", other, "--checkpoint", DEMO_CKPT, "--weight-format", "f16")
    assert code == 1 and "verify rejects the directory: target layout" in out and "inputs_embeds" in out, out


def test_a_language_model_changed_after_inspection_is_planned_again(tmp_path, monkeypatch):
    """The annotation planned at inspection edits the bytes read then; a language model changed before staging (here:
    during the build) is read and planned again, so the staged edit carries that change too."""
    from irsurgeon.flows import patch as flow
    from irsurgeon.ir import xmlsafe
    from irsurgeon.core.rtinfo import HIDDEN_STATES_LAYERS

    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    build = flow.build

    def change_then_build(*args, **kwargs):
        xml = target / LM
        xml.write_bytes(xmlsafe.set_value(xml.read_bytes(), ("changed_meanwhile",), "yes"))
        return build(*args, **kwargs)
    monkeypatch.setattr(flow, "build", change_then_build)
    code, out = run("patch", target, "--checkpoint", DEMO_CKPT, "--weight-format", "f16")
    assert code == 0, out
    data = (target / LM).read_bytes()
    assert xmlsafe.get_value(data, ("changed_meanwhile",)) == "yes"
    assert xmlsafe.get_value(data, (HIDDEN_STATES_LAYERS,)) is not None


EMBED = "model.language_model.embed_tokens.weight"


def shard(src_ckpt: Path, dest: Path) -> None:
    """The reference checkpoint re-laid as an index + 3 shards: mtp.* in one, the token embeddings (read by the
    identity check, a few rows) in another; the third is unreadable if opened."""
    dest.mkdir(parents=True)
    shutil.copyfile(src_ckpt / "config.json", dest / "config.json")
    st = SafetensorsFile(src_ckpt / "model.safetensors")
    mtp = [n for n in st.tensors if n.startswith("mtp.")]
    write_safetensors(dest / "model-00002-of-00003.safetensors", {n: st.raw(n) for n in mtp},
                      {n: st.tensors[n].dtype for n in mtp})
    write_safetensors(dest / "model-00001-of-00003.safetensors", {EMBED: st.raw(EMBED)}, {EMBED: st.tensors[EMBED].dtype})
    rest = sorted(n for n in st.tensors if not n.startswith("mtp.") and n != EMBED)
    (dest / "model-00003-of-00003.safetensors").write_bytes(b"\xff" * 64)  # a corrupt shard: opening it fails
    weight_map = {n: "model-00002-of-00003.safetensors" for n in mtp}
    weight_map[EMBED] = "model-00001-of-00003.safetensors"
    weight_map.update({n: "model-00003-of-00003.safetensors" for n in rest})
    (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_sharded_checkpoint_reads_only_the_mtp_shard(export, ckpt, tmp_path):
    shard(ckpt("qwen35-dense"), tmp_path / "ckpt")
    target = strip(export("dense-fp16"), tmp_path / "t")
    code, out = run("patch", target, "--checkpoint", tmp_path / "ckpt")
    assert code == 0, out
    assert all(c.ok for c in verify_directory(target))


def test_repo_id_from_an_offline_cache_fetches_only_the_mtp_shard(export, ckpt, tmp_path):
    """A Hugging Face cache pre-filled with config, index and the mtp shard only; HF_HUB_OFFLINE=1."""
    snap = tmp_path / "hub" / "models--acme--qwen35-tiny" / "snapshots" / ("0" * 40)
    shard(ckpt("qwen35-dense"), snap)
    for f in ("model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"):
        (snap / f).unlink()  # never fetched: offline, fetching them would fail
    (tmp_path / "hub" / "models--acme--qwen35-tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--qwen35-tiny" / "refs" / "main").write_text("0" * 40)
    target = strip(export("dense-fp16"), tmp_path / "t")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint",
                           "acme/qwen35-tiny"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "taking the 'mtp.*' tensors of model-00002-of-00003.safetensors" in proc.stdout
    assert "model-00001" not in proc.stdout and "model-00003" not in proc.stdout
    assert all(c.ok for c in verify_directory(target))


def test_uncached_repo_id_offline_is_one_line_error(export, tmp_path):
    target = strip(export("dense-fp16"), tmp_path / "t")
    before = snapshot(target)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty-hub")}
    proc = subprocess.run([sys.executable, "-m", "irsurgeon.cli", "patch", str(target), "--checkpoint",
                           "acme/not-cached"], env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("Error: ") and len(proc.stderr.splitlines()) == 1
    assert "acme/not-cached" in proc.stderr and "cache" in proc.stderr
    assert snapshot(target) == before


def spoil_fc(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
    st = SafetensorsFile(dest / "model.safetensors")
    raw = {n: st.raw(n).copy() for n in st.tensors}
    dtypes = {n: st.tensors[n].dtype for n in st.tensors}
    st.close()
    raw["mtp.fc.weight"] = raw["mtp.fc.weight"][:, :64].copy()
    write_safetensors(dest / "model.safetensors", raw, dtypes)


@pytest.mark.parametrize("fault", ["bad-tensor", "wrong-model", "smoke-test", "commit"])
def test_failed_patch_leaves_the_target_byte_identical(export, ckpt, tmp_path, monkeypatch, fault):
    target = strip(export("dense-fp16"), tmp_path / "t")
    before = snapshot(target)
    source = ckpt("qwen35-dense")
    if fault == "bad-tensor":
        spoil_fc(source, tmp_path / "bad")
        source, needle = tmp_path / "bad", "mtp.fc.weight"
    elif fault == "wrong-model":
        source, needle = ckpt("qwen35-moe"), "does not belong"
    elif fault == "smoke-test":
        def broken(xml, cfg):
            raise RuntimeError("simulated crash after staging")
        monkeypatch.setattr("irsurgeon.families.qwen35_mtp.patch.smoke_test", broken)
        needle = "simulated crash"
    else:
        full_disk_on_nth_replace(monkeypatch, 2)
        needle = "rolled back"
    code, out = run("patch", target, "--checkpoint", source)
    assert code != 0 and out.strip().splitlines()[-1].startswith("Error: ") and needle in out, out
    assert snapshot(target) == before


def test_target_without_the_vlm_layout_is_refused(export, ckpt, tmp_path):
    target = strip(export("dense-fp16"), tmp_path / "t")
    (target / "openvino_text_embeddings_model.xml").unlink()
    before = snapshot(target)
    code, out = run("patch", target, "--checkpoint", ckpt("qwen35-dense"))
    assert code == 1 and out.startswith("Error: ") and "openvino_text_embeddings_model.xml" in out
    assert snapshot(target) == before


def _read_only_run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`irsurgeon patch COPY args` where COPY is the demo target on a read-only file system (a tmpfs remounted
    read-only in a private mount namespace: root ignores file modes), or a copy without write permission (non-root)."""
    target = tmp_path / "ro"
    command = [sys.executable, "-m", "irsurgeon", "patch", str(target / "t"), "--checkpoint", str(DEMO_CKPT), *args]
    if os.geteuid() != 0:
        shutil.copytree(DEMO_TARGET, target / "t")
        os.chmod(target / "t", 0o555)
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=300)
        finally:
            os.chmod(target / "t", 0o755)
    target.mkdir()
    script = (f"mount -t tmpfs tmpfs {target} && cp -r {DEMO_TARGET} {target}/t && mount -o remount,ro {target} && "
              + " ".join(shlex.quote(c) for c in command))
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    if "unshare failed" in proc.stderr or "mount:" in proc.stderr:
        pytest.skip(f"no private mount namespace here: {proc.stderr.strip()[:120]}")
    return proc


@pytest.mark.parametrize("args", [("--dry-run",), ()])
def test_a_read_only_target_is_refused_before_the_pair_check_dry_run_or_not(tmp_path, args):
    proc = _read_only_run(tmp_path, *args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert ("read-only file system" in lines[0] or "not writable" in lines[0]) and "cannot be written" in lines[0]
    assert "would build" not in proc.stdout and "checkpoint identity" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("key", ["qwen3_5", "dflash", "eagle3"])
def test_a_kv_cache_precision_other_than_the_drafts_rebuilds_it_and_the_same_leaves_it(tmp_path, key):
    """`--kv-cache-precision u8` on a ready directory said 'nothing to do' and left the draft's KV at f16."""
    import shutil

    from helpers.cli import invoke
    from lab.families import FIXTURE_PAIRS
    from irsurgeon.core import rtinfo
    from irsurgeon.ir import files, xmlsafe
    from irsurgeon.families import registry

    source, ckpt = FIXTURE_PAIRS[key]
    target = shutil.copytree(source, tmp_path / "t")
    draft = target / registry.by_key(key).layout.draft_xml
    assert invoke("patch", target, "--checkpoint", ckpt).exit_code == 0

    def kv() -> str:
        return str(xmlsafe.get_value(files.read_ir_bytes(draft), (rtinfo.RUNTIME_OPTIONS, rtinfo.KV_CACHE_PRECISION),
                                     str(draft)))
    assert kv() == "f16"
    asked = invoke("patch", target, "--checkpoint", ckpt, "--kv-cache-precision", "u8")
    assert asked.exit_code == 0 and "KV cache precision is f16; u8 asked: rebuilding it" in asked.output, asked.output
    assert kv() == "u8"
    same = invoke("patch", target, "--checkpoint", ckpt, "--kv-cache-precision", "U8")
    assert same.exit_code == 0 and "nothing to do" in same.output, same.output
