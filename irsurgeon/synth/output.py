"""Where every synth kind writes: OUT_DIR/target and OUT_DIR/ckpt, whole or not at all.

    recover(out, wait)         a killed run's staging undone (see below), under OUT_DIR's lock
    check_output(out, force)   before any work: each of the two is absent, an empty folder, or (force) a folder to
                               replace; a link or a file there is refused, as is an earlier output without force,
                               and anything named .synth-* that is not a staging folder synth made
    output_pair(out, wait, force)   under OUT_DIR's directory lock, the two folders to write into: fresh folders in
                               OUT_DIR/.synth-XXXXXXXX, moved to OUT_DIR/target and OUT_DIR/ckpt once the kind has
                               written them, each replacing what was there (an earlier output, with force)

The move is four renames (target aside to old-target, the new one in; the same for ckpt), so a run killed between
two of them is undone by the next run, and a failed one at once: a `moving` mark is made in the staging folder
first, and while that folder still holds a new folder the move was not complete: each new folder that moved in goes
back, each old-<name> returns to OUT_DIR/<name>; once it holds neither new folder, the move was complete and the old
ones go. Ctrl-C is held while the renames run. Either way OUT_DIR holds the earlier pair or the new pair, never one
of each. A staging folder is a real folder named .synth- and 8 characters (tempfile.mkdtemp's) holding only these
names: anything else named .synth-* (a link, a file, a folder of the user's) is refused by name, never removed.

Each file is the same bytes wherever it was written: an OpenVINO .xml names no path, nor does a safetensors file.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from irsurgeon.core.errors import OutputError, with_hint
from irsurgeon.core.signals import deferred_sigint
from irsurgeon.commit.transaction import directory_lock

OWN = ("target", "ckpt")  # what synth writes into OUT_DIR, every kind
STAGING_PREFIX = ".synth-"  # the folder a run writes into first (one a killed run left is undone by the next)
STAGING = re.compile(re.escape(STAGING_PREFIX) + r"[a-z0-9_]{8}")  # tempfile.mkdtemp's 8 characters
MOVING = "moving"  # made in the staging folder before the first rename into OUT_DIR
OLD = "old-"
STAGED_NAMES = {MOVING, *OWN, *(OLD + name for name in OWN)}


def check_output(out_dir: str | Path, force: bool) -> None:
    """Refuse what output_pair would refuse, before anything is computed or written (see the module docstring)."""
    out = Path(out_dir)
    for d in (out / name for name in OWN):
        if d.is_symlink():  # a link would send the files elsewhere
            raise OutputError(f"{d}: is a link; synth writes only into folders of its own")
        if d.exists() and not d.is_dir():
            raise OutputError(f"{d}: is not a folder; synth writes only into folders of its own")
        if not force and d.is_dir() and any(d.iterdir()):
            raise with_hint(OutputError(f"{d}: exists and is not empty"), "--force",
                            f"--force replaces {out / OWN[0]}/ and {out / OWN[1]}/")
    stagings(out)


def stagings(out: Path) -> list[Path]:
    """The staging folders synth left in OUT_DIR; an entry named .synth-* that is not one is an OutputError."""
    found = []
    for entry in sorted(out.glob(STAGING_PREFIX + "*")) if out.is_dir() else ():
        try:
            names = set(os.listdir(entry)) if entry.is_dir() and not entry.is_symlink() else None
        except FileNotFoundError:  # another run's, removed meanwhile (this check may run before the lock)
            continue
        if not STAGING.fullmatch(entry.name) or names is None or not names <= STAGED_NAMES:
            raise OutputError(f"{entry}: not a staging folder synth made (a link, a file, or other contents); "
                              f"synth removes only its own: move it away first")
        found.append(entry)
    return found


def recover(out_dir: str | Path, wait: bool) -> None:
    """A killed run's staging folders undone (its move rolled back), under OUT_DIR's lock: before check_output
    judges what OUT_DIR holds. An absent OUT_DIR is left absent."""
    out = Path(out_dir)
    if out.is_dir() and not out.is_symlink() and stagings(out):
        with directory_lock(out, wait):
            for stale in stagings(out):
                undo(stale, out)


def make_dir(d: Path) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{d}: cannot create directory: {e.strerror}") from None


@contextmanager
def output_pair(out_dir: str | Path, wait: bool, force: bool) -> Iterator[tuple[Path, Path]]:
    """(target, ckpt) folders to write into, moved into place when the block ends without an error."""
    out = Path(out_dir)
    make_dir(out)
    with directory_lock(out, wait):
        for stale in stagings(out):  # the lock is ours: no other run is writing there
            undo(stale, out)
        check_output(out, force)  # again, holding the lock: another run may have written meanwhile
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
        try:
            fresh = tuple(staging / name for name in OWN)
            for d in fresh:
                d.mkdir()
            yield fresh
            with deferred_sigint():
                move_in(staging, out)
        finally:
            undo(staging, out)


def move_in(staging: Path, out: Path) -> None:
    """Each new folder to OUT_DIR/<name>, what was there first moved aside to staging/old-<name>; a failure leaves
    the move for undo() to roll back."""
    (staging / MOVING).touch()
    _sync(staging)
    for name in OWN:
        try:
            if (out / name).exists():
                os.rename(out / name, staging / (OLD + name))
            os.rename(staging / name, out / name)
        except OSError as e:
            raise OutputError(f"{out / name}: cannot move the new folder in: {e.strerror or e}; the earlier output "
                              f"is kept") from None
    _sync(out)


def undo(staging: Path, out: Path) -> None:
    """Finish with a staging folder: an incomplete move (a new folder still in it, after the mark) is rolled back,
    OUT_DIR getting its earlier folders back; then the staging folder, and what it holds, is removed."""
    if (staging / MOVING).exists() and any((staging / name).is_dir() for name in OWN):
        for name in OWN:
            if not (staging / name).exists() and (out / name).is_dir():
                os.rename(out / name, staging / name)  # the new folder that had moved in
            if (staging / (OLD + name)).exists():
                os.rename(staging / (OLD + name), out / name)
        _sync(out)
        os.unlink(staging / MOVING)  # rolled back: a run killed while the rest goes must not roll back again
        _sync(staging)
    shutil.rmtree(staging)


def _sync(folder: Path) -> None:
    """The folder's entries on disk (a rename is durable once its directory is synced)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
