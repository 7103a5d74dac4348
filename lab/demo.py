"""The bundled tiny demo (fixtures/qwen3_5): writable copies of its target, patched or sharded variants."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from irsurgeon.cli import main
from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "fixtures" / "qwen3_5"
DEMO_TARGET = DEMO / "target"
DEMO_CKPT = DEMO / "ckpt"


def writable_copy(src: Path, dest: Path) -> Path:
    """A copy of src (a flat directory) whose files and folder are writable whatever the checkout's modes."""
    shutil.copytree(src, dest)
    for p in [dest, *dest.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def patch_demo(directory: Path) -> Path:
    """A writable copy of the demo target, patched with the demo checkpoint through the CLI."""
    writable_copy(DEMO_TARGET, directory)
    res = CliRunner().invoke(main, ["patch", str(directory), "--checkpoint", str(DEMO_CKPT)])
    assert res.exit_code == 0, res.output
    return directory


def sharded_demo_ckpt(directory: Path) -> Path:
    """The demo checkpoint split in two shards with an index: the mtp.* tensors alone in the second."""
    directory.mkdir(parents=True)
    shutil.copy(DEMO_CKPT / "config.json", directory / "config.json")
    st = SafetensorsFile(DEMO_CKPT / "model.safetensors")
    mtp = [n for n in st.tensors if n.startswith("mtp.")]
    parts = {"model-1.safetensors": [n for n in st.tensors if n not in mtp], "model-2.safetensors": mtp}
    for shard, names in parts.items():
        write_safetensors(directory / shard, {n: st.raw(n) for n in names}, {n: st.tensors[n].dtype for n in names})
    st.close()
    weight_map = {n: shard for shard, names in parts.items() for n in names}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return directory
