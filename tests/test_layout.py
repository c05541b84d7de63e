"""The package layout shows the data flow (docs/architecture.md): imports run one way, from
what users type down to the wgpu layer, and no two modules import each other even
indirectly. Read from the source (every import, also those inside functions). Code and docs
carry no lab history a reader of the repository can't follow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lower floors never import higher ones; a floor may import its own and every lower one.
FLOORS = {
    "farm.schedule": 0,
    "farm.parallel": 0,
    "farm.paths": 0,
    "farm.gpu": 0,
    "farm.trial": 1,
    "farm.catalog": 2,
    "farm.store": 2,
    "farm.oracle": 3,
    "farm.tuning": 4,
    "farm.runtime": 4,
    "farm.recurrent": 4,
    "farm.cli": 5,
    "farm.dashboard": 5,
    "farm": 6,  # farm/__init__.py and __main__.py
}
MAX_LINES = 400
# Modules over MAX_LINES that are one idea, each with its reason in its docstring.
ONE_IDEA = {
    "farm/gpu/device.py",
    "farm/runtime/forge.py",
    "farm/runtime/calls.py",
    "farm/tuning/campaign.py",
    "farm/tuning/runner.py",
    "farm/tuning/search.py",
    "farm/tuning/workers.py",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "farm").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    for path in sorted((ROOT / "dashboard").rglob("*.py")):
        parts = ["farm", "dashboard", *path.relative_to(ROOT / "dashboard").with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name.startswith("farm"):
                out.add(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, set(modules)) - {name} for name, path in modules.items()}


def _floor(module: str) -> int:
    while module not in FLOORS:
        module = module.rpartition(".")[0]
    return FLOORS[module]


def test_imports_never_run_upward():
    upward = [
        f"{src} (floor {_floor(src)}) imports {dst} (floor {_floor(dst)})"
        for src, targets in _graph().items()
        for dst in targets
        if _floor(dst) > _floor(src) and not src.startswith(dst + ".")  # a package's own __init__
    ]
    assert upward == []


def test_no_import_cycles():
    graph = _graph()
    # A package imports its own submodules through __init__; that edge is not a cycle.
    edges = {
        src: {d for d in dsts if not d.startswith(src + ".") and not src.startswith(d + ".")}
        for src, dsts in graph.items()
    }
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    assert cycles == []


def test_every_module_is_in_a_known_package():
    assert [m for m in _graph() if not any(m == f or m.startswith(f + ".") for f in FLOORS)] == []


def test_modules_stay_small_or_say_why():
    long = []
    for path in _modules().values():
        rel = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and rel not in ONE_IDEA:
            long.append(f"{rel}: {lines} lines")
    assert long == []
    for rel in ONE_IDEA:
        assert "one idea" in ast.get_docstring(ast.parse((ROOT / rel).read_text())), rel


# Lab history a reader of the repository can't follow: notebook sections, numbered parts,
# sessions and issues, the lab's notebook and its raw results (a file under benchmarks/results;
# the folder alone is the benchmarks' default output), which left the tree.
HISTORY = re.compile(
    r"§\s*\d|\b(?:parts?|sessions?|issues?)\s+#?\d+\b|NOTES\.md|benchmarks/results/[\w.*{-]", re.IGNORECASE
)
HISTORY_DIRS = ("farm", "dashboard", "kernels", "benchmarks", "docs")
TEXT_SUFFIXES = {".py", ".wgsl", ".md", ".css", ".js", ".json", ".yml", ".yaml", ".toml", ".sh", ".txt", ".html"}
# The performance page and the decision records name the commit that keeps the lab, exactly so.
LAB_COMMIT = "6d03ecc:benchmarks/NOTES.md"


def _names_the_lab_commit(rel: Path) -> bool:
    return rel == Path("docs/performance.md") or rel.parts[:2] == ("docs", "decisions")


def test_code_and_docs_carry_no_lab_history():
    found = []
    for top in HISTORY_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if path.suffix not in TEXT_SUFFIXES or not path.is_file() or "__pycache__" in rel.parts:
                continue
            if rel.parts[:2] == ("benchmarks", "results"):  # the benchmarks' own output, ignored by git
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                text = line.replace(LAB_COMMIT, "") if _names_the_lab_commit(rel) else line
                if HISTORY.search(text):
                    found.append(f"{rel}:{number}: {line.strip()[:120]}")
    assert found == []
