"""What a checkpoint holds, known without reading a weight (no numpy here: the CLI's start-up reaches it through the
registry, and the headers are read only when a family asks)."""
from __future__ import annotations

from pathlib import Path

from irsurgeon.core.errors import CheckpointError


class Held:
    """What a checkpoint holds, known without reading a weight: its tensor names (the headers of its files where they
    are here, else its index's map: a hub snapshot before its weights are fetched) and a tensor's stored shape where a
    header was read. Read on first use, so a checkpoint whose labels decide is never opened for it. The families'
    claims by content read it (draft.protocol.Family.claims): publishers copy configs, labels included, from base
    models. `known` is False when neither headers nor an index are here (the config's labels decide alone)."""

    def __init__(self, root: str | Path | None = None, names=None, shapes=None):
        self.root = None if root is None else Path(root)
        self._read = None if root is not None else (frozenset(names or ()), dict(shapes or {}), names is not None)
        self.files: tuple[str, ...] = ()  # the weight files the names were read from (their headers or an index)

    def _load(self) -> tuple[frozenset[str], dict[str, tuple[int, ...]], bool]:
        if self._read is None:
            self._read = self._scan(self.root)
        return self._read

    def _scan(self, root: Path) -> tuple[frozenset[str], dict[str, tuple[int, ...]], bool]:
        from irsurgeon.weights.checkpoint import INDEX_FILE, Checkpoint, weight_map

        try:
            ckpt = Checkpoint.open(root)
        except CheckpointError:
            index = root / INDEX_FILE
            if not (root.is_dir() and index.is_file()):
                return frozenset(), {}, False
            self.files = (index.name,)
            return frozenset(weight_map(index)), {}, True
        try:
            shapes = {n: ckpt.info(n).shape for n, shard in ckpt.shard_of.items() if shard.exists()}
        finally:
            ckpt.close()
        self.files = tuple(sorted({p.name for p in ckpt.shard_of.values()}))
        return frozenset(ckpt.shard_of), shapes, True

    @property
    def known(self) -> bool:
        return self._load()[2]

    @property
    def names(self) -> frozenset[str]:
        return self._load()[0]

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self._load()[1].get(name)


NOTHING_HELD = Held(names=None)  # a config read alone: its labels decide
