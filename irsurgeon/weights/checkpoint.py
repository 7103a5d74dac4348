"""Locate a Hugging Face checkpoint's tensors and open only the shards that hold the ones asked for.

A checkpoint is a directory with `config.json` and either `model.safetensors` or a sharded
`model.safetensors.index.json` (`{"weight_map": {tensor: shard file}}`), or a single `.safetensors` file with a
separately given config. Shard names from an index are untrusted: they must be plain file names inside the
checkpoint directory, and a shard that is a link must stay inside it (or inside the Hugging Face cache's blobs).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from irsurgeon import limits
from irsurgeon.errors import CheckpointError
from irsurgeon.weights.safetensors_io import SafetensorsFile, TensorInfo

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"


def _shard_path(root: Path, shard: object, index: Path) -> Path:
    if not isinstance(shard, str) or not shard or "/" in shard or "\\" in shard or shard in (".", ".."):
        raise CheckpointError(f"{index}: shard name {shard!r} is not a plain file name in the checkpoint directory")
    path = root / shard
    if path.is_symlink() and not any(r in path.resolve().parents for r in _link_roots(root)):
        raise CheckpointError(f"{index}: shard {shard!r} is a link pointing outside the checkpoint directory")
    if path.suffix != ".safetensors":
        raise CheckpointError(f"{index}: shard {shard!r} is not a .safetensors file (only safetensors are read)")
    return path


def _link_roots(root: Path) -> list[Path]:
    """Where a shard link may point: the checkpoint directory, and for a Hugging Face cache snapshot
    (`models--<org>--<name>/snapshots/<rev>`, whose files all link to `../../blobs/<hash>`) that repo's blobs."""
    roots = [root.resolve()]
    if root.parent.name == "snapshots" and root.parent.parent.name.startswith("models--"):
        roots.append((root.parent.parent / "blobs").resolve())
    return roots


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
            if path.suffix != ".safetensors":
                raise CheckpointError(f"{path}: expected a .safetensors file or a checkpoint directory")
            cfg = Path(config) if config else path.parent / CONFIG_FILE
            ckpt = cls({}, cfg, path.parent)
            ckpt._index_single(path)
            return ckpt
        if not path.is_dir():
            raise CheckpointError(f"{path}: no such checkpoint file or directory")
        cfg = Path(config) if config else path / CONFIG_FILE
        index = path / INDEX_FILE
        if index.exists():  # exists, not is_file: a FIFO or device there is refused by name when read
            return cls(cls._read_index(index, path), cfg, path)
        single = path / SINGLE_FILE
        if single.exists():
            ckpt = cls({}, cfg, path)
            ckpt._index_single(single)
            return ckpt
        raise CheckpointError(f"{path}: neither {SINGLE_FILE} nor {INDEX_FILE} found (only safetensors are read)")

    @staticmethod
    def _read_index(index: Path, root: Path) -> dict[str, Path]:
        data = limits.read_json(index, CheckpointError, limits.INDEX_JSON_BYTES)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: 'weight_map' is missing or empty")
        return {str(name): _shard_path(root, shard, index) for name, shard in weight_map.items()}

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

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
