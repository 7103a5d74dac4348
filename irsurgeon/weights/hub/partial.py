"""The tensors a draft needs from a repo id, fetched by byte range into irsurgeon's own cache (store.py).

    fetch_weights(source, root, hub, prefix, echo) -> a checkpoint directory holding them

root is the snapshot resolve_source made (config.json, the index); prefix the family's hub_prefix, whose tensors the
build reads ("" for all of them). Each shard holding a `prefix*` tensor (the index says which; without an index,
model.safetensors) is taken from the first of:

  kept     the cache's copy, when it is a regular file whose header (the local reader's, bounded) names this shard
           and a prefix the one asked starts with, holds every `prefix*` tensor the index places there, whose
           size is its header and those tensors exactly (a file cut short is fetched again), and whose tensor table
           and bytes hash to the sha256 recorded in it when it was written (META_DIGEST): no request at all;
  local    the Hugging Face cache's whole copy (an earlier download), its content checked against its ETag first;
  ranges   (online) the shard's HEAD first (a header stored from another version of the file is dropped), its
           header by range (HubBytes: 8-byte length + JSON, bounded as the local reader bounds it), then only the
           needed tensors' bytes, in spans coalesced while the bytes between stay under MERGE_WASTE of the needed
           ones, streamed to the file; a draft that needs every byte of the file (a small one, fetched for all its
           tensors) has the whole content checked against the ETag;
  whole    a server that ignores Range (200) gets the whole-file download through huggingface_hub, said in a note on
           stderr, and its content checked against the ETag.

The ETag is the content's hash (names.py): sha256 for an LFS file, git's blob sha1 otherwise; huggingface_hub 2.4.0
checks only a download's size (file_download.py http_get: "Consistency check failed: file should be of size"). The
file written is a safetensors file of the shard's `prefix*` tensors alone (header rewritten, data packed in the
file's order, the source shard and prefix in its __metadata__), so the folder (config.json and the index copied in)
reads as a local checkpoint, with the unchanged reader.

Its __metadata__ also records a sha256 of its tensor table (each tensor's name, dtype, shape and offsets) and bytes,
made from the bytes as written (read back, in the same pass as the ETag check where every byte was fetched), and a
copy is used only when it still hashes to it: a copy changed since it was written (a disk's error, a tool that edited
its header or bytes, even consistently) is fetched again, offline one error line, instead of building another draft.
The digest lives in the cache it guards, as huggingface_hub's ETag-named blobs do (huggingface_hub 2.4.0 trusts a
cached file of a commit without hashing it: file_download.py "if user provides a commit_hash and they already have
the file on disk, shortcut everything"; try_to_load_from_cache checks os.path.isfile): it tells a changed copy from
the one written, not a copy forged by someone who rewrites the digest too.

A repo without safetensors (stored_as_bin: transformers' order takes pytorch_model.bin and its index only then) has
its `.bin` files holding `prefix*` tensors fetched whole into the Hugging Face cache instead (fetch_bin), each checked
against its ETag once downloaded, and the snapshot is the checkpoint directory: a `.bin` places its tensors through
its zip directory and pickle, which the local reader (torch_bin.py) reads, not by byte range.
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import threading
from pathlib import Path

from irsurgeon.core import limits
from irsurgeon.core.config import present
from irsurgeon.core.errors import CheckpointError
from irsurgeon.core.text import shown
from irsurgeon.weights.checkpoint import BIN_FILE, BIN_INDEX_FILE, CONFIG_FILE, INDEX_FILE, SINGLE_FILE, weight_map
from irsurgeon.weights.hub import store
from irsurgeon.weights.hub import fetch as hub_fetch
from irsurgeon.weights.hub.fetch import (Echo, HubOptions, cache_root, cached_file, fetcher, has_file, is_repo_id,
                                         probe, size_limit, snapshot_commit)
from irsurgeon.weights.hub.names import check_content
from irsurgeon.weights.hub.ranges import HubBytes, RangesRefused
from irsurgeon.weights.rows import LocalBytes, merge_ranges
from irsurgeon.weights.safetensors_io import SafetensorsFile, TensorInfo, encode_header, parse_header

MERGE_GAP = 1 << 20  # neighbours closer than this are one request, while the gaps stay within MERGE_WASTE
MERGE_WASTE = 0.05   # of the needed bytes: at most this much more is downloaded for fewer requests
COPY_CHUNK = 16 << 20
META_SOURCE, META_PREFIX, META_SIZE = "irsurgeon.source", "irsurgeon.prefix", "irsurgeon.size"
META_DIGEST = "irsurgeon.sha256"  # of the tensor table and bytes (table_digest, then the bytes), hex
UNHASHED = "0" * 64  # the digest's place while the bytes are written: the header keeps its length


def fetch_weights(source: str | Path, root: Path, hub: HubOptions | None, prefix: str, echo: Echo = print) -> Path:
    """After resolve_source: the `prefix*` tensors of root's commit (a branch that moves meanwhile cannot mix two
    commits' files) in irsurgeon's cache folder, returned as the checkpoint directory; a local path as it is."""
    commit = snapshot_commit(root)
    if not (commit and is_repo_id(source)):
        return root
    repo_id, pinned = str(source), dataclasses.replace(hub or HubOptions(), revision=commit)
    index = root / INDEX_FILE
    placed = weight_map(index) if index.is_file() else None
    shards = head_shards(placed, prefix, index) if placed is not None else [SINGLE_FILE]
    with store.Folder(cache_root(pinned), repo_id, commit) as folder:
        for name in (CONFIG_FILE, INDEX_FILE):
            copy_small(folder, root, name, echo)
        todo = [s for s in shards if not kept(folder, s, prefix, placed, echo)]
        online = probe(repo_id, pinned, lambda _: None) if todo else False  # quiet: resolve_source's spoke
        if placed is None and todo and stored_as_bin(repo_id, root, pinned, online):
            return fetch_bin(repo_id, root, pinned, prefix, online, echo)
        for shard in todo:
            with folder.writing(shard, echo):  # another run writing it: waited for, then its copy is complete
                if not kept(folder, shard, prefix, placed):
                    fetch_shard(folder, repo_id, shard, pinned, prefix, online, echo)
    return folder.path


def fetch_to_judge(source: str | Path, root: Path, hub: HubOptions | None, echo: Echo = print) -> Path | None:
    """For a repo id whose config.json names no draft family by its labels and whose snapshot holds no index (so no
    tensor name is known yet): its weights, every tensor, fetched as fetch_weights fetches them (a single
    safetensors file by range, a .bin whole), so that what the checkpoint holds decides whose it is
    (weights.held.Held). None for a local path. A file larger than limits.JUDGE_FETCH_BYTES is refused rather than
    fetched: a draft of one layer is far smaller, and a base model given by mistake is not downloaded to be refused."""
    if not (snapshot_commit(root) and is_repo_id(source)):
        return None
    pinned = dataclasses.replace(hub or HubOptions(), revision=snapshot_commit(root))
    repo_id = str(source)
    if probe(repo_id, pinned, lambda _: None):
        size = next((n for n in (hub_fetch.file_size(repo_id, f, pinned) for f in (SINGLE_FILE, BIN_FILE))
                     if n is not None), None)
        if size is not None and size > limits.JUDGE_FETCH_BYTES:
            raise CheckpointError(f"{hub_fetch.at(repo_id, pinned)}: config.json names no draft family, and its "
                                  f"weights ({size / 2**30:.1f} GiB) are too large to fetch to see what they hold "
                                  f"(at most {limits.JUDGE_FETCH_BYTES / 2**30:.0f} GiB)")
    echo(f"{repo_id}: config.json names no draft family: fetching its weights to see what they hold")
    return fetch_weights(source, root, hub, "", echo)


def stored_as_bin(repo_id: str, root: Path, hub: HubOptions, online: bool) -> bool:
    """Whether a repo without model.safetensors.index.json keeps its weights in .bin files: transformers 5.25.0
    (modeling_utils.py _get_resolved_checkpoint_files) takes model.safetensors, its index, then pytorch_model.bin, its
    index. The .bin files an earlier run left in the snapshot say so without a request; else one HEAD of
    model.safetensors (offline, or the hub unreachable: a safetensors repo, whose missing shard is the error)."""
    if any(present(root / name) for name in (BIN_INDEX_FILE, BIN_FILE)):
        return True
    return online and not has_file(repo_id, SINGLE_FILE, hub)


def fetch_bin(repo_id: str, root: Path, hub: HubOptions, prefix: str, online: bool, echo: Echo) -> Path:
    """A .bin repo's files holding `prefix*` tensors (its index says which; without one, pytorch_model.bin), each
    fetched whole into the Hugging Face cache by fetcher (hf_hub_download, bounded and checked like every file) and,
    when just downloaded, its content checked against its ETag as a whole shard's is; the snapshot is then the
    checkpoint directory. Whole, not by range: a .bin places its tensors through its zip directory and its pickle,
    which the local reader (torch_bin.py) reads."""
    fetch = fetcher(repo_id, hub, online)
    index = root / BIN_INDEX_FILE if present(root / BIN_INDEX_FILE) else \
        fetch(BIN_INDEX_FILE, optional=True) if online else None
    for shard in head_shards(weight_map(index), prefix, index) if index is not None else [BIN_FILE]:
        if cached_file(repo_id, shard, hub) is None:
            echo(f"{repo_id}: fetching {shard} whole (a .bin file is read from the local copy)")
            found = fetch(shard, optional=index is None)  # an index's shard must be there: its absence is the error
            if found is None:
                raise CheckpointError(f"{hub_fetch.at(repo_id, hub)}: neither {SINGLE_FILE}, {INDEX_FILE}, "
                                      f"{BIN_FILE} nor {BIN_INDEX_FILE} is in the repo")
            local = LocalFile(found)
            try:
                local.check()
            finally:
                local.close()
    return root


def head_shards(placed: dict[str, str], prefix: str, index: Path) -> list[str]:
    shards = sorted({s for n, s in placed.items() if n.startswith(prefix)})
    if not shards:
        raise CheckpointError(f"{index}: no '{prefix}*' tensors listed: this checkpoint carries none of the draft's "
                              f"tensors")
    return shards


def copy_small(folder: store.Folder, root: Path, name: str, echo: Echo) -> None:
    """The snapshot's config.json or index, copied into the folder unless the same bytes are there (looked at again
    under the file's lock: another run may have just written them)."""
    if not (root / name).is_file():
        return
    limit, _ = size_limit(name)
    data = limits.read_bytes(root / name, limit, CheckpointError, name)
    if folder.read(name, limit) != data:
        with folder.writing(name, echo):
            if folder.read(name, limit) != data:
                folder.write(name, lambda fd: store.write_all(fd, data, 0))


def kept(folder: store.Folder, shard: str, prefix: str, placed: dict[str, str] | None,
         echo: Echo | None = None) -> bool:
    """Whether the folder's copy of `shard` is complete for `prefix` and as written (see the module docstring); a copy
    complete but not as written is said through echo, when given."""
    if folder.regular(shard) is None:
        return False
    try:
        f = SafetensorsFile(folder.path / shard)
    except CheckpointError:
        return False
    try:
        meta = f.metadata if isinstance(f.metadata, dict) else {}
        stored = meta.get(META_PREFIX)
        spans = sum(i.end - i.begin for i in f.tensors.values())
        ends = max((i.end for i in f.tensors.values()), default=0)
        needed = {n for n, s in (placed or {}).items() if s == shard and n.startswith(prefix)}
        if not (meta.get(META_SOURCE) == shard and isinstance(stored, str) and prefix.startswith(stored)
                and f.size - f.data_start == spans == ends and needed <= set(f.tensors)):
            return False
        recorded, digest = meta.get(META_DIGEST), table_digest(f.tensors.values())
        for chunk in f.data_chunks(COPY_CHUNK):
            digest.update(chunk)
        if isinstance(recorded, str) and recorded == digest.hexdigest():
            return True
        if echo is not None:
            why = ("its tensors do not hash to the sha256 recorded when irsurgeon wrote it: changed since"
                   if isinstance(recorded, str) else "it records no sha256 (an earlier irsurgeon's copy)")
            echo(shown(f"{f.path}: {why}; not using it"))
        return False
    except CheckpointError:  # cut short since its header was read: fetched again
        return False
    finally:
        f.close()


def table_digest(tensors):
    """A sha256 (hashlib object) started with the tensor table (each TensorInfo's name, dtype, shape and data offsets,
    by name); the bytes after the header are added to it."""
    table = sorted([i.name, i.dtype, list(i.shape), i.begin, i.end] for i in tensors)
    return hashlib.sha256(json.dumps(table, separators=(",", ":")).encode())


def fetch_shard(folder: store.Folder, repo_id: str, shard: str, hub: HubOptions, prefix: str, online: bool,
                echo: Echo) -> None:
    """The shard's `prefix*` tensors into the folder: from the Hugging Face cache's whole copy, else by range, else
    (the server ignores ranges) whole. Offline without a copy: the one-line error of a file not in the cache."""
    whole = cached_file(repo_id, shard, hub)
    if whole is None and not online:
        whole = fetcher(repo_id, hub, False)(shard)
    if whole is None:
        try:
            return relayout(folder, shard, HubBytes(repo_id, shard, hub.revision, hub), prefix, echo)
        except RangesRefused as e:
            print(shown(f"note: {e}; fetching the whole {shard} instead"), file=sys.stderr)
            whole = fetcher(repo_id, hub, True)(shard)
    echo(f"{repo_id}: taking the {named(prefix)} of {shard} from the Hugging Face cache's copy of the whole file")
    local = LocalFile(whole)
    try:
        local.check()
        relayout(folder, shard, local, prefix, echo)
    finally:
        local.close()


def relayout(folder: store.Folder, shard: str, src, prefix: str, echo: Echo) -> None:
    """Write `shard` into the folder as a safetensors file of its `prefix*` tensors, read from src (HubBytes or
    LocalFile): the header first, then only those tensors' bytes."""
    raw: dict[tuple[int, int], bytes] = {}

    def read(offset: int, n: int) -> bytes:
        raw[offset, n] = src.read([(offset, n)])[0]
        return raw[offset, n]

    if isinstance(src, HubBytes):
        src.located()  # its tensors come by range: a header stored from another version must not place them
    size = src.size()
    tensors, _, start = parse_header(read, size, src.label)
    # parse_header refused tensors sharing bytes (of the whole file, as for a local one): the chosen ones are apart
    chosen = sorted((i for i in tensors.values() if i.name.startswith(prefix)), key=lambda i: i.begin)
    need = sum(i.end - i.begin for i in chosen)
    spans = merge_ranges([(start + i.begin, i.end - i.begin) for i in chosen if i.end > i.begin], MERGE_GAP,
                         int(need * MERGE_WASTE))
    packed = partial_header(chosen, shard, size, prefix, UNHASHED)
    header = encode_header(packed)
    every = isinstance(src, HubBytes) and start + need == size  # every byte of the file: check its hash
    if isinstance(src, HubBytes):
        echo(f"{src.label}: fetching {len(chosen)} {named(prefix)} ({limits.human(need)} of "
             f"{limits.human(size)}) by byte range" + ("; the whole file, checked against its ETag" if every else ""))

    def fill(fd: int) -> None:
        store.write_all(fd, header, 0)
        with progress(src, sum(n for _, n in spans), shard) as bar:
            src.copy(spans, Packer(fd, chosen, start, len(header), folder.path / shard, bar))
        digest = table_digest(TensorInfo(n, e["dtype"], tuple(e["shape"]), *e["data_offsets"])
                              for n, e in packed.items() if n != "__metadata__")

        def data():  # the data as written, a chunk at a time, into the copy's digest
            for at in range(0, need, COPY_CHUNK):
                chunk = os.pread(fd, min(COPY_CHUNK, need - at), len(header) + at)
                digest.update(chunk)
                yield chunk
        written = data()
        if every:  # the original header, then the data: the whole file's ETag and the copy's digest in one pass
            check_content(itertools.chain([raw[0, 8], raw[8, start - 8]], written), size, src.etag, src.label)
        for _ in written:  # what check_content left (all of it without an ETag that is a hash, or not every byte)
            pass
        final = encode_header(partial_header(chosen, shard, size, prefix, digest.hexdigest()))
        store.write_all(fd, final, 0)  # as long as `header`: the digest takes UNHASHED's place
    folder.write(shard, fill)


def named(prefix: str) -> str:
    return f"'{prefix}*' tensors" if prefix else "tensors"  # "'*' tensors" would read as a glob


def partial_header(chosen: list[TensorInfo], shard: str, size: int, prefix: str, digest: str) -> dict:
    """The header of the chosen tensors packed in their order, naming where they came from and their digest."""
    header, at = {}, 0
    for i in chosen:
        header[i.name] = {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": [at, at + i.end - i.begin]}
        at += i.end - i.begin
    header["__metadata__"] = {META_SOURCE: shard, META_PREFIX: prefix, META_SIZE: str(size), META_DIGEST: digest}
    return header


class Packer:
    """A sink of the source file's bytes (offset, chunk) that writes the chosen tensors' parts of them where the
    packed file holds them: tensor k's source bytes [s_k, e_k) go to base + (its packed offset)."""

    def __init__(self, fd: int, chosen: list[TensorInfo], start: int, base: int, where: Path, bar=None):
        self.fd, self.where, self.bar, self.lock = fd, where, bar, threading.Lock()
        self.begin = [start + i.begin for i in chosen]
        self.end = [start + i.end for i in chosen]
        self.at = [base]
        for i in chosen[:-1]:
            self.at.append(self.at[-1] + i.end - i.begin)

    def __call__(self, offset: int, chunk: bytes) -> None:
        k = max(bisect.bisect_right(self.begin, offset) - 1, 0)
        stop = offset + len(chunk)
        while k < len(self.begin) and self.begin[k] < stop:
            lo, hi = max(offset, self.begin[k]), min(stop, self.end[k])
            if lo < hi:
                try:
                    store.write_all(self.fd, chunk[lo - offset:hi - offset], self.at[k] + lo - self.begin[k])
                except OSError as e:  # a full disk is the cache's, not the hub's
                    raise CheckpointError(f"{self.where}: cannot write: {e.strerror or type(e).__name__}") from None
            k += 1
        if self.bar is not None:
            with self.lock:  # pieces arrive from several threads
                self.bar.update(len(chunk))


def progress(src, total: int, shard: str):
    """huggingface_hub's progress bar (its own on/off switches: HF_HUB_DISABLE_PROGRESS_BARS) for a download; none
    for a local copy."""
    if not isinstance(src, HubBytes):
        return contextlib.nullcontext()
    from huggingface_hub.utils import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"{shard} (by range)")


class LocalFile(LocalBytes):
    """A whole file in the Hugging Face cache, read like HubBytes; its ETag is the name huggingface_hub gave its blob
    (the snapshot entry is a link to ../../blobs/<etag>: huggingface_hub 2.4.0 file_download.py _create_symlink)."""

    def __init__(self, path: Path):
        super().__init__(path)
        if hasattr(os, "posix_fadvise"):  # read through once, in order (LocalBytes asked for random access)
            os.posix_fadvise(self._fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        self.etag = os.path.basename(os.readlink(path)) if path.is_symlink() else None

    def copy(self, spans: list[tuple[int, int]], sink) -> None:
        for offset, n in spans:
            for at in range(offset, offset + n, COPY_CHUNK):
                sink(at, self.read([(at, min(COPY_CHUNK, offset + n - at))])[0])

    def check(self) -> None:
        size = self.size()
        chunks = (self.read([(at, min(COPY_CHUNK, size - at))])[0] for at in range(0, size, COPY_CHUNK))
        try:
            check_content(chunks, size, self.etag, self.label)
        except CheckpointError as e:  # huggingface_hub would hand the same copy out again
            raise CheckpointError(f"{e} (remove it from the Hugging Face cache to fetch it again)") from None


