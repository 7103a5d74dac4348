"""A Gemma 4 assistant as a repo id, against the Hub look-alike on 127.0.0.1 (lab/hub_server.py): every tensor
fetched by byte range (config.json first, then model.safetensors, or the index and every shard), patched into a copy
of the fixture target; a missing file is one line and leaves the target as it was. huggingface_hub runs unmodified
in a process of its own (lab.forkrun: HF_ENDPOINT and HF_HOME are read when it is imported)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from lab.dirsnap import snapshot
from helpers.gemma4 import copy_pair
from lab import forkrun
from lab.hub_server import Faults, HubServer, Revision, split_checkpoint
from irsurgeon.flows.verify import verify_directory

ROOT = Path(__file__).resolve().parents[3]
REPO = "acme/gemma4-assistant"


def run_cli(*args, endpoint: str, home: Path):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_ETAG_TIMEOUT",
                                                            "IRSURGEON_HUB_TIMEOUT")}
    env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(home), "PYTHONPATH": str(ROOT),
                "HF_HUB_DISABLE_TELEMETRY": "1", "HOME": str(home)})
    return forkrun.completed(forkrun.module("irsurgeon.cli"), args, env, timeout=120)  # a process of its own


def single_file(source: Path) -> dict[str, Path]:
    return {"config.json": source / "config.json", "model.safetensors": source / "model.safetensors"}


def test_patch_from_a_repo_id_fetches_the_whole_assistant(tmp_path):
    target, source = copy_pair(tmp_path)
    with HubServer({REPO: {"main": Revision(single_file(source))}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert hub.served("config.json")[1] == (source / "config.json").stat().st_size
    assert hub.served("model.safetensors")[1] == (source / "model.safetensors").stat().st_size  # each byte once
    print(f"gemma4 repo-id patch: {len(hub.log)} requests: {[(e[0], e[1].rsplit('/', 1)[-1]) for e in hub.log]}")
    gets = [e for e in hub.log if e[0] == "GET"]
    assert len(gets) == 3 and all(e[2] for e in gets[1:])  # config.json; by range, the header's first read, the rest
    assert "the whole file, checked against its ETag" in proc.stdout
    assert all(c.ok for c in verify_directory(target)), [c for c in verify_directory(target) if not c.ok]
    assert (target / "mtp_assistant" / "config.json").read_bytes() == (source / "config.json").read_bytes()


def test_a_sharded_assistant_is_fetched_shard_by_shard(tmp_path):
    target, source = copy_pair(tmp_path)
    files = split_checkpoint(source, tmp_path / "repo")
    shards = set(json.loads(files["model.safetensors.index.json"].read_text())["weight_map"].values())
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert len(shards) == 2 and all(hub.served(n)[1] == files[n].stat().st_size for n in shards)
    assert all(c.ok for c in verify_directory(target))


def test_a_missing_weights_file_is_one_line_and_touches_nothing(tmp_path):
    target, source = copy_pair(tmp_path)
    before = snapshot(target)
    with HubServer({REPO: {"main": Revision({"config.json": source / "config.json"})}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert ("neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor "
            "pytorch_model.bin.index.json is in the repo") in errors[0]
    assert snapshot(target) == before


def test_a_repo_of_another_target_is_refused_before_its_weights(tmp_path):
    target, source = copy_pair(tmp_path)
    before = snapshot(target)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text((source / "config.json").read_text().replace(
        '"backbone_hidden_size": 64', '"backbone_hidden_size": 48'))
    with HubServer({REPO: {"main": Revision({"config.json": bad / "config.json",
                                             "model.safetensors": source / "model.safetensors"})}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 1 and "backbone_hidden_size is 48" in proc.stderr, proc.stderr
    assert hub.served("model.safetensors") == (0, 0) and snapshot(target) == before


def test_revision_and_cache_dir_are_honoured(tmp_path):
    target, source = copy_pair(tmp_path)
    cache = tmp_path / "cache"
    with HubServer({REPO: {"v2": Revision(single_file(source))}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, "--revision", "v2", "--cache-dir", cache,
                       endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert len(list(cache.glob("irsurgeon/models--acme--gemma4-assistant/snapshots/*/model.safetensors"))) == 1
    assert not (tmp_path / "hf" / "hub").exists() or not any((tmp_path / "hf" / "hub").glob("models--*"))


def test_a_gemma4_assistant_repo_for_a_qwen_target_is_one_line(tmp_path):
    from irsurgeon.synth import synthesize
    from irsurgeon.synth.registry import default_spec

    _, source = copy_pair(tmp_path)
    target = synthesize(tmp_path / "q", "qwen35", default_spec("qwen35"), seed=1).target
    before = snapshot(target)
    with HubServer({REPO: {"main": Revision(single_file(source))}}) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "a Gemma 4 MTP assistant checkpoint" in errors[0], proc.stderr
    assert hub.served("model.safetensors") == (0, 0) and snapshot(target) == before


def test_dry_run_and_a_ready_target_fetch_no_weights(tmp_path):
    target, source = copy_pair(tmp_path)
    with HubServer({REPO: {"main": Revision(single_file(source))}}) as hub:
        dry = run_cli("patch", target, "--checkpoint", REPO, "--dry-run", endpoint=hub.url, home=tmp_path / "hf")
        assert dry.returncode == 0 and "would build mtp_assistant/" in dry.stdout, dry.stderr
        assert hub.served("model.safetensors") == (0, 0) and not (target / "mtp_assistant").exists()
        run_cli("patch", target, "--checkpoint", source, endpoint=hub.url, home=tmp_path / "hf")
        again = run_cli("patch", target, "--checkpoint", REPO, endpoint=hub.url, home=tmp_path / "hf")
    assert again.returncode == 0 and "already has its draft" in again.stdout, again.stderr
    assert hub.served("model.safetensors") == (0, 0)


def test_an_etag_that_is_a_path_writes_nothing_outside_the_cache(tmp_path):
    """model.safetensors' X-Linked-Etag `../../../X` would make huggingface_hub write the blob at <cache>/../X."""
    target, source = copy_pair(tmp_path)
    before = snapshot(target)
    box = tmp_path / "box"
    box.mkdir()
    with HubServer({REPO: {"main": Revision(single_file(source))}},
                   faults=Faults(etag={"model.safetensors": '"../../../X"'})) as hub:
        proc = run_cli("patch", target, "--checkpoint", REPO, "--cache-dir", box / "cache", endpoint=hub.url,
                       home=box / "hf")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "model.safetensors" in errors[0] and "../../../X" in errors[0], errors[0]
    assert {p.name for p in box.iterdir()} <= {"cache", "hf"}, list(box.iterdir())  # <cache>/../X is box/X
    assert not (box / "hf").exists() or not any((box / "hf").iterdir())
    assert snapshot(target) == before
