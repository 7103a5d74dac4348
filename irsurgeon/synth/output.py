"""Where every synth kind writes: OUT_DIR/target and OUT_DIR/ckpt, whole or not at all.

    check_output(out, force)   before any work: each of the two is absent, an empty folder, or (force) a folder to
                               replace; a link or a file there is refused, as is an earlier output without force
    output_pair(out, wait, force)   under OUT_DIR's directory lock, the two folders to write into: fresh folders in
                               OUT_DIR/.synth-* (one a killed run left is removed first), moved to OUT_DIR/target and OUT_DIR/ckpt once the kind has written
                               them, each replacing what was there (an earlier output, with force); a failed or
                               interrupted run leaves OUT_DIR/target and OUT_DIR/ckpt as they were

Each file is the same bytes wherever it was written: an OpenVINO .xml names no path, nor does a safetensors file.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from irsurgeon.errors import OutputError, with_hint
from irsurgeon.transaction import directory_lock

OWN = ("target", "ckpt")  # what synth writes into OUT_DIR, every kind
STAGING_PREFIX = ".synth-"  # the folder a run writes into first (one a killed run left is removed by the next)


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
        check_output(out, force)  # again, holding the lock: another run may have written meanwhile
        for stale in out.glob(STAGING_PREFIX + "*"):  # the lock is ours: no other run is writing there
            shutil.rmtree(stale)
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
        try:
            fresh = tuple(staging / name for name in OWN)
            for d in fresh:
                d.mkdir()
            yield fresh
            for name in OWN:
                replace_dir(staging / name, out / name, staging / f"old-{name}")
        finally:
            shutil.rmtree(staging)  # the new folders once moved out, or everything of a failed run


def replace_dir(new: Path, dest: Path, old: Path) -> None:
    """Move `new` to `dest`, what was at `dest` first moved aside to `old` (removed with the staging folder)."""
    if dest.exists():
        os.rename(dest, old)
    os.rename(new, dest)
