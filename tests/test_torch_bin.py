"""`pytorch_model.bin` (torch.save zip files) read without torch: what torch wrote (tests/data/torch_bin, made by
scripts/make_torch_bin_fixtures.py) reads bit for bit as the safetensors copy of the same tensors, single, sharded
and through the CLI; every hostile file (made here, by lab/torch_zip.py) is one CheckpointError line naming the file
and what it met, and runs nothing."""
from __future__ import annotations

import json
import os
import pickle
import pickletools
import shutil
import struct
import sys
import time
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from helpers.checkpoints import read_tensors
from helpers.heads import run_head, three_calls
from lab import torch_zip as tz
from lab.demo import DEMO_CKPT, DEMO_TARGET, writable_copy
from lab.dirsnap import snapshot
from irsurgeon.cli import main
from irsurgeon.core import limits
from irsurgeon.core.errors import CheckpointError
from irsurgeon.flows.standalone import build_mtp_model
from irsurgeon.flows.verify import verify_directory
from irsurgeon.weights import torch_bin
from irsurgeon.weights.checkpoint import Checkpoint
from irsurgeon.weights.safetensors_io import SafetensorsFile
from irsurgeon.weights.torch_bin import TorchBinFile

DATA = Path(__file__).parent / "data" / "torch_bin"
PAIRS = ["dtypes", "state_dict", "plain_dict", "parameters", "tied"]


def refusal(path: Path) -> str:
    """The one line a file is refused with; it names the file."""
    with pytest.raises(CheckpointError) as e:
        TorchBinFile(path)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{path}: "), line
    return line


def opcodes(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        data = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    return [op.name for op, _, _ in pickletools.genops(data)]


# ---- what torch wrote ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAIRS)
def test_torch_files_read_bit_for_bit_as_their_safetensors_copies(name):
    b, s = TorchBinFile(DATA / f"{name}.bin"), SafetensorsFile(DATA / f"{name}.safetensors")
    assert sorted(b.tensors) == sorted(s.tensors) and b.tensors
    for n, info in b.tensors.items():
        assert (info.dtype, info.shape) == (s.tensors[n].dtype, s.tensors[n].shape), n
        assert b.raw(n).tobytes() == s.raw(n).tobytes(), n
        assert np.array_equal(b.get(n), s.get(n), equal_nan=True) and b.get(n).dtype == s.get(n).dtype, n
        if info.shape:  # StoredRows reads rows of a leading axis: a 0-d tensor has none
            assert b.rows(n).shape == s.rows(n).shape
            assert b.rows(n)[1:2].tobytes() == s.rows(n)[1:2].tobytes(), n
    b.close()
    s.close()


def test_every_dtype_a_state_dict_holds_is_read():
    names = {i.dtype for i in TorchBinFile(DATA / "dtypes.bin").tensors.values()}
    assert names == {"F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "U16"}


def test_an_ordered_state_dict_with_metadata_and_a_plain_dict_both_read():
    """state_dict() pickles an OrderedDict whose `_metadata` BUILD sets; a plain dict is an EMPTY_DICT."""
    ordered, plain = opcodes(DATA / "state_dict.bin"), opcodes(DATA / "plain_dict.bin")
    assert "BUILD" in ordered and ordered[1] == "GLOBAL" and plain[1] == "EMPTY_DICT" and "BUILD" not in plain
    a, b = TorchBinFile(DATA / "state_dict.bin"), TorchBinFile(DATA / "plain_dict.bin")
    assert list(a.tensors) == list(b.tensors)
    assert all(np.array_equal(a.get(n), b.get(n)) for n in a.tensors)


def test_parameters_read_as_their_data():
    assert "_rebuild_parameter" in str(zipfile.ZipFile(DATA / "parameters.bin").read("parameters/data.pkl"))
    a, b = TorchBinFile(DATA / "parameters.bin"), TorchBinFile(DATA / "plain_dict.bin")
    assert sorted(a.tensors) == sorted(b.tensors) and all(np.array_equal(a.get(n), b.get(n)) for n in a.tensors)


def test_tied_tensors_share_their_storage_bytes_and_a_view_starts_at_its_offset():
    t = TorchBinFile(DATA / "tied.bin").tensors
    assert (t["embed.weight"].begin, t["embed.weight"].end) == (t["lm_head.weight"].begin, t["lm_head.weight"].end)
    assert t["row3"].begin == t["embed.weight"].begin + 3 * 4 * 4 and t["row3"].end == t["row3"].begin + 16
    assert t["tail"].shape == (6,) and t["tail"].end - t["tail"].begin == 12


def test_torch_is_not_imported():
    for name in PAIRS:
        TorchBinFile(DATA / f"{name}.bin").close()
    assert "torch" not in sys.modules


def bin_checkpoint(root: Path, files: list[Path]) -> Path:
    root.mkdir()
    for f in files:
        shutil.copy(f, root / f.name)
    shutil.copy(DEMO_CKPT / "config.json", root / "config.json")
    return root


def test_a_sharded_bin_checkpoint_opens_only_the_shards_asked_for(tmp_path):
    ckpt = Checkpoint.open(bin_checkpoint(tmp_path / "c", sorted((DATA / "sharded").iterdir())))
    want = SafetensorsFile(DATA / "sharded.safetensors")
    assert ckpt.names() == sorted(want.tensors)
    assert np.array_equal(ckpt.get("2.weight"), want.get("2.weight"))
    assert [p.name for p in ckpt.opened] == ["pytorch_model-00002-of-00002.bin"]
    for n in ckpt.names():
        rows, dtype = ckpt.raw(n)
        assert dtype == want.tensors[n].dtype and rows[0:rows.shape[0]].tobytes() == want.raw(n).tobytes()
    ckpt.close()


def test_a_single_bin_file_and_a_directory_of_one_open(tmp_path):
    d = bin_checkpoint(tmp_path / "c", [DATA / "plain_dict.bin"])
    (d / "plain_dict.bin").rename(d / "pytorch_model.bin")
    for source in (d, d / "pytorch_model.bin"):
        ckpt = Checkpoint.open(source)
        assert ckpt.names() == sorted(TorchBinFile(DATA / "plain_dict.bin").tensors)
        ckpt.close()


def test_safetensors_come_before_bin_files_in_one_directory(tmp_path):
    d = bin_checkpoint(tmp_path / "c", [DATA / "dtypes.bin", DATA / "plain_dict.safetensors"])
    (d / "dtypes.bin").rename(d / "pytorch_model.bin")
    (d / "plain_dict.safetensors").rename(d / "model.safetensors")
    ckpt = Checkpoint.open(d)
    assert ckpt.names() == sorted(SafetensorsFile(DATA / "plain_dict.safetensors").tensors)
    ckpt.close()


@pytest.mark.parametrize("index, shard", [("pytorch_model.bin.index.json", "model-00001.safetensors"),
                                          ("model.safetensors.index.json", "pytorch_model-00001.bin")])
def test_an_index_names_only_files_of_its_own_kind(tmp_path, index, shard):
    d = bin_checkpoint(tmp_path / "c", [])
    (d / shard).write_bytes(b"")
    (d / index).write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(CheckpointError, match=f"shard '{shard}' is not a {Path(index[:-11]).suffix} file"):
        Checkpoint.open(d)


def test_a_bin_file_linked_from_outside_the_checkpoint_is_refused(tmp_path):
    d = bin_checkpoint(tmp_path / "c", [])
    (d / "pytorch_model.bin").symlink_to(DATA / "plain_dict.bin")
    with pytest.raises(CheckpointError, match="link pointing outside the checkpoint directory"):
        Checkpoint.open(d)


# ---- through the CLI -----------------------------------------------------------------------------------------------

def as_bin(src: Path, dest: Path) -> Path:
    """src's checkpoint directory with its model.safetensors written as pytorch_model.bin (lab/torch_zip.py)."""
    dest.mkdir()
    shutil.copy(src / "config.json", dest / "config.json")
    tz.from_safetensors(src / "model.safetensors", dest / "pytorch_model.bin")
    return dest


def test_build_mtp_from_a_bin_only_checkpoint_equals_the_safetensors_build(tmp_path):
    d = as_bin(DEMO_CKPT, tmp_path / "bin")
    result = CliRunner().invoke(main, ["build-mtp", str(d), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "openvino_mtp_model.xml").is_file()
    calls = three_calls(read_tensors(DEMO_CKPT)["mtp.fc.weight"][0].shape[0])
    got = run_head(build_mtp_model(d, weight_format="f32"), calls)
    want = run_head(build_mtp_model(DEMO_CKPT, weight_format="f32"), calls)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("given", ["directory", "file"])
def test_patch_from_a_bin_checkpoint_checks_its_identity_and_verifies(tmp_path, given):
    """Past the old "only safetensors" refusal: the pair check reads the embedding rows of the .bin too."""
    d = as_bin(DEMO_CKPT, tmp_path / "bin")
    target = writable_copy(DEMO_TARGET, tmp_path / "t")
    source = d if given == "directory" else d / "pytorch_model.bin"
    result = CliRunner().invoke(main, ["patch", str(target), "--checkpoint", str(source)])
    assert result.exit_code == 0, result.output
    assert "checkpoint identity: 16 rows of model.language_model.embed_tokens.weight match" in result.output
    assert [c.name for c in verify_directory(target) if not c.ok] == []


# ---- hostile files -------------------------------------------------------------------------------------------------

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def hostile(tmp_path: Path, obj=None, storages=None, **kw) -> Path:
    """A torch.save zip of obj (default a valid one-tensor state dict) in its own folder."""
    if obj is None:
        obj, storages = tz.state_dict_object({"w": W})
    folder = tmp_path / "files"
    folder.mkdir(exist_ok=True)
    return tz.write(folder / "pytorch_model.bin", obj if isinstance(obj, bytes) else tz.dumps(obj),
                    {"0": W.tobytes()} if storages is None else storages, **kw)


def one_tensor(**call) -> dict:
    """{"w": W's tensor, with what `call` changes: storage (numel, dtype), shape, offset, stride}."""
    storage = tz.storage_id("0", call.pop("dtype", "F32"), call.pop("numel", W.size))
    return {"w": tz.tensor_call(storage, call.pop("shape", W.shape), **call)}


class Evil:
    """What a malicious checkpoint pickles: its __reduce__ calls os.system (pickled as posix.system on Linux)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_reduce_to_os_system_runs_nothing_and_writes_nothing(tmp_path):
    marker = tmp_path / "PWNED"
    for obj in ({"w": tz.Call(tz.Global("os", "system"), (f"touch {marker}",))},
                pickle.dumps({"w": Evil(f"touch {marker}")}, protocol=2)):
        path = hostile(tmp_path, obj)
        before = snapshot(tmp_path)
        line = refusal(path)
        assert "refused global os.system" in line or "refused global posix.system" in line, line
        assert not marker.exists() and snapshot(tmp_path) == before


@pytest.mark.parametrize("module, name", [
    ("builtins", "eval"), ("posix", "system"), ("os", "system"), ("__builtin__", "eval"), ("subprocess", "Popen"),
    ("_codecs", "encode"), ("torch", "Size"), ("torch", "device"), ("torch", "Tensor"), ("torch.nn.modules.linear",
    "Linear"), ("torch._utils", "_rebuild_qtensor"), ("torch.cuda", "FloatStorage"), ("numpy.core.multiarray",
    "_reconstruct"), ("collections", "Counter"), ("builtins", "set")])
def test_every_global_outside_the_list_is_refused_by_name(tmp_path, module, name):
    line = refusal(hostile(tmp_path, {"w": tz.Call(tz.Global(module, name), ("1+1",))}))
    assert f"data.pkl: refused global {module}.{name}:" in line


def test_a_global_name_is_escaped_and_cut_short(tmp_path):
    line = refusal(hostile(tmp_path, {"w": tz.Global("os\x1b[2J" + "x" * 5000, "system")}))
    assert "\x1b" not in line and "\\x1b" in line and len(line) < 600, line


@pytest.mark.parametrize("pid, shown", [
    (("module", tz.Global("torch", "FloatStorage"), "0", "cpu", 6), "'module'"),
    ("storage", "'storage'"),
    (("storage", tz.Global("torch", "FloatStorage"), "0", "cpu"), "'cpu')"),
    (("storage", tz.Global("collections", "OrderedDict"), "0", "cpu", 6), "a type"),
    (("storage", tz.Global("torch", "float32"), "0", "cpu", 6), "a Marker"),
    (("storage", tz.Global("torch", "FloatStorage"), 0, "cpu", 6), "a Marker, 0,"),
    (("storage", tz.Global("torch", "FloatStorage"), "0", "cpu", -6), "-6"),
])
def test_a_persistent_id_of_another_form_is_refused(tmp_path, pid, shown):
    line = refusal(hostile(tmp_path, {"w": tz.tensor_call(tz.PersistentId(pid), W.shape)}))
    assert "refused persistent id (" in line or "refused persistent id '" in line, line
    assert shown in line, line


@pytest.mark.parametrize("call, words", [
    ({"numel": 100}, "storage '0' holds 24 bytes, its persistent id says 400"),
    ({"shape": (3, 3)}, "F32 [3, 3] at element 0 ends at byte 36 of storage '0', which holds 24"),
    ({"shape": (2,), "offset": 5}, "F32 [2] at element 5 ends at byte 28 of storage '0', which holds 24"),
    ({"stride": (1, 2)}, "tensor 'w': stride [1, 2] of shape [2, 3] is not row-major contiguous"),
    ({"offset": -1}, "storage offset or requires_grad is not what torch writes"),
    ({"shape": (2, -3)}, "size is not a tuple of non-negative integers"),
    ({"stride": (3,)}, "size [2, 3] and stride [3] differ in length"),
])
def test_a_tensor_outside_its_storage_or_not_contiguous_is_refused(tmp_path, call, words):
    assert words in refusal(hostile(tmp_path, one_tensor(**call)))


def test_a_real_transposed_tensor_is_refused_by_name():
    assert "tensor 't': stride [1, 3] of shape [3, 2] is not row-major" in refusal(DATA / "transposed.bin")


def test_the_format_before_torch_1_6_and_a_bare_pickle_are_refused_unread(tmp_path):
    marker = tmp_path / "PWNED"
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(Evil(f"touch {marker}")))
    for path in (DATA / "legacy.bin", tmp_path / "pytorch_model.bin"):
        assert "a bare pickle, not a torch.save zip (the format before torch 1.6): not read" in refusal(path)
    assert not marker.exists()


def test_a_truncated_zip_is_refused(tmp_path):
    path = hostile(tmp_path)
    for keep in (len(path.read_bytes()) // 2, len(path.read_bytes()) - 30, 3, 0):
        path.write_bytes(path.read_bytes()[:keep])
        assert "no zip end record: not a torch.save zip file, or truncated" in refusal(path)


@pytest.mark.parametrize("entry", ["data/0", "data.pkl"])
def test_a_compressed_entry_is_refused(tmp_path, entry):
    line = refusal(hostile(tmp_path, compressed=[entry]))
    assert f"zip entry 'archive/{entry}' is compressed or encrypted (method 8)" in line


def patch_central(path: Path, name: str, **fields) -> None:
    """Overwrite fields of name's central directory entry: csize, usize (offsets 20, 24), header (42)."""
    raw = bytearray(path.read_bytes())
    at = raw.rindex(name.encode()) - torch_bin.CENTRAL.size
    assert raw[at:at + 4] == b"PK\x01\x02"
    for field, offset in (("csize", 20), ("usize", 24), ("header", 42)):
        if field in fields:
            struct.pack_into("<I", raw, at + offset, fields[field])
    path.write_bytes(bytes(raw))


def test_a_data_pkl_declared_huge_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    path = hostile(tmp_path)
    patch_central(path, "archive/data.pkl", csize=2 << 30, usize=2 << 30)
    monkeypatch.setattr(torch_bin, "load_state_dict", lambda data: pytest.fail("the pickle was read"))
    assert f"data.pkl is {2 << 30} bytes; irsurgeon's limit is {limits.TORCH_PICKLE_BYTES}" in refusal(path)


def test_a_data_pkl_over_the_limit_is_never_parsed(tmp_path, monkeypatch):
    path = hostile(tmp_path)
    size = zipfile.ZipFile(path).getinfo("archive/data.pkl").file_size
    monkeypatch.setattr(limits, "TORCH_PICKLE_BYTES", size - 1)
    monkeypatch.setattr(pickletools, "genops", lambda data: pytest.fail("the pickle was parsed"))
    assert f"data.pkl is {size} bytes; irsurgeon's limit is {size - 1}" in refusal(path)


@pytest.mark.parametrize("fields, words", [
    ({"header": 0}, "its local header (at 0) is not the directory's entry"),
    ({"csize": 1 << 20, "usize": 1 << 20}, "its 1048576 bytes at"),
    ({"header": 1 << 30}, "its local header at 1073741824 lies past the entries"),
])
def test_a_directory_entry_lying_about_a_storage_is_refused(tmp_path, fields, words):
    numel = fields.get("usize", W.nbytes) // 4  # the pickle agrees with the size the directory claims
    path = hostile(tmp_path, one_tensor(numel=numel, shape=(2, 3)))
    patch_central(path, "archive/data/0", **fields)
    assert words in refusal(path)


def torch_written(tmp_path: Path) -> Path:
    """A copy of a file torch wrote: it ends with a zip64 end record, which zipfile adds only when needed."""
    return Path(shutil.copy(DATA / "plain_dict.bin", tmp_path / "pytorch_model.bin"))


def test_a_zip64_end_record_pointing_outside_the_file_is_refused(tmp_path):
    path = torch_written(tmp_path)
    raw = bytearray(path.read_bytes())
    at = raw.rindex(b"PK\x06\x07")
    struct.pack_into("<Q", raw, at + 8, len(raw) + 100)
    path.write_bytes(bytes(raw))
    assert "its zip64 end record lies outside the file" in refusal(path)


def test_a_directory_cut_short_is_refused(tmp_path):
    path = torch_written(tmp_path)
    raw = bytearray(path.read_bytes())
    at = raw.rindex(b"PK\x06\x06")
    entries = struct.unpack_from("<Q", raw, at + 32)[0]
    struct.pack_into("<QQ", raw, at + 24, entries + 3, entries + 3)
    path.write_bytes(bytes(raw))
    assert "its zip directory ends before its" in refusal(path)


def test_a_bytes_value_holding_a_pickle_is_refused_and_a_string_holding_one_stays_data(tmp_path):
    marker = tmp_path / "PWNED"
    payload = pickle.dumps(Evil(f"touch {marker}"), protocol=2)
    as_bytes = pickle.dumps({"w": payload}, protocol=2)  # protocol 2 pickles bytes through _codecs.encode
    assert "refused global _codecs.encode" in refusal(hostile(tmp_path, as_bytes))
    obj, storages = tz.state_dict_object({"w": W})
    obj["payload"] = payload.decode("latin-1")
    line = refusal(hostile(tmp_path, obj, storages))
    assert "entry 'payload' is '\\x80\\x02" in line and "not a tensor" in line and not marker.exists()


@pytest.mark.parametrize("obj, words", [
    ([1, 2], "holds a list, not a state dict"),
    ({"model": {"w": 1}}, "entry 'model' is a dict, not a tensor"),
    ({1: tz.tensor_call(tz.storage_id("0", "F32", 6), (2, 3))}, "entry 1 is a Tensor, not a tensor"),
    ({"w": tz.Call(tz.REBUILD_V2, (tz.storage_id("0", "F32", 6), 0, (2, 3), (3, 1), False, {"h": 1}))},
     "backward hooks"),
    ({"w": tz.Call(tz.REBUILD_V2, (tz.storage_id("0", "F32", 6), 0, (2, 3), (3, 1), False, {}, {"neg": True}))},
     "conj or neg bit"),
    ({"w": tz.Call(tz.REBUILD_V2, ("0", 0, (2, 3), (3, 1), False, {}))}, "rebuilt from something other than"),
    ({"w": tz.Call(tz.Global("torch._utils", "_rebuild_tensor_v3"),
                   (tz.storage_id("0", "F32", 6), 0, (2, 3), (3, 1), False, {}, tz.Global("torch", "float32")))},
     "_rebuild_tensor_v3 takes an untyped storage"),
    ({"w": tz.Call(tz.Global("torch._utils", "_rebuild_parameter"), ("not a tensor", True, {}))},
     "a parameter's data is not a tensor"),
    ({"w": tz.tensor_call(tz.storage_id("7", "F32", 6), (2, 3))}, "names storage '7', which the zip does not hold"),
])
def test_anything_but_a_state_dict_of_tensors_is_refused(tmp_path, obj, words):
    assert words in refusal(hostile(tmp_path, obj))


def test_a_storage_named_twice_with_two_sizes_is_refused(tmp_path):
    obj = {"a": tz.tensor_call(tz.storage_id("0", "F32", 6), (6,)), "b": tz.tensor_call(tz.storage_id("0", "F32", 3),
                                                                                          (3,))}
    assert "storage '0' is named twice, with different types or sizes" in refusal(hostile(tmp_path, obj))


@pytest.mark.parametrize("order, words", [(b"big", "big-endian tensors"), (b"middle", "an unknown byte order")])
def test_a_byte_order_but_little_is_refused(tmp_path, order, words):
    line = refusal(hostile(tmp_path, byteorder=order))
    assert f"byteorder says {order!r}: {words}; only little-endian files are read" in line


def test_no_byteorder_entry_reads_as_little_endian_as_torch_does(tmp_path):
    assert np.array_equal(TorchBinFile(hostile(tmp_path, byteorder=None)).get("w"), W)


def test_a_zip_without_data_pkl_is_refused(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/other.pkl", b"")
    assert "no <archive>/data.pkl in the zip" in refusal(path)


@pytest.mark.parametrize("data, words", [
    (pickle.dumps(OrderedDict(w=1), protocol=4), "refused opcode FRAME at byte 2"),
    (pickle.PROTO + b"\x02" + pickle.EMPTY_SET + pickle.STOP, "refused opcode EMPTY_SET at byte 2"),
    (pickle.PROTO + b"\x02" + pickle.GLOBAL + b"collections\nOrderedDict\n" + pickle.EMPTY_TUPLE + pickle.NEWOBJ
     + pickle.STOP, "refused opcode NEWOBJ at byte 28"),
    (b"(ios\nsystem\n.", "refused opcode INST at byte 1"),  # protocol 0: INST calls what it names
])
def test_an_opcode_outside_torchs_set_is_refused(tmp_path, data, words):
    assert f"{words}: not one torch.save writes for a state dict" in refusal(hostile(tmp_path, data))


def test_a_memo_index_far_ahead_is_refused_before_the_unpickler_allocates(tmp_path):
    """`LONG_BINPUT 10**9` makes CPython's C unpickler allocate a 16 GB memo; refused by the opcode walk."""
    data = pickle.PROTO + b"\x02" + pickle.NONE + pickle.LONG_BINPUT + struct.pack("<I", 10**9) + pickle.STOP
    start = time.perf_counter()
    assert "memo index 1000000000 at byte 3 skips ahead of the 0 entries written" in refusal(hostile(tmp_path, data))
    assert time.perf_counter() - start < 2


def test_too_many_opcodes_or_tensors_are_refused(tmp_path, monkeypatch):
    path = hostile(tmp_path)
    monkeypatch.setattr(limits, "TORCH_PICKLE_OPCODES", 10)
    assert "data.pkl: more than 10 opcodes (irsurgeon's limit)" in refusal(path)
    monkeypatch.undo()
    obj, storages = tz.state_dict_object({f"w{i}": W for i in range(3)})
    path = hostile(tmp_path, obj, storages)
    monkeypatch.setattr(limits, "SAFETENSORS_TENSORS", 2)
    assert "more than 2 storages (irsurgeon's limit per file)" in refusal(path)


def test_a_pickle_cut_short_is_refused(tmp_path):
    data = tz.dumps(one_tensor())
    assert "data.pkl: not a pickle (" in refusal(hostile(tmp_path, data[:len(data) // 2]))


def test_build_cannot_change_what_find_class_hands_out(tmp_path):
    """BUILD on an admitted rebuild or marker, with a state dict or a (None, slots) state: refused, nothing set."""
    admitted = dict(torch_bin.ADMITTED)
    head = pickle.PROTO + b"\x02" + pickle.GLOBAL
    state = pickle.EMPTY_DICT + pickle.BINUNICODE + struct.pack("<I", 5) + b"build" + pickle.NONE + pickle.SETITEM
    for target in (b"torch._utils\n_rebuild_tensor_v2\n", b"torch\nFloatStorage\n"):
        for built in (state, pickle.MARK + pickle.NONE + state + pickle.TUPLE):
            line = refusal(hostile(tmp_path, head + target + built + pickle.BUILD + pickle.STOP))
            assert "data.pkl: not a pickle torch.load reads (AttributeError" in line, line
    assert torch_bin.ADMITTED == admitted and torch_bin.ADMITTED["torch._utils._rebuild_tensor_v2"].build is \
        torch_bin._rebuild_v2
