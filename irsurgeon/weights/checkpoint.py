"""Locate a Hugging Face checkpoint's tensors and open only the shards that hold the ones asked for.

A checkpoint is a directory with `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json` (`{"weight_map": {tensor: shard file}}`), or a single `.safetensors` file with a
separately given config. Shard names from an index are untrusted: they must be plain file names inside the
checkpoint directory, and a shard that is a link must resolve inside it, or into the Hugging Face cache the
checkpoint is a snapshot of (its repo's blobs folder, or the cache's shared blob store), never anywhere else.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError, ConfigError, with_hint
from irsurgeon.weights.safetensors_io import SafetensorsFile, StoredRows, TensorInfo

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"


def weight_map(index: Path) -> dict[str, str]:
    """An index's {tensor: shard file name}, bounded, each shard a plain `.safetensors` name (index files are
    untrusted: they decide which files are opened here, or fetched from a hub)."""
    data = limits.read_json(index, CheckpointError, limits.INDEX_JSON_BYTES)
    found = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(found, dict) or not found:
        raise CheckpointError(f"{index}: 'weight_map' is missing or empty")
    checked: dict = {}  # each distinct shard name checked once: an index lists a handful of shards for 1 M names
    for shard in found.values():
        if not isinstance(shard, str) or shard not in checked:  # anything but a string is refused right here
            checked[shard] = _plain_shard_name(shard, index)
    return {str(name): checked[shard] for name, shard in found.items()}


def _plain_shard_name(shard: object, index: Path) -> str:
    if isinstance(shard, str) and any(ord(c) < 32 or ord(c) == 127 for c in shard):
        raise CheckpointError(f"{index}: shard name {shard!r:.200} holds a control character (a NUL, a newline): "
                              f"not a file name")
    if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard or shard in (".", ".."):
        raise CheckpointError(f"{index}: shard name {shard!r} is not a plain file name in the checkpoint directory")
    if not shard.endswith(".safetensors"):
        raise CheckpointError(f"{index}: shard {shard!r} is not a .safetensors file (only safetensors are read)")
    return shard


def weightless(path: Path) -> str | None:
    """Why a local checkpoint path can hold no weights, or None: a file that is not .safetensors (such as its
    config.json), or a folder with neither model.safetensors nor an index (such as an export directory)."""
    if path.is_file() and path.suffix != ".safetensors":
        return "not a .safetensors file: expected a .safetensors file or a checkpoint directory"
    if path.is_dir() and not any((path / name).exists() for name in (INDEX_FILE, SINGLE_FILE)):
        return f"neither {SINGLE_FILE} nor {INDEX_FILE} found (only safetensors are read)"
    return None


def home_of(path: str | Path) -> Path:
    """The folder a checkpoint's files sit in: the checkpoint directory, or a single .safetensors file's own."""
    path = Path(path)
    return path if path.is_dir() else path.parent


def config_of(path: str | Path, config: str | Path | None = None) -> Path:
    """The config.json of a checkpoint directory or of a single .safetensors file (beside it), under the same link
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


def _shard_path(root: Path, shard: object, index: Path) -> Path:
    return _inside(root, _plain_shard_name(shard, index), index, f"shard {shard!r}")


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
        self._files: dict[Path, SafetensorsFile] = {}

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
        index = path / INDEX_FILE
        if index.exists():  # exists, not is_file: a FIFO or device there is refused by name when read
            return cls(cls._read_index(_inside(path, INDEX_FILE, path, INDEX_FILE), path), cfg, path)
        single = path / SINGLE_FILE
        if single.exists():
            ckpt = cls({}, cfg, path)
            ckpt._index_single(_shard_path(path, SINGLE_FILE, path))  # the same link rule as an index's shards
            return ckpt
        raise CheckpointError(f"{path}: {weightless(path)}")

    @staticmethod
    def _read_index(index: Path, root: Path) -> dict[str, Path]:
        """tensor -> shard path, each distinct shard resolved once (linear in the index, whatever its size)."""
        names = weight_map(index)
        paths = {shard: _shard_path(root, shard, index) for shard in set(names.values())}
        return {name: paths[shard] for name, shard in names.items()}

    def _index_single(self, path: Path) -> None:
        f = self._file(path)
        self.shard_of = {name: path for name in f.tensors}

    def _file(self, path: Path) -> SafetensorsFile:
        if path not in self._files:
            if not path.exists():
                raise CheckpointError(f"{path}: shard listed in the index does not exist")
            self._files[path] = SafetensorsFile(path)
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
        """Every shard opened so far as it was when opened (SafetensorsFile.check_unchanged); `name`: what was read."""
        for f in self._files.values():
            f.check_unchanged(name)

    def advise(self, names: list[str]) -> None:
        """Ask the kernel to read these tensors' bytes ahead, shard by shard (SafetensorsFile.advise)."""
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
