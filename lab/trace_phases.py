"""Run the real `irsurgeon` CLI with wall-clock spans around the house's functions; write the time per phase.

    [IRSURGEON_ROOT=DIR] python lab/trace_phases.py OUT.json patch TARGET --checkpoint CKPT --weight-format f16

Nothing of the flow is re-implemented: the functions below are wrapped in place (the attribute of every loaded module
that holds them, and class attributes), then `irsurgeon.cli.main` runs with the remaining arguments. Time is
exclusive: a span stops its caller's clock, so the phases add up to the child's run from this script's start to its
exit (what is outside every span is `startup` before `patch()` is entered and `other` after). A sub-phase wrapper
(fsync, sha256, openvino's compile/read/infer/serialize) is labelled `<enclosing phase>: <what>`.
A module imported for the first time inside a span (nncf for int4, openvino in a lazy reader) counts as `import`.

OUT.json: {"phases": {label: wall seconds}, "cpu": {label: CPU seconds}, "background": {label: wall seconds in
other threads, overlapping the phases}, "calls": {label: count}, "order": [labels as first entered], "rc": exit
code, "io": /proc/self/io as the child exits, "vmhwm": peak RSS in bytes (VmHWM), "missing": wrapped names the
irsurgeon run does not have}. IRSURGEON_ROOT: the checkout whose irsurgeon runs (default: this one), e.g. an older
revision unpacked elsewhere, to compare phase by phase.
"""
from __future__ import annotations

import atexit
import builtins
import functools
import importlib
import json
import os
import sys
import threading
import time
from pathlib import Path

START = time.perf_counter()
ROOT = Path(os.environ.get("IRSURGEON_ROOT") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

# (module, attribute or Class.method, phase): the house's functions by phase, in the order patch calls them
SPANS = [
    ("irsurgeon.flows.patch", "patch", "other"),  # ends `startup`; the flow's own glue is `other`
    ("irsurgeon.flows.patch", "clear_interrupted", "commit"),
    ("irsurgeon.flows.patch", "inspect", "inspect"),
    ("irsurgeon.flows.patch", "is_done", "inspect"),
    ("irsurgeon.flows.patch", "pair", "identity"),
    ("irsurgeon.flows.patch", "plan", "inspect"),
    ("irsurgeon.draft.load", "load_with", "load"),
    ("irsurgeon.weights.safetensors_io", "SafetensorsFile._read_into", "read"),
    ("irsurgeon.weights.safetensors_io", "SafetensorsFile._pread", "read"),
    ("irsurgeon.weights.safetensors_io", "bf16_to_f32", "convert"),
    ("irsurgeon.weights.spec", "round_rows", "convert"),
    ("irsurgeon.weights.spec", "decode_slice", "convert"),
    ("irsurgeon.weights.spec", "read_tensor", "convert"),
    ("irsurgeon.weights.half", "round_slice", "convert"),
    ("irsurgeon.weights.half", "bf16_slice", "convert"),
    ("irsurgeon.weights.half", "to_half", "convert"),
    ("irsurgeon.draft.build", "build_model", "graph"),
    ("irsurgeon.families.qwen35_mtp.patch", "finish_head", "graph"),
    ("irsurgeon.quant.compress", "compress_model", "compress"),
    ("irsurgeon.draft.save", "stage_ir", "save"),
    ("irsurgeon.families.qwen35_mtp.patch", "smoke_test", "smoke test"),
    ("irsurgeon.families.qwen35_mtp.patch", "stage_annotation", "annotation"),
    ("irsurgeon.families.qwen35_mtp.patch", "stage_openvino_config", "annotation"),
    ("irsurgeon.commit.transaction", "DirectoryTransaction.__enter__", "commit"),
    ("irsurgeon.commit.transaction", "DirectoryTransaction.commit", "commit"),
    ("irsurgeon.commit.transaction", "DirectoryTransaction.__exit__", "commit"),
    ("irsurgeon.flows.patch", "confirm", "verify"),
]
# sub-phases: labelled after the phase they run in
SUBSPANS = [
    ("os", "fsync", "fsync"),
    ("irsurgeon.commit.journal_format", "digest", "sha256"),
    ("openvino", "Core.read_model", "read_model"),
    ("openvino", "Core.compile_model", "compile"),
    ("openvino", "InferRequest.infer", "infer"),
    ("openvino", "save_model", "serialize"),
]


class Clock:
    """Exclusive wall time per label: entering a span stops the enclosing label's clock, leaving restarts it. The
    process's CPU time (all threads) is kept the same way: on a shared machine it moves less than the wall."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.stack = ["startup"]
        self.since, self.cpu_since = START, 0.0

    def _tick(self) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        label = self.stack[-1] if len(self.stack) > 1 or not self.calls else "other"  # the base after a span: other
        self.totals[label] = self.totals.get(label, 0.0) + now - self.since
        self.cpu[label] = self.cpu.get(label, 0.0) + cpu - self.cpu_since
        self.since, self.cpu_since = now, cpu

    def enter(self, label: str) -> None:
        self._tick()
        self.stack.append(label)
        self.calls[label] = self.calls.get(label, 0) + 1

    def leave(self) -> None:
        self._tick()
        self.stack.pop()

    @property
    def phase(self) -> str:
        return self.stack[-1].split(": ")[0]


CLOCK = Clock()


BACKGROUND: dict[str, float] = {}  # wall seconds of wrapped calls made by other threads (overlapping the phases)


def spanned(fn, label):
    """fn timed under `label` (a str, or a callable of the enclosing phase giving it); a call from another thread
    than the main one is only added up in BACKGROUND."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                what = label if isinstance(label, str) else label("background")
                BACKGROUND[what] = BACKGROUND.get(what, 0.0) + time.perf_counter() - start
        CLOCK.enter(label if isinstance(label, str) else label(CLOCK.phase))
        try:
            return fn(*args, **kwargs)
        finally:
            CLOCK.leave()
    return wrapper


MISSING: list[str] = []


def install(module: str, attr: str, label) -> None:
    """Wrap module.attr (or module.Class.method) wherever it is reachable: the defining module, the class, and every
    loaded module that imported the function by name. A name this revision lacks is listed in MISSING."""
    mod = importlib.import_module(module)
    owner, name = (getattr(mod, attr.split(".")[0], None), attr.split(".")[1]) if "." in attr else (mod, attr)
    if owner is None or not hasattr(owner, name):
        MISSING.append(f"{module}.{attr}")
        return
    if owner is not mod:
        setattr(owner, name, spanned(getattr(owner, name), label))
        return
    original = getattr(mod, attr)
    wrapped = spanned(original, label)
    for m in list(sys.modules.values()):
        if m is not None and vars(m).get(attr) is original:
            setattr(m, attr, wrapped)


def lazy_imports() -> None:
    """A top-level module first imported inside a span is `import` time (nncf under int4's compress)."""
    real = builtins.__import__

    def traced(name, globals=None, locals=None, fromlist=(), level=0):
        if level or name.partition(".")[0] in sys.modules or not CLOCK.calls or \
                threading.current_thread() is not threading.main_thread():
            return real(name, globals, locals, fromlist, level)
        CLOCK.enter("import")
        try:
            return real(name, globals, locals, fromlist, level)
        finally:
            CLOCK.leave()
    builtins.__import__ = traced


def dump(out: Path, rc: list[int]) -> None:
    CLOCK._tick()
    with open("/proc/self/io") as io, open("/proc/self/status") as status:
        counters = dict(line.split(":", 1) for line in io.read().splitlines())
        hwm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM"))
    out.write_text(json.dumps({"phases": CLOCK.totals, "cpu": CLOCK.cpu, "calls": CLOCK.calls, "background": BACKGROUND, "order": list(CLOCK.totals), "rc": rc[0],
                               "missing": MISSING, "io": {k: int(v) for k, v in counters.items()}, "vmhwm": hwm}))


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1].startswith("-"):
        raise SystemExit(f"usage: {__doc__.splitlines()[2].strip()}")  # OUT.json first: `--help` is no file name
    out, args = Path(sys.argv[1]), sys.argv[2:]
    rc = [0]
    atexit.register(dump, out, rc)
    # the modules patch would import lazily are imported here so their functions can be wrapped (still `startup`)
    for module, _, _ in SPANS + SUBSPANS:
        importlib.import_module(module)
    for module, attr, label in SPANS:
        install(module, attr, label)
    for module, attr, what in SUBSPANS:
        install(module, attr, lambda phase, what=what: f"{phase}: {what}")
    lazy_imports()
    from irsurgeon.cli import main as cli

    sys.argv = ["irsurgeon", *args]
    try:
        cli()
    except SystemExit as e:
        rc[0] = e.code if isinstance(e.code, int) else 1
        raise


if __name__ == "__main__":
    main()
