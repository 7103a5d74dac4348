"""Bounded input: every file irsurgeon reads goes through here, and every large allocation asks first.

Size limits per kind of file, in one place. Each is far above what real exports and checkpoints hold (measured on
the published Qwen3.5/3.6 configs in reference/real-configs and optimum-intel exports) and far below what would
hurt a machine:
    config JSON (config.json, openvino_config.json, generation_config.json): real ones are 2-22 KB
    index JSON (model.safetensors.index.json): ~40 k entries for the largest MoE releases, a few MB
    other JSON of a model directory (tokenizer.json): read by openvino-genai only, tens of MB at most
    IR .xml: a 4-layer export is 0.6 MB, so a 64-layer int4 language model is tens of MB
    safetensors header: 100 MB, the limit the safetensors format itself sets, and at most 262,144 entries (tensors)
        per file, counted on the raw bytes before the JSON is built (see SAFETENSORS_TENSORS)
    torch.save zip (`pytorch_model.bin`): its pickle and its zip directory 64 MiB each, the pickle at most 2^24
        opcodes and as many tensors as a safetensors header (see TORCH_PICKLE_BYTES)
    text (a prompts file): a few KB in practice
Readers accept regular files only: a FIFO, a device (`/dev/zero`), a socket or a directory is refused before a byte
is read (opened with O_NONBLOCK, so opening a FIFO never waits for a writer). The size is checked on the open
descriptor, so the file checked is the file read. JSON is checked for nesting depth and number length before it is
parsed (Python's own limits would raise RecursionError / ValueError instead of a clear refusal).

Errors name the file and what was expected, never the file's bytes: a path may link to a file that is not what it
claims to be.
"""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import NamedTuple

from irsurgeon.core.errors import IRSurgeonError

MiB = 1 << 20
CONFIG_JSON_BYTES = 16 * MiB
INDEX_JSON_BYTES = 64 * MiB
OTHER_JSON_BYTES = 256 * MiB  # tokenizer.json and the like, read only by openvino-genai: the largest are ~35 MB
IR_XML_BYTES = 256 * MiB
# OpenVINO's in-memory model is far larger than its .xml: 575 KB of the demo language model became 13.8 MB resident
# after ov.Core().read_model (24x, openvino 2026.4.1); 16x is a lower bound for the memory budget
IR_XML_MEMORY_FACTOR = 16
# safetensors' own limit: huggingface/safetensors, safetensors/src/tensor.rs, `const MAX_HEADER_SIZE: usize =
# 100_000_000` (a longer header is SafeTensorError::HeaderTooLarge), so no real file has a larger one
SAFETENSORS_HEADER_BYTES = 100_000_000
# Entries (tensors, and __metadata__) one safetensors header may list. Real files hold far fewer per file (from
# the architectures and the published shard counts): Llama-3.1-405B 1,137 tensors in 191 shards; Qwen3-235B-A22B
# 94 layers x 128 experts x 3 = ~37 k in 118 shards (~320 a shard); DeepSeek-V3 (FP8, each weight with its
# weight_scale_inv) 58 MoE layers x 256 experts x 6 + the rest = ~92 k in 163 shards (~600 a shard); Kimi-K2 a
# layer a shard, 384 experts x 3 x 2 = ~2.3 k (~3.5 k in the int4 release: weight_packed, weight_scale,
# weight_shape); the worst single file is a whole per-expert-quantized MoE saved unsharded, e.g. a GPTQ
# Qwen3-30B-A3B: 48 x 128 x 3 x 4 (qweight, qzeros, scales, g_idx) = ~74 k. Their headers: ~150 bytes an entry,
# 0.1-0.5 MB a shard, ~11 MB for that single file. 2^18 is 3.5x that file and 75x the largest shard. Measured on
# 2 shared cores: a file at the limit (21 MB of header) opens in ~3 s at ~0.3 GB (patch, reading it twice, 11 s at
# 0.5 GB); a million 1-element entries (79 MB, under the byte limit) cost 29 s and 2.3 GB before, and are refused
# now in under a second at ~0.2 GB, by the count json_scan makes on the bytes.
SAFETENSORS_TENSORS = 1 << 18
# A torch.save zip (`pytorch_model.bin`, irsurgeon.weights.torch_bin): its pickle `data.pkl` and its zip central
# directory each at most this many bytes, refused by the sizes the zip declares before either is read. A state dict
# pickles to ~120 bytes a tensor (torch 2.13.0: 2.4 MB for 20,000 tensors), its directory to ~100 bytes a storage,
# so SAFETENSORS_TENSORS of them fit with room for names twice as long; the largest published `.bin` shards hold a
# few thousand tensors (~0.5 MB of pickle).
TORCH_PICKLE_BYTES = 64 * MiB
TORCH_DIRECTORY_BYTES = 64 * MiB
# Opcodes the pickle may hold: ~30 a tensor (25-40 measured, Parameters and `_metadata` included), 64 a tensor
# for SAFETENSORS_TENSORS of them. Counted before anything is built, this bounds what unpickling makes: 2^24
# one-byte opcodes that each push an empty dict or list (the largest object an admitted opcode makes) held 1.2 GB
# at most and were read in 4-6 s (measured, CPython 3.11: 1,166 MiB over the interpreter's 62)
TORCH_PICKLE_OPCODES = 64 * SAFETENSORS_TENSORS
TEXT_BYTES = 16 * MiB

JSON_MAX_DEPTH = 64          # real configs nest 4-6 deep (text_config / rope_parameters / mrope_section)
JSON_MAX_INT_DIGITS = 40     # digits of a number: an unsigned 128-bit integer has 39; real values have 12

INDEX_SUFFIX = ".index.json"

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def json_limit(path: str | Path) -> int:
    """The byte limit for a JSON file irsurgeon reads: an index gets more room than a config."""
    return INDEX_JSON_BYTES if Path(path).name.endswith(INDEX_SUFFIX) else CONFIG_JSON_BYTES


def directory_file_limit(name: str) -> int | None:
    """The byte limit for a file of a model directory that another reader opens whole, or None (weights)."""
    if name.endswith(".xml"):
        return IR_XML_BYTES
    if not name.endswith(".json"):
        return None
    return json_limit(name) if name.endswith((INDEX_SUFFIX, "config.json")) else OTHER_JSON_BYTES


def not_regular(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO (named pipe)", ...), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | Path, error: type[IRSurgeonError]) -> tuple[int, int]:
    """(descriptor, size) of a regular file opened for reading; anything else is `error` naming the path."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as e:
        raise error(f"{path}: cannot open: {e.strerror or type(e).__name__}") from None
    try:
        st = os.fstat(fd)
        what = not_regular(st.st_mode)
        if what:
            raise error(f"{path}: is {what}; expected a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def check_regular(path: str | Path, error: type[IRSurgeonError]) -> None:
    """Refuse a path that exists and is not a regular file (following links); a missing path is the caller's case."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    what = not_regular(mode)
    if what:
        raise error(f"{path}: is {what}; expected a regular file")


def check_directory_files(directory: str | Path, error: type[IRSurgeonError]) -> None:
    """Refuse a directory another reader will open whole (openvino-genai reads config.json, generation_config.json,
    tokenizer and model files itself, blocking on a FIFO): every entry must be a regular file or a folder, and
    JSON and IR .xml files must be within their limits."""
    with os.scandir(directory) as entries:
        for entry in entries:
            path = Path(directory) / entry.name
            try:
                st = os.stat(path)
            except OSError:
                continue  # a dangling link: the reader reports a missing file
            what = not_regular(st.st_mode)
            if what and what != "a directory":
                raise error(f"{path}: is {what}; expected a regular file")
            limit = directory_file_limit(entry.name)
            if not what and limit is not None and st.st_size > limit:
                raise error(f"{path}: {st.st_size} bytes; the limit for {path.suffix[1:].upper()} files is "
                            f"{limit} bytes")


def read_bytes(path: str | Path, limit: int, error: type[IRSurgeonError], what: str = "input") -> bytes:
    """The whole content of a regular file of at most `limit` bytes."""
    fd, size = open_regular(path, error)
    try:
        if size > limit:
            raise error(f"{path}: {size} bytes; the limit for {what} files is {limit} bytes")
        chunks, got = [], 0
        while got < size:
            chunk = os.read(fd, size - got)
            if not chunk:
                break  # shrank since fstat: the parser reports what is missing
            chunks.append(chunk)
            got += len(chunk)
        if os.read(fd, 1):
            raise error(f"{path}: grew while being read; expected a file that is not being written")
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or type(e).__name__}") from None
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_text(path: str | Path, limit: int, error: type[IRSurgeonError], what: str = "text") -> str:
    """A bounded UTF-8 text file."""
    data = read_bytes(path, limit, error, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (invalid byte at offset {e.start})") from None


_SCAN_CHUNK = 1 << 20
_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (JSON_MAX_INT_DIGITS + 1))


class JsonScan(NamedTuple):
    """What a scan of JSON text finds before it is parsed: what makes it too deep, its numbers too long or its top
    level too long (None: within the limits), and the members (name: value pairs) of the objects at depth 1 and 2
    (the top level's, and those of the objects it holds)."""
    excess: str | None
    members: tuple[int, int]


def json_scan(raw: bytes, most_members: int | None = None) -> JsonScan:
    """Depth, number length and members of JSON text, counted on its bytes outside strings before it is parsed
    (json.loads recurses per level, int() refuses more than 4300 digits, and a long top level builds a large table).
    Vectorized, a MiB at a time, with the state carried between pieces (inside a string or not, backslashes and
    digits running on): linear, and a few tens of MB whatever the text; it stops at the first excess."""
    import numpy as np  # here, not at the top: the CLI imports this module before it can guard against Ctrl-C

    step = np.zeros(256, np.int8)
    step[list(b"[{")], step[list(b"]}")] = 1, -1
    structural, digit = np.zeros(256, bool), np.zeros(256, bool)
    structural[list(b"[]{}:")], digit[list(b"0123456789")] = True, True
    inside, slashes, digits = 0, 0, 0  # carried: in a string; backslashes, digits the piece before ended with
    long_runs = _LONG_DIGITS.search(raw) is not None
    depth, top, second = 0, 0, 0
    for at in range(0, len(raw), _SCAN_CHUNK):
        a = np.frombuffer(raw, np.uint8, count=min(_SCAN_CHUNK, len(raw) - at), offset=at)
        idx = np.arange(len(a), dtype=np.int32)
        # a quote ends or starts a string unless an odd run of backslashes comes right before it
        quotes = np.flatnonzero(a == ord('"'))
        if (a == ord("\\")).any():
            last_plain = np.maximum.accumulate(np.where(a == ord("\\"), -1, idx))
            before = np.maximum(quotes - 1, 0)
            run = np.where(last_plain[before] < 0, quotes + slashes, quotes - 1 - last_plain[before])
            run[quotes == 0] = slashes  # the piece's first byte: the run the piece before ended with
            quotes = quotes[run % 2 == 0]
            slashes = int(len(a) - 1 - last_plain[-1] + (slashes if last_plain[-1] < 0 else 0))
        else:
            quotes = quotes[1:] if slashes % 2 and quotes.size and quotes[0] == 0 else quotes
            slashes = 0
        toggles = np.zeros(len(a), np.uint8)
        toggles[quotes] = 1
        parity = (np.cumsum(toggles, dtype=np.int32) + inside) & 1  # 1 inside a string (its opening quote too)
        outside = parity == 0
        inside = int(parity[-1])
        if long_runs:  # some run of digits is that long, in a string or not: is one outside?
            numeric = digit[a] & outside
            last_other = np.maximum.accumulate(np.where(numeric, -1, idx))
            longest = np.where(last_other < 0, idx + 1 + digits, idx - last_other)
            if longest.max(initial=0) > JSON_MAX_INT_DIGITS:
                return JsonScan(f"holds a number of more than {JSON_MAX_INT_DIGITS} digits", (top, second))
            digits = int(longest[-1])
        codes = a[structural[a] & outside]
        running = depth + np.cumsum(step[codes], dtype=np.int64)
        if running.size and running.max() > JSON_MAX_DEPTH:
            return JsonScan(f"is JSON nested deeper than {JSON_MAX_DEPTH} levels", (top, second))
        colons = codes == ord(":")  # one per member, at the depth of its object
        top += int(np.count_nonzero(colons & (running == 1)))
        second += int(np.count_nonzero(colons & (running == 2)))
        if most_members is not None and top > most_members:
            return JsonScan(f"lists more than {most_members} entries (irsurgeon's limit per file)", (top, second))
        depth = int(running[-1]) if running.size else depth
    return JsonScan(None, (top, second))


def json_excess(raw: bytes) -> str | None:
    """What makes JSON text too deep or its numbers too long (json_scan), or None."""
    return json_scan(raw).excess


def parsed_members(value) -> tuple[int, int]:
    """The members of a parsed JSON value's objects at depth 1 and 2, as json_scan counts them in its text."""
    if not isinstance(value, (dict, list)):
        return 0, 0
    children = value.values() if isinstance(value, dict) else value
    return len(value) if isinstance(value, dict) else 0, sum(len(c) for c in children if isinstance(c, dict))


def twice_named(text: str | bytes) -> str | None:
    """The first name an object of the JSON text holds twice (json.loads keeps the last one), or None."""
    def pairs(found: list) -> dict:
        names = dict(found)
        if len(names) != len(found):
            seen: set = set()
            raise _Twice(next(k for k, _ in found if k in seen or seen.add(k)))
        return names
    try:
        json.loads(text, object_pairs_hook=pairs)
    except _Twice as e:
        return e.args[0]
    return None


class _Twice(Exception):
    """A name an object holds twice, carried out of json.loads."""


def parse_json(data: str | bytes, source: str, error: type[IRSurgeonError], most_members: int | None = None,
               once: bool = False):
    """json.loads within the depth and number-size limits; any failure is `error` naming source, never quoting it.
    most_members: the most entries its top level may list, counted before it is parsed. once: every name appears
    once in each object of the first two levels (Python's json keeps the last of two equal names, silently)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    scan = json_scan(raw, most_members)
    del raw
    if scan.excess:
        raise error(f"{source}: {scan.excess}")
    try:
        value = json.loads(data)
    except RecursionError:  # unreachable after the scan; kept so that no input can turn it into a crash
        raise error(f"{source}: is JSON nested deeper than {JSON_MAX_DEPTH} levels") from None
    except json.JSONDecodeError as e:
        raise error(f"{source}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:  # bytes given: json.loads detects UTF-8/16/32
        raise error(f"{source}: not valid JSON text (undecodable byte at offset {e.start})") from None
    if once and parsed_members(value) != scan.members:  # the scan counted a name json.loads dropped
        name = twice_named(data)
        shown = "a name" if name is None else repr(name) if len(name) <= 120 else \
            f"{name[:120]!r}... ({len(name)} characters)"
        raise error(f"{source}: names {shown} twice in one object; expected each name once")
    return value


def read_json(path: str | Path, error: type[IRSurgeonError], limit: int | None = None):
    """A bounded JSON file (limit: json_limit(path) unless given)."""
    text = read_text(path, json_limit(path) if limit is None else limit, error, "JSON")
    return parse_json(text, str(path), error)


# --- memory budget ------------------------------------------------------------------------------------------------
# Before an allocation whose size comes from a header or a config, the caller states a lower bound of what the step
# must hold at once and check_memory compares it with what the kernel can still hand out: MemAvailable + SwapFree
# from /proc/meminfo (os.sysconf's available pages where there is no /proc), capped by the cgroup v2 limit left.
# The margin is on the side of going on: nothing is reserved, and the need is a lower bound, so a refusal means the
# step could not have finished, and a model that fits is never refused. Without it an absurd but consistent header
# (a sparse file holding what it claims) would be read into memory until the OOM killer ends the process.

def available_memory() -> int | None:
    """Bytes this process can still allocate, or None when the platform does not say."""
    found = [m for m in (_meminfo_available(), _cgroup_available()) if m is not None]
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(found)


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return sum(int(fields[k].split()[0]) * 1024 for k in ("MemAvailable", "SwapFree") if k in fields) \
            if "MemAvailable" in fields else None
    except (OSError, ValueError):
        return None


def _cgroup_available() -> int | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            rel = next((ln.strip()[3:] for ln in f if ln.startswith("0::")), None)
        if rel is None:
            return None
        base = Path("/sys/fs/cgroup") / rel.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((base / "memory.current").read_text()))
    except (OSError, ValueError):
        return None


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


def check_memory(nbytes: int, what: str, error: type[IRSurgeonError]) -> None:
    """Refuse a step that needs more than the memory available; `what` names it ("tensor 'x' of file y")."""
    available = available_memory()
    if available is not None and nbytes > available:
        raise error(f"{what} needs {human(nbytes)} of memory, but only {human(available)} is available")


# `synth`'s sizes: far above its tiny fixtures, low enough that a mistyped size cannot make a file of many GB
SYNTH_SIZE_LIMITS = {"layers": 64, "hidden": 8192, "heads": 256, "kv_heads": 256, "head_dim": 1024, "vocab": 1 << 18}

# A repo whose config.json names no family has its single weight file fetched to see what it holds (a SafeAILab
# EAGLE-3 upload labelled LlamaForCausalLM, weights/hub/partial.py fetch_to_judge): up to this size. The largest
# published EAGLE-3 draft (a Llama-3.3-70B target's: fc [8192, 24576], one layer, a 32000-row head) is about 3 GiB
# in bf16, 6 GiB in f32.
JUDGE_FETCH_BYTES = 8 << 30
