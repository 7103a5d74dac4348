"""Fixtures shared by the test files (every folder under tests/): the reference data the tests compare with, and the
guards and set-ups that several files ask for by name (`@pytest.mark.usefixtures(...)` or an argument).

tests/data/reference (see its README.md) holds seeded tiny Qwen3.5 checkpoints, what optimum-intel exported from
them, golden MTP outputs and real published configs. It is part of the repository: a file missing there is a plain
failure. $IRSURGEON_REFERENCE points the tests at another copy of the same layout (e.g. a regenerated one;
tests/helpers/reference.py).
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).parent), str(ROOT)]  # the helpers package (tests/), the lab package (the root)

from helpers.reference import reference_dir  # noqa: E402  (importable once tests/ is on sys.path)


@pytest.fixture(scope="session")
def reference() -> Path:
    return reference_dir()


@pytest.fixture(scope="session")
def ckpt(reference):
    """ckpt("qwen35-dense") -> path of a reference checkpoint."""
    return lambda name: reference / "ckpt" / name


@pytest.fixture(scope="session")
def export(reference):
    """export("dense-fp16") -> path of an optimum-intel reference export."""
    return lambda name: reference / "export" / name


@pytest.fixture(scope="session")
def golden(reference):
    """golden("dense-fp16") -> path of the golden MTP outputs of that export."""
    return lambda name: reference / "golden" / f"{name}.npz"


@pytest.fixture
def no_hang():
    """A read that blocks (a FIFO opened without O_NONBLOCK) fails the test instead of hanging the suite."""
    def expired(signum, frame):
        raise TimeoutError("blocked for 60 s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def every_constant_appended(monkeypatch):
    """Every constant of a draft takes irsurgeon's appended path (irsurgeon.draft.save.DETACH_BYTES = 1)."""
    from irsurgeon.draft import save as draft_save
    monkeypatch.setattr(draft_save, "DETACH_BYTES", 1)


@pytest.fixture(scope="session")
def pristine(tmp_path_factory):
    """Every family's pristine folder (lab.hostile.Pristine: its bundled pair, sharded, patched), each made once per
    test process on first use and shared by the hostile-input lab and the fuzz bench, which only copy it."""
    from lab.hostile import Pristine
    return Pristine(tmp_path_factory.mktemp("pristine"))


@pytest.fixture(scope="module")
def patched_demo(tmp_path_factory) -> Path:
    """The demo target (fixtures/qwen3_5) patched with its checkpoint, once per test file; copy it to change it."""
    from lab.demo import patch_demo
    return patch_demo(tmp_path_factory.mktemp("patched") / "demo")


def fd_path(fd: int) -> str:
    return os.path.realpath(f"/proc/self/fd/{fd}")


@pytest.fixture
def advised(monkeypatch) -> list[tuple[str, int, int]]:
    """Every WILLNEED hint given: (file, offset, length)."""
    seen: list[tuple[str, int, int]] = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        if advice == os.POSIX_FADV_WILLNEED:
            seen.append((fd_path(fd), offset, length))
        return real(fd, offset, length, advice)
    monkeypatch.setattr(os, "posix_fadvise", record)
    return seen


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, int, int]]:
    """Every positional read the process makes: (file, offset, length)."""
    seen: list[tuple[str, int, int]] = []
    real_preadv, real_pread = os.preadv, os.pread

    def preadv(fd, buffers, offset, *rest):
        n = real_preadv(fd, buffers, offset, *rest)
        seen.append((fd_path(fd), offset, n))
        return n

    def pread(fd, n, offset):
        data = real_pread(fd, n, offset)
        seen.append((fd_path(fd), offset, len(data)))
        return data
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(os, "pread", pread)
    return seen


# --- one core per worker ------------------------------------------------------------------------------------------
# An xdist worker (gw0, gw1, ...) runs on one core of those it may use (gw0 the first, gw1 the second, ...), and so
# do the processes it starts: openvino's thread pool sizes itself to the cores a process may use, and two workers
# each running a pool over both cores of a 2-core machine spent about 10 % more CPU on the same tests (measured on
# five test files, 77.6 s against 69.6 s). IRSURGEON_TEST_NO_PIN=1 leaves the workers on every core.

def pin_worker() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and not os.environ.get("IRSURGEON_TEST_NO_PIN"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


# --- progress a person can read ------------------------------------------------------------------------------------
# Besides pytest's dots: a line as each test file finishes (its last test done, on whichever worker), with the count
# of tests done and the time since the run started. Only in the process that reports (pytest alone, or the xdist
# controller), and not with -v, which already names every test.

class _Progress:
    def __init__(self, config):
        self.config, self.left, self.total, self.done, self.start = config, {}, 0, 0, None

    def expect(self, nodeids) -> None:
        if self.left:
            return  # xdist: every worker collects the same tests
        for nodeid in nodeids:
            name = nodeid.split("::")[0]
            self.left[name] = self.left.get(name, 0) + 1
        self.total = len(nodeids)

    def finished(self, nodeid: str) -> None:
        name = nodeid.split("::")[0]
        if name not in self.left:
            return
        self.done += 1
        self.left[name] -= 1
        if self.left[name] == 0:
            del self.left[name]
            seconds = int(time.monotonic() - self.start)
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                if reporter._tw.width_of_current_line:  # after a line of dots
                    reporter.write("\n")
                reporter.write_line(f"[{self.done:>5}/{self.total} {seconds // 60}:{seconds % 60:02d}] {name} done")


_PROGRESS: list[_Progress] = []  # the one of this run, when it reports


def take_ctrl_c_back() -> None:
    """Ctrl-C is Python's KeyboardInterrupt in every test process. A shell ignores SIGINT for a job it starts in the
    background (`make test &` in a script, nohup) and so do some launchers (py-spy), and an ignored SIGINT is
    inherited: the tests that send themselves SIGINT would see nothing (one looped forever on a retry that its
    interruption was meant to end), and the children the tests start would ignore it too."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# --- the tests' temporary folders in memory ----------------------------------------------------------------------
# A patch commits with an fsync of every file and folder it moves in; on this machine's virtual disk those cost more
# system time than the commits themselves (the transaction tests took 5.1 s of system time against 2.7 s on tmpfs).
# So a run's tmp_path folders are made under /dev/shm when it is a tmpfs this user can write with 2 GiB free (a run
# leaves about 32 MB there while it lasts), in a folder of this run's own that it removes at its end. What the power-cut
# lab checks is the calls themselves (strace), which tmpfs receives all the same. --basetemp, or
# IRSURGEON_TEST_DISK_TMP=1, keeps pytest's own place.

_IN_MEMORY: list[Path] = []


def in_memory_basetemp(config) -> None:
    if config.option.basetemp or os.environ.get("IRSURGEON_TEST_DISK_TMP") or hasattr(config, "workerinput"):
        return  # asked for, or an xdist worker (the controller's basetemp/gwN)
    root = Path("/dev/shm")
    try:
        free = os.statvfs(root)
        mounts = Path("/proc/mounts").read_text().splitlines()
        is_tmpfs = any(line.split()[1:3] == [str(root), "tmpfs"] for line in mounts)
    except OSError:
        return
    if not is_tmpfs or not os.access(root, os.W_OK) or free.f_bavail * free.f_frsize < 2 << 30:
        return
    mine = root / f"irsurgeon-tests-{os.getuid()}"
    try:
        mine.mkdir(mode=0o700, exist_ok=True)
        st = mine.lstat()
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return  # not a folder of this user's alone: pytest's own place
    for old in mine.iterdir():  # a run that ended without removing its folder (killed)
        if old.name.isdigit() and not Path(f"/proc/{old.name}").exists():
            shutil.rmtree(old, ignore_errors=True)
    run = mine / str(os.getpid())
    config.option.basetemp = str(run)
    _IN_MEMORY.append(run)


def pytest_unconfigure(config):
    for run in _IN_MEMORY:
        shutil.rmtree(run, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path factory reads --basetemp
def pytest_configure(config):
    in_memory_basetemp(config)
    take_ctrl_c_back()
    if not hasattr(config, "workerinput") and config.getoption("verbose") <= 0 and not config.getoption("collectonly"):
        _PROGRESS[:] = [_Progress(config)]


def pytest_sessionstart(session):
    pin_worker()
    for progress in _PROGRESS:
        progress.start = time.monotonic()


def pytest_collection_finish(session):
    # What the process holds once the tests are collected (openvino, numpy, nncf, every test module and item) lives
    # to the end: frozen, Python's full collections no longer walk it after every batch of tests (gc.freeze, as
    # lab.forkrun's server does); a collection first, so no garbage is kept for good.
    import gc
    gc.collect()
    gc.freeze()
    for progress in _PROGRESS:
        if session.items:
            progress.expect([item.nodeid for item in session.items])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    for progress in _PROGRESS:
        progress.expect(ids)


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for progress in _PROGRESS:
            progress.finished(report.nodeid)

