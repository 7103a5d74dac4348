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

# Layers, lowest first: the package's folders (and its three top-level modules). A module may import its own folder
# or a lower one, never a higher one, and the graph has no cycle. Every module must sit in a folder named here: there
# is no catch-all, so a new folder or top-level module fails test_every_module_has_a_layer until it is placed. The
# folders' own docstrings say the same (test_every_folder_says_what_it_may_import).
RANK = {
    "irsurgeon": 0,               # the public API's lazy table (irsurgeon/__init__.py), importing core.errors only
    "irsurgeon.core": 0,          # errors, limits, config readers, rt_info keys, text, signals, fsat, concurrency
    "irsurgeon.ir": 1,            # what an export directory and an IR are, read only; the footprint
    "irsurgeon.commit": 2,        # every write into a target: transaction, journal, recovery, the annotation
    "irsurgeon.weights": 2,       # safetensors, the tensor table, the hub
    "irsurgeon.quant": 2,         # weight formats, the format choice, nncf
    "irsurgeon.ops": 3,           # graph builders on ov.Output
    "irsurgeon.draft": 4,         # the family protocol and the build
    "irsurgeon.synth": 5,         # the shared seeded fixture builders
    "irsurgeon.families": 6,      # each family, and their registry
    "irsurgeon.flows": 7,         # patch, verify, show, genai, a draft alone: family-neutral
    "irsurgeon.cli": 8,           # click commands
    "irsurgeon.entry": 9, "irsurgeon.__main__": 9,
    "irsurgeon.cli.__main__": 9,  # `python -m irsurgeon.cli`: the command through irsurgeon.entry, as every entry
}
FLOWS = ("irsurgeon.flows", "irsurgeon.commit", "irsurgeon.synth", "irsurgeon.cli", "irsurgeon.draft",
         "irsurgeon.ir.footprint")
READ_ONLY = ("irsurgeon.ir",)  # statically; show and verify: what they load when they run
WRITE_FLOW = ("irsurgeon.flows.patch", "irsurgeon.commit.transaction", "irsurgeon.commit.recovery",
              "irsurgeon.commit.annotate", "irsurgeon.draft.build", "irsurgeon.draft.save", "irsurgeon.quant.compress",
              "irsurgeon.flows.standalone")


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


def placed(module: str) -> str | None:
    """The RANK entry a module sits in: itself when named (a top-level module, a folder's __main__), else its folder
    (irsurgeon.<folder>)."""
    parts = module.split(".")
    for key in (module, ".".join(parts[:2])):
        if key in RANK and (key == module or key != "irsurgeon"):
            return key
    return None


def rank(module: str) -> int:
    return RANK[placed(module)]


def test_the_graph_is_read(graph):
    # the parser sees the edges it must (a function-local one included), or every assertion below is vacuous
    assert "irsurgeon.families.registry" in graph["irsurgeon.flows.patch"] and "irsurgeon.flows.show" in graph["irsurgeon.cli.show"]
    assert len(graph) > 50


def test_no_import_cycle(graph):
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]


def test_every_module_has_a_layer(graph):
    assert not [m for m in graph if placed(m) is None]


def test_a_module_in_no_folder_is_not_placed():
    assert placed("irsurgeon.newmodule") is None and placed("irsurgeon.newfolder.x") is None
    assert placed("irsurgeon.core.errors") == "irsurgeon.core" and placed("irsurgeon") == "irsurgeon"


def test_every_folder_says_what_it_may_import():
    """Each folder's __init__ opens with one docstring saying what it is and what it may import."""
    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        assert doc.startswith(folder.name + ":") and "import" in doc.lower(), folder.name


def test_the_top_level_holds_few_modules():
    assert len(list(PACKAGE.glob("*.py"))) <= 10


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
    dirs = [root / "fixtures" / "qwen3_5" / "target", root / "fixtures" / "gemma4" / "target"]
    code = ("import sys\nfrom irsurgeon.flows.show import show\nfrom irsurgeon.flows.verify import verify_directory\n"
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
    """The family folders under irsurgeon/families/, read from the graph (not from the registry)."""
    return {m.split(".")[2] for m in graph if m.startswith("irsurgeon.families.") and m.count(".") >= 2
            and m.split(".")[2] != "registry"}


def registered_packages() -> set[str]:
    from irsurgeon.families import registry

    return {type(f).__module__.split(".")[2] for f in registry.FAMILIES}


def test_flows_reach_a_family_only_through_the_registry(graph):
    """No flow (nor any house module) imports a family's package or modules: only families.registry does."""
    families = family_packages(graph)
    assert families == registered_packages()  # every family folder is registered, and only those are families
    direct = sorted(f"{m} -> {d}" for m, deps in graph.items() if not m.startswith("irsurgeon.families.")
                    for d in deps if d.startswith("irsurgeon.families.") and d.split(".")[2] in families)
    assert not direct, direct
    for name in families:  # nor does one family import another
        prefix = f"irsurgeon.families.{name}"
        crossing = sorted(f"{m} -> {d}" for m, deps in graph.items() if m == prefix or m.startswith(prefix + ".")
                          for d in deps
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

    packages = registered_packages()
    words = {f.key for f in registry.FAMILIES} | packages
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
            if n not in skip and (pattern.search(code) or re.search(r"families\.(%s)\b" % "|".join(packages), code)):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, hits


def family_spellings() -> set[str]:
    """What only one family writes: each family's draft file (without its suffix) or its own subfolder, from the
    registry; a file several families write (config.json, a target IR) is the house's."""
    from irsurgeon.families import registry

    counts: dict[str, int] = {}
    for family in registry.FAMILIES:
        for name in family.layout.writes:
            counts[name] = counts.get(name, 0) + 1
    own = set()
    for family in registry.FAMILIES:
        own |= set(family.layout.subfolders)
        draft = family.layout.draft_xml
        if "/" not in draft and counts[draft] == 1:
            own.add(draft.rsplit(".", 1)[0])
    return own


def test_nothing_outside_the_families_spells_a_family_file():
    """No code outside irsurgeon/families/ (docstrings and comments aside) spells a file or folder only one family
    writes: the flows read it from the family's Layout."""
    words = family_spellings()
    assert {"mtp_assistant", "dflash_draft", "openvino_mtp_model"} <= words  # the check sees every family's
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("families/"):
            continue
        text = path.read_text()
        skip = docstring_lines(ast.parse(text))
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#")[0]
            if n not in skip and any(w in code for w in words):
                hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, hits


def test_the_naming_check_sees_a_branch(tmp_path):
    import re
    line = 'if family.key == "gemma4":'
    assert re.search(r"""(==|!=|\bin\b)\s*\(?\s*["'](gemma4)["']""", line)
