"""Write tests/data/torch_bin/: small `pytorch_model.bin` files made by torch.save itself, each beside a safetensors
file of the same tensors (safetensors.torch.save_file), for tests/test_torch_bin.py.

Runs only in an environment with torch and safetensors (never the project's: irsurgeon reads these files without
torch), e.g.

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy safetensors
    /tmp/torchenv/bin/python scripts/make_torch_bin_fixtures.py [--out tests/data/torch_bin]

Seeded: the same torch release writes the same bytes again, except `.data/serialization_id`, which torch makes
random for each save (torch/serialization.py); the tensors' bytes never change.

    dtypes          one tensor of each dtype a state dict carries: f32, bf16, f16, f64, i64, i32, i16, i8, u8, bool,
                    and (pickled by _rebuild_tensor_v3 on an untyped storage) float8_e4m3fn, float8_e5m2, uint16
    state_dict      nn.Module.state_dict(): an OrderedDict with `_metadata` (set by BUILD)
    plain_dict      a plain dict of tensors
    parameters      nn.Parameters (torch._utils._rebuild_parameter)
    tied            two names on one tensor, a row view at a non-zero storage offset, a slice of another storage
    sharded/        pytorch_model-0000{1,2}-of-00002.bin + pytorch_model.bin.index.json, as transformers shards
    transposed      a non-contiguous tensor (a transpose), which the reader refuses
    legacy          torch.save's format before torch 1.6 (_use_new_zipfile_serialization=False), refused
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[1]


def dtypes() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(3, 5, generator=g) * 3
    out = {f"w.{d}": base.to(getattr(torch, d)) for d in ("float32", "bfloat16", "float16", "float64")}
    out.update({f"w.{d}": (base * 10).to(getattr(torch, d)) for d in ("int64", "int32", "int16", "int8")})
    out["w.uint8"] = (base.abs() * 20).to(torch.uint8)
    out["w.bool"] = base > 0
    out.update({f"w.{d}": base.to(getattr(torch, d)) for d in ("float8_e4m3fn", "float8_e5m2")})
    out["w.uint16"] = (base.abs() * 1000).to(torch.uint16)
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.zeros(0, 4)
    return out


def module() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2, bias=False))


def pair(out: Path, name: str, tensors: dict, saved=None) -> None:
    """<name>.bin (torch.save of `saved`, default the tensors) and <name>.safetensors of the same tensors (copies:
    safetensors refuses tensors that share memory)."""
    torch.save(tensors if saved is None else saved, out / f"{name}.bin")
    save_file({k: v.detach().clone().contiguous() for k, v in tensors.items()}, out / f"{name}.safetensors")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "torch_bin")
    out = ap.parse_args().out
    (out / "sharded").mkdir(parents=True, exist_ok=True)
    pair(out, "dtypes", dtypes())
    state = module().state_dict()
    pair(out, "state_dict", dict(state), state)
    plain = {k: v.clone() for k, v in state.items()}
    pair(out, "plain_dict", plain)
    params = dict(module().named_parameters())
    pair(out, "parameters", params)

    table = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    other = torch.arange(10, dtype=torch.float16)
    tied = {"embed.weight": table, "lm_head.weight": table, "row3": table[3], "tail": other[4:]}
    pair(out, "tied", tied)

    shards = {"pytorch_model-00001-of-00002.bin": {k: v for k, v in state.items() if k.startswith("0.")},
              "pytorch_model-00002-of-00002.bin": {k: v for k, v in state.items() if not k.startswith("0.")}}
    for shard, part in shards.items():
        torch.save(part, out / "sharded" / shard)
    total = sum(v.numel() * v.element_size() for v in state.values())
    index = {"metadata": {"total_size": total},
             "weight_map": {k: shard for shard, part in shards.items() for k in part}}
    (out / "sharded" / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2) + "\n")
    save_file({k: v.contiguous() for k, v in state.items()}, out / "sharded.safetensors")

    torch.save({"t": torch.arange(6, dtype=torch.float32).reshape(2, 3).t()}, out / "transposed.bin")
    torch.save({"w": table}, out / "legacy.bin", _use_new_zipfile_serialization=False)
    for p in sorted(out.rglob("*")):
        if p.is_file():
            print(f"{p.relative_to(out)}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
