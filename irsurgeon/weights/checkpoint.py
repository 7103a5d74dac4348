"""Locate a Hugging Face checkpoint's tensors and open only the shards that hold the ones asked for.

A checkpoint is a directory with `config.json` and its weights: a sharded `model.safetensors.index.json`
(`{"weight_map": {tensor: shard file}}`) or `model.safetensors`, else `pytorch_model.bin.index.json` or
`pytorch_model.bin` (torch.save zip files, read by the restricted reader of torch_bin.py); or a single `.safetensors`
or `.bin` file with a separately given config. Safetensors come first, as transformers takes them (transformers
5.25.0 modeling_utils.py _get_resolved_checkpoint_files: model.safetensors, its index, then pytorch_model.bin, its
index). Shard names from an index are untrusted: they must be plain file names inside the checkpoint directory, of
the index's kind (`.safetensors` or `.bin`), and a shard that is a link must resolve inside it, or into the Hugging
Face cache the checkpoint is a snapshot of (its repo's blobs folder, or the cache's shared blob store), never
anywhere else. Nothing above this module knows which kind of file a tensor came from (TensorFile).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError, ConfigError, with_hint
from irsurgeon.weights.safetensors_io import SafetensorsFile, StoredRows, TensorFile, TensorInfo
from irsurgeon.weights import torch_bin
from irsurgeon.weights.torch_bin import TorchBinFile

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
BIN_FILE = "pytorch_model.bin"
BIN_INDEX_FILE = "pytorch_model.bin.index.json"
WEIGHT_FILES = (INDEX_FILE, SINGLE_FILE, BIN_INDEX_FILE, BIN_FILE)  # a directory's, looked for in this order
WEIGHT_SUFFIXES = (".safetensors", ".bin")
CONFIG_FILE = "config.json"


def weight_map(index: Path) -> dict[str, str]:
    """An index's {tensor: shard file name}, bounded, each shard a plain name of the index's kind (`.safetensors`,
    or `.bin` for pytorch_model.bin.index.json; index files are untrusted: they decide which files are opened here,
    or fetched from a hub)."""
    data = limits.read_json(index, CheckpointError, limits.INDEX_JSON_BYTES)
    found = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not found:
        raise CheckpointError(f"{index}: 'weight_map' is missing or empty")
    checked: dict = {}  # each distinct shard name checked once: an index lists a handful of shards for 1 M names
    for shard in found.values():
        if not isinstance(shard, str) or shard not in checked:  # anything but a string is refused right here
            checked[shard] = _plain_shard_name(shard, index)
    return {str(name): checked[shard] for name, shard in found.items()}


def _plain_shard_name(shard: object, index: Path, kind: str | None = None) -> str:
    if isinstance(shard, str) and any(ord(c) < 32 or ord(c) == 127 for c in shard):
        raise CheckpointError(f"{index}: shard name {shard!r:.200} holds a control character (a NUL, a newline): "
                              f"not a file name")
    if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard or shard in (".", ".."):
        raise CheckpointError(f"{index}: shard name {shard!r} is not a plain file name in the checkpoint directory")
    kind = kind or shard_suffix(index)
    if not shard.endswith(kind):
        raise CheckpointError(f"{index}: shard {shard!r} is not a {kind} file (an index of {kind} files names only "
                              f"those)")
    return shard


def shard_suffix(index: Path) -> str:
    """The kind of file an index lists: its name less `.index.json` (pytorch_model.bin.index.json: `.bin`)."""
    return ".bin" if Path(index.name.removesuffix(limits.INDEX_SUFFIX)).suffix == ".bin" else ".safetensors"


def weightless(path: Path) -> str | None:
    """Why a local checkpoint path can hold no weights, or None: a file that is neither .safetensors nor .bin (such
    as its config.json), or a folder with none of WEIGHT_FILES (such as an export directory)."""
    if path.is_file() and path.suffix not in WEIGHT_SUFFIXES:
        return ("not a .safetensors or .bin file: expected a .safetensors file, a torch.save .bin file or a "
                "checkpoint directory")
    if path.is_dir() and not any((path / name).exists() for name in WEIGHT_FILES):
        return f"neither {SINGLE_FILE}, {INDEX_FILE}, {BIN_FILE} nor {BIN_INDEX_FILE} found"
    return None


def home_of(path: str | Path) -> Path:
    """The folder a checkpoint's files sit in: the checkpoint directory, or a single weights file's own."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def config_of(path: str | Path, config: str | Path | None = None) -> Path:
    """The config.json of a checkpoint directory or of a single weights file (beside it), under the same link
    rule as its shards; `config` (the user's --config) as given. A missing one is a CheckpointError naming it."""
    path = Path(path)
    if config is not None:
        return Path(config)
    home = home_of(path)
    where = _inside(home, CONFIG_FILE, home, CONFIG_FILE)
    if not where.exists():  # a FIFO or device is refused by name when read
        raise with_hint(CheckpointError(f"{path}: no config.json {'in it' if path.is_dir() else 'beside it'}"),
                        "--config", "pass --config with the checkpoint's config.json")
    return where


def _shard_path(root: Path, shard: object, index: Path, kind: str | None = None) -> Path:
    return _inside(root, _plain_shard_name(shard, index, kind), index, f"shard {shard!r}")


def _inside(root: Path, name: str, where: Path, what: str) -> Path:
    """root/name, refused when it resolves outside the checkpoint directory and its real Hugging Face cache."""
    path = root / name
    try:
        real, roots = path.resolve(), _link_roots(root)  # the resolved path counts, not the spelling
    except (RuntimeError, OSError):  # Python 3.11's resolve() reports a link loop as RuntimeError, 3.13 as ELOOP
        raise CheckpointError(f"{where}: {what} is a link that resolves to nothing (a loop of links)") from None
    if not (roots[0] in real.parents or real.parent in roots[1:2] or real.parent.parent in roots[2:]):
        raise CheckpointError(f"{where}: {what} is a link pointing outside the checkpoint directory (to {real})")
    return path


def _link_roots(root: Path) -> list[Path]:
    """Where a shard may resolve to: [checkpoint directory (any depth), then for a Hugging Face cache snapshot
    that repo's blobs folder (direct children), then the cache-wide shared blob store (<xx>/<hash> entries)].

    A folder counts only as the real one of its resolved path, never a link. huggingface_hub 2.4.0:
    file_download.py (_create_symlink, hf_hub_download) lays a repo out as `models--<org>--<name>/blobs/<etag>` with
    each `snapshots/<revision>/<file>` a relative link to `../../blobs/<etag>`; utils/_shared_blobs.py may turn a
    `blobs/<etag>` into a link to `<cache>/blobs/<hash[:2]>/<hash>`, a store it marks with the regular file
    `.huggingface-shared-blobs` holding "1\n".
    """
    home = root.resolve()
    repo = home.parent.parent
    if home.parent.name != "snapshots" or not repo.name.startswith("models--") or not _real_dir(repo / "blobs"):
        return [home]
    store, marker = repo.parent / "blobs", repo.parent / "blobs" / ".huggingface-shared-blobs"
    shared = _real_dir(store) and marker.is_file() and not marker.is_symlink() and marker.read_bytes() == b"1\n"
    return [home, repo / "blobs", *([store] if shared else [])]


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


class Checkpoint:
    """Tensor name -> shard map of a checkpoint; shards are opened on first use and remembered in `opened`."""

    def __init__(self, shard_of: dict[str, Path], config_path: Path | None, root: Path):
        self.shard_of = shard_of
        self.config_path = config_path
        self.root = root
        self._files: dict[Path, TensorFile] = {}

    @classmethod
    def open(cls, path: str | Path, config: str | Path | None = None) -> "Checkpoint":
        path = Path(path)
        if path.is_file():
            problem = weightless(path)
            if problem:
                raise CheckpointError(f"{path}: {problem}")
            cfg = Path(config) if config else _inside(path.parent, CONFIG_FILE, path.parent, CONFIG_FILE)
            ckpt = cls({}, cfg, path.parent)
            ckpt._index_single(path)
            return ckpt
        if not path.is_dir():
            raise CheckpointError(f"{path}: no such checkpoint file or directory")
        cfg = Path(config) if config else _inside(path, CONFIG_FILE, path, CONFIG_FILE)  # --config: the user's
        # exists, not is_file: a FIFO or device there is refused by name when read
        name = next((n for n in WEIGHT_FILES if (path / n).exists()), None)
        if name is None:
            raise CheckpointError(f"{path}: {weightless(path)}")
        if name.endswith(limits.INDEX_SUFFIX):
            return cls(cls._read_index(_inside(path, name, path, name), path), cfg, path)
        ckpt = cls({}, cfg, path)
        ckpt._index_single(_shard_path(path, name, path, Path(name).suffix))  # the link rule of an index's shards
        return ckpt

    @staticmethod
    def _read_index(index: Path, root: Path) -> dict[str, Path]:
        """tensor -> shard path, each distinct shard resolved once (linear in the index, whatever its size)."""
        names = weight_map(index)
        paths = {shard: _shard_path(root, shard, index) for shard in set(names.values())}
        return {name: paths[shard] for name, shard in names.items()}

    def _index_single(self, path: Path) -> None:
        f = self._file(path)
        self.shard_of = {name: path for name in f.tensors}

    def _file(self, path: Path) -> TensorFile:
        if path not in self._files:
            if not path.exists():
                raise CheckpointError(f"{path}: shard listed in the index does not exist")
            self._files[path] = (TorchBinFile if path.suffix == torch_bin.SUFFIX else SafetensorsFile)(path)
        return self._files[path]

    @property
    def opened(self) -> list[Path]:
        return list(self._files)

    def names(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self.shard_of if n.startswith(prefix))

    def info(self, name: str) -> TensorInfo:
        f = self._file(self.shard_of[name])
        if name not in f.tensors:
            raise CheckpointError(f"{f.path}: the index places tensor {name!r} here, but the file does not hold it")
        return f.tensors[name]

    def get(self, name: str) -> np.ndarray:
        self.info(name)
        return self._file(self.shard_of[name]).get(name)

    def check_unchanged(self, name: str) -> None:
        """Every shard opened so far as it was when opened (TensorFile.check_unchanged); `name`: what was read."""
        for f in self._files.values():
            f.check_unchanged(name)

    def advise(self, names: list[str]) -> None:
        """Ask the kernel to read these tensors' bytes ahead, shard by shard (TensorFile.advise)."""
        by_shard: dict[Path, list[str]] = {}
        for name in names:
            by_shard.setdefault(self.shard_of[name], []).append(name)
        for path, group in by_shard.items():
            f = self._file(path)
            f.advise(n for n in group if n in f.tensors)

    def raw(self, name: str) -> tuple[StoredRows, str]:
        """The tensor's stored values, read row block by row block (to decode in slices), and its dtype."""
        info = self.info(name)
        return self._file(self.shard_of[name]).rows(name), info.dtype

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def config_bytes(root: str | Path) -> bytes:
    """The checkpoint's config.json as it is (bounded and parsed like every JSON input): what a draft folder keeps
    beside its IR for verify's pair check."""
    where = config_of(root)  # a folder's, or a single file's beside it
    text = limits.read_text(where, limits.CONFIG_JSON_BYTES, ConfigError, "checkpoint config")
    limits.parse_json(text, str(where), ConfigError)
    return text.encode("utf-8")
