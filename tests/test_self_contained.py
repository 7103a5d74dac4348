"""Everything the tests, the Makefile, CI and the scripts read by default is inside the repository.

Python files are parsed: every path built from `__file__` (`Path(__file__)`, `.resolve()`, `.parent`,
`.parents[n]`, `/ "segment"`, `os.path.dirname`, and module-level names bound to one of those) and every
`Path("relative")` (read from the repository root, where the tests run) must stay inside the checkout, and no
string outside a docstring may name the sibling reference folder. A script that regenerates data from another
copy may say so in its docstring or take it from an argument or $IRSURGEON_REFERENCE; its default is the copy
in tests/data/reference. Makefile and .ci/run: no `../` and no reference folder outside tests/data.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from helpers.reference import REFERENCE, ROOT, reference_dir

OUTSIDE_REFERENCE = re.compile(r"shared[\"']?\s*/\s*[\"']?reference")
PARENT_PATH = re.compile(r"\.\./")
SHELL_FILES = ("Makefile", ".ci/run")
CONFIG_FILES = ("setup.cfg", "pyproject.toml")


def python_files() -> list[Path]:
    return sorted(p for d in ("tests", "scripts", "benchmarks", "lab") for p in (ROOT / d).rglob("*.py"))


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


class Paths:
    """The filesystem paths a module builds from `__file__` or from a relative Path(...), as far as they are
    literal (None for anything else)."""

    def __init__(self, path: Path, tree: ast.Module):
        self.file, self.names = path, {}
        for stmt in tree.body:  # module-level bindings, in order: ROOT = Path(__file__).resolve().parents[1]
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                value = self.of(stmt.value)
                if value is not None:
                    self.names[stmt.targets[0].id] = value

    def of(self, node: ast.AST) -> Path | None:
        if isinstance(node, ast.Name):
            return self.file if node.id == "__file__" else self.names.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            base = self.of(node.value)
            return None if base is None else Path(os.path.normpath(base / ".."))
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
            base = self.of(node.value.value)
            if base is None or not isinstance(node.slice, ast.Constant) or not isinstance(node.slice.value, int):
                return None
            return Path(os.path.normpath(base.joinpath(*[".."] * (node.slice.value + 1))))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            base, right = self.of(node.left), node.right
            if base is None or not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                return None
            return Path(os.path.normpath(base / right.value))
        if isinstance(node, ast.Call):
            func, args = node.func, node.args
            if isinstance(func, ast.Name) and func.id == "Path" and len(args) == 1:
                if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
                    return None if os.path.isabs(args[0].value) else Path(os.path.normpath(ROOT / args[0].value))
                return self.of(args[0])
            if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute") and not args:
                return self.of(func.value)
            if isinstance(func, ast.Attribute) and func.attr == "dirname" and len(args) == 1:
                base = self.of(args[0])
                return None if base is None else base.parent
        return None


def outside_paths(path: Path, text: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    paths, skip = Paths(path, tree), docstrings(tree)
    found = {}  # line -> the first (outermost) finding on it
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if OUTSIDE_REFERENCE.search(node.value):
                found.setdefault(where, f"{where}: names the sibling reference folder: {node.value!r}")
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.BinOp, ast.Call)):
            target = paths.of(node)
            if target is not None and not target.is_relative_to(ROOT):
                found.setdefault(where, f"{where}: {ast.unparse(node)} is {target}, outside {ROOT}")
    return list(found.values())


def test_python_files_read_nothing_outside_the_repository():
    files = python_files()
    assert ROOT / "tests" / "conftest.py" in files and ROOT / "scripts" / "make_demo_fixture.py" in files
    found = [line for f in files for line in outside_paths(f)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("name", SHELL_FILES + CONFIG_FILES)
def test_makefile_ci_and_config_name_no_path_outside_the_repository(name):
    lines = (ROOT / name).read_text().splitlines()
    code = [(n, line) for n, line in enumerate(lines, 1) if not line.lstrip().startswith("#")]
    found = [f"{name}:{n}: {line}" for n, line in code if PARENT_PATH.search(line) or OUTSIDE_REFERENCE.search(line)]
    assert found == [], "\n".join(found)


def test_the_reference_data_is_in_the_repository(monkeypatch):
    monkeypatch.delenv("IRSURGEON_REFERENCE", raising=False)
    assert reference_dir() == REFERENCE and REFERENCE.is_relative_to(ROOT)
    for part in ("ckpt", "export", "golden", "real-configs", "README.md"):
        assert (REFERENCE / part).exists(), part


SIBLING = "../" + "shared/" + "reference"  # spelled in pieces: this file is scanned too


@pytest.mark.parametrize("source, bad", [
    (f"ROOT = Path(__file__).resolve().parents[1]\nREF = ROOT.parent / 'shared' / {'reference'!r}\n", True),
    ("REF = Path(__file__).resolve().parents[2]\n", True),
    ("HERE = Path(__file__).resolve().parent\nREF = HERE.parents[1] / 'x'\n", True),
    ("REF = Path(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))\n", True),
    ("REF = Path('../x')\n", True),
    ("REF = Path(__file__).parent / '..' / '..' / 'x'\n", True),
    (f"def f():\n    return run(['--reference', '{SIBLING}'])\n", True),
    ("ROOT = Path(__file__).resolve().parents[1]\nREF = ROOT / 'tests' / 'data' / 'reference'\n", False),
    ("REF = Path(os.environ.get('IRSURGEON_REFERENCE') or Path(__file__).parents[1] / 'tests' / 'data')\n", False),
    (f"'''Regenerate it from {SIBLING} with --reference DIR.'''\nREF = Path(__file__).parent\n", False),
    ("link.symlink_to(Path('..', '..', 'blobs', 'b'))\nbad = '../escape.safetensors'\n", False),
])
def test_the_check_tells_outside_paths_from_inside_ones(source, bad):
    """Negative controls, as a script at scripts/x.py would hold them."""
    found = outside_paths(ROOT / "scripts" / "x.py", source)
    assert bool(found) is bad, found


# --- benchmarks/, scripts/ and lab/ stand without tests/ -------------------------------------------------------------

TEST_MODULES = re.compile(r"^(tests|helpers|conftest|test_\w*)$")  # tests/ on sys.path would make these importable


def imports_from_tests(path: Path, text: str | None = None) -> list[str]:
    """Imports of test modules, sys.path entries naming tests/, and path expressions that end at tests/ or
    tests/helpers/ (reading tests/data is allowed: it is the reference data)."""
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    paths, found = Paths(path, tree), []
    extended = {id(n.left) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)}
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
        found += [f"{where}: imports {n}" for n in names if TEST_MODULES.match(n.split(".")[0])]
        if (isinstance(node, (ast.Attribute, ast.Subscript, ast.BinOp, ast.Call)) and id(node) not in extended
                and paths.of(node) in (ROOT / "tests", ROOT / "tests" / "helpers")):
            found.append(f"{where}: {ast.unparse(node)} is a test code folder")
        if isinstance(node, (ast.Call, ast.Assign)) and "sys.path" in ast.unparse(
                node.func if isinstance(node, ast.Call) else node.targets[0]):
            found += [f"{where}: puts {c.value!r:.80} on sys.path" for c in ast.walk(node) if isinstance(c, ast.Constant)
                      and isinstance(c.value, str) and re.search(r"(^|/)tests(/helpers)?/?$", c.value)]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"sys\.path.*tests", node.value):
            found.append(f"{where}: a child's sys.path names tests/: {node.value!r:.80}")
    return found


def test_benchmarks_scripts_and_lab_import_nothing_from_tests():
    files = sorted(p for d in ("benchmarks", "scripts", "lab") for p in (ROOT / d).rglob("*.py"))
    assert ROOT / "benchmarks" / "bench_reliability.py" in files and ROOT / "lab" / "kills.py" in files
    found = [line for f in files for line in imports_from_tests(f)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize("source, bad", [
    ("from test_reliability import KillLab\n", True),
    ("from helpers.dirsnap import snapshot\n", True),
    ("import conftest\n", True),
    ("import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests'))\n",
     True),
    ("import sys\nsys.path.append('tests')\n", True),
    ("CHILD = 'import sys; sys.path[:0] = [\"/repo/tests\"]'\n", True),
    ("from lab.kills import KillLab\nfrom irsurgeon import patch\n", False),
    ("from pathlib import Path\nREF = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'reference'\n", False),
    ("import test_data_maker_of_another_project as t\n", True),
])
def test_the_check_tells_imports_from_tests(source, bad):
    """Negative controls, as a benchmark at benchmarks/x.py would hold them."""
    found = imports_from_tests(ROOT / "benchmarks" / "x.py", source)
    assert bool(found) is bad, found


SIBLINGS = ("scripts", "benchmarks")


@pytest.mark.parametrize("path", [p for d in SIBLINGS for p in sorted((ROOT / d).glob("*.py"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_script_finds_the_sibling_files_it_runs_and_imports(path):
    """benchmarks/ and scripts/ files run or import one another: a path `ROOT / "scripts" / "x.py"` must name a
    file that is there, and a sibling module imported from the other folder needs that folder on the file's
    sys.path (a moved file once broke both, unseen)."""
    text = path.read_text()
    named = re.findall(r'"(scripts|benchmarks)"\s*/\s*"([\w.]+\.py)"', text)
    missing = [f"{d}/{f}" for d, f in named if not (ROOT / d / f).is_file()]
    assert not missing, f"{path.name} runs {missing}, not in the repository"
    here = {p.stem for p in path.parent.glob("*.py")}
    other = next(d for d in SIBLINGS if d != path.parent.name)
    theirs = {p.stem for p in (ROOT / other).glob("*.py")} - here
    imported = {(node.module or "").split(".")[0] if isinstance(node, ast.ImportFrom) else a.name.split(".")[0]
                for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.Import, ast.ImportFrom))
                for a in (node.names if isinstance(node, ast.Import) else [None])}
    needed = sorted(imported & theirs)
    if needed:
        assert re.search(rf'sys\.path[^\n]*"{other}"', text), f"{path.name} imports {needed} from {other}/ " \
                                                               f"without putting {other}/ on sys.path"
