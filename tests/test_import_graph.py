"""The package's import graph, read from the source with `ast`: dependencies point one way.

Every `import` counts, at module level or inside a function (a function-local import still runs, so it cannot
hide a cycle). `from a.b import c` is an edge to `a.b.c` when that is a module, else to `a.b`; the parent packages
Python imports on the way are not edges (their `__init__` holds no logic but the public API's lazy table).
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "irsurgeon"

# Layers, lowest first: a module may import its own layer or a lower one (never a higher one), and the graph has no
# cycle. Longest matching prefix wins. The house's building blocks sit below the families; the families below their
# registry; the flows (patch, verify, show, genai_check, head) above it, reaching a family only through it.
RANK = {
    "irsurgeon": 0, "irsurgeon.errors": 0, "irsurgeon.rtinfo": 0, "irsurgeon.config": 0, "irsurgeon.limits": 0,
    "irsurgeon.families.base": 0, "irsurgeon.text": 0, "irsurgeon.signals": 0,                        # the protocol; safe terminal text
    "irsurgeon.concurrency": 0,                                                # work on a thread beside the main one
    "irsurgeon.fsat": 0,                                                       # calls relative to held directories
    "irsurgeon.ir": 1, "irsurgeon.journal": 1, "irsurgeon.journal_format": 1,  # what a directory and an IR are
    "irsurgeon.recovery": 2,
    "irsurgeon.weights": 2, "irsurgeon.footprint": 2, "irsurgeon.transaction": 2,
    "irsurgeon.quantization": 2,                                               # weight formats as data
    "irsurgeon.ops": 3, "irsurgeon.compress": 3, "irsurgeon.families.builder": 3,
    "irsurgeon.build": 4, "irsurgeon.precision": 4, "irsurgeon.annotate": 4,
    "irsurgeon.synth": 5, "irsurgeon.families": 5,                             # fixture builders; each family
    "irsurgeon.families.registry": 6,
    "irsurgeon.verify": 7, "irsurgeon.show": 8, "irsurgeon.genai_check": 8, "irsurgeon.head": 8,
    "irsurgeon.patch": 9,
    "irsurgeon.cli": 10, "irsurgeon.entry": 11, "irsurgeon.__main__": 12,
}
FLOWS = ("irsurgeon.patch", "irsurgeon.verify", "irsurgeon.show", "irsurgeon.genai_check", "irsurgeon.head",
         "irsurgeon.footprint", "irsurgeon.journal", "irsurgeon.transaction", "irsurgeon.synth", "irsurgeon.cli",
         "irsurgeon.build")
READ_ONLY = ("irsurgeon.footprint", "irsurgeon.ir")  # statically; show and verify: what they load when they run
WRITE_FLOW = ("irsurgeon.patch", "irsurgeon.transaction", "irsurgeon.build", "irsurgeon.compress", "irsurgeon.head",
              "irsurgeon.annotate")


def module_files() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    """The irsurgeon modules `name` imports anywhere in its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return {m for m in found if m in modules and m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def rank(module: str) -> int:
    prefix = max((p for p in RANK if module == p or module.startswith(p + ".")), key=len)
    return RANK[prefix]


def test_the_graph_is_read(graph):
    # the parser sees the edges it must (a function-local one included), or every assertion below is vacuous
    assert "irsurgeon.families.registry" in graph["irsurgeon.patch"] and "irsurgeon.show" in graph["irsurgeon.cli.show"]
    assert len(graph) > 50


def test_no_import_cycle(graph):
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_every_module_has_a_layer(graph):
    assert all(any(m == p or m.startswith(p + ".") for p in RANK) for m in graph)


def test_imports_point_down(graph):
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if rank(d) > rank(m))
    assert not upward, upward


@pytest.mark.parametrize("module", READ_ONLY)
def test_read_only_modules_never_reach_the_write_flow(graph, module):
    names = [m for m in graph if m == module or m.startswith(module + ".")]
    reached = {m: sorted(d for d in reachable(graph, m) if d.startswith(WRITE_FLOW)) for m in names}
    assert not any(reached.values()), reached


def test_show_and_verify_load_no_writing_module():
    """show and verify reach every family through the registry, so statically they reach the families' write side
    too; what they run must not: after show and verify of a directory of every family, no write-flow module (nor a
    family's patch module) is loaded."""
    root = PACKAGE.parent
    dirs = [root / "fixtures" / "demo" / "target", root / "fixtures" / "gemma4" / "target"]
    code = ("import sys\nfrom irsurgeon.show import show\nfrom irsurgeon.verify import verify_directory\n"
            f"for d in {[str(d) for d in dirs]!r}:\n    show(d)\n    verify_directory(d)\n"
            "print(sorted(m for m in sys.modules if m.startswith(%r) or m.endswith('.patch')))" % (WRITE_FLOW,))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]", res.stdout


def test_the_cli_starts_without_openvino_nncf_or_numpy():
    code = ("import sys, irsurgeon.cli; "
            "print(sorted({'openvino', 'nncf', 'numpy'} & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(n for n in module_files() if not n.endswith(".__main__"))  # __main__ runs the CLI
    code = f"import importlib\nfor n in {names!r}:\n    importlib.import_module(n)\n"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def family_packages(graph) -> set[str]:
    return {m.split(".")[2] for m in graph if m.startswith("irsurgeon.families.") and m.count(".") >= 2
            and m.split(".")[2] not in ("base", "builder", "registry")}


def test_flows_reach_a_family_only_through_the_registry(graph):
    """No flow (nor any house module) imports a family's package or modules: only families.registry does."""
    families = family_packages(graph)
    assert {"qwen35_mtp", "gemma4_mtp"} <= families
    direct = sorted(f"{m} -> {d}" for m, deps in graph.items() if not m.startswith("irsurgeon.families.")
                    for d in deps if d.startswith("irsurgeon.families.") and d.split(".")[2] in families)
    assert not direct, direct
    for name in families:  # nor does one family import another
        prefix = f"irsurgeon.families.{name}"
        crossing = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith(prefix) for d in deps
                          if d.startswith("irsurgeon.families.") and d.split(".")[2] in families - {name})
        assert not crossing, crossing


def docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines |= set(range(node.lineno, node.end_lineno + 1))
    return lines


# The public API keeps the Qwen3.5 head's config loader under its first names (irsurgeon.load_config, MTPConfig).
NAMING_ALLOWED = {"__init__.py"}


def test_no_flow_names_a_family():
    """Outside irsurgeon/families/ no code (docstrings aside) compares against, or spells, a family's key or
    package name: a branch on the family is a method of the protocol instead."""
    import re

    from irsurgeon.families import registry

    words = {f.key for f in registry.FAMILIES} | {"qwen35_mtp", "gemma4_mtp"}
    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](%s)["']""" % "|".join(map(re.escape, words)))
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("families/") or rel in NAMING_ALLOWED:
            continue
        text = path.read_text()
        skip = docstring_lines(ast.parse(text))
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if n not in skip and (pattern.search(code) or re.search(r"families\.(qwen35_mtp|gemma4_mtp)", code)):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, hits


def test_the_naming_check_sees_a_branch(tmp_path):
    import re
    line = 'if family.key == "gemma4":'
    assert re.search(r"""(==|!=|\bin\b)\s*\(?\s*["'](gemma4)["']""", line)
