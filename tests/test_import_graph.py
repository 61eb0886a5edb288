"""No import cycle between hpcpredict's modules (issue 15): a module that needs another's helper
imports it, and the other never imports it back, even lazily inside a function.

The graph is read from the source with `ast`, not by importing: every ``import`` and ``from ...
import`` anywhere in a module (function bodies included: a lazy import is still a dependency),
except under ``if TYPE_CHECKING:``, which never runs. ``from package import name`` depends on
``package.name`` when that is a module, else on the package's ``__init__``. A submodule's
implicit import of its parent package is not an edge: a package's ``__init__`` may gather its
submodules without that being a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hpcpredict

PACKAGE_ROOT = Path(hpcpredict.__file__).resolve().parent


def module_files() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` except the bodies of ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)
    return found


def imported_names(module: str, path: Path) -> set[str]:
    """The dotted names `module` imports (`from a import b` gives a and a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for name in imported_names(module, path):
            while name and name not in modules:  # a.b.function -> a.b
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.add(name)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that comes back to its start, or None (depth-first search)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target, path)) is not None:
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node, [])) is not None:
            return cycle
    return None


def test_hpcpredict_modules_import_each_other_without_a_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_lazy_imports_and_what_cycles_look_like() -> None:
    """The checker itself: a lazy import inside a function is an edge; a cycle is reported."""
    graph = import_graph()
    assert "hpcpredict.daemon.fronts.server" in graph["hpcpredict.cli.daemon"]  # imported inside serve()
    assert "hpcpredict.corrections.policies" in graph["hpcpredict.slurm.corrector"]
    assert not any(target.startswith("hpcpredict.sim") for target in graph["hpcpredict.slurm.guard"])
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_slurm_and_daemon_take_the_correction_policies_from_corrections_not_sim() -> None:
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith(("hpcpredict.slurm.", "hpcpredict.daemon.")):
            assert "hpcpredict.sim.easy.schedulers" not in targets, module
        if module.startswith("hpcpredict.corrections"):
            assert not any(t.startswith(("hpcpredict.sim", "hpcpredict.slurm", "hpcpredict.daemon"))
                           for t in targets), module
