"""A package's re-exported names, loaded from their modules on first use (PEP 562).

Why: a package ``__init__`` that imports its submodules' names runs all of them as soon as any
one submodule is imported. `hpcpredict.learn` and `hpcpredict.sim` gather numba kernels beside
light modules of names and defaults that the command line reads to build its options, and
``hpcpredict --help`` must not wait ~1 s for numba, scipy and the kernels (docs/performance.md,
"The whole command"). With `lazy_exports`, ``from hpcpredict.sim import simulate`` still works;
it imports `hpcpredict.sim.easy.simulation` at that moment.

>>> getattr_, dir_, names = lazy_exports("pkg", {"json": ("dumps",)})
>>> names, getattr_("dumps")({"a": 1})
(['dumps'], '{"a": 1}')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, sources: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """A module ``__getattr__``, ``__dir__`` and ``__all__`` for `package`, which re-exports
    each name of ``sources[module]`` from `module`."""
    module_of = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> Any:
        try:
            module = module_of[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(module_of)

    return __getattr__, __dir__, sorted(module_of)
