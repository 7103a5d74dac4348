"""A hostile hub (lab/hub_server.py, Faults): what a server, or a command line, may send that huggingface_hub
would turn into paths, unbounded reads or an endless wait, and what irsurgeon makes of it: one `Error:` line, exit 1,
nothing written outside the cache directory, memory bounded by what was asked, and every fetch ended by the
--hub-timeout budget.

Each command runs in a process of its own (lab.forkrun; huggingface_hub, which reads HF_ENDPOINT and HF_HOME when it
is imported, is imported there) inside a "box":
the cache directory, HF_HOME and HOME all lie in it, so that a write anywhere but the cache shows in a snapshot of the
box taken before and after.
"""
from __future__ import annotations

import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.tiers import default_tier, every_nth

from lab import forkrun
from lab.dirsnap import snapshot
from lab.hub_server import Faults, HubServer, Revision, split_checkpoint
from irsurgeon.core.errors import CheckpointError
from irsurgeon.synth import synthesize
from irsurgeon.synth.registry import default_spec

ROOT = Path(__file__).resolve().parents[1]
REPO = "acme/qwen35-tiny"
INDEX = "model.safetensors.index.json"
EMBED_SHARD, MTP_SHARD = "model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"
ESCAPE = "../../../X"  # from <cache>/models--acme--qwen35-tiny/blobs (or refs, .no_exist/<commit>): <cache>/../X
SPEC = default_spec("qwen35").with_(vocab=4096)
CLEAN_ENV = ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_ETAG_TIMEOUT", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME",
             "HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY", "DO_NOT_TRACK", "IRSURGEON_HUB_TIMEOUT")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile-model")
    s = synthesize(base / "s", "qwen35", SPEC, seed=1)
    return s.target, split_checkpoint(s.ckpt, base / "repo")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float  # the child's own peak resident set (lab.forkrun.Ran.peak)

    @property
    def errors(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("Error:")]


class Box:
    """tmp/box/{cache,home,hf}: --cache-dir, HOME and HF_HOME of one run; `outside()` is everything but the cache."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "box"
        self.cache, self.home, self.hf = self.root / "cache", self.root / "home", self.root / "hf"
        self.home.mkdir(parents=True)

    def outside(self) -> dict[str, str]:
        """The box but the cache; and but OpenVINO's telemetry files (~/intel/openvino_ga_cid, ~/intel/stats, which
        `import openvino` writes through openvino_telemetry whatever the checkpoint: not the hub's doing)."""
        return {k: v for k, v in snapshot(self.root).items()
                if not any(k == d or k.startswith(d + "/") for d in ("cache", "home/intel"))}

    def run(self, *args, endpoint: str, env: dict | None = None, timeout: float = 60) -> Run:
        """`irsurgeon ARGS` in the box (`python -m irsurgeon.cli`)."""
        return self.run_python(forkrun.module("irsurgeon.cli"), *args, endpoint=endpoint, env=env, timeout=timeout)

    def run_python(self, code: str, *args, endpoint: str, env: dict | None = None, timeout: float = 60) -> Run:
        """`python -c code ARGS` in the box, in a process of its own (lab.forkrun)."""
        base = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
        base.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(self.hf), "HOME": str(self.home),
                     "PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_TELEMETRY": "1"})
        base.update(env or {})
        base = {k: v for k, v in base.items() if v is not None}
        ran = forkrun.run(code, args, base, timeout=timeout)
        assert ran.returncode is not None, f"still running after {timeout} s: {ran.stderr[-2000:]}"
        return Run(ran.returncode, ran.stdout, ran.stderr, ran.seconds, ran.peak / 2**20)


def copy_target(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def assert_one_error(run: Run, *words: str) -> str:
    assert run.returncode == 1 and len(run.errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert all(w in run.errors[0] for w in words), (words, run.errors[0])
    return run.errors[0]


# --- names that would become paths -----------------------------------------------------------------------------------

def without(files: dict, name: str) -> dict:
    return {k: v for k, v in files.items() if k != name}


PATH_ATTACKS = {  # case -> (faults, files of the repo (given the model's), extra CLI args, what the error line names)
    "ETag of config.json": (Faults(etag={"config.json": f'"{ESCAPE}"'}), None, (), "ETag"),
    "X-Linked-Etag of the mtp shard": (Faults(etag={MTP_SHARD: f'"{ESCAPE}"'}), None, (), "X-Linked-Etag"),
    "weak ETag of config.json": (Faults(etag={"config.json": f'W/"{ESCAPE}"'}), None, (), "ETag"),
    "X-Repo-Commit": (Faults(commit=ESCAPE), None, (), "X-Repo-Commit"),
    "X-Repo-Commit of a 404": (Faults(missing_commit=ESCAPE), lambda f: without(f, INDEX), (), "X-Repo-Commit"),
    "--revision": (Faults(any_revision=True), None, ("--revision", ESCAPE), "revision"),
}


@pytest.mark.parametrize("case", list(PATH_ATTACKS))
def test_a_path_for_a_name_writes_nothing_outside_the_cache(model, tmp_path, case):
    """huggingface_hub joins the ETag (blobs/<etag>), X-Repo-Commit (snapshots/, .no_exist/<commit>/) and the
    revision (refs/<revision>) to cache paths unchecked: each is refused in one line that names the value."""
    faults, files, args, header = PATH_ATTACKS[case]
    target_src, repo_files = model
    target = copy_target(target_src, tmp_path / "t")
    box = Box(tmp_path)
    before, target_before = box.outside(), snapshot(target)
    with HubServer({REPO: {"main": Revision(files(repo_files) if files else repo_files)}}, faults=faults) as hub:
        run = box.run("patch", target, "--checkpoint", REPO, "--cache-dir", box.cache, *args, endpoint=hub.url)
    line = assert_one_error(run, header, ESCAPE)
    assert box.outside() == before, sorted(set(box.outside()) - set(before))
    assert snapshot(target) == target_before
    if case == "--revision":
        assert hub.log == [], hub.log  # refused before any request
    print(f"{case}: {line}")


GOOD_REVISIONS = ["main", "v2", "refs/pr/1", "release-1.0", "feature/x_y", "a" * 40, "0123456789" * 4, "@x"]
BAD_REVISIONS = ["", "../../../X", "..", "a..b", "/main", "main/", "-rf", "a//b", "main.lock", "a/b.lock/c",
                 "main.", ".hidden", "a/.b", "x@{1}", "@", "a b", "a\tb", "a\x1bb", "a\x7fb", "a~1", "a^", "a:b",
                 "a?", "a*", "a[b", "a\\b", "a\u202eb", "x" * 256]


@pytest.mark.parametrize("revision", GOOD_REVISIONS)
def test_revisions_git_allows_are_taken(revision):
    from irsurgeon.weights.hub import HubOptions

    assert HubOptions(revision).revision == revision


@pytest.mark.parametrize("revision", BAD_REVISIONS)
def test_revisions_git_refuses_are_one_line_naming_them_escaped(revision):
    from irsurgeon.weights.hub import HubOptions

    with pytest.raises(CheckpointError) as e:
        HubOptions(revision)
    text = str(e.value)
    assert "revision" in text and text.isprintable() and len(text) < 400, text
    assert repr(revision[:200]) in text


def test_a_path_huggingface_hub_returned_outside_the_cache_is_refused(tmp_path):
    """The check after the download: a snapshot entry that resolves outside the cache (as a blob path built from a
    hostile ETag would) is an error, not a file to read."""
    from irsurgeon.weights.hub import HubOptions, inside_cache

    cache = tmp_path / "cache"
    snap = cache / "models--acme--tiny" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (tmp_path / "X").write_text("{}")
    (snap / "config.json").symlink_to(Path("..", "..", "blobs", "..", "..", "..", "X"))
    (cache / "models--acme--tiny" / "blobs").mkdir()
    (cache / "models--acme--tiny" / "blobs" / "b").write_text("{}")
    (snap / "ok.json").symlink_to(Path("..", "..", "blobs", "b"))
    hub = HubOptions(cache_dir=cache)
    assert inside_cache(snap / "ok.json", "acme/tiny", hub) == snap / "ok.json"
    with pytest.raises(CheckpointError, match="outside the cache"):
        inside_cache(snap / "config.json", "acme/tiny", hub)
    with pytest.raises(CheckpointError, match="outside the cache"):
        inside_cache(tmp_path / "X", "acme/tiny", hub)


# --- every read bounded by what was asked ----------------------------------------------------------------------------

@pytest.mark.parametrize("status", [206, 200])
def test_a_range_answered_with_gigabytes_is_one_line_in_bounded_memory(model, tmp_path, status):
    """The identity check asks for kilobytes of the embedding shard; the server answers 1.5 GB (Content-Length
    saying so), as a range (206) or as the whole file (200): refused, reading at most what was asked."""
    target_src, files = model
    target = copy_target(target_src, tmp_path / "t")
    box, before = Box(tmp_path), snapshot(target)
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(range_bytes=1_500_000_000,
                                                                    range_status=status)) as hub:
        run = box.run("patch", target, "--checkpoint", REPO, endpoint=hub.url)
        sent = sum(e[3] for e in hub.log if e[2])
    line = assert_one_error(run, EMBED_SHARD)
    assert snapshot(target) == before
    assert run.peak_rss_mb < 1024, run.peak_rss_mb  # was 3.1 GB: the whole answer read into memory, then copied
    print(f"range answered with 1.5 GB ({status}): {line}; peak RSS {run.peak_rss_mb:.0f} MB, {sent} bytes "
          f"sent before the client hung up, {run.seconds:.1f} s")


ENDLESS = {  # case -> (faults, what the error line names besides the shard: the bound it stopped at)
    "a range of the mtp shard": (Faults(endless_file=MTP_SHARD), lambda size: "more than"),
    "the whole mtp shard (its server ignores ranges)": (Faults(endless_file=MTP_SHARD, ignore_range=MTP_SHARD), str),
}


@pytest.mark.parametrize("case", list(ENDLESS))
def test_a_download_longer_than_announced_stops_at_the_announced_size(model, tmp_path, case):
    """The mtp shard's GET never ends (chunked, no Content-Length): the download stops once it passes the length of
    the range asked, or (a whole-file download) the size the HEAD announced, instead of filling the disk."""
    target_src, files = model
    faults, bound = ENDLESS[case]
    box = Box(tmp_path)
    with HubServer({REPO: {"main": Revision(files)}}, faults=faults) as hub:
        run = box.run("build-mtp", REPO, "-o", tmp_path / "out", "--cache-dir", box.cache, endpoint=hub.url,
                      timeout=60)
        time.sleep(0.2)  # the server's handler notices the hang-up and logs what it sent
        sent = sum(e[3] for e in hub.log if e[1].startswith("/cdn/"))
    line = assert_one_error(run, MTP_SHARD, bound(files[MTP_SHARD].stat().st_size))
    largest = max((p.stat().st_size for p in box.cache.rglob("*") if p.is_file() and not p.is_symlink()), default=0)
    assert largest < files[MTP_SHARD].stat().st_size and not (tmp_path / "out").exists()
    assert sent < 256 << 20, sent  # the client hung up early (what is in flight in socket buffers aside)
    print(f"endless download ({case}): {line}; {sent >> 20} MiB sent in {run.seconds:.1f} s")


def test_a_config_announced_larger_than_any_config_is_not_downloaded(model, tmp_path):
    target_src, files = model
    box = Box(tmp_path)
    with HubServer({REPO: {"main": Revision(files)}}, faults=Faults(announce={"config.json": 1 << 30})) as hub:
        run = box.run("build-mtp", REPO, "-o", tmp_path / "out", endpoint=hub.url)
    assert_one_error(run, "config.json", str(1 << 30))
    assert not [e for e in hub.log if e[0] == "GET"], hub.log


# --- an overall deadline ---------------------------------------------------------------------------------------------

DRIPS = {  # case -> the answer that drips (or asks for a retry in a day)
    "the probe (HEAD config.json)": Faults(drip=("HEAD", "config.json")),
    "config.json (budget from IRSURGEON_HUB_TIMEOUT)": Faults(drip=("GET", "config.json")),
    "the index": Faults(drip=("GET", INDEX)),
    "the mtp shard's tensors by range": Faults(drip=("RANGE", MTP_SHARD)),
    "the whole mtp shard (its server ignores ranges)": Faults(drip=("GET", MTP_SHARD), ignore_range=MTP_SHARD),
    "an identity row's range": Faults(drip=("RANGE", EMBED_SHARD)),
    "Retry-After: 100000 on the mtp shard": Faults(retry_after=("RANGE", MTP_SHARD)),
}
BUDGET = 1.0  # what a whole patch fetch takes here: 0.3 s of requests


@pytest.mark.parametrize("case", default_tier(list(DRIPS), keep={"config.json (budget from IRSURGEON_HUB_TIMEOUT)",
                                                          "the mtp shard's tensors by range"}))
def test_a_dripping_hub_ends_at_the_hub_timeout(model, tmp_path, case):
    """One byte every 0.25 s keeps every read timeout happy for minutes (huggingface_hub's retries would sleep out
    the Retry-After): the --hub-timeout budget ends the fetch, whichever request it is."""
    target_src, files = model
    target = copy_target(target_src, tmp_path / "t")
    box, before = Box(tmp_path), snapshot(target)
    from_env = "IRSURGEON_HUB_TIMEOUT" in case
    args, env = ((), {"IRSURGEON_HUB_TIMEOUT": str(BUDGET)}) if from_env else (("--hub-timeout", BUDGET), {})
    with HubServer({REPO: {"main": Revision(files)}}, faults=DRIPS[case]) as hub:
        run = box.run("patch", target, "--checkpoint", REPO, *args, endpoint=hub.url, env=env)
    line = assert_one_error(run, f"no answer within {BUDGET:g} s", "--hub-timeout", "IRSURGEON_HUB_TIMEOUT")
    assert snapshot(target) == before
    assert run.seconds < BUDGET + 10, run.seconds  # start-up (~0.5 s) and the requests before the drip included
    print(f"{case}: failed after {run.seconds:.1f} s: {line}")


# --- huggingface_hub's own files -------------------------------------------------------------------------------------

def test_a_fetch_writes_nothing_under_home_but_the_cache(model, tmp_path):
    """HOME with nothing set (no HF_HOME, telemetry not disabled, no token): huggingface_hub's agent-registry
    telemetry would fetch /api/agent-harnesses and cache the answer in ~/.cache/huggingface; the implicit token lookup
    reads ~/.cache/huggingface/token. After a fetch of config.json, the index, the mtp shard and a range of the
    embedding shard (what `patch` fetches; run through the library, as `import openvino` writes ~/intel on its own),
    HOME holds the given cache and nothing else, and the hub saw no telemetry request."""
    _, files = model
    box = Box(tmp_path)
    cache = box.home / "cache"
    code = ("import sys\n"
            "from irsurgeon.weights.hub import HubBytes, HubOptions, fetch_weights, resolve_source, snapshot_commit\n"
            "hub = HubOptions(cache_dir=sys.argv[1])\n"
            "root = resolve_source(sys.argv[2], hub=hub)\n"
            "fetch_weights(sys.argv[2], root, hub, 'mtp.')\n"
            "print(len(HubBytes(sys.argv[2], sys.argv[3], snapshot_commit(root), hub).read([(0, 64)])[0]))\n")
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        run = box.run_python(code, cache, REPO, EMBED_SHARD, endpoint=hub.url,
                             env={"HF_HOME": None, "HF_HUB_DISABLE_TELEMETRY": None})
    assert run.returncode == 0 and run.stdout.split()[-1] == "64", run.stderr + run.stdout
    written = sorted(p.relative_to(box.home).as_posix() for p in box.home.rglob("*"))
    assert written and all(p == "cache" or p.startswith("cache/") for p in written), written
    assert any(p.endswith(MTP_SHARD) for p in written)
    assert not [e for e in hub.log if e[1].startswith("/api/")], hub.log


# --- a hostile header by range -----------------------------------------------------------------------------------------

HEADERS = {  # hostile_forms form applied to the mtp shard -> what the error line names besides the shard
    "header-aliased-tensors": "share bytes",  # the default tier's (test_bounds_checkpoint reads a million locally)
    "header-million-tensors": "lists more than",
    "header-duplicate-name": "twice",
}


@pytest.mark.parametrize("form", every_nth(list(HEADERS), 3, ids=str))  # the others: CI's extended tier
def test_a_hostile_header_by_range_is_refused_as_the_local_reader_refuses_it(model, tmp_path, form):
    """The mtp shard's header lists a million tensors (accepted after 20-35 s at 1.3 GB, by range), or two tensors
    sharing bytes, or one name twice: the ranged fetch reads it with the local reader's parse_header, so each is
    the same one line as for a local file, before any tensor's bytes are asked for, the target untouched."""
    from lab.hostile_forms import SAFETENSORS_FORMS
    from irsurgeon.core import limits

    target_src, files = model
    files = dict(files)
    shard = tmp_path / "repo" / MTP_SHARD
    shard.parent.mkdir()
    shard.write_bytes(files[MTP_SHARD].read_bytes())
    SAFETENSORS_FORMS[form](shard)
    files[MTP_SHARD] = shard
    target = copy_target(target_src, tmp_path / "t")
    box, before = Box(tmp_path), snapshot(target)
    with HubServer({REPO: {"main": Revision(files)}}) as hub:
        run = box.run("patch", target, "--checkpoint", REPO, "--cache-dir", box.cache, endpoint=hub.url)
        asked = [e for e in hub.log if e[1].startswith("/cdn/") and MTP_SHARD in e[1] and e[2]]
    line = assert_one_error(run, MTP_SHARD, HEADERS[form])
    if form == "header-million-tensors":
        assert str(limits.SAFETENSORS_TENSORS) in line
    assert snapshot(target) == before
    header_end = 8 + struct.unpack("<Q", shard.read_bytes()[:8])[0]
    assert all(int(e[2].split("=")[1].split("-")[0]) < header_end for e in asked), asked  # no tensor's bytes
    assert run.peak_rss_mb < 1024, run.peak_rss_mb
    print(f"{form} by range: {line}; peak RSS {run.peak_rss_mb:.0f} MB, {run.seconds:.1f} s")
