"""A genai measurement in a process of its own (flows/isolated.py): its result and its errors come back as if run
here, a child that dies is measured again in a fresh one, and an interruption leaves no child running."""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from irsurgeon.core.errors import IRSurgeonError
from irsurgeon.flows import isolated
from lab.families import FIXTURE_PAIRS

pytestmark = pytest.mark.genai


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> Path:
    from irsurgeon.flows.patch import patch

    source, ckpt = FIXTURE_PAIRS["eagle3"]
    target = shutil.copytree(source, tmp_path_factory.mktemp("isolated") / "t")
    patch(target, ckpt)
    return target


def children() -> list[int]:
    """This process's child processes (/proc: their ppid)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                out.append(int(entry))
    return out


def killing(times: int, sig=signal.SIGABRT):
    """An echo that kills the measuring child at its first line, `times` times (never a child this process had
    before: a lab.forkrun server of earlier tests)."""
    said, left, already = [], [times], set(children())

    def echo(line: str) -> None:
        said.append(line)
        if line.startswith("equivalence: loading") and left[0]:
            left[0] -= 1
            for pid in children():
                if pid not in already:
                    os.kill(pid, sig)
    return echo, said


@pytest.mark.extended  # CI's extended tier; the default tier's runs below each return a result as well
def test_a_result_comes_back_as_run_here(patched):
    report = isolated.call("run_equivalence", patched, 1, (2,), 8)
    assert report.identical and len(report.runs) == 1 and report.runs[0].tokens == 8


def test_a_child_that_dies_is_measured_again_in_a_fresh_one(patched):
    echo, said = killing(1)
    report = isolated.call("run_equivalence", patched, 1, (2,), 8, echo=echo)
    assert report.identical and report.runs[0].tokens == 8
    assert any("openvino-genai ended its process (signal SIGABRT" in line for line in said), said


def test_a_child_that_dies_every_time_is_one_error_naming_how(patched):
    echo, _ = killing(isolated.RETRIES + 1)
    with pytest.raises(IRSurgeonError, match=r"ended its process during run_equivalence 2 times \(last: signal "
                                             r"SIGABRT"):
        isolated.call("run_equivalence", patched, 1, (2,), 8, echo=echo)


def test_an_error_in_the_child_is_that_error(tmp_path):
    with pytest.raises(IRSurgeonError) as e:
        isolated.call("run_equivalence", tmp_path / "missing", 1, (2,), 8)
    assert "missing" in str(e.value) and "failed in its process" not in str(e.value)


def test_an_interruption_leaves_no_child_running(patched):
    seen, already = [], set(children())  # already: the test process's own (a lab.forkrun server of earlier tests)

    def echo(line: str) -> None:
        seen.extend(pid for pid in children() if pid not in already)
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        isolated.call("run_equivalence", patched, 1, (2,), 8, echo=echo)
    assert seen and not [pid for pid in seen if os.path.exists(f"/proc/{pid}")]


def test_only_the_measurements_are_run_so():
    with pytest.raises(ValueError):
        isolated.call("patch", "x")


def test_bytes_native_code_writes_to_stdout_never_reach_the_frames(patched, tmp_path, monkeypatch):
    """openvino and genai print from C++ (std::cout goes to file descriptor 1, whatever sys.stdout is): in the child
    such bytes go to its stderr, and the frames come whole (was: the parent read them as a death, twice, and tune
    failed with 'ended its process ... exit status 0')."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "def _hook(event, args):\n"
        "    if event == 'import' and args[0] == 'irsurgeon.flows.genai':\n"
        "        os.write(1, b'[ WARNING ] written by native code\\n' + bytes(range(256)))\n"
        "if os.environ.get('IRSURGEON_TEST_NOISY_CHILD'):\n"
        "    sys.addaudithook(_hook)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("IRSURGEON_TEST_NOISY_CHILD", "1")
    said = []
    report = isolated.call("run_equivalence", patched, 1, (2,), 8, echo=said.append)
    assert report.identical and report.runs[0].tokens == 8
    assert not any("ended its process" in line for line in said), said


def test_a_count_past_its_moment_stops_adding_prompts(patched):
    """run_equivalence's `until` (time.monotonic(), one clock for every process here): the first prompt is always
    run, none after the moment has passed."""
    import time

    report = isolated.call("run_equivalence", patched, 3, (1,), 4, until=time.monotonic())
    assert sorted({r.prompt for r in report.runs}) == [0]
    assert sorted({r.prompt for r in isolated.call("run_equivalence", patched, 3, (1,), 4).runs}) == [0, 1, 2]
