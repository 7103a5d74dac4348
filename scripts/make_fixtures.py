#!/usr/bin/env python3
"""Regenerate fixtures/synth/ from irsurgeon.synth.registry.FIXTURES and rewrite its MANIFEST.sha256.

    python scripts/make_fixtures.py            # regenerate and rewrite the manifest
    python scripts/make_fixtures.py --check    # regenerate into a temporary folder, compare with the manifest

Every file is a function of the fixture's (kind, sizes, seed, with_mtp, weight_format) and of the pinned openvino
and nncf releases, so a regeneration must reproduce the manifest byte for byte.
"""
import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from irsurgeon.synth.registry import FIXTURES, make_fixture

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fixtures" / "synth"
MANIFEST = "MANIFEST.sha256"


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST}


def manifest_text(root: Path) -> str:
    return "".join(f"{h}  {name}\n" for name, h in digests(root).items())


def generate(root: Path) -> None:
    for name in sorted(FIXTURES):
        make_fixture(name, root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare a fresh regeneration with the manifest")
    args = ap.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            fresh = manifest_text(Path(tmp))
        same = fresh == (OUT / MANIFEST).read_text()
        print("fixtures match the manifest" if same else "fixtures DIFFER from the manifest")
        return 0 if same else 1
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    generate(OUT)
    (OUT / MANIFEST).write_text(manifest_text(OUT))
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({len(digests(OUT))} files, {size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
