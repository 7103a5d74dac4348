"""The documentation's examples run as written, on the bundled fixtures.

Which blocks run:
- README.md: every ```bash, ```sh, ```console and ```python block.
- docs/*.md: only a block right after a `<!-- run -->` line; the other blocks there illustrate (real model names,
  placeholders).
- A block right after `<!-- genai -->` (README) or `<!-- run genai -->` (docs) runs openvino-genai: it runs only in
  the genai tier (test_genai_blocks_run_as_written, marked slow and genai), which runs every block of the file.

How they run: the blocks of one file, in order, in a fresh temporary directory holding a copy of fixtures/ (so they
are written from the repository root and write into out/), each shell block with `bash -euo pipefail`, each Python
block as `python -c BLOCK` with this interpreter. `irsurgeon`, `python` and `python3` on PATH run this checkout's CLI
and this interpreter (`irsurgeon` as `python -m irsurgeon`, and each Python block, forked from lab.forkrun's server:
the same process a fresh one would be, its modules imported already); nothing in a block is substituted. In a shell
block a line that runs `make` is not run (the make targets install the package and run the test suite; they are the
set-up commands). In a console block only the lines after `$ ` are commands. A block that exits non-zero fails the
test, naming the file and line where the block starts.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab import forkrun

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SHELLS, PYTHON = ("bash", "sh", "console"), ("python",)
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!--\s*(run)?\s*(genai)?\s*-->\s*$")
MAKE = re.compile(r"^\s*make(\s|$)")
JOBS = ("irsurgeon patch", "irsurgeon verify", "irsurgeon verify out/qwen --genai", "irsurgeon show",
        "irsurgeon annotate", "irsurgeon build-mtp", "--weight-format int4", "irsurgeon synth")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int      # of the opening fence
    lang: str
    code: str
    genai: bool

    @property
    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path.name
        return f"{shown}:{self.line}"


def blocks(path: Path, every: bool) -> list[Block]:
    """The runnable blocks of a Markdown file; every=False: only those marked `<!-- run -->`."""
    found, lines, mark, i = [], path.read_text().splitlines(), None, 0
    while i < len(lines):
        opening, marked = FENCE.match(lines[i]), MARK.match(lines[i])
        if marked:
            mark = marked
        elif opening and opening.group(1):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            lang, code = opening.group(1), "\n".join(lines[i + 1:end]) + "\n"
            runs = every or (mark is not None and mark.group(1))
            if runs and lang in SHELLS + PYTHON:
                found.append(Block(path, i + 1, lang, code, bool(mark and mark.group(2))))
            mark, i = None, end
        elif lines[i].strip():
            mark = None  # a marker applies to the block right after it only
        i += 1
    return found


def shell_code(block: Block) -> str:
    """The commands of a shell block: `make` lines left out, console output lines dropped."""
    lines = block.code.splitlines()
    if block.lang == "console":
        lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
    return "\n".join(ln for ln in lines if not MAKE.match(ln)) + "\n"


def sandbox(tmp: Path) -> dict[str, str]:
    """A copy of fixtures/ in tmp, and the environment whose irsurgeon, python and python3 are this checkout's."""
    shutil.copytree(ROOT / "fixtures", tmp / "fixtures", dirs_exist_ok=True)  # a second run: the same copy
    bin_dir = tmp.parent / f"{tmp.name}-bin"
    bin_dir.mkdir(exist_ok=True)
    def script(name: str, run: str) -> None:
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (bin_dir / name).chmod(0o755)
    for name in ("python", "python3"):
        script(name, f'"{sys.executable}"')
    forked = {}
    if os.environ.get("IRSURGEON_TEST_NO_FORK"):  # a fresh interpreter each time, as lab.forkrun.run does then
        script("irsurgeon", f'"{sys.executable}" -m irsurgeon')
    else:  # `irsurgeon`: `python -m irsurgeon` forked from a server that imported its modules
        shell = forkrun.shell_server()
        shell.command(bin_dir, "irsurgeon", forkrun.module("irsurgeon"), argv0="-m")
        forked = shell.env()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": path,
            "HF_HUB_OFFLINE": "1", **forked}


def run_blocks(found: list[Block], tmp: Path) -> None:
    env = sandbox(tmp)
    for block in found:
        if block.lang in SHELLS:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", shell_code(block)], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=600)
        else:  # `python -c BLOCK`, forked from lab.forkrun's server (a fresh interpreter with IRSURGEON_TEST_NO_FORK)
            done = forkrun.completed(block.code, [], env, cwd=tmp, timeout=600)
        assert done.returncode == 0, (f"{block.where}: the {block.lang} block exits {done.returncode}\n{block.code}"
                                      f"--- stdout\n{done.stdout[-2000:]}\n--- stderr\n{done.stderr[-3000:]}")


DOCUMENTS = {README: blocks(README, every=True), **{d: blocks(d, every=False) for d in DOCS}}
QUICK = [p for p, found in DOCUMENTS.items() if any(not b.genai for b in found)]  # pages of prose only run nothing
GENAI = [p for p, found in DOCUMENTS.items() if any(b.genai for b in found)]


@pytest.mark.parametrize("path", QUICK, ids=lambda p: p.name)
def test_blocks_run_as_written(path, tmp_path):
    quick = [b for b in DOCUMENTS[path] if not b.genai]
    run_blocks(quick, tmp_path / "repo")
    if path == README:  # a reader runs them again: nothing there may need clearing out/ first
        run_blocks(quick, tmp_path / "repo")


@pytest.mark.slow
@pytest.mark.genai
@pytest.mark.parametrize("path", GENAI, ids=lambda p: p.name)
def test_genai_blocks_run_as_written(path, tmp_path):
    run_blocks(DOCUMENTS[path], tmp_path / "repo")


def test_the_readme_has_an_example_of_every_job():
    found = DOCUMENTS[README]
    assert README in QUICK and README in GENAI
    shell = "".join(shell_code(b) for b in found if b.lang in SHELLS)
    python = "".join(b.code for b in found if b.lang in PYTHON)
    assert [job for job in JOBS if job not in shell] == []
    for name in ("patch_directory", "verify_directory", "show_path", "annotate_ir", "build_mtp_model",
                 "save_draft", "openvino_genai"):
        assert name in python, name
    assert any(b.genai and b.lang in PYTHON for b in found), "no Python example runs a patched directory in genai"


def test_the_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for page in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"\w+://", target):
                assert (page.parent / target).exists(), f"{page.name}: link to {target}"


@pytest.mark.parametrize("text, expected", [
    ("```bash\nirsurgeon show x\n```\n", [("bash", False)]),
    ("<!-- genai -->\n```python\nimport openvino_genai\n```\n", [("python", True)]),
    ("```text\nirsurgeon patch TARGET\n```\n```json\n{}\n```\n", []),
    ("<!-- genai -->\n\nprose\n```sh\nls\n```\n", [("sh", False)]),
])
def test_the_extractor_reads_fences_and_markers(tmp_path, text, expected):
    page = tmp_path / "page.md"
    page.write_text(text)
    found = blocks(page, every=True)
    assert [(b.lang, b.genai) for b in found] == expected


def test_docs_blocks_run_only_when_marked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nfalse\n```\n<!-- run -->\n```bash\ntrue\n```\n<!-- run genai -->\n```python\npass\n```\n")
    assert [(b.code, b.genai) for b in blocks(page, every=False)] == [("true\n", False), ("pass\n", True)]


def test_make_lines_and_console_output_are_not_run():
    make = Block(README, 1, "bash", "make demo    # installs\nirsurgeon show x\n  make test\n", False)
    console = Block(README, 1, "console", "$ irsurgeon show x\nout/x: ready\n$ make test\n", False)
    assert shell_code(make) == "irsurgeon show x\n" and shell_code(console) == "irsurgeon show x\n"


def test_a_failing_block_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\ntrue\nfalse\ntrue\n```\n")
    with pytest.raises(AssertionError, match="page.md:1: the bash block exits 1"):
        run_blocks(blocks(page, every=True), tmp_path / "repo")
    page.write_text("```python\nprint('ran')\n```\n```python\nimport sys\nsys.exit('no ' + 'model')\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:4: the python block exits 1(.|\n)*stderr\s+no model"):
        run_blocks(blocks(page, every=True), tmp_path / "repo")


def test_the_cli_page_lists_every_option_of_every_command():
    """docs/cli.md's synopsis names each option of each command in that command's entry (it once missed 20)."""
    from irsurgeon.cli import main

    text = (ROOT / "docs" / "cli.md").read_text()
    block = text[text.index("```text\n") + 8:]
    block = block[:block.index("```")]
    entries = re.split(r"\n(?=irsurgeon )", block)
    missing = []
    for name, command in main.commands.items():
        entry = next((e for e in entries if e.startswith(f"irsurgeon {name} ")), "")
        for param in command.params:
            flags = [o for o in (*param.opts, *param.secondary_opts) if o.startswith("--")]
            missing += [f"{name} {flag}" for flag in flags if flag not in entry]
    assert not missing, missing
