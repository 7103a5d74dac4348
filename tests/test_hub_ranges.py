"""A repo id's draft tensors fetched by byte range into irsurgeon's own cache (irsurgeon/weights/hub/partial.py,
store.py), against the Hub look-alike on 127.0.0.1 (lab/hub_server.py), which counts what it serves.

On three layouts (the head in model.safetensors beside a large tensor; in a shard beside one; in a shard of its own)
a patch downloads at most 1.1x what it needs (the head, the headers of the files holding it or the embeddings, the
identity check's 16 rows), and a second run nothing; every range answer is what was asked or one error line; a
server that ignores ranges gets the whole-file download, said on stderr; a whole file is checked against its ETag;
what the cache holds is used only when it is complete, and the cache is never written through a link. A file that
changes on the server between two requests, a file of another commit, a redirect that is not http(s), a link in
huggingface_hub's own folders: one error line, nothing written through it, nothing of two versions mixed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lab.families import FAMILIES, FIXTURE_PAIRS
from lab.hub import cli_env, run_cli
from lab.hub_server import Faults, HubServer, Revision, split_checkpoint
from irsurgeon.core.errors import CheckpointError
from irsurgeon.synth import synthesize
from irsurgeon.synth.registry import default_spec
from irsurgeon.flows.verify import verify_directory
from irsurgeon.weights.hub import store
from irsurgeon.weights.safetensors_io import SafetensorsFile
from helpers.tiers import every_nth

REPO = "acme/qwen35-tiny"
MTP_SHARD = "model-00003-of-00003.safetensors"
FILLER = "model.visual.blocks.filler.weight"  # sorts right before mtp.*: the head's neighbour in its file
FILLER_BYTES = 8 << 20
LAYOUTS = {"single file": 1, "head beside a big tensor": 2, "dedicated head shard": 3}
ROWS = 16 * 64 * 2  # the identity check's 16 rows of the [4096, 64] bf16 embedding table


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("ranges")
    s = synthesize(base / "s", "qwen35", default_spec("qwen35").with_(vocab=4096), seed=1)
    filler = {FILLER: (np.zeros(FILLER_BYTES // 2, np.uint16), "BF16")}
    repos = {k: split_checkpoint(s.ckpt, base / f"repo{n}", n, filler) for k, n in LAYOUTS.items()}
    return s.target, repos


def needed(files: dict[str, Path]) -> tuple[int, int]:
    """(the head's bytes, what a patch needs: the head, the headers of the files holding it or the embeddings, and
    the identity rows)."""
    head = headers = 0
    for path in files.values():
        if path.suffix == ".safetensors":
            f = SafetensorsFile(path)
            head += sum(i.end - i.begin for n, i in f.tensors.items() if n.startswith("mtp."))
            headers += f.data_start if any(n.startswith("mtp.") or "embed_tokens" in n for n in f.tensors) else 0
            f.close()
    return head, head + headers + ROWS


def weight_traffic(hub: HubServer) -> tuple[int, int]:
    """(range requests, safetensors bytes sent) so far."""
    cdn = [e for e in hub.log if e[1].startswith("/cdn/")]
    return sum(1 for e in cdn if e[2]), sum(e[3] for e in cdn)


def ours(cache: Path) -> Path:
    """irsurgeon's cache folder of the one commit fetched."""
    (folder,) = cache.glob("irsurgeon/models--acme--qwen35-tiny/snapshots/*")
    return folder


@pytest.mark.parametrize("layout", every_nth(list(LAYOUTS), 3, ids=str))  # the other layouts: CI's extended tier
def test_a_patch_downloads_what_it_needs_and_a_second_run_nothing(pair, tmp_path, layout):
    target_src, files = pair[0], pair[1][layout]
    head, need = needed(files)
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("patch", shutil.copytree(target_src, tmp_path / "a"), "--checkpoint", REPO,
                           endpoint=hub.url, home=tmp_path / "hf")
        assert first.returncode == 0, first.stderr + first.stdout
        ranges, sent = weight_traffic(hub)
        seen = len(hub.log)
        again, _ = run_cli("patch", shutil.copytree(target_src, tmp_path / "b"), "--checkpoint", REPO,
                           endpoint=hub.url, home=tmp_path / "hf")
    assert again.returncode == 0, again.stderr + again.stdout
    assert sent <= 1.1 * need, (sent, need)  # main: 51.5 MB for the two layouts with the head beside the filler
    later = hub.log[seen:]
    assert not [e for e in later if e[2] or e[0] == "GET"], later  # only the HEADs of config.json and the index
    assert "read from irsurgeon's cache" in again.stdout
    assert all(c.ok for c in verify_directory(tmp_path / "b"))
    print(f"{layout}: {sent} bytes of safetensors for a {head}-byte head ({sent / head:.2f}x the head, "
          f"{sent / need:.2f}x the {need} bytes needed) in {ranges} range requests; a second run: "
          f"{len(later)} HEAD requests")


def test_a_server_that_ignores_ranges_gets_the_whole_file_said_on_stderr(pair, tmp_path):
    target_src, files = pair[0], pair[1]["dedicated head shard"]
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(ignore_range=MTP_SHARD)) as hub:
        proc, _ = run_cli("patch", shutil.copytree(target_src, tmp_path / "t"), "--checkpoint", REPO,
                          endpoint=hub.url, home=tmp_path / "hf")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    notes = [line for line in proc.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and MTP_SHARD in notes[0] and "ignored the byte range (HTTP 200)" in notes[0], notes
    whole = [e for e in hub.log if e[0] == "GET" and e[2] is None and e[1].startswith("/cdn/")]
    assert len(whole) == 1 and whole[0][3] == files[MTP_SHARD].stat().st_size  # the whole shard, once
    assert all(c.ok for c in verify_directory(tmp_path / "t"))


HASHES = {"fetched by range, every byte of it": Faults(etag={MTP_SHARD: '"' + "0" * 64 + '"'}),
          "fetched whole (ranges ignored)": Faults(etag={MTP_SHARD: '"' + "0" * 64 + '"'}, ignore_range=MTP_SHARD)}


@pytest.mark.parametrize("case", list(HASHES))
def test_a_whole_file_is_checked_against_the_hubs_sha256(pair, tmp_path, case):
    """The mtp shard alone in its file is the head: all of it is fetched, and its content must hash to the ETag."""
    files = pair[1]["dedicated head shard"]
    with HubServer({REPO: {"main": Revision(files)}}, faults=HASHES[case]) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache",
                          endpoint=hub.url, home=tmp_path / "hf")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert MTP_SHARD in errors[0] and "sha256" in errors[0] and "0" * 64 in errors[0], errors[0]
    assert not (tmp_path / "out").exists() and not (ours(tmp_path / "cache") / MTP_SHARD).exists()


WRONG = {  # a range of the mtp shard answered otherwise than asked -> what the one error line says
    "longer (1 MiB)": (Faults(range_file=MTP_SHARD, range_bytes=1 << 20), "where"),
    "shorter (10 bytes)": (Faults(range_file=MTP_SHARD, range_bytes=10), "announces 10"),
    "other bytes (16 further on)": (Faults(range_file=MTP_SHARD, range_shift=16), "Content-Range"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_range_answered_otherwise_than_asked_is_one_line_and_nothing_is_kept(pair, tmp_path, case):
    files = pair[1]["dedicated head shard"]
    faults, words = WRONG[case]
    with HubServer({REPO: {"main": Revision(files)}}, faults=faults) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", "--cache-dir", tmp_path / "cache",
                          endpoint=hub.url, home=tmp_path / "hf")
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert MTP_SHARD in errors[0] and words in errors[0], errors[0]
    folder = ours(tmp_path / "cache")
    assert not (tmp_path / "out").exists() and sorted(p.name for p in folder.iterdir()) == [
        "config.json", "model.safetensors.index.json"], list(folder.iterdir())


SPOILED = {  # what the cache's copy of the mtp shard is made to be before a second run
    "cut short": lambda path, outside: os.truncate(path, path.stat().st_size - 100),
    "a link to a file outside the cache": lambda path, outside: (path.unlink(), path.symlink_to(outside)),
}


@pytest.mark.parametrize("case", list(SPOILED))
def test_a_spoiled_copy_in_the_cache_is_fetched_again_never_written_through(pair, tmp_path, case):
    """A copy cut short (or any other file at its name, a link out of the cache) is not taken for the head: it is
    fetched again by range and replaced; a run's leftover temp file is removed once its writer is gone."""
    files = pair[1]["dedicated head shard"]
    outside = tmp_path / "outside.safetensors"
    shutil.copy(files[MTP_SHARD], outside)
    kept_outside = outside.read_bytes()
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "a", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
        assert first.returncode == 0, first.stderr
        folder = ours(tmp_path / "cache")
        good = (folder / MTP_SHARD).read_bytes()
        SPOILED[case](folder / MTP_SHARD, outside)
        leftover = folder / f".{MTP_SHARD}.999999999.0123abcd.tmp"  # a pid no process has
        leftover.write_bytes(good[:100])
        before = weight_traffic(hub)[0]
        again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "b", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
        assert again.returncode == 0, again.stderr
        assert weight_traffic(hub)[0] > before  # fetched again
    assert not (folder / MTP_SHARD).is_symlink() and (folder / MTP_SHARD).read_bytes() == good
    assert outside.read_bytes() == kept_outside and not leftover.exists()


def swap_two_tensors(path: Path) -> None:
    """A consistent edit: two tensors of one dtype and shape trade their data offsets in the header (same length)."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    kinds: dict = {}
    for name, entry in head.items():
        if name != "__metadata__":
            kinds.setdefault((entry["dtype"], tuple(entry["shape"])), []).append(name)
    a, b = next(names for names in kinds.values() if len(names) > 1)[:2]
    head[a]["data_offsets"], head[b]["data_offsets"] = head[b]["data_offsets"], head[a]["data_offsets"]
    text = json.dumps(head, separators=(",", ":")).encode()
    assert len(text) <= n
    path.write_bytes(raw[:8] + text.ljust(n) + raw[8 + n:])


def flip_last_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))


EDITED = {"two tensors' offsets swapped": swap_two_tensors, "one byte of a tensor changed": flip_last_byte}


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
@pytest.mark.parametrize("case", list(EDITED))
def test_a_cache_copy_changed_since_it_was_written_is_not_built_from(pair, tmp_path, case, offline):
    """Every structural check of a copy passes after a consistent edit; the sha256 recorded in it when irsurgeon wrote
    it does not: the copy is said to have changed and fetched again (offline: one error line, nothing built)."""
    files = pair[1]["dedicated head shard"]
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "a", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
        assert first.returncode == 0, first.stderr
        folder = ours(tmp_path / "cache")
        good = (folder / MTP_SHARD).read_bytes()
        EDITED[case](folder / MTP_SHARD)
        before = weight_traffic(hub)[0]
        again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "b", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf",
                           extra_env={"HF_HUB_OFFLINE": "1"} if offline else None)
    said = again.stdout + again.stderr
    print(f"{case}, {'offline' if offline else 'online'}: {said.strip()}")
    assert f"{MTP_SHARD}: its tensors do not hash to the sha256 recorded when irsurgeon wrote it" in said, said
    if offline:
        errors = [line for line in again.stderr.splitlines() if line.startswith("Error:")]
        assert again.returncode == 1 and len(errors) == 1 and MTP_SHARD in errors[0], again.stderr
        assert not (tmp_path / "b").exists() and "Traceback" not in again.stderr
    else:
        assert again.returncode == 0, again.stderr
        assert weight_traffic(hub)[0] > before and (folder / MTP_SHARD).read_bytes() == good  # fetched again


@pytest.mark.slow
def test_a_run_killed_mid_download_leaves_nothing_a_later_run_trusts(pair, tmp_path):
    """SIGKILL while the head's bytes are arriving (the server pauses mid-answer): the cache holds no file at the
    shard's name, only a temp file, which the next run removes before it fetches the head again and builds."""
    files = pair[1]["head beside a big tensor"]
    shard = "model-00002-of-00002.safetensors"
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "irsurgeon.cli", "build-mtp", REPO, "-o", tmp_path / "a", "--cache-dir", cache]
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(slow_file=shard, pause=1.0)) as hub:
        proc = subprocess.Popen(args, env=cli_env(hub.url, tmp_path / "hf"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not list(cache.glob(f"irsurgeon/*/snapshots/*/.{shard}.*.tmp")) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
    folder = ours(cache)
    assert list(folder.glob(f".{shard}.*.tmp")) and not (folder / shard).exists()
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "b", "--cache-dir", cache, endpoint=hub.url,
                           home=tmp_path / "hf")
    assert again.returncode == 0, again.stderr
    assert (folder / shard).is_file() and not list(folder.glob(".*.tmp"))
    assert (tmp_path / "b" / "openvino_mtp_model.xml").is_file() and not (tmp_path / "a").exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_familys_hub_prefix_covers_what_its_loader_reads(family):
    """What a repo id's fetch takes (hub_prefix*) holds every tensor the strict loader reads (the table's prefix)."""
    from irsurgeon.core.config import read_json

    ckpt = FIXTURE_PAIRS[family.key][1]
    cfg = family.recipe().parse_config(read_json(ckpt / "config.json"), "config.json")
    assert family.recipe().tensors(cfg).prefix.startswith(family.hub_prefix)


@pytest.mark.slow  # the default run has Qwen3.5 above and Gemma 4 in tests/families/gemma4/test_gemma4_hub.py
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_fetches_its_tensors_by_range(family, tmp_path):
    """Through the protocol alone: a patch from a repo id of the family's bundled checkpoint downloads its
    hub_prefix* tensors (+ the header, + the identity rows), then nothing on a second run."""
    target_src, ckpt = FIXTURE_PAIRS[family.key]
    files = {p.name: p for p in ckpt.iterdir()}
    f = SafetensorsFile(ckpt / "model.safetensors")
    embed = f.tensors.get("model.language_model.embed_tokens.weight")
    rows = 16 * (embed.end - embed.begin) // embed.shape[0] if embed and not embed.name.startswith(
        family.hub_prefix) else 0
    need = f.data_start + rows + sum(i.end - i.begin for n, i in f.tensors.items() if n.startswith(family.hub_prefix))
    f.close()
    repo = "acme/" + family.key.replace("_", "-")
    with HubServer({repo: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("patch", shutil.copytree(target_src, tmp_path / "a"), "--checkpoint", repo,
                           endpoint=hub.url, home=tmp_path / "hf")
        assert first.returncode == 0, first.stderr + first.stdout
        seen, (_, sent) = len(hub.log), weight_traffic(hub)
        again, _ = run_cli("patch", shutil.copytree(target_src, tmp_path / "b"), "--checkpoint", repo,
                           endpoint=hub.url, home=tmp_path / "hf")
    assert again.returncode == 0, again.stderr + again.stdout
    assert sent <= 1.1 * need and not [e for e in hub.log[seen:] if e[0] == "GET"], (sent, need, hub.log[seen:])
    assert all(c.ok for c in verify_directory(tmp_path / "b"))
    print(f"{family.key}: {sent} bytes of {files['model.safetensors'].stat().st_size} ({sent / need:.2f}x needed)")


# --- two versions or two commits of a file are never mixed, in the download or in the cache --------------------------

SHARD = "model-00002-of-00002.safetensors"  # the head beside a large tensor: never read whole, never hashed
SMALL_FILLER = {FILLER: (np.zeros(1 << 21, np.uint16), "BF16")}
OTHER_COMMIT = "1234567890abcdef1234567890abcdef12345678"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A two-shard repo (the embeddings; the rest with the head), and the same shard with a header 64 bytes longer:
    every tensor the same, every offset in the file 64 bytes further (another version of the file)."""
    base = tmp_path_factory.mktemp("versions")
    s = synthesize(base / "s", "qwen35", default_spec("qwen35").with_(vocab=4096), seed=1)
    files = split_checkpoint(s.ckpt, base / "repo", 2, SMALL_FILLER)
    data = bytearray(files[SHARD].read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    longer = data[8:8 + n] + b" " * 64
    (base / "v2").mkdir()
    (base / "v2" / SHARD).write_bytes(struct.pack("<Q", n + 64) + longer + data[8 + n:])
    return files, base / "v2" / SHARD


def one_error(proc) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0]


def build_from_hub(files: dict, tmp_path, faults: Faults | None = None, cache=None):
    """`build-mtp REPO -o tmp_path/out` against the look-alike hub serving files (with faults)."""
    with HubServer({REPO: {"main": Revision(files)}}, faults=faults or Faults()) as hub:
        proc, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "out", "--cache-dir", cache or tmp_path / "cache",
                          endpoint=hub.url, home=tmp_path / "hf")
    return proc


def cached(cache) -> list[str]:
    return sorted(p.name for p in cache.glob("irsurgeon/models--acme--qwen35-tiny/snapshots/*/*"))


def test_a_shard_replaced_on_the_server_between_two_range_requests_is_one_line(repo, tmp_path):
    """The header comes from one version, the tensors from the other (their ETag changes): a head built from them
    would be the bytes 64 further on, shaped right and wrong."""
    files, v2 = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(swap_file=(SHARD, v2))))
    assert SHARD in error and "changed on the server during the download" in error, error
    assert not (tmp_path / "out").exists() and SHARD not in cached(tmp_path / "cache")


def test_a_shard_answered_for_another_commit_is_refused(repo, tmp_path):
    """config.json and the index came from one commit; the shard's HEAD says another (the branch moved between two
    requests): its bytes would be filed under the first commit."""
    files, _ = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(file_commit={SHARD: OTHER_COMMIT})))
    assert SHARD in error and OTHER_COMMIT in error and "not mixing two commits' files" in error, error
    assert not (tmp_path / "out").exists() and SHARD not in cached(tmp_path / "cache")


@pytest.mark.parametrize("location", ["file:///etc/passwd", "ftp://127.0.0.1/x"])
def test_a_redirect_to_a_location_that_is_not_http_is_refused_by_name(repo, tmp_path, location):
    """It used to read 'connection lost ... set HF_HUB_OFFLINE=1', which is neither what happened nor a remedy."""
    files, _ = repo
    error = one_error(build_from_hub(files, tmp_path, Faults(location={SHARD: location})))
    assert SHARD in error and location in error and "not an http(s) URL" in error, error


@pytest.mark.slow  # two CLI runs
def test_what_the_cache_stored_under_another_etag_is_fetched_again(repo, tmp_path):
    """The shard's bytes change at the same commit between two runs (a killed first run left its header stored):
    the second run's HEAD names another ETag, so the stored header is not used with the new tensors."""
    files, v2 = repo
    commit = Revision(files).commit
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        first, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "a", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
    assert first.returncode == 0, first.stderr
    (folder,) = (tmp_path / "cache").glob("irsurgeon/*/snapshots/*")
    (folder / SHARD).unlink()  # as if killed after the header was stored
    with HubServer({REPO: {"main": Revision({**files, SHARD: v2}, commit=commit)}}) as hub:
        again, _ = run_cli("build-mtp", REPO, "-o", tmp_path / "b", "--cache-dir", tmp_path / "cache",
                           endpoint=hub.url, home=tmp_path / "hf")
        header_reads = [e for e in hub.log if e[2] and e[2].startswith("bytes=0-")]
    assert again.returncode == 0, again.stderr
    assert header_reads, "\n".join(map(str, hub.log))  # read again, not taken from the cache
    # both versions hold the same tensors: the same head, unless one's header was read with the other's bytes
    head = "openvino_mtp_model.bin"
    assert (tmp_path / "b" / head).read_bytes() == (tmp_path / "a" / head).read_bytes()


@pytest.mark.parametrize("link", ["models--acme--qwen35-tiny", "models--acme--qwen35-tiny/snapshots",
                                  "models--acme--qwen35-tiny/blobs", ".locks"])
def test_a_link_among_huggingface_hubs_folders_is_refused_before_it_writes_through_it(repo, tmp_path, link):
    """huggingface_hub follows a link in its repo folder and writes config.json there, outside the cache; the
    checkpoint reader then refused what it had written. Now nothing is written and the link is named."""
    files, _ = repo
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    (cache / link).parent.mkdir(parents=True, exist_ok=True)
    (cache / link).symlink_to(outside)
    error = one_error(build_from_hub(files, tmp_path, cache=cache))
    assert f"{cache / link}: a link in the Hugging Face cache" in error, error
    assert list(outside.iterdir()) == []


def test_a_stored_header_the_reader_refuses_is_not_used(tmp_path):
    """A .ranges file whose header bytes the local reader refuses (an absurd length, a tensor past the file) is not
    usable: fetched again, where it used to refuse the shard on every later run, offline or not."""
    def header(entries: dict) -> bytes:
        raw = json.dumps(entries).encode()
        return struct.pack("<Q", len(raw)) + raw

    good = header({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
    past = header({"t": {"dtype": "F32", "shape": [2], "data_offsets": [992, 1000]}})
    with store.Folder(tmp_path / "cache", "acme/tiny", "c" * 40) as folder:
        for name, first, usable in (("good", good, True), ("2^63", struct.pack("<Q", 1 << 63) + b"{}", False),
                                    ("past the file", past, False), ("cut short", good[:20], True)):
            store.write_ranges(folder, "x.safetensors", len(good) + 8, [(0, first)], "e" * 64)
            found = store.read_ranges(folder, "x.safetensors")
            assert (found is not None) == usable, name
            if usable:
                assert found == (len(good) + 8, [(0, first)], "e" * 64)


# --- the pieces, without a server ------------------------------------------------------------------------------------

def test_gaps_are_merged_only_within_the_waste_allowed():
    from irsurgeon.weights.rows import merge_ranges

    spans = [(0, 100), (110, 100), (260, 100), (2000, 10)]
    assert merge_ranges(spans, 1000) == [(0, 360), (2000, 10)]
    assert merge_ranges(spans, 1000, waste=60) == [(0, 360), (2000, 10)]  # gaps of 10 and 50
    assert merge_ranges(spans, 1000, waste=20) == [(0, 210), (260, 100), (2000, 10)]
    assert merge_ranges([(0, 10), (10, 10)], 0, waste=0) == [(0, 20)]  # adjacent: no waste


def test_content_is_checked_against_an_lfs_sha256_or_a_git_blob_sha1():
    from irsurgeon.weights.hub.names import check_content

    data = b"tensor bytes" * 1000
    check_content([data[:5], data[5:]], len(data), f'"{hashlib.sha256(data).hexdigest()}"', "f")
    check_content([data], len(data), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(), "f")
    check_content([data], len(data), None, "f")  # no hash to check against
    with pytest.raises(CheckpointError, match="f: its content's sha256 is"):
        check_content([data[:-1] + b"!"], len(data), hashlib.sha256(data).hexdigest(), "f")


def test_the_cache_folder_is_never_reached_through_a_link(tmp_path):
    from irsurgeon.weights.hub.store import Folder

    cache, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    (cache / "irsurgeon").symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match="cannot make irsurgeon's cache folder"):
        Folder(cache, "acme/tiny", "a" * 40)
    assert list(elsewhere.iterdir()) == []


def test_a_cache_write_replaces_a_link_and_a_stored_ranges_file_cut_short_is_not_read(tmp_path):
    from irsurgeon.weights.hub import store

    outside = tmp_path / "outside"
    outside.write_bytes(b"keep")
    with store.Folder(tmp_path / "cache", "acme/tiny", "b" * 40) as folder:
        (folder.path / "x.safetensors").symlink_to(outside)
        assert folder.read("x.safetensors", 100) is None and folder.regular("x.safetensors") is None
        folder.write("x.safetensors", lambda fd: store.write_all(fd, b"new", 0))
        store.write_ranges(folder, "y.safetensors", 1000, [(0, b"abcd"), (500, b"ef")])
        assert store.read_ranges(folder, "y.safetensors") == (1000, [(0, b"abcd"), (500, b"ef")], None)
        ranges = folder.path / "y.safetensors.ranges"
        ranges.write_bytes(ranges.read_bytes()[:-1])
        assert store.read_ranges(folder, "y.safetensors") is None
    assert outside.read_bytes() == b"keep" and (folder.path / "x.safetensors").read_bytes() == b"new"
