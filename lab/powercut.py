"""The power-cut lab: the states a power cut may leave a target in while `irsurgeon patch` runs, built on copies and
handed to the next command.

A kill leaves every write in the page cache, which the kernel still writes out; a power cut keeps only what reached
the disk, in an order the file system chooses within its rules. After the methods of ALICE (T. S. Pillai et al., "All
File Systems Are Not Created Equal: On the Complexity of Crafting Crash-Consistent Applications", OSDI 2014) and
CrashMonkey (J. Mohan et al., "Finding Crash-Consistency Bugs with Bounded Black-Box Crash Testing", OSDI 2018):

 1. record   `patch` runs under `strace -f -yy` (every file, descriptor, sync, rename, link, unlink, mkdir and rmdir
             call of every thread, descriptors resolved to paths), through RUNNER: a wrapper of os.fsync,
             os.fdatasync and os.sync that, just before each sync the main thread makes on a file or folder of the
             target, creates a marker file (seen in the trace) and snapshots the target from inside the process
             (every entry's kind, mode, device, inode and bytes: what the kernel holds at that moment); once more at
             the start and after the command's end.
 2. model    the trace's calls inside the target become operations in order (Op): namespace operations (create,
             mkdir, symlink, link, rename, unlink, rmdir), data operations (write, truncate, mode change) and syncs,
             each bound to the model inode it acts on and to the folder inodes its names are in, by replaying them
             over the target's tree.
 3. states   at each crash point (just before each marked sync, and after the end) the rules below give, in a
             bounded and deterministic way, the trees the disk may hold: which namespace operations survived, and
             what each file not yet fsynced holds.
 4. check    each state is materialised on a fresh folder, twice: recovery (what every writing command runs first:
             irsurgeon.commit.transaction.clear_interrupted) must leave it byte-identical to the original or to the
             result of the uninterrupted patch, and never refuse it; `irsurgeon verify` must not call it ready unless
             its files are the complete patch's with no commit pending; `irsurgeon patch` again must exit 0 and leave
             the uninterrupted result byte for byte. A file of the original target written, truncated or given
             another mode in place is a finding of its own (a power cut may tear it).

Rules, ext4 data=ordered (the model `ext4`; ALICE Table 1 and section 2.2 for ext4 in its default mode; the kernel's
Documentation/admin-guide/ext4.rst for data=ordered and auto_da_alloc; fsync(2) for what one fsync covers):
  E1 order    namespace operations are journaled by jbd2 in the order they are made: a power cut leaves a prefix of
              them (ALICE's ext4 data=ordered model persists directory operations in order).
  E2 syncs    an fsync of a folder, or sync/syncfs, makes every namespace operation made before it durable (a jbd2
              commit takes every earlier transaction with it). An fsync of a file makes its bytes, size and mode
              durable and, here, nothing else: ext4 without fast_commit commits every earlier operation too, so what
              holds in this model holds on ext4 with or without fast_commit. Only syncs of the main thread count:
              another thread's sync lands at a moment that varies from run to run (ignoring it yields more states,
              never fewer).
  E3 data     a file written, truncated or created after its last fsync holds its bytes at the crash complete, cut
              short (a prefix) or empty; never another file's bytes ("data=ordered: all data are forced directly out
              to the main file system prior to its metadata being committed to the journal"). Appends spanning
              blocks are not atomic (ALICE, Table 1).
  E4 replace  auto_da_alloc: a file renamed over an existing name has the data written before the rename flushed
              before the rename commits ("the data blocks of the new file are forced to disk before the rename()
              operation is committed").
  E5 atomic   a rename is atomic: the name holds the old or the new file, never neither (ALICE, Table 1: ext4's
              directory operations are atomic).
Rules of the stricter model `reordered` (beyond ext4: what fsync(2) promises and no more, as a file system that
writes directory blocks back in any order would give; E3 and E5 kept, E1, E2 and E4 replaced):
  R1 a namespace operation is durable once the folder receiving its name (a rename's destination, an unlink's or a
     rmdir's folder) is fsynced after it, or after sync. fsync(2): "Calling fsync() does not necessarily ensure that
     the entry in the directory containing the file has also reached disk. For that an explicit fsync() on a file
     descriptor for the directory is also needed."
  R2 the others persist in any order, except that operations on one and the same entry (a name in one folder inode)
     keep theirs. A rename whose source entry did not persist names its inode at its destination all the same; the
     entries of a folder whose own entry did not persist are unreachable.
  R3 no auto_da_alloc.

Bounds (deterministic): at each crash point, the namespace operations not yet durable (in order) give the metadata
choices: ext4, each prefix of them; reordered, each prefix, each "all but one (and the later operations on its
names)", each "one alone (with the earlier operations on its names)". Under every metadata choice the files not
yet fsynced are all complete, all empty or all cut (at half their size, a multiple of 4 KiB beyond 8 KiB); under the
fullest choice also each one alone empty or cut; a file with durable bytes from before (an fsync, or the original
target's) that was rewritten since may also hold those. A crash anywhere between two syncs leaves one of the states
of the crash point that ends that stretch: its prefixes are the earlier moments, the cut and empty forms the writes
under way.

Identities: a power cut keeps inode numbers; a copy does not, and the journal binds itself to the staging folder,
the subfolders and the files by device and inode. Each materialised state's journal (and `committed`) therefore has
those identities translated to the copy's (a one-to-one map through the model's inodes; a recorded file the state
does not hold gets inode 0, which no file has), re-encoded by irsurgeon's own encoder; nothing else of it changes.

A power cut during the next run's own recovery: PowerCutLab.after_power_cut records the next `patch` on one of the
states (pending_commit: a journal still pending, the most files moved in) and gives its crash points the same
treatment, judged by the first patch's original and complete results.

Not modelled: file systems other than ext4 data=ordered (the `reordered` model is a stricter stand-in, not any
particular one), hardware or virtual disks that acknowledge a flush they have not made, torn sectors inside a
file's durable range.
The figures of the last runs: docs/reliability.md. tests/test_powercut.py runs it.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from irsurgeon.commit import journal_format
from lab.dirsnap import digest
from lab.families import WRITABLE
from lab.kills import child_env, files_only, patch_args, run_cli

ROOT = Path(__file__).resolve().parents[1]
STAGE_DIR = journal_format.STAGE_DIR
MODELS = ("ext4", "reordered")
STRACE_CALLS = ("file,desc,fsync,fdatasync,sync,syncfs,rename,renameat,renameat2,unlink,unlinkat,mkdir,rmdir,link,"
                "symlink")

# The patch, run under strace: marks and snapshots the target just before each sync the main thread makes on it
# (and at the start and the end). $PC_TARGET: the target; $PC_GATE: a folder outside it for markers and snapshots.
RUNNER = r'''
import hashlib, os, pickle, stat, sys, threading
TARGET = os.path.realpath(os.environ["PC_TARGET"])
GATE = os.environ["PC_GATE"]
DROP = set(filter(None, os.environ.get("PC_DROP", "").split(",")))  # names whose fsync is left out (the lab's own test)
SYNCS = {name: getattr(os, name) for name in ("fsync", "fdatasync", "sync")}
count, known = [0], set()

def inside(fd):
    """fd's path relative to the target, or None when it is outside."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return "." if where == TARGET else where[len(TARGET) + 1:] if where.startswith(TARGET + "/") else None

def snapshot(what):
    n = count[0]
    count[0] += 1
    os.close(os.open(f"{GATE}/mark-{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # the crash point, in the trace
    entries, blobs = {}, {}
    for top, dirs, files in os.walk(TARGET):
        for name in ["", *dirs, *files] if top == TARGET else [*dirs, *files]:
            path = os.path.join(top, name) if name else top
            st = os.lstat(path)
            rel = os.path.relpath(path, TARGET) if name else ""
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    data = f.read()
                key = hashlib.sha256(data).hexdigest()
                if key not in known:
                    known.add(key)
                    blobs[key] = data
                body = key
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            else:
                body = None
            kind = "file" if stat.S_ISREG(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else \
                "link" if stat.S_ISLNK(st.st_mode) else "other"
            entries[rel] = (kind, st.st_mode & 0o7777, st.st_dev, st.st_ino, body)
    with open(f"{GATE}/snap-{n}.pickle", "wb") as f:
        pickle.dump({"what": what, "entries": entries, "blobs": blobs}, f)

def marked(name):
    real = SYNCS[name]
    def call(*args):
        where = inside(args[0]) if args else "."
        if threading.current_thread() is threading.main_thread() and where is not None:
            left_out = os.path.basename(where) in DROP
            snapshot(f"{name} {where}{' (left out)' if left_out else ''}")
            if left_out:
                return None
        return real(*args)
    return call

for name in SYNCS:
    setattr(os, name, marked(name))
snapshot("start")
sys.argv = ["irsurgeon", *sys.argv[1:]]
try:
    from irsurgeon.entry import run
    run()
finally:
    snapshot("end")
'''


class ModelError(RuntimeError):
    """The trace holds something the model cannot represent faithfully (said, never guessed around)."""


NAMESPACE = ("create", "mkdir", "symlink", "link", "rename", "unlink", "rmdir")
DATA = ("write", "trunc", "chmod")


@dataclass
class Op:
    """One file-system operation inside the target, in the trace's order. paths are target-relative ('' is the
    target itself): (name,) or, for rename and link, (source, destination)."""
    i: int
    line: int
    pid: int
    main: bool
    kind: str  # NAMESPACE, DATA, "fsync" (a file or folder), "sync" (everything), "mark"
    paths: tuple[str, ...] = ()
    mark: int | None = None
    node: int | None = None  # the model inode it acts on (made, moved, linked, removed, written, synced)
    replaced: int | None = None  # the inode a rename took a name from
    folder: int | None = None  # the folder that receives (or loses) the name: a rename's destination's
    slots: tuple[tuple[int | None, str], ...] = ()  # (folder inode, name) of each of paths when it was made

    @property
    def namespace(self) -> bool:
        return self.kind in NAMESPACE

    def text(self) -> str:
        shown = [p or "." for p in self.paths]
        return f"{self.kind} {' -> '.join(shown)}" if shown else self.kind


# --- the trace --------------------------------------------------------------------------------------------------

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_FD = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>(?:\(deleted\))?$")


def _unquote(token: str) -> str:
    """The string strace printed as "...", escapes decoded (\\n, \\", \\\\, \\xNN, octal)."""
    body = token[1:token.rindex('"')]
    out, i = bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "x":
            out.append(int(body[i + 2:i + 4], 16))
            i += 4
        elif nxt.isdigit():
            j = i + 1
            while j < len(body) and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(int(body[i + 1:j], 8))
            i = j
        else:
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "v": b"\v", "f": b"\f"}.get(nxt, nxt.encode())
            i += 2
    return os.fsdecode(bytes(out))


def _split_call(text: str) -> tuple[str, list[str], str] | None:
    """name, top-level arguments and return text of one complete strace call line."""
    m = re.match(r"^([a-z0-9_]+)\(", text)
    if not m:
        return None
    args, depth, quote, cur, i = [], 0, False, "", m.end()
    while i < len(text):
        c = text[i]
        if quote:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                quote = False
        elif c == '"':
            quote, cur = True, cur + c
        elif c in "([{<":
            depth, cur = depth + 1, cur + c
        elif c in ")]}>" and depth:
            depth, cur = depth - 1, cur + c
        elif c == ")" and not depth:
            if cur.strip():
                args.append(cur.strip())
            rest = text[i + 1:].strip()
            return m.group(1), args, rest[1:].strip() if rest.startswith("=") else rest
        elif c == "," and not depth:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    return None


def _fd_path(token: str) -> str | None:
    m = _FD.match(token)
    return m.group(2) if m else None


def _at(dir_token: str, name_token: str) -> str:
    name = _unquote(name_token)
    if name.startswith("/"):
        if name.startswith("/proc/"):
            raise ModelError(f"a path through /proc the model cannot place: {name}")
        return name
    base = _fd_path(dir_token)
    if base is None:
        raise ModelError(f"a relative path without a resolved directory: {dir_token}, {name}")
    return os.path.join(base, name)


def calls(log: str) -> list[tuple[int, int, str, list[str], str]]:
    """(line number, pid, name, arguments, return text) of every successful call, a call split by another thread's
    (`<unfinished ...>` / `<... resumed>`) joined and placed where it returned."""
    pending: dict[int, str] = {}
    out = []
    for n, raw in enumerate(log.splitlines(), 1):
        m = _LINE.match(raw)
        if not m:
            continue
        pid, text = int(m.group(1)), m.group(2)
        if text.startswith(("+++", "---")):
            continue
        if text.endswith("<unfinished ...>"):
            pending[pid] = text[:-len("<unfinished ...>")].rstrip()
            continue
        resumed = re.match(r"^<\.\.\. [a-z0-9_]+ resumed>\s?(.*)$", text)
        if resumed:
            if pid not in pending:
                continue
            text = pending.pop(pid) + resumed.group(1)
        parsed = _split_call(text)
        if parsed is None:
            continue
        name, args, ret = parsed
        if ret.startswith(("-1", "?")):
            continue
        out.append((n, pid, name, args, ret))
    return out


def parse(log: str, target: Path, gate: Path) -> list[Op]:
    """The operations of a trace inside target (markers of gate included), in order."""
    target_s, gate_s = os.path.realpath(target), os.path.realpath(gate)
    ops: list[Op] = []
    main_pid = None

    def rel(path: str) -> str | None:
        path = os.path.normpath(path)
        if path == target_s:
            return ""
        return os.path.relpath(path, target_s) if path.startswith(target_s + "/") else None

    def add(line, pid, kind, *paths, mark=None):
        inside = [rel(p) for p in paths]
        if any(p is None for p in inside):
            if all(p is None for p in inside):
                return
            raise ModelError(f"line {line}: {kind} across the target's edge: {paths}")
        ops.append(Op(len(ops), line, pid, pid == main_pid, kind, tuple(inside), mark))

    for line, pid, name, args, ret in calls(log):
        main_pid = pid if main_pid is None else main_pid
        if name in ("open", "openat", "creat", "openat2"):
            path = _fd_path(ret)
            flags = {"openat": args[2:3], "openat2": args[2:3], "open": args[1:2]}.get(name, ["O_CREAT|O_TRUNC"])
            flags = flags[0] if flags else ""
            if path is None:
                continue
            if os.path.dirname(os.path.normpath(path)) == gate_s and os.path.basename(path).startswith("mark-"):
                ops.append(Op(len(ops), line, pid, pid == main_pid, "mark", (), int(path.rsplit("-", 1)[1])))
                continue
            if "O_CREAT" in flags:
                add(line, pid, "create?", path)
            if "O_TRUNC" in flags:
                add(line, pid, "trunc", path)
        elif name in ("write", "writev", "pwrite64", "pwritev", "pwritev2", "ftruncate", "fallocate", "fchmod"):
            path = _fd_path(args[0])
            if path is not None:
                add(line, pid, "chmod" if name == "fchmod" else "trunc" if name == "ftruncate" else "write", path)
        elif name in ("sendfile", "copy_file_range"):
            path = _fd_path(args[0] if name == "sendfile" else args[2])
            if path is not None:
                add(line, pid, "write", path)
        elif name == "truncate":
            add(line, pid, "trunc", _unquote(args[0]))
        elif name in ("chmod", "fchmodat"):
            add(line, pid, "chmod", _unquote(args[0]) if name == "chmod" else _at(args[0], args[1]))
        elif name in ("fsync", "fdatasync", "syncfs"):
            path = _fd_path(args[0])
            if path is None:
                continue
            if name == "syncfs":
                ops.append(Op(len(ops), line, pid, pid == main_pid, "sync"))
            else:
                add(line, pid, "fsync", path)
        elif name == "sync":
            ops.append(Op(len(ops), line, pid, pid == main_pid, "sync"))
        elif name in ("rename", "renameat", "renameat2"):
            src, dst = (_unquote(args[0]), _unquote(args[1])) if name == "rename" else \
                (_at(args[0], args[1]), _at(args[2], args[3]))
            if name == "renameat2" and "RENAME_EXCHANGE" in args[4]:
                raise ModelError(f"line {line}: RENAME_EXCHANGE is not modelled")
            add(line, pid, "rename", src, dst)
        elif name in ("link", "linkat"):
            add(line, pid, "link", *((_unquote(args[0]), _unquote(args[1])) if name == "link" else
                                     (_at(args[0], args[1]), _at(args[2], args[3]))))
        elif name in ("symlink", "symlinkat"):
            add(line, pid, "symlink", _unquote(args[1]) if name == "symlink" else _at(args[1], args[2]))
        elif name in ("unlink", "unlinkat", "rmdir"):
            path = _unquote(args[0]) if name != "unlinkat" else _at(args[0], args[1])
            gone = "rmdir" if name == "rmdir" or (name == "unlinkat" and "AT_REMOVEDIR" in args[2]) else "unlink"
            add(line, pid, gone, path)
        elif name in ("mkdir", "mkdirat"):
            add(line, pid, "mkdir", _unquote(args[0]) if name == "mkdir" else _at(args[0], args[1]))
        elif name in ("mmap", "mmap2") and "MAP_SHARED" in args[3] and "PROT_WRITE" in args[2]:
            path = _fd_path(args[4])
            if path is not None and rel(path) is not None:
                raise ModelError(f"line {line}: a file of the target mapped shared and writable: writes unseen")
    return ops


# --- the recording ----------------------------------------------------------------------------------------------

@dataclass
class Snapshot:
    at: int  # the index of its marker op (-1: before the first op)
    what: str
    entries: dict[str, tuple]  # rel -> (kind, mode, dev, ino, sha256 | link text | None)


@dataclass
class Recording:
    target: Path  # the recorded copy, patched
    ops: list[Op]
    snapshots: list[Snapshot]
    blobs: dict[str, bytes]
    returncode: int
    stderr: str


def record(place: Callable[[Path], object], ckpt: Path, where: Path, extra: tuple[str, ...] = (),
           drop: tuple[str, ...] = ()) -> Recording:
    """Lay the target out at where/target (`place`: a copy of a pristine target, or a power-cut state) and patch it
    under strace through RUNNER; the trace's operations and the snapshots at each crash point. drop: names whose
    fsync RUNNER leaves out, as a product missing it would (the lab's proof that it catches one)."""
    strace = shutil.which("strace")
    if strace is None:
        raise ModelError("strace is not installed: the power-cut lab records the patch with it")
    where.mkdir(parents=True, exist_ok=True)
    target, gate, log = where / "target", where / "gate", where / "trace.log"
    place(target)
    gate.mkdir()
    env = child_env(PC_TARGET=str(target), PC_GATE=str(gate), PC_DROP=",".join(drop))
    cmd = [strace, "-f", "-qq", "-e", f"trace={STRACE_CALLS}", "-yy", "-s", "0", "-o", str(log),
           sys.executable, "-c", RUNNER, *patch_args(target, *extra, ckpt=ckpt)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    ops = parse(log.read_text(errors="replace"), target, gate)
    blobs: dict[str, bytes] = {}
    snaps = []
    marks = {op.mark: op.i for op in ops if op.kind == "mark"}
    n = 0
    while (gate / f"snap-{n}.pickle").exists():
        with open(gate / f"snap-{n}.pickle", "rb") as f:
            body = pickle.load(f)  # written by RUNNER in this very lab
        blobs.update(body["blobs"])
        if n not in marks:
            raise ModelError(f"snapshot {n} has no marker in the trace")
        snaps.append(Snapshot(marks[n], body["what"], body["entries"]))
        n += 1
    if not snaps or snaps[0].what != "start" or snaps[-1].what != "end":
        raise ModelError(f"the run was not recorded from start to end: {proc.stderr[-400:]}")
    _check_marks(ops)
    return Recording(target, ops, snaps, blobs, proc.returncode, proc.stderr)


def _check_marks(ops: list[Op]) -> None:
    """Every sync the main thread makes in the target follows its marker (nothing synced unseen by RUNNER)."""
    last = None
    for op in (op for op in ops if op.main):
        if op.kind in ("fsync", "sync") and (last is None or last.kind != "mark"):
            raise ModelError(f"trace line {op.line}: a sync of the main thread RUNNER did not mark ({op.text()})")
        last = op


# --- the model --------------------------------------------------------------------------------------------------

@dataclass
class Node:
    kind: str  # file, dir, link, other
    original: bool


class Model:
    """The recording's operations bound to model inodes by replaying them over the target's tree."""

    def __init__(self, rec: Recording):
        self.rec = rec
        self.ops = rec.ops
        start = rec.snapshots[0]
        self.nodes: dict[int, Node] = {}
        self.initial: dict[str, int] = {}
        by_ino: dict[tuple[int, int], int] = {}
        for rel_path, (kind, _mode, dev, ino, _body) in sorted(start.entries.items()):
            key = (dev, ino)
            if key not in by_ino:
                by_ino[key] = len(self.nodes)
                self.nodes[by_ino[key]] = Node(kind, True)
            self.initial[rel_path] = by_ino[key]
        self.in_place: list[Op] = []
        names = dict(self.initial)
        self.names_at: dict[int, dict[str, int]] = {-1: dict(names)}  # op index of a marker -> names then
        for op in self.ops:
            if op.kind == "mark":
                self.names_at[op.i] = dict(names)
                continue
            self._bind(op, names)
            if op.kind in DATA and self.nodes[op.node].original:
                self.in_place.append(op)
        self.final = names
        self.points = [s for s in rec.snapshots if s.what != "start"]
        self.snap_at = {s.at: s for s in rec.snapshots}
        self._identities()

    def _new(self, kind: str) -> int:
        self.nodes[len(self.nodes)] = Node(kind, False)
        return len(self.nodes) - 1

    def _bind(self, op: Op, names: dict[str, int]) -> None:
        """Fill op.node, op.replaced and op.folder, and apply op to names (the run as it happened)."""
        kind, paths = op.kind, op.paths

        def parent(path: str) -> int | None:
            return names.get(os.path.dirname(path)) if path else None
        if kind in NAMESPACE or kind == "create?":
            op.slots = tuple((parent(path), os.path.basename(path)) for path in paths)
        if kind == "create?":
            if paths[0] in names:
                op.kind, op.node = "open", names[paths[0]]
                return
            op.kind = "create"
        if kind in ("create?", "mkdir", "symlink"):
            op.folder = parent(paths[0])
            op.node = self._new({"create?": "file", "mkdir": "dir", "symlink": "link"}[kind])
            names[paths[0]] = op.node
        elif kind == "link":
            op.node, op.folder = names[paths[0]], parent(paths[1])
            names[paths[1]] = op.node
        elif kind == "rename":
            src, dst = paths
            op.node, op.replaced, op.folder = names[src], names.get(dst), parent(dst)
            if op.replaced == op.node:  # a rename between two names of one file does nothing
                op.kind = "noop"
                return
            _move(names, src, dst)
        elif kind in ("unlink", "rmdir"):
            op.node, op.folder = names.pop(paths[0]), parent(paths[0])
        elif kind in ("write", "trunc", "chmod", "fsync"):
            if paths[0] not in names:
                raise ModelError(f"trace line {op.line}: {op.text()} of a name the model does not hold")
            op.node = names[paths[0]]

    def _identities(self) -> None:
        """(device, inode) of the recorded run -> model inode, per snapshot (an inode number freed in the run may be
        given to a later file)."""
        self.real: list[dict[tuple[int, int], int]] = []
        for snap in self.rec.snapshots:
            names = self.names_at[snap.at]
            self.real.append({(dev, ino): names[rel_path] for rel_path, (_k, _m, dev, ino, _b) in snap.entries.items()
                              if rel_path in names})

    def identities_of(self, journal: int) -> dict[tuple[int, int], int]:
        """The identity map a journal's records are read with: that of the first snapshot holding the journal (what
        it names was alive when it was written, and is kept alive until the commit or its recovery ends)."""
        for snap, real in zip(self.rec.snapshots, self.real):
            if journal in self.names_at[snap.at].values():
                return real
        raise ModelError(f"model inode {journal}: a journal never seen in a snapshot")

    def content(self, node: int, point: Snapshot) -> tuple[str, int, str | None]:
        """(kind, mode, body) of a model inode at the crash point: from the last snapshot up to it that names it."""
        for snap in reversed([s for s in self.rec.snapshots if s.at <= point.at]):
            names = self.names_at[snap.at]
            for rel_path, held in names.items():
                if held == node and rel_path in snap.entries:
                    kind, mode, _dev, _ino, body = snap.entries[rel_path]
                    return kind, mode, body
        raise ModelError(f"model inode {node}: never seen in a snapshot")

    def durable_body(self, node: int, point: Snapshot) -> str | None:
        """The bytes (sha256) a file held when the main thread last fsynced it before the point, or its original
        bytes; None when it never had durable bytes."""
        synced = [op for op in self.ops[:point.at] if op.main and (
            op.kind == "sync" or (op.kind == "fsync" and op.node == node))]
        if synced:
            return self.content(node, self.snap_at[_mark_before(self.ops, synced[-1])])[2]
        if self.nodes[node].original:
            return self.content(node, self.rec.snapshots[0])[2]
        return None

    def dirty(self, node: int, point: Snapshot) -> bool:
        """Written (or truncated, made) since its last fsync of the main thread before the point."""
        last_write = max((op.i for op in self.ops[:point.at] if op.node == node and
                          (op.kind in DATA or op.kind == "create")), default=-1)
        last_sync = max((op.i for op in self.ops[:point.at] if op.main and (
            op.kind == "sync" or (op.kind == "fsync" and op.node == node))), default=-1)
        return last_write > last_sync


def _mark_before(ops: list[Op], op: Op) -> int:
    """The marker op RUNNER made just before a main-thread sync."""
    for prev in reversed(ops[:op.i]):
        if prev.main and prev.kind == "mark":
            return prev.i
    return -1


def _move(names: dict[str, int], src: str, dst: str) -> None:
    """Rename src (and, for a folder, everything under it) to dst in a name map."""
    moved = {p: n for p, n in names.items() if p == src or p.startswith(src + "/")}
    for p in [p for p in names if p == dst or p.startswith(dst + "/")]:
        del names[p]
    for p, n in moved.items():
        del names[p]
        names[dst + p[len(src):]] = n


# --- the states -------------------------------------------------------------------------------------------------

@dataclass
class State:
    """One state a power cut may leave: the durable namespace operations and what each file not yet fsynced holds."""
    model: str
    point: Snapshot
    kept: frozenset[int]  # op indices of the namespace operations that survived
    undone: tuple[Op, ...]  # those of the crash point's window that did not
    forms: dict[int, str]  # model inode -> complete | empty | cut | durable, for files not yet fsynced
    tree: dict[str, tuple] = field(default_factory=dict)  # rel -> (kind, mode, node, body)

    def describe(self, lab: "PowerCutLab") -> str:
        at = lab.point_name(self.point)
        undone = "; ".join(op.text() for op in self.undone) or "nothing"
        forms = ", ".join(f"{lab.name_of(n, self)} {f}" for n, f in sorted(self.forms.items()) if f != "complete")
        return f"[{self.model}] power cut {at}: undone: {undone}; files: {forms or 'all complete'}"


def window(model: Model, point: Snapshot, rules: str) -> tuple[set[int], list[Op]]:
    """The namespace operations before the crash point that are durable by the rules, and the others, in order."""
    before = [op for op in model.ops[:point.at] if op.namespace]
    syncs = [op for op in model.ops[:point.at] if op.main and op.kind in ("fsync", "sync")]
    if rules == "ext4":
        barrier = max((op.i for op in syncs if op.kind == "sync" or model.nodes[op.node].kind == "dir"), default=-1)
        forced = {op.i for op in before if op.i < barrier}
    elif rules == "reordered":
        forced = {op.i for op in before if any(s.i > op.i and (s.kind == "sync" or s.node == op.folder)
                                               for s in syncs)}
    else:
        raise ValueError(f"unknown rules {rules!r}: {MODELS}")
    return forced, [op for op in before if op.i not in forced]


def _group(seed: int, pending: list[Op], later: bool) -> set[int]:
    """pending[seed] with the operations on its names after it (later) or before it, transitively."""
    group = [pending[seed]]
    for other in (pending[seed + 1:] if later else reversed(pending[:seed])):
        if any(set(other.slots) & set(g.slots) for g in group):
            group.append(other)
    return {op.i for op in group}


def metadata_choices(forced: set[int], pending: list[Op], rules: str) -> list[frozenset[int]]:
    """The surviving sets of namespace operations at a crash point (module docstring: Bounds), the fullest last."""
    everything = frozenset(forced | {op.i for op in pending})
    choices = [frozenset(forced | {op.i for op in pending[:n]}) for n in range(len(pending))]
    if rules == "reordered":
        for k in range(len(pending)):
            choices.append(everything - _group(k, pending, later=True))
            choices.append(frozenset(forced) | _group(k, pending, later=False))
    out = list(dict.fromkeys(c for c in choices if c != everything))
    return [*out, everything]


def replay(model: Model, kept: frozenset[int], upto: int) -> dict[str, int]:
    """The names a state holds: the target's entries, then the kept namespace operations before `upto` applied in
    order to the folder inodes they were made in, then every path reachable from the target. A rename whose source
    entry the state lacks still names its inode at the destination (the inode exists; only its old entry was not
    written); entries of a folder whose own entry the state lacks are unreachable."""
    entries: dict[int, dict[str, int]] = {}
    for path, node in model.initial.items():
        if path:
            entries.setdefault(model.initial[os.path.dirname(path)], {})[os.path.basename(path)] = node
    for op in model.ops[:upto]:
        if op.i not in kept:
            continue
        if op.kind in ("create", "mkdir", "symlink", "link"):
            folder, name = op.slots[-1]
            entries.setdefault(folder, {})[name] = op.node
        elif op.kind == "rename":
            (src_dir, src), (dst_dir, dst) = op.slots
            if entries.get(src_dir, {}).get(src) == op.node:
                del entries[src_dir][src]
            entries.setdefault(dst_dir, {})[dst] = op.node
        elif op.kind in ("unlink", "rmdir"):
            folder, name = op.slots[0]
            if entries.get(folder, {}).get(name) == op.node:
                del entries[folder][name]
    names, todo = {"": model.initial[""]}, [""]
    while todo:
        path = todo.pop()
        for name, node in sorted(entries.get(names[path], {}).items()):
            child = f"{path}/{name}" if path else name
            if node in names.values():  # a folder reached twice (a cycle) is not a tree a disk can hold
                if model.nodes[node].kind == "dir":
                    raise ModelError(f"{child}: a folder reached twice in a built state")
            names[child] = node
            if model.nodes[node].kind == "dir":
                todo.append(child)
    return names


def data_choices(model: Model, point: Snapshot, names: dict[str, int], kept: frozenset[int], rules: str,
                 fullest: bool) -> list[dict[int, str]]:
    """What the files not yet fsynced hold (module docstring: Bounds); E4 under ext4."""
    files = sorted({n for n in names.values() if model.nodes[n].kind == "file" and model.dirty(n, point)})
    if rules == "ext4":  # auto_da_alloc: a durable rename over an existing name flushed what was written before it
        files = [n for n in files if not any(op.i in kept and op.kind == "rename" and op.node == n and
                                             op.replaced is not None for op in model.ops[:point.at])]
    if not files:
        return [{}]
    olds = {n: model.durable_body(n, point) for n in files}
    choices = [{n: "complete" for n in files}, {n: "empty" for n in files}, {n: "cut" for n in files}]
    if any(b is not None for b in olds.values()):
        choices.append({n: "durable" if olds[n] is not None else "complete" for n in files})
    if fullest and len(files) > 1:
        for n in files:
            for form in ("empty", "cut"):
                choices.append({m: form if m == n else "complete" for m in files})
    return choices


def _cut(data: bytes) -> bytes:
    size = len(data) // 2
    return data[:size - size % 4096] if len(data) > 8192 else data[:size]


class PowerCutLab:
    """A family's patch recorded once, the states of every crash point, and their check. place and ends: see
    after_power_cut."""

    def __init__(self, root: Path, source: Path, ckpt: Path, extra: tuple[str, ...] = (),
                 drop: tuple[str, ...] = (), *, place: Callable[[Path], object] | None = None,
                 ends: tuple[dict, dict] | None = None):
        self.root, self.source, self.ckpt, self.extra = root, source, ckpt, extra
        self.rec = record(place or (lambda target: shutil.copytree(source, target)), ckpt, root / "record", extra,
                          drop)
        if self.rec.returncode != 0:
            raise ModelError(f"the recorded patch failed: {self.rec.stderr[-400:]}")
        self.model = Model(self.rec)
        self.before, self.after = ends or (digest(source), digest(self.rec.target))
        if digest(self.rec.target) != self.after:
            raise ModelError(f"the recorded run did not end with the complete patch: {self.rec.stderr[-400:]}")
        self._n = 0
        self.judged: dict[tuple, list[str]] = {}  # a state's tree signature -> its problems

    @classmethod
    def after_power_cut(cls, root: Path, parent: "PowerCutLab", state: State) -> "PowerCutLab":
        """The next `patch` on one of parent's states, recorded: its crash points are power cuts during that
        run's recovery (and then its own patch), judged by parent's original and complete results."""
        return cls(root, parent.source, parent.ckpt, parent.extra,
                   place=lambda target: parent.materialise(state, target), ends=(parent.before, parent.after))

    def pending_commit(self) -> State:
        """The ext4 state, all files complete, with the journal still pending and the most files moved into the
        target: the one whose recovery has the most to put back."""
        def moved(state: State) -> int:
            return sum(1 for p, row in state.tree.items() if not p.startswith(STAGE_DIR)
                       and self.model.initial.get(p) != row[2])
        best = None
        for point in self.model.points:
            for state in self.states(point, "ext4"):
                if f"{STAGE_DIR}/{journal_format.JOURNAL}" in state.tree and \
                        all(f == "complete" for f in state.forms.values()) and \
                        (best is None or moved(state) >= moved(best)):
                    best = state
        if best is None:
            raise ModelError("no state of this patch holds a pending commit")
        return best

    def point_name(self, point: Snapshot) -> str:
        k, n = self.model.points.index(point) + 1, len(self.model.points)
        if point.what == "end":
            return f"after the end (crash point {k} of {n})"
        return f"before {point.what} (crash point {k} of {n})"

    def moving_points(self) -> list[Snapshot]:
        """The crash points just after files moved into the target (a rename out of the staging folder since the
        point before), and the end."""
        out, start = [], 0
        for point in self.model.points:
            ops = self.model.ops[start:point.at]
            if point.what == "end" or any(op.kind == "rename" and not op.paths[1].startswith(STAGE_DIR + "/") and
                                          op.paths[1] != STAGE_DIR for op in ops):
                out.append(point)
            start = point.at
        return out

    def name_of(self, node: int, state: State) -> str:
        return next((p for p, n in sorted(state.tree.items()) if n[2] == node), f"inode {node}")

    def states(self, point: Snapshot, rules: str) -> list[State]:
        forced, pending = window(self.model, point, rules)
        out = []
        choices = metadata_choices(forced, pending, rules)
        for k, kept in enumerate(choices):
            names = replay(self.model, kept, point.at)
            for forms in data_choices(self.model, point, names, kept, rules, k == len(choices) - 1):
                state = State(rules, point, kept, tuple(op for op in pending if op.i not in kept), forms)
                state.tree = self._tree(state, names)
                out.append(state)
        return out

    def _tree(self, state: State, names: dict[str, int]) -> dict[str, tuple]:
        tree = {}
        for rel_path, node in names.items():
            kind, mode, body = self.model.content(node, state.point)
            if kind == "file":
                form = state.forms.get(node, "complete")
                if form == "durable":
                    body = self.model.durable_body(node, state.point)
                elif form in ("empty", "cut"):
                    data = b"" if form == "empty" else _cut(self.rec.blobs[body])
                    body = hashlib.sha256(data).hexdigest()
                    self.rec.blobs.setdefault(body, data)
            tree[rel_path] = (kind, mode, node, body)
        return tree

    @staticmethod
    def signature(state: State) -> tuple:
        """What the state holds, hard links included (inodes numbered by first name), its inode numbers aside."""
        first: dict[int, int] = {}
        rows = []
        for rel_path, (kind, mode, node, body) in sorted(state.tree.items()):
            first.setdefault(node, len(first))
            rows.append((rel_path, kind, mode, first[node], body))
        return tuple(rows)

    # --- materialising and judging --------------------------------------------------------------------------------

    def materialise(self, state: State, dest: Path) -> Path:
        """The state on a fresh folder dest: folders, files (hard links as links), modes; its journals' identities
        translated to the copy's."""
        placed: dict[int, str] = {}
        dest.mkdir(parents=True)
        for rel_path, (kind, _mode, node, body) in sorted(state.tree.items(), key=lambda kv: kv[0].count("/")):
            if not rel_path:
                continue
            path = dest / rel_path
            if kind == "dir":
                path.mkdir()
            elif node in placed:
                os.link(dest / placed[node], path)
            elif kind == "file":
                path.write_bytes(self.rec.blobs[body])
            elif kind == "link":
                os.symlink(body, path)
            else:
                raise ModelError(f"{rel_path}: a {kind} in the target is not modelled")
            placed.setdefault(node, rel_path)
        for rel_path, (kind, mode, _node, _body) in sorted(state.tree.items(), key=lambda kv: -kv[0].count("/")):
            if kind != "link":
                os.chmod(dest / rel_path if rel_path else dest, mode)
        self._translate(state, dest)
        return dest

    def _translate(self, state: State, dest: Path) -> None:
        ident: dict[int, tuple[int, int]] = {}
        for rel_path, (_kind, _mode, node, _body) in state.tree.items():
            st = os.lstat(dest / rel_path if rel_path else dest)
            ident[node] = (st.st_dev, st.st_ino)
        for name in (journal_format.JOURNAL, journal_format.COMMITTED):
            path = dest / STAGE_DIR / name
            if not path.is_file() or path.is_symlink():
                continue
            body = journal_format.decode(path.read_bytes(), WRITABLE)
            if body is None:
                continue  # torn or empty: recovery must face it as it is
            real = self.model.identities_of(state.tree[f"{STAGE_DIR}/{name}"][2])

            def moved(record: dict | None, real: dict = real) -> dict | None:
                if record is None:
                    return None
                node = real.get((record["dev"], record["ino"]))
                dev, ino = ident.get(node, (os.lstat(dest).st_dev, 0))
                return {**record, "dev": dev, "ino": ino}

            files = [{**f, "new": moved(f["new"]), "old": moved(f["old"])} for f in body["files"]]
            data = journal_format.encode(body["run"], files, moved(body["stage"]), [moved(d) for d in body["dirs"]])
            mode = path.stat().st_mode & 0o7777
            path.write_bytes(data)
            path.chmod(mode)

    def check(self, state: State) -> tuple[bool, list[str]]:
        """Whether the state's tree was new, and its problems (module docstring: check); a tree already judged is
        not run again."""
        key = self.signature(state)
        if key in self.judged:
            return False, self.judged[key]
        self._n += 1
        problems = []
        where = state.describe(self)
        recovered = self.materialise(state, self.root / "states" / f"{self._n}-recover")
        problems += self._recovery(recovered, where)
        raw = self.materialise(state, self.root / "states" / f"{self._n}-cli")
        held = files_only(digest(raw))
        pending = (raw / STAGE_DIR / journal_format.JOURNAL).exists()
        check = run_cli("verify", str(raw))
        if "Traceback" in check.stderr or check.returncode not in (0, 1):
            problems.append(f"{where}: verify ended {check.returncode}: {check.stderr.strip()[-300:]}")
        elif check.returncode == 0 and (held != files_only(self.after) or pending):
            problems.append(f"{where}: verify said ready for a directory that is not the complete patch"
                            f"{' (a commit is pending)' if pending else ''}")
        again = run_cli(*patch_args(raw, *self.extra, ckpt=self.ckpt))
        if again.returncode != 0 or "Traceback" in again.stderr:
            problems.append(f"{where}: the next patch ended {again.returncode}: {again.stderr.strip()[-300:]}")
        elif digest(raw) != self.after:
            problems.append(f"{where}: the next patch did not leave the uninterrupted patch's result "
                            f"({_differ(digest(raw), self.after)})")
        self.judged[key] = problems
        shutil.rmtree(recovered)
        if not problems:
            shutil.rmtree(raw)
        return True, problems

    def _recovery(self, target: Path, where: str) -> list[str]:
        from irsurgeon.commit.transaction import clear_interrupted
        from irsurgeon.core.errors import OutputError

        try:
            clear_interrupted(target, writable=WRITABLE)
        except OutputError as e:
            return [f"{where}: recovery refused the directory: {e}"]
        now = digest(target)
        if now == self.before or now == self.after:
            return []
        if files_only(now) in (files_only(self.before), files_only(self.after)):
            return [f"{where}: recovery left {STAGE_DIR} behind"]
        near = self.before if len(_diff(now, self.before)) <= len(_diff(now, self.after)) else self.after
        return [f"{where}: after recovery neither the original nor the complete patch ({_differ(now, near)})"]


def _diff(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _differ(now: dict[str, str], ref: dict[str, str]) -> str:
    names = _diff(now, ref)
    shown = [f"{n} {'missing' if n not in now else 'extra' if n not in ref else 'differs'}" for n in names[:4]]
    return ", ".join(shown) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


@dataclass
class Sweep:
    """Figures of a power-cut sweep of one patch."""
    points: int = 0
    built: dict[str, int] = field(default_factory=dict)  # rules -> states generated (a tree may recur)
    checked: int = 0  # distinct trees materialised and run through recovery, verify and patch
    problems: list[str] = field(default_factory=list)

    def line(self, name: str) -> str:
        built = ", ".join(f"{n} {rules}" for rules, n in self.built.items())
        return (f"{name}: {self.points} crash points, power-cut states built: {built}; {self.checked} distinct "
                f"states checked (recovery, verify, patch again); {len(self.problems)} problems")


def sweep(lab: PowerCutLab, points: list[Snapshot] | None = None, models: tuple[str, ...] = MODELS,
          first_problem: bool = False) -> Sweep:
    """Build and check every state of the given crash points (all by default) under the given rules; with
    first_problem, stop at the first state that breaks a rule."""
    out = Sweep(built={rules: 0 for rules in models})
    out.problems += [f"{op.text()} (trace line {op.line}): a file of the original target changed in place"
                     for op in lab.model.in_place]
    for point in lab.model.points if points is None else points:
        out.points += 1
        for rules in models:
            for state in lab.states(point, rules):
                out.built[rules] += 1
                new, problems = lab.check(state)
                out.checked += new
                out.problems += problems if new else []
                if first_problem and out.problems:
                    return out
    return out
