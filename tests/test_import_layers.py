"""The layout tells the architecture: each package imports only the layers below it.

From the bottom: the shared job model and helpers (`hpcpredict.*` modules); the log readers
(`logs`); the learner with its features and predictors (`learn`) and the corrections; the
simulator's shared planning (`sim.engine`), the EASY engine (`sim.easy`) and the SLURM model
(`sim.slurm_model`, which reuses the EASY engine's result type and compiled plumbing), and the run
layer above both (`sim`: a run named by strings, metrics, replicas, analysis); experiments
(`experiments`: campaigns, tune, the real-SLURM replay harness). Beside the simulator, the live
side: SLURM (`slurm`: adapter, watcher, guard, failsafe), the daemon's event-sourced core
(`daemon.core`), its read-only views (`daemon.views`) and its fronts (`daemon.fronts`: the plugin's
socket, the admin HTTP API); the command line (`cli`) on top.

Read from the source as tests/test_import_graph.py reads it (every import, lazy ones included),
and once more with the imports under ``if TYPE_CHECKING:``: a type-only arrow up is still a
circle for a reader, so it fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_import_graph import find_cycle, import_graph, imported_names, module_files

LOWER = {"base", "logs", "learn", "corrections"}
# package -> the packages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    "logs": {"base"},
    "learn": {"base", "logs"},
    "corrections": {"base"},
    "sim.engine": {"base"},
    "sim.easy": LOWER | {"sim.engine"},
    "sim.slurm_model": LOWER | {"sim.engine", "sim.easy"},
    "sim": LOWER | {"sim.engine", "sim.easy", "sim.slurm_model"},
    "experiments": LOWER | {"sim.engine", "sim.easy", "sim.slurm_model", "sim", "slurm"},
    "slurm": LOWER,
    "daemon.core": LOWER | {"slurm"},
    "daemon.views": LOWER | {"slurm", "daemon.core", "sim"},
    "daemon.fronts": LOWER | {"slurm", "daemon.core", "daemon.views"},
    "daemon": {"daemon.core", "daemon.views", "daemon.fronts"},  # the package's own doc
    "cli": set(),  # anything: filled below
}
ALLOWED["cli"] = set(ALLOWED) - {"cli"}
SUBPACKAGES = {"sim": ("engine", "easy", "slurm_model"), "daemon": ("core", "fronts", "views")}


def package_of(module: str, path: Path) -> str:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and path.name != "__init__.py"):
        return "base"
    if parts[1] in SUBPACKAGES and len(parts) > 2 and parts[2] in SUBPACKAGES[parts[1]]:
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def _type_checking_names(module: str, path: Path) -> set[str]:
    """The names imported under ``if TYPE_CHECKING:`` only."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                for child in ast.walk(inner):
                    if isinstance(child, ast.ImportFrom):
                        base = (".".join(package.split(".")[: len(package.split(".")) - child.level + 1]
                                         + ([child.module] if child.module else []))
                                if child.level else child.module or "")
                        names.add(base)
                        names.update(f"{base}.{alias.name}" for alias in child.names)
                    elif isinstance(child, ast.Import):
                        names.update(alias.name for alias in child.names)
    return names


def arrows(with_types: bool) -> dict[tuple[str, str], list[str]]:
    """(package, imported package) -> the module imports that make it."""
    modules = module_files()
    found: dict[tuple[str, str], list[str]] = {}
    for module, path in modules.items():
        names = imported_names(module, path) | (_type_checking_names(module, path) if with_types else set())
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if not name or name == module:
                continue
            here, there = package_of(module, path), package_of(name, modules[name])
            if here != there:
                found.setdefault((here, there), []).append(f"{module} -> {name}")
    return found


def test_the_allowed_layers_are_a_hierarchy() -> None:
    """No two packages may import each other, even through others: the rules have an order."""
    ordered: list[str] = []
    remaining = dict(ALLOWED)
    while remaining:
        ready = [name for name, needs in remaining.items() if needs <= set(ordered)]
        assert ready, f"the allowed imports have a circle among {sorted(remaining)}"
        ordered += sorted(ready)
        for name in ready:
            del remaining[name]


@pytest.mark.parametrize("with_types", [False, True], ids=["runtime", "with type-only imports"])
def test_no_import_runs_back_up_a_layer(with_types: bool) -> None:
    modules = module_files()
    assert {package_of(module, path) for module, path in modules.items()} <= set(ALLOWED)
    wrong = {pair: sorted(set(why))[:3] for pair, why in arrows(with_types).items()
             if pair[1] not in ALLOWED[pair[0]]}
    assert not wrong, wrong


def test_no_cycle_even_through_type_only_imports() -> None:
    """A module that needs another's type for an annotation imports it under TYPE_CHECKING; if
    the other imports it back, the two are one knot for a reader: a Protocol or a smaller
    module breaks it."""
    modules = module_files()
    graph = import_graph()
    for module, path in modules.items():
        for name in _type_checking_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                graph[module].add(name)
    # a package's __init__ naming its own submodules' types (lazy exports) gathers them: not an arrow
    graph = {module: {name for name in names if not name.startswith(module + ".")}
             for module, names in graph.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle through type-only imports: " + " -> ".join(cycle or [])
