"""The head's bytes asked of the kernel while the target is inspected: posix_fadvise(WILLNEED) on the byte ranges of
the tensors the build will read, from a thread, before patch judges the target.

patch inspects the target first (openvino parses its language model: about 0.3 s at 27B) and opens the checkpoint
only once the target is judged; the device sits idle meanwhile. The hint lets the kernel read the head's tensors
(their ranges only, however large the shard around them) into the page cache then, so the build that follows reads
them from memory (benchmarks/profile_patch.py, docs/performance.md). Nothing here reads a tensor, decodes or checks
anything, or writes: the build reads and checks every byte as before. The checkpoint is opened the way the build
opens it (Checkpoint.open: the bounded reader, regular files only); what goes wrong here (a config, index or
header the flow will refuse, a shard that is not there) only ends the hint: the flow reads the same files next and
says what is wrong, in its own order (the target's faults first). The price of starting before the target is
judged: a run that then reads no weight (a directory already ready, a target or checkpoint refused) has had the
kernel read the head's bytes for nothing; nothing waits for them.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from irsurgeon.core.config import read_json
from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.spec import read_names


def start(recipe, checkpoint: Path) -> threading.Thread | None:
    """The hint for a local checkpoint directory or file, on a daemon thread (it never holds the process up)."""
    if not hasattr(os, "posix_fadvise"):
        return None
    thread = threading.Thread(target=advise, args=(recipe, checkpoint), name="irsurgeon-prefetch", daemon=True)
    thread.start()
    return thread


def advise(recipe, checkpoint: Path) -> None:
    """Open the checkpoint, name the tensors `recipe` reads for its config, and ask for their bytes."""
    try:
        ckpt = Checkpoint.open(checkpoint)
    except IRSurgeonError:
        return  # the flow opens it again and reports it
    try:
        cfg = recipe.parse_config(read_json(ckpt.config_path), str(ckpt.config_path))
        ckpt.advise(read_names(ckpt, recipe.tensors(cfg)))
    except (IRSurgeonError, OSError):
        return  # a hint only: the flow reads the same files and reports what it finds
    finally:
        ckpt.close()
