"""Where the reference data is: tests/data/reference in this checkout (see its README.md), or the copy of the same
layout $IRSURGEON_REFERENCE names (e.g. a regenerated one)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "data" / "reference"
REFERENCE_ENV = "IRSURGEON_REFERENCE"


def reference_dir() -> Path:
    return Path(os.environ.get(REFERENCE_ENV) or REFERENCE)
