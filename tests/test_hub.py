"""Repo ids against a Hub look-alike on 127.0.0.1 (lab/hub_server.py): what is fetched, how much, from
which revision, and how each failure reads. huggingface_hub itself runs unmodified, in a subprocess per command
(HF_ENDPOINT and HF_HOME are read when huggingface_hub is imported), with a fresh HF_HOME per test."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import openvino as ov
import pytest

from lab.demo import DEMO_TARGET
from lab.dirsnap import snapshot
from lab.hub import run_cli
from lab.hub_server import Blackhole, Faults, HubServer, Refusing, Revision, split_checkpoint
from lab.procs import env
from lab import torch_zip as tz
from irsurgeon.synth import synthesize
from irsurgeon.synth.registry import default_spec
from irsurgeon.flows.verify import verify_directory

REPO = "acme/qwen35-tiny"
EMBED_SHARD, REST_SHARD, MTP_SHARD = (f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3))
SPEC = default_spec("qwen35").with_(vocab=4096)  # a 512 KiB embedding table: 16 rows of it are 2 KiB


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Seeds 1 and 2 of one synthetic config: targets, and their checkpoints split into 3 shards."""
    base = tmp_path_factory.mktemp("hub-models")
    out = {}
    for seed in (1, 2):
        s = synthesize(base / f"s{seed}", "qwen35", SPEC, seed=seed)
        out[seed] = (s.target, split_checkpoint(s.ckpt, base / f"repo{seed}"))
    return out


def copy_target(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def error_lines(proc) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("Error:")]


def test_patch_from_a_repo_id_fetches_config_index_and_the_head_by_byte_range(models, tmp_path):
    target_src, files = models[1]
    target = copy_target(target_src, tmp_path / "t")
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        proc, _ = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf",
                          extra_env={"TQDM_POSITION": "-1"})  # bars even without a TTY (huggingface_hub utils/tqdm.py)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    whole = [e for e in hub.log if e[0] == "GET" and e[2] is None]
    assert [e[1].rsplit("/", 1)[-1] for e in whole] == ["config.json", "model.safetensors.index.json"]
    mtp = [e for e in hub.log if e[0] == "GET" and e[1].startswith("/cdn/") and hub.blobs[e[1][5:]].name == MTP_SHARD]
    assert mtp and all(e[2].startswith("bytes=") for e in mtp)  # by range, every byte once: the shard is the head
    assert hub.served(MTP_SHARD)[1] == files[MTP_SHARD].stat().st_size
    assert "the whole file, checked against its ETag" in proc.stdout
    assert REST_SHARD not in str(hub.log)
    requests, sent = hub.served(EMBED_SHARD)
    size = files[EMBED_SHARD].stat().st_size
    ranged = [e for e in hub.log if e[0] == "GET" and e[2] and e[1].startswith("/cdn/")]
    assert ranged and all(e[2].startswith("bytes=") for e in ranged)
    # a first read of 1/64 of the shard (length + header), then 16 rows of 64 bf16 values: 10 KiB of 512 KiB
    assert 0 < sent <= size // 64 + 16 * 64 * 2, (sent, size)
    assert "checkpoint identity: 16 rows" in proc.stdout and "range requests" in proc.stdout
    assert "100%|" in proc.stderr  # huggingface_hub's own progress bars for config.json and the index
    assert all(c.ok for c in verify_directory(target))
    per_file = {name: hub.served(name) for name in sorted(files)}
    print(f"repo-id patch: {len(hub.log)} requests, {sum(e[3] for e in hub.log)} bytes served; per file "
          f"(requests, bytes): {per_file}")


def test_revision_selects_the_files_and_identity_tells_them_apart(models, tmp_path):
    """main holds seed 1, v2 seed 2: the seed-2 target is refused from main and patched from --revision v2."""
    repo = {"main": Revision(models[1][1]), "v2": Revision(models[2][1])}
    target = copy_target(models[2][0], tmp_path / "t")
    before = snapshot(target)
    with HubServer({REPO: repo}) as hub:
        wrong, _ = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
        assert snapshot(target) == before
        assert wrong.returncode == 1 and "does not belong" in error_lines(wrong)[0], wrong.stderr
        assert not hub.served(MTP_SHARD)[0]  # refused before the head's shard was downloaded
        right, _ = run_cli("patch", target, "--checkpoint", REPO, "--revision", "v2", endpoint=hub.url,
                           home=tmp_path / "hf")
    assert right.returncode == 0, right.stderr + right.stdout
    head = ov.Core().read_model(target / "openvino_mtp_model.xml")
    assert head.get_rt_info(["irsurgeon", "revision"]).astype(str) == "v2"
    assert head.get_rt_info(["irsurgeon", "checkpoint_identity"]).astype(str).startswith("verified")


def test_build_mtp_and_verify_take_a_repo_id(models, tmp_path):
    target_src, files = models[1]
    with HubServer({REPO: {"main": Revision(files)}}, private={REPO: "s3cret"}) as hub:
        built, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", "--token", "s3cret",
                           "--cache-dir", tmp_path / "cache", endpoint=hub.url, home=tmp_path / "hf")
        verified, _ = run_cli("verify", target_src, "--checkpoint", REPO, "--token", "s3cret", endpoint=hub.url,
                              home=tmp_path / "hf2")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "out" / "openvino_mtp_model.xml").is_file() and (tmp_path / "cache").is_dir()
    assert "ok   checkpoint identity" in verified.stdout, verified.stdout + verified.stderr
    assert not (tmp_path / "hf" / "hub").exists()  # --cache-dir, not HF_HOME, held the files


def test_offline_after_an_online_patch_uses_the_cache(models, tmp_path):
    target_src, files = models[1]
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("patch", copy_target(target_src, tmp_path / "a"), "--checkpoint", REPO,
                           endpoint=hub.url, home=tmp_path / "hf")
    assert first.returncode == 0, first.stderr
    again, _ = run_cli("patch", copy_target(target_src, tmp_path / "b"), "--checkpoint", REPO, endpoint=hub.url,
                       home=tmp_path / "hf", extra_env={"HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr
    # the head and the identity rows come from irsurgeon's cache, which the first run filled (that server is gone)
    assert "match the target's" in again.stdout and "read from irsurgeon's cache" in again.stdout, again.stdout
    assert all(c.ok for c in verify_directory(tmp_path / "b"))


def test_unreachable_hub_falls_back_to_a_filled_cache(models, tmp_path):
    """Not offline mode, just no answer: what the cache holds is used, and said so, in seconds."""
    target_src, files = models[1]
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("patch", copy_target(target_src, tmp_path / "a"), "--checkpoint", REPO,
                           endpoint=hub.url, home=tmp_path / "hf")
    assert first.returncode == 0, first.stderr
    again, took = run_cli("patch", copy_target(target_src, tmp_path / "b"), "--checkpoint", REPO,
                          endpoint=hub.url, home=tmp_path / "hf")  # that server is gone: connection refused
    assert again.returncode == 0, again.stderr
    assert "using the local Hugging Face cache" in again.stdout and "read from irsurgeon's cache" in again.stdout
    assert all(c.ok for c in verify_directory(tmp_path / "b")) and took < 15


def bin_repo(files: dict[str, Path], dest: Path) -> dict[str, Path]:
    """A repo of split_checkpoint's files with each .safetensors written as a torch.save .bin (model-*.safetensors ->
    pytorch_model-*.bin), its index as pytorch_model.bin.index.json: no safetensors left."""
    dest.mkdir()
    renamed = {n: "pytorch_model" + n.removeprefix("model").removesuffix(".safetensors") + ".bin"
               for n in files if n.endswith(".safetensors")}
    out = {new: tz.from_safetensors(files[old], dest / new) for old, new in renamed.items()}
    out["config.json"] = files["config.json"]
    if "model.safetensors.index.json" in files:
        index = json.loads(files["model.safetensors.index.json"].read_text())
        index["weight_map"] = {n: renamed[shard] for n, shard in index["weight_map"].items()}
        out["pytorch_model.bin.index.json"] = dest / "pytorch_model.bin.index.json"
        out["pytorch_model.bin.index.json"].write_text(json.dumps(index))
    return out


@pytest.mark.parametrize("shards", [pytest.param(1, marks=pytest.mark.slow), 3])  # the default tier: several
def test_a_repo_of_bin_files_is_fetched_whole_and_read_locally(tmp_path, shards):
    """No safetensors in the repo (transformers' order then takes pytorch_model.bin, its index): the .bin files
    holding `mtp.*` are downloaded whole through huggingface_hub, never by range and never the others, then read by
    the restricted reader; the head is the local checkpoint's, and a second run offline needs no server."""
    s = synthesize(tmp_path / "s", "qwen35", SPEC, seed=1)
    files = bin_repo(split_checkpoint(s.ckpt, tmp_path / "st", shards), tmp_path / "repo")
    assert not [n for n in files if "safetensors" in n]
    head = "pytorch_model.bin" if shards == 1 else "pytorch_model-00003-of-00003.bin"
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "hub", endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"fetching {head} whole" in proc.stdout + proc.stderr
    cdn = [(hub.blobs[e[1][5:]].name, e[2]) for e in hub.log if e[0] == "GET" and e[1].startswith("/cdn/")]
    assert cdn == [(head, None)], hub.log
    assert hub.served(head)[1] >= files[head].stat().st_size
    local, _ = run_cli("build-mtp", s.ckpt, "-o", tmp_path / "local", endpoint=hub.url, home=tmp_path / "hf2")
    assert local.returncode == 0, local.stderr
    built = (tmp_path / "hub" / "openvino_mtp_model.bin").read_bytes()
    assert built == (tmp_path / "local" / "openvino_mtp_model.bin").read_bytes()
    again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "offline", endpoint=hub.url, home=tmp_path / "hf",
                       extra_env={"HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "offline" / "openvino_mtp_model.bin").read_bytes() == built


FAILURES = {  # case -> (server set-up, words the one error line must hold)
    "unknown repo (401)": (lambda files: {"acme/other": {"main": Revision(files)}}, None, ["repo not found", "token"]),
    "private, no token (401)": (lambda files: {REPO: {"main": Revision(files)}}, {REPO: "s3cret"}, ["token"]),
    "shard missing (404)": (lambda files: {REPO: {"main": Revision({k: v for k, v in files.items()
                                                                    if k != MTP_SHARD})}}, None,
                            [MTP_SHARD, "not in the repo"]),
    "unknown revision (404)": (lambda files: {REPO: {"v1": Revision(files)}}, None, ["no revision 'main'"]),
}


def test_a_repo_index_naming_a_shard_outside_the_repo_is_refused_before_any_download(models, tmp_path):
    """build-mtp fetches the mtp shards the index names: a name that is not a plain file name is never requested."""
    files = dict(models[1][1])
    data = json.loads(files["model.safetensors.index.json"].read_text())
    data["weight_map"] = {n: "../escape.safetensors" if n.startswith("mtp.") else shard
                          for n, shard in data["weight_map"].items()}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(data))
    files["model.safetensors.index.json"] = tmp_path / "model.safetensors.index.json"
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 1 and len(error_lines(proc)) == 1, proc.stderr
    assert "not a plain file name" in error_lines(proc)[0], proc.stderr
    assert "escape" not in str(hub.log) and not (tmp_path / "out").exists()


def test_any_other_download_failure_is_one_line_naming_the_file():
    """What huggingface_hub raises beyond its own error types (a ValueError for a bad filename, say) still reads as
    one line, not an unexpected error of the message code."""
    from irsurgeon.weights.hub import HubOptions, hub_error

    error = hub_error(REPO, "model.safetensors", HubOptions(), ValueError("Invalid filename"))
    assert str(error) == f"{REPO}: cannot fetch model.safetensors: Invalid filename"


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_hub_http_errors_are_one_line_and_touch_nothing(models, tmp_path, case):
    target_src, files = models[1]
    target = copy_target(target_src, tmp_path / "t")
    before = snapshot(target)
    repos, private, words = FAILURES[case]
    with HubServer(repos(files), private=private or {}) as hub:
        proc, _ = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 1 and len(error_lines(proc)) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(w in error_lines(proc)[0] for w in words), proc.stderr
    assert snapshot(target) == before


def test_server_dying_mid_file_is_one_line_and_touches_nothing(models, tmp_path):
    target_src, files = models[1]
    target = copy_target(target_src, tmp_path / "t")
    before = snapshot(target)
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(die_mid_file=MTP_SHARD)) as hub:
        proc, took = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 1 and len(error_lines(proc)) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert MTP_SHARD in error_lines(proc)[0] and "HF_HUB_OFFLINE=1" in error_lines(proc)[0]
    assert snapshot(target) == before
    print(f"server died mid-file: failed after {took:.1f} s")


@pytest.mark.parametrize("kind", ["connection refused", pytest.param("no answer", marks=pytest.mark.slow)])
def test_unreachable_hub_fails_fast_naming_offline_mode(models, tmp_path, kind):
    target = copy_target(models[1][0], tmp_path / "t")
    before = snapshot(target)
    if kind == "connection refused":
        with Refusing() as port:  # held for the run: no other worker's server can be given it meanwhile
            proc, took = run_cli("patch", target, "--checkpoint", REPO, endpoint=port.url, home=tmp_path / "hf")
    else:  # telemetry opted in (irsurgeon turns it off otherwise): huggingface_hub first spends up to 3 s on its
        # agent-registry fetch
        with Blackhole() as hole:
            proc, took = run_cli("patch", target, "--checkpoint", REPO, endpoint=hole.url, home=tmp_path / "hf",
                                 extra_env={"HF_HUB_DISABLE_TELEMETRY": "0"})
    lines = error_lines(proc)
    assert proc.returncode == 1 and len(lines) == 1 and proc.stderr.strip() == lines[0], proc.stderr
    assert kind in lines[0] or "within" in lines[0]
    assert "HF_HUB_OFFLINE=1" in lines[0]
    assert took < 15, took  # start-up (~1 s) + registry fetch (3 s) + the 5 s probe; was 24 s of silent retries
    assert snapshot(target) == before
    print(f"{kind}: failed after {took:.1f} s (process start-up included)")


@pytest.mark.slow
def test_a_slow_download_is_not_cut_short(models, tmp_path):
    """The mtp shard stalls for 7 s mid-body: longer than the 5 s the first HEAD may take, shorter than
    huggingface_hub's own read timeout (HF_HUB_DOWNLOAD_TIMEOUT, 10 s): the patch completes."""
    target_src, files = models[1]
    target = copy_target(target_src, tmp_path / "t")
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(slow_file=MTP_SHARD, pause=7.0)) as hub:
        proc, took = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr
    assert took > 7 and all(c.ok for c in verify_directory(target))


# --- a local path that does not exist is said to be one, before it is tried as a repo id ----------------------------

def test_a_mistyped_local_path_says_so_before_the_hub(tmp_path):
    (tmp_path / "models").mkdir()
    proc = subprocess.run([sys.executable, "-m", "irsurgeon", "patch", str(DEMO_TARGET), "--checkpoint",
                           "models/ckptt"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env(), "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"})
    assert proc.returncode == 1 and proc.stderr.startswith("Error: models/ckptt: no such local checkpoint in models; "
                                                           "as a Hugging Face repo id:"), proc.stderr


def test_a_mistyped_local_path_names_the_entry_it_is_closest_to():
    from irsurgeon.weights.hub.fetch import local_answer

    models = Path(__file__).resolve().parents[1] / "fixtures" / "eagle3"  # holds ckpt/ and target/
    assert local_answer(models / "ckptt") == f"no such local checkpoint in {models} (did you mean '{models}/ckpt'?)"
    assert local_answer(models / "zzzz") == f"no such local checkpoint in {models}"  # nothing close: no guess


def test_a_path_through_a_file_says_the_file_is_not_a_folder(tmp_path):
    """`notes.txt/ckpt`: the file is there, so it is not said to be missing (was "notes.txt/ does not exist")."""
    from irsurgeon.weights.hub.fetch import local_answer

    (tmp_path / "notes.txt").write_text("x")
    said = local_answer(tmp_path / "notes.txt" / "deeper" / "ckpt")
    assert said == f"no such local path ({tmp_path / 'notes.txt'} is a file, not a folder)", said


def test_a_mistyped_local_path_whose_first_folder_is_missing_says_so_before_the_hub(tmp_path):
    """`fixtures-typo/ckptt`: no part of it exists; the line says which folder is missing, then what the hub said."""
    proc = subprocess.run([sys.executable, "-m", "irsurgeon", "patch", str(DEMO_TARGET), "--checkpoint",
                           "fixtures-typo/ckptt"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**env(), "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"})
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("Error: fixtures-typo/ckptt: no such local path (fixtures-typo/ does not exist); as a "
                               "Hugging Face repo id: cannot reach"), lines[0]


def test_a_config_changed_in_huggingface_hubs_cache_is_refused_not_used(models, tmp_path):
    """huggingface_hub trusts a commit's file once it is on disk, and the config decides the draft (an EAGLE-3 draft's
    taps): its blob must still hash to the ETag it is named by, online or offline."""
    import hashlib

    target_src, files = models[1]
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("patch", copy_target(target_src, tmp_path / "a"), "--checkpoint", REPO,
                           endpoint=hub.url, home=tmp_path / "hf")
    assert first.returncode == 0, first.stderr
    snapshots = tmp_path / "hf" / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots"
    blob = next(snapshots.glob("*/config.json")).resolve()  # blobs/<its ETag>: sha256 here, as for an LFS file
    data = files["config.json"].read_bytes()
    assert blob.name == hashlib.sha256(data).hexdigest()
    blob.write_bytes(data.replace(b'"hidden_size"', b' "hidden_size"', 1))
    target = copy_target(target_src, tmp_path / "b")
    before = snapshot(target)
    again, _ = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf",
                       extra_env={"HF_HUB_OFFLINE": "1"})
    assert again.returncode == 1 and "config.json: its content's sha256 is" in again.stderr, again.stderr
    assert snapshot(target) == before
