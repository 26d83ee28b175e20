"""The package's shape stays readable: no module imports itself back through others, and none but
the files shipped whole to hosts is over 600 lines (issue 27).

Every import statement counts, wherever it stands (inside a function, under TYPE_CHECKING): a
lazy import hides a circle, it does not remove it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fleet"
MAX_LINES = 600
# shipped whole to hosts or containers and run there with the host's python3: single files by design
SHIPPED_WHOLE = {"fleet/probe/hostprobe.py", "fleet/preflight.py", "fleet/bench/replay.py"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.relative_to(PACKAGE).parts:
            continue  # Alembic's revision files import nothing of fleet's
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The fleet modules `name` imports, each resolved to the longest module name that exists."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            # a submodule importing its own package's names is the package's business
            if target and target != name and not name.startswith(target + "."):
                out.add(target)
    return out


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circles() -> None:
    mods = _modules()
    edges = {name: _imports(name, path, mods) for name, path in mods.items()}
    assert _cycles(edges) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above could fail: a lazy import back is a circle too."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("rel", sorted(SHIPPED_WHOLE))
def test_shipped_files_exist(rel: str) -> None:
    assert (ROOT / rel).is_file(), f"{rel} is exempt from the size limit but no longer exists"


def test_no_module_over_600_lines() -> None:
    big = {}
    for path in _modules().values():
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text("utf-8").splitlines())
        if lines > MAX_LINES and rel not in SHIPPED_WHOLE:
            big[rel] = lines
    assert big == {}, "split these by responsibility"
