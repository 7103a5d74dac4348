"""Hostile input files and a judge for what a command does with them.

A Lab holds pristine copies of the demo checkpoint (single file and sharded), the demo target and a patched target.
A Case names one input file, one way to make it hostile (a `FORMS` entry) and one command; `Lab.run` makes a fresh
copy, applies the form, runs the real CLI in a subprocess with a timeout and judges the outcome (`Outcome`):
success, or exit 1 with exactly one `Error:` line; no traceback, no "unexpected" fallback, no signal death, no hang,
no peak RSS above `RSS_LIMIT`, no byte of a linked-to file echoed, nothing changed outside the command's output.

Forms cost nothing on disk: a 2 GiB file is sparse, a FIFO is os.mkfifo, a device is a link to /dev/zero.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
DEMO_TARGET = ROOT / "fixtures" / "demo" / "target"
DEMO_CKPT = ROOT / "fixtures" / "demo" / "ckpt"
CLI = "import sys; from irsurgeon.entry import run; sys.argv[0] = 'irsurgeon'; run()"  # the console script
TIMEOUT = 60.0
RSS_LIMIT = 2 << 30
CANARY = "CANARY-7f3a-secret-bytes"
SPARSE = (2 << 30) + 4096


def env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "IRSURGEON_DEBUG": ""}


# --- forms: each makes the file at `path` hostile (its pristine version is there) ---------------------------------

def fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def sparse(path: Path) -> None:
    """The real content, then zeros up to 2 GiB (no blocks written)."""
    os.truncate(path, SPARSE)


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def secret_link(path: Path) -> None:
    """A link to another file whose bytes must never reach an error message."""
    secret = path.parent.parent / "secret.txt"
    secret.write_text(f"{CANARY}\n" * 4)
    path.unlink()
    path.symlink_to(secret)


def secret_json_link(path: Path) -> None:
    secret = path.parent.parent / "secret.json"
    secret.write_text(json.dumps({CANARY: CANARY, "token": CANARY}))
    path.unlink()
    path.symlink_to(secret)


def not_utf8(path: Path) -> None:
    path.write_bytes(b'{"a": "\xff\xfe' + CANARY.encode() + b'"}')


def deep_json(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def deep_object(path: Path) -> None:
    """A config whose text_config is 100 levels of objects: under Python's recursion limit, over ours."""
    data = json.loads(path.read_text())
    node = data
    for _ in range(100):
        node["text_config"] = {}
        node = node["text_config"]
    path.write_text(json.dumps(data))


def huge_int(path: Path) -> None:
    """A 5000-digit integer: Python's int() refuses more than 4300 digits with a ValueError."""
    text = path.read_text().rstrip()[:-1].rstrip()
    path.write_text(text + ("" if text.endswith("{") else ",") + ' "x_huge": ' + "9" * 5000 + "}")


JSON_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory,
              "secret-link": secret_link, "secret-json-link": secret_json_link, "not-utf8": not_utf8,
              "deep-array": deep_json, "deep-object": deep_object, "huge-int": huge_int}


def header(path: Path, edit: Callable[[dict], object]) -> None:
    """Rewrite a safetensors header (same data after it) with edit(header); the string "HUGE" becomes a
    5000-digit integer (which Python itself will not even print)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    raw = json.dumps(edit(json.loads(data[8:8 + n]))).replace('"HUGE"', "9" * 5000).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def header_raw(path: Path, raw: bytes) -> None:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def _with_shape(h: dict, shape) -> dict:
    name = next(k for k in h if k.startswith("mtp."))
    h[name]["shape"] = shape
    return h


SAFETENSORS_FORMS = {
    "fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory, "secret-link": secret_link,
    "header-deep": lambda p: header_raw(p, b"[" * 100_000 + b"]" * 100_000),
    "header-huge-int": lambda p: header(p, lambda h: _with_shape(h, ["HUGE"])),
    "header-40-digit-int": lambda p: header(p, lambda h: _with_shape(h, [10 ** 39, 10 ** 39])),
    "header-not-utf8": lambda p: header_raw(p, b'{"\xff\xfe' + CANARY.encode() + b'": 1}'),
    "header-secret-values": lambda p: header(p, lambda h: {**h, next(k for k in h if k.startswith("mtp.")): {
        "dtype": CANARY, "shape": CANARY, "data_offsets": CANARY}}),
}


def xml_edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data, old
    path.write_bytes(data.replace(old, new, 1))


def _rt_info(path: Path, element: bytes) -> None:
    """Add an element first in the net-level rt_info (the one after </edges>), replacing one of the same name."""
    data = path.read_bytes()
    at = data.index(b"<rt_info>", data.rindex(b"</edges>")) + len(b"<rt_info>")
    name = element.split(b" ", 1)[0]
    old = data.find(b"\t\t" + name + b" ", at)
    if old >= 0:
        data = data[:old] + data[data.index(b"\n", old) + 1:]
    path.write_bytes(data[:at] + b"\n\t\t" + element + data[at:])


XML_FORMS = {
    "fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "directory": directory, "secret-link": secret_link,
    "offset-30-digits": lambda p: xml_edit(p, b'offset="', b'offset="' + b"9" * 30),
    "offset-5000-digits": lambda p: xml_edit(p, b'offset="', b'offset="' + b"9" * 5000),
    "version-5000-digits": lambda p: xml_edit(p, b'version="11"', b'version="' + b"1" * 5000 + b'"'),
    "char-ref-huge": lambda p: _rt_info(p, b'<aaa value="&#99999999999999;" />\n'),
    "char-ref-surrogate": lambda p: _rt_info(p, b'<aaa value="&#55296;" />\n'),
    "annotation-deep": lambda p: _rt_info(p, b'<hidden_states_decoder_layers value="' + b"[" * 50_000
                                          + b"]" * 50_000 + b'" />\n'),
    "annotation-huge-int": lambda p: _rt_info(p, b'<hidden_states_decoder_layers value="{&quot;layers&quot;:{&quot;'
                                              + b"9" * 5000 + b'&quot;:{&quot;producer&quot;:&quot;x&quot;,'
                                              b'&quot;output_index&quot;:0}}}" />\n'),
    "rt-info-deep-500": lambda p: _rt_info(p, b"<a>" * 500 + b'<b value="1" />' + b"</a>" * 500 + b"\n"),
    "rt-info-deep-100000": lambda p: _rt_info(p, b"<a>" * 100_000 + b'<b value="1" />' + b"</a>" * 100_000 + b"\n"),
    "name-5000-digits": lambda p: _layer_name(p, b"9" * 5000 + b"."),
    "name-superscript-digit": lambda p: _layer_name(p, "².".encode()),
    "name-char-ref-huge": lambda p: _layer_name(p, b"&#99999999999999;"),
    "name-char-ref-hex-surrogate": lambda p: _layer_name(p, b"&#xD800;"),
}


def _layer_name(path: Path, insert: bytes) -> None:
    """Insert bytes into the first layer's name after the `__module.` prefix of layer names (if it has one)."""
    data = path.read_bytes()
    at = data.find(b'name="__module.')
    at = at + len(b'name="__module.') if at >= 0 else data.index(b'name="', data.index(b"<layer ")) + len(b'name="')
    path.write_bytes(data[:at] + insert + data[at:])

BIN_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "directory": directory, "sparse-2GiB": sparse}


def lm_model(**values) -> Callable[[Path], None]:
    """openvino_config.json whose quantization_configs.lm_model holds `values` over an int4 entry."""
    def form(path: Path) -> None:
        entry = {"bits": 4, "sym": False, "group_size": 32, "ratio": 1.0, "backup_precision": None,
                 "all_layers": None, **values}
        path.write_text(json.dumps({"quantization_config": {"quantization_configs": {"lm_model": entry}}}))
    return form


OPENVINO_CONFIG_FORMS = {
    **JSON_FORMS,
    **{f"lm_model-{k}={json.dumps(v)[:20]}": lm_model(**{k: v}) for k, v in [
        ("bits", "4"), ("bits", 4.0), ("bits", True), ("bits", None), ("bits", [4]), ("group_size", "64"),
        ("group_size", 1e300), ("group_size", 10 ** 30), ("group_size", 48), ("group_size", 64.5), ("ratio", "x"),
        ("ratio", [1]), ("ratio", 1e309), ("ratio", 10 ** 30), ("ratio", -1), ("sym", "false"), ("sym", 1),
        ("backup_precision", 5), ("backup_precision", CANARY), ("all_layers", "yes"), ("all_layers", {})]},
    "lm_model-list": lambda p: p.write_text(json.dumps({"quantization_config": {"quantization_configs": {
        "lm_model": [4]}}})),
}

PROMPT_FORMS = {"fifo": fifo, "dev-zero": dev_zero, "sparse-2GiB": sparse, "not-utf8": not_utf8,
                "secret-link": secret_link}


# --- where each input lives and which commands read it ------------------------------------------------------------

# input -> (path in the lab, forms, commands)
INPUTS = {
    "ckpt config.json": ("ckpt/config.json", JSON_FORMS, ("build-mtp", "patch")),
    "index": ("sharded/model.safetensors.index.json", JSON_FORMS, ("build-mtp", "patch")),
    "model.safetensors": ("ckpt/model.safetensors", SAFETENSORS_FORMS, ("build-mtp", "patch")),
    "shard": ("sharded/model-2.safetensors", SAFETENSORS_FORMS, ("build-mtp",)),
    "target config.json": ("target/config.json", JSON_FORMS, ("show", "annotate", "patch")),
    "language model .xml": ("target/openvino_language_model.xml", XML_FORMS, ("show-xml", "show", "annotate",
                                                                               "patch")),
    "language model .bin": ("target/openvino_language_model.bin", BIN_FORMS, ("show-xml", "annotate", "patch")),
    "tokenizer .xml": ("target/openvino_tokenizer.xml", XML_FORMS, ("show",)),
    "patched language model .xml": ("patched/openvino_language_model.xml", XML_FORMS, ("verify", "patch")),
    "mtp .xml": ("patched/openvino_mtp_model.xml", XML_FORMS, ("show-xml", "verify", "patch")),
    "openvino_config.json": ("target/openvino_config.json", OPENVINO_CONFIG_FORMS, ("patch", "build-mtp-auto")),
    "prompts file": ("prompts.txt", PROMPT_FORMS, ("verify-prompts",)),
    "generation_config.json": ("patched/generation_config.json", BIN_FORMS, ("verify-genai",)),  # genai reads it
}


@dataclass(frozen=True)
class Case:
    input: str
    form: str
    command: str

    def __str__(self) -> str:
        return f"{self.input} / {self.form} / {self.command}"


def all_cases() -> list[Case]:
    return [Case(name, form, command) for name, (_, forms, commands) in INPUTS.items() for form in forms
            for command in commands]


# --- running and judging ------------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: str
    code: int | None
    stderr: str
    seconds: float
    peak_rss: int
    problems: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.code == 1 and not self.problems


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> what it is, never reading a special or large file (hash for regular files under 64 MB)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        elif not p.is_file():
            out[rel] = f"special:{st.st_mode:o}"
        elif st.st_size > 64 << 20:
            out[rel] = f"size:{st.st_size}:{st.st_mtime_ns}"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# The child writes its own peak RSS (VmHWM) as it exits: the rusage of a child counts the parent's pages it started
# from (Linux records the pre-exec mm's high-water mark), so it cannot measure a small child of a large parent.
MEASURED = ("import atexit, os\n"
            "def _hwm(path=os.environ['HOSTILE_HWM']):\n"
            "    with open('/proc/self/status') as s, open(path, 'w') as f:\n"
            "        f.write(next(l for l in s if l.startswith('VmHWM')).split()[1])\n"
            "atexit.register(_hwm)\n") + CLI


def run_cli(args: list[str], timeout: float = TIMEOUT) -> tuple[int | None, str, str, float, int]:
    """(exit code or None when it hung, stdout, stderr, seconds, peak RSS bytes) of the CLI in a subprocess;
    a negative code is the signal that ended it (then the peak is the last one seen while it ran)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile("r") as hwm:
        proc = subprocess.Popen([sys.executable, "-c", MEASURED, *args], env={**env(), "HOSTILE_HWM": hwm.name},
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)
        seen = 0
        try:
            proc.wait(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            seen = _vm_hwm(proc.pid)
            proc.kill()
            proc.wait()
            code = None
        out.seek(0)
        err.seek(0)
        reported = hwm.read().strip()
        peak = int(reported) * 1024 if reported.isdigit() else seen
        return code, out.read(), err.read(), time.perf_counter() - start, peak


def _vm_hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            return int(next(ln for ln in status if ln.startswith("VmHWM")).split()[1]) * 1024
    except (OSError, StopIteration, ValueError):
        return 0


def judge(case: str, code: int | None, out: str, err: str, seconds: float, peak: int, changed: list[str],
          allow_usage_error: bool = False) -> Outcome:
    o = Outcome(case, code, err, seconds, peak)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if code is None:
        o.problems.append(f"hung: no exit within {TIMEOUT:.0f} s")
    elif code < 0 or code > 128:
        o.problems.append(f"killed by signal {-code if code < 0 else code - 128} (exit {code})")
    elif code not in (0, 1) and not (allow_usage_error and code == 2):
        o.problems.append(f"exit {code}: {err.strip()[-200:]}")
    if "Traceback" in err or "unexpected" in err:
        o.problems.append(f"traceback or unexpected error: {lines[-1] if lines else ''}")
    elif code == 1 and not (len(lines) == 1 and lines[0].startswith("Error: ")):
        o.problems.append(f"not one Error: line: {err.strip()[:300]!r}")
    elif code == 2 and allow_usage_error and not (lines and lines[-1].startswith("Error: ")):
        o.problems.append(f"usage error without an Error: line: {err.strip()[:300]!r}")
    if CANARY in err or CANARY in out:
        o.problems.append("echoed bytes of a linked-to file")
    if peak > RSS_LIMIT:
        o.problems.append(f"peak RSS {peak / 2**30:.1f} GiB")
    if changed:
        o.problems.append(f"changed outside its output: {changed[:4]}")
    return o


class Lab:
    """Pristine inputs made once; every case runs on a fresh copy in its own folder."""

    def __init__(self, root: Path):
        self.root = root
        self.pristine = root / "pristine"
        self.pristine.mkdir(parents=True)
        shutil.copytree(DEMO_CKPT, self.pristine / "ckpt")
        shutil.copytree(DEMO_TARGET, self.pristine / "target")
        (self.pristine / "target" / "openvino_config.json").write_text("{}")
        _sharded(self.pristine / "sharded")
        shutil.copytree(DEMO_TARGET, self.pristine / "patched")
        (self.pristine / "prompts.txt").write_text("The capital of France is\n")
        from irsurgeon.patch import patch
        patch(self.pristine / "patched", self.pristine / "ckpt", echo=lambda _line: None)
        self.count = 0

    def fresh(self) -> Path:
        self.count += 1
        work = self.root / f"case{self.count}"
        shutil.copytree(self.pristine, work, symlinks=True)
        return work

    def run(self, case: Case) -> Outcome:
        rel, forms, _ = INPUTS[case.input]
        work = self.fresh()
        try:
            forms[case.form](work / rel)
            args, output = command_args(case.command, work, work / rel)
            before = snapshot(work)
            code, out, err, seconds, peak = run_cli(args)
            after = snapshot(work)
            allowed = output if code == 0 else None
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)
                             and not (allowed and (k == allowed or k.startswith(allowed + "/"))))
            return judge(str(case), code, out, err, seconds, peak, changed, case.command == "verify-prompts")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def command_args(command: str, work: Path, victim: Path) -> tuple[list[str], str | None]:
    """CLI arguments of a command reading `victim`, and the folder it may change when it succeeds."""
    ckpt = work / ("sharded" if "sharded" in victim.parts else "ckpt")
    target = work / ("patched" if "patched" in victim.parts else "target")
    table = {
        "show": (["show", target], None),
        "show-xml": (["show", victim], None),
        "build-mtp": (["build-mtp", ckpt, "-o", work / "out"], "out"),
        "build-mtp-auto": (["build-mtp", ckpt, "-o", work / "out", "--weight-format", "auto", "--target", target],
                           "out"),
        "annotate": (["annotate", target], target.name),
        "patch": (["patch", target, "--checkpoint", ckpt], target.name),
        "verify": (["verify", target], None),
        "verify-prompts": (["verify", work / "patched", "--prompts", victim], None),
        "verify-genai": (["verify", target, "--genai", "--prompts", "1", "--sweep", "1", "--max-new-tokens", "4"],
                         None),
    }
    args, output = table[command]
    return [str(a) for a in args], output


def _sharded(directory: Path) -> None:
    """The demo checkpoint in two shards with an index: the mtp.* tensors alone in the second."""
    from irsurgeon.weights.safetensors_io import SafetensorsFile, write_safetensors

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


# --- an absurd but consistent checkpoint ----------------------------------------------------------------------------

def absurd_checkpoint(directory: Path, hidden: int = 1 << 17) -> int:
    """A config at hidden_size `hidden` (config.py's bound) and a sparse model.safetensors whose header matches it
    exactly: every check of shapes and offsets passes, and the file really holds the bytes (as zeros). Returns the
    file's size."""
    from irsurgeon.config import parse_config
    from irsurgeon.weights.spec import MTP_PREFIX, dense_shapes

    directory.mkdir(parents=True)
    cfg = json.loads((DEMO_CKPT / "config.json").read_text())
    tc = cfg["text_config"]
    tc.update(hidden_size=hidden, intermediate_size=hidden, num_attention_heads=hidden // 64, num_key_value_heads=2,
              head_dim=64)
    (directory / "config.json").write_text(json.dumps(cfg))
    offset, entries = 0, {}
    for name, shape in sorted(dense_shapes(parse_config(cfg)).items()):
        nbytes = 2 * math.prod(shape)
        entries[MTP_PREFIX + name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(entries).encode()
    path = directory / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)
    return 8 + len(raw) + offset


# --- a checkpoint truncated while a build reads it ------------------------------------------------------------------

def truncation_race(directory: Path, keep: float) -> Outcome:
    """build-mtp in a subprocess on a hidden-1024 bf16 checkpoint; once the build has the file open, it is truncated
    from here to `keep` of its size. With a memory-mapped reader this died of SIGBUS (exit -7)."""
    from irsurgeon.synth.checkpoint import SynthSpec, write_checkpoint

    ckpt = directory / "ckpt"
    write_checkpoint(ckpt, SynthSpec(hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=3072), seed=2)
    st = ckpt / "model.safetensors"
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", CLI, "build-mtp", str(ckpt), "-o", str(directory / "out")],
                                env=env(), stdout=subprocess.DEVNULL, stderr=err, text=True)
        wait_until_open(proc.pid, st)
        os.truncate(st, int(st.stat().st_size * keep))
        try:
            code = proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        err.seek(0)
        text = err.read()
    changed = ["out"] if (directory / "out").exists() and code != 0 else []
    return judge(f"checkpoint truncated to {keep:.0%} during build-mtp", code, "", text,
                 time.perf_counter() - start, 0, changed)


def wait_until_open(pid: int, path: Path, timeout: float = TIMEOUT) -> None:
    target = str(path.resolve())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return
        except OSError:  # an fd closed between listing and reading it
            pass
        time.sleep(0.002)
    raise AssertionError(f"process {pid} never opened {path}")
