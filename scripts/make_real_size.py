"""A checkpoint and a target at a published model's real sizes, with only the MTP head's bytes on disk.

    python scripts/make_real_size.py OUT_DIR --config CONFIG.json [--seed 0] [--patch f16,int4]

OUT_DIR/ckpt: the given config.json (its quantization_config dropped: the head is written bf16), an index listing
every main-model tensor at its real shape and dtype (bf16) in shards of at most 5 GB whose data is a file hole
(sparse: the header is real, the data reads as zeros and takes no disk space; `patch` never reads it), and
`mtp.safetensors` with the real head's tensors (random bf16 values, the fused expert layout of the 35B-A3B release).
OUT_DIR/target: the decomposed VLM layout `patch` needs, at the real shapes (layers, widths, vocabulary, layer kinds),
built by irsurgeon.synth's graph builders with zero f16 weights; the XML is the real-shaped graph, each `.bin` is
made sparse after writing (openvino's serializer writes identical constants once; `fallocate --dig-holes` turns
the zero blocks into holes). The checkpoint-identity check reads 16 embedding rows on both sides: zeros = zeros.
Prints the apparent and the on-disk size of both directories.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irsurgeon.families.qwen35_mtp.model import PREFIX, parse_config, tensors  # noqa: E402  (sys.path set above)
from irsurgeon.ops.core import WeightFormat, weight  # noqa: E402  (sys.path set above)
from irsurgeon.ops.half import half_constant  # noqa: E402  (sys.path set above)
from irsurgeon.synth import configs  # noqa: E402  (sys.path set above)
from irsurgeon.synth import target as tg  # noqa: E402  (sys.path set above)
from irsurgeon.synth.checkpoint import Draw, lm_tensors, spec_from_config  # noqa: E402  (sys.path set above)
from irsurgeon.synth.registry import save, write_json  # noqa: E402  (sys.path set above)
from irsurgeon.synth.tokenizer import (detokenizer_model, tokenizer_model,  # noqa: E402  (sys.path set above)
                                       tokenizer_rt_info)
from irsurgeon.synth.vision import VisionSpec  # noqa: E402  (sys.path set above)

SHARD_BYTES = 5 << 30
CHUNK = 1 << 24  # values drawn at a time for the head


class ShapeDraw(Draw):
    """Draw's shapes without its values: zero-stride views, so the main model's tensors take no memory."""

    def mat(self, o: int, i: int, scale: float = 1.0) -> np.ndarray:
        return np.broadcast_to(np.float32(0), (o, i))

    def gain(self, n: int, scale: float = 1.0) -> np.ndarray:
        return np.broadcast_to(np.float32(0), (n,))


def lm_shapes(spec) -> dict[str, tuple[int, ...]]:
    """Every main-model tensor with its real shape (experts drawn once, then widened to all of them)."""
    import irsurgeon.synth.checkpoint as ck

    one = spec.with_(num_experts=1) if spec.num_experts else spec
    real_draw, ck.Draw = ck.Draw, ShapeDraw  # lm_tensors draws through Draw: shapes only
    try:
        shapes = {n: t.shape for n, t in lm_tensors(one, np.random.default_rng(0)).items()}
    finally:
        ck.Draw = real_draw
    for name, shape in shapes.items():
        if ".mlp.experts." in name:
            shapes[name] = (spec.num_experts, *shape[1:])
        elif name.endswith(".mlp.gate.weight"):
            shapes[name] = (spec.num_experts, shape[1])
    return shapes


class Zeros(dict):
    """name -> shape, read as a lazily allocated zero array (what the builders that read a tensor directly get)."""

    def __getitem__(self, name: str) -> np.ndarray:
        return np.zeros(super().__getitem__(name), np.float32)


class ZeroWeights(tg.Weights):
    """synth's Weights with lazily allocated zero f16 constants: never-touched pages, no memory, shared holes."""

    def mat(self, name, view=None):
        shape = dict.__getitem__(self.tensors, name)
        if view is not None:
            shape = view(np.broadcast_to(np.float32(0), shape)).shape
        return half_constant(np.zeros(shape, np.float16), name)

    def gain(self, name):
        return weight(np.ones(dict.__getitem__(self.tensors, name), np.float32), name, WeightFormat.F16)


def header_bytes(entries: dict[str, tuple[str, tuple[int, ...], int, int]]) -> bytes:
    raw = json.dumps({n: {"dtype": d, "shape": list(s), "data_offsets": [a, b]} for n, (d, s, a, b) in entries.items()},
                     separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def write_sparse_shards(ckpt: Path, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """The main model as bf16 shards whose data is one hole each; returns the index's weight_map entries."""
    groups, size = [[]], 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 2
        if size + n > SHARD_BYTES and groups[-1]:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    weight_map = {}
    for k, names in enumerate(groups):
        path = ckpt / f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        entries, offset = {}, 0
        for name in names:
            n = int(np.prod(shapes[name])) * 2
            entries[name] = ("BF16", shapes[name], offset, offset + n)
            offset += n
        head = header_bytes(entries)
        with open(path, "wb") as fh:
            fh.write(head)
            fh.truncate(len(head) + offset)  # the data: a hole
        weight_map.update({name: path.name for name in names})
    return weight_map


def write_head(path: Path, shapes: dict[str, tuple[int, ...]], seed: int) -> None:
    """The real head's tensors, random bf16 (matrices ~ N(0, 0.02^2), norm gains ~ U(-0.5, 0.5)), streamed."""
    entries, offset = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape)) * 2
        entries[name] = ("BF16", shape, offset, offset + n)
        offset += n
    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        fh.write(header_bytes(entries))
        for name, shape in shapes.items():
            left, norm = int(np.prod(shape)), len(shape) == 1
            while left:
                k = min(left, CHUNK)
                x = rng.uniform(-0.5, 0.5, k).astype(np.float32) if norm else \
                    rng.standard_normal(k, dtype=np.float32) * np.float32(0.02)
                fh.write(((x.view(np.uint32) + 0x8000) >> 16).astype(np.uint16).tobytes())
                left -= k


def head_shapes(config: dict) -> dict[str, tuple[int, ...]]:

    cfg = parse_config(config, source="config.json")
    shapes = tensors(cfg).stored("fused" if cfg.is_moe else None)
    return {PREFIX + n: s for n, s in shapes.items()}


def write_checkpoint(ckpt: Path, config: dict, spec, seed: int) -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in config.items() if k != "quantization_config"}
    (ckpt / "config.json").write_text(json.dumps(config, indent=1))
    weight_map = write_sparse_shards(ckpt, {n: s for n, s in lm_shapes(spec).items()})
    heads = head_shapes(config)
    write_head(ckpt / "mtp.safetensors", heads, seed)
    weight_map.update({name: "mtp.safetensors" for name in heads})
    total = sum((ckpt / f).stat().st_size for f in set(weight_map.values()))
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))


def write_target(target: Path, config: dict, spec) -> None:
    """The files `patch` reads or requires, real-shaped, f16 zero weights; .bin files made sparse."""
    target.mkdir(parents=True, exist_ok=True)
    shapes = lm_shapes(spec)
    kind = "qwen35-moe" if spec.num_experts else "qwen35"
    w = ZeroWeights(Zeros(shapes), WeightFormat.F16, zero_centred=True)
    models = {"openvino_language_model": tg.qwen35_language_model(spec, w),
              "openvino_text_embeddings_model": tg.text_embeddings_model(spec, w),
              "openvino_tokenizer": tokenizer_model(spec.vocab), "openvino_detokenizer": detokenizer_model(spec.vocab)}
    tokenizer_rt_info(models["openvino_tokenizer"], detokenizer=False)
    tokenizer_rt_info(models["openvino_detokenizer"], detokenizer=True)
    for stem, model in models.items():
        save(model, target / f"{stem}.xml")
        subprocess.run(["fallocate", "--dig-holes", str(target / f"{stem}.bin")], check=True)
    write_json(target / "config.json", {k: v for k, v in config.items() if k != "quantization_config"})
    write_json(target / "generation_config.json", configs.generation_config())
    write_json(target / "preprocessor_config.json", configs.preprocessor_config(VisionSpec()))
    print(f"target: {kind} layout, {spec.layers} layers")


def footprint(d: Path) -> str:
    files = [f for f in d.iterdir() if f.is_file()]
    apparent = sum(f.stat().st_size for f in files)
    disk = sum(f.stat().st_blocks * 512 for f in files)
    return f"{d}: {apparent / 1e9:.2f} GB apparent, {disk / 1e9:.3f} GB on disk"


def measure(out: Path, fmt: str) -> None:
    """`irsurgeon patch` of a fresh sparse copy of the target, page cache dropped for both directories first:
    wall, peak RSS, bytes read from the device against the head's shard plus the XML files."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # bench_build
    import os
    import shutil

    from bench_build import CHILD, evict, run_child

    work = out / f"patched-{fmt}"
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(out / "target"), str(work)], check=True)
    os.sync()  # the fresh copy's pages are dirty: written back first, or they stay cached
    for d in (out / "ckpt", work):
        evict(d)
    io_file = out / f"patched-{fmt}.io"
    r = run_child(["-c", CHILD, str(io_file), "patch", str(work), "--checkpoint", str(out / "ckpt"),
                   "--weight-format", fmt])
    if r["rc"]:
        raise SystemExit(f"patch failed:\n{r['out']}")
    io = dict(line.split(":", 1) for line in io_file.read_text().splitlines())
    head = (out / "ckpt" / "mtp.safetensors").stat().st_size
    xml = sum(f.stat().st_size for f in (out / "target").glob("*.xml"))
    read = int(io["read_bytes"])
    print(f"patch {fmt}: wall {r['wall']:.1f} s, peak RSS {r['rss'] / 1e6:.0f} MB ({r['rss'] / head:.2f}x the head's "
          f"bf16 bytes {head / 1e6:.0f} MB), read {read / 1e6:.1f} MB = head shard + XML "
          f"{(head + xml) / 1e6:.1f} MB {'+' if read >= head + xml else '-'} {abs(read - head - xml) / 1e3:.0f} KB; "
          f"load {os.getloadavg()[0]:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--config", type=Path, required=True, help="a published config.json (real-configs/)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--patch", default="", help="then patch a copy of the target, e.g. f16,int4, and measure it")
    a = ap.parse_args()
    config = json.loads(a.config.read_text())
    spec = spec_from_config(config.get("text_config", config))
    if not (a.out / "ckpt" / "model.safetensors.index.json").is_file():
        write_checkpoint(a.out / "ckpt", config, spec, a.seed)
    if not (a.out / "target" / "openvino_language_model.xml").is_file():
        write_target(a.out / "target", config, spec)
    print(footprint(a.out / "ckpt"))
    print(footprint(a.out / "target"))
    for fmt in filter(None, a.patch.split(",")):
        measure(a.out, fmt)


if __name__ == "__main__":
    main()
