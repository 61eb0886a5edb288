"""`hpcpredict.compiled`'s cache stamp: a cached kernel is compiled again when any kernel file
changes, not only its own (numba inlines callees from other files into the cached code)."""

from __future__ import annotations

import gc
import importlib.util
import re
import sys
from pathlib import Path

import hpcpredict
from hpcpredict import compiled as compiled_module
from hpcpredict.compiled import KERNEL_FILES, compiled

PACKAGE = Path(hpcpredict.__file__).resolve().parent


def test_the_kernel_files_are_every_file_that_compiles_a_function() -> None:
    using = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
             if re.search(r"^@compiled\b", path.read_text(), re.MULTILINE)}
    assert using == set(KERNEL_FILES)


def test_a_kernel_file_changed_makes_every_cached_function_compile_again(tmp_path, monkeypatch) -> None:
    source = tmp_path / "kernel_user.py"
    source.write_text("def twice(x):\n    return 2 * x\n")
    spec = importlib.util.spec_from_file_location("kernel_user", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Importable, as every real kernel's module is: numba's cached code names the module its
    # environment comes from and imports it on load once the first compile's copy is collected.
    monkeypatch.setitem(sys.modules, "kernel_user", module)
    spec.loader.exec_module(module)

    def hits(stamps: tuple) -> int:
        gc.collect()  # the previous call's kernel gone, as in a new process: loaded from the file
        monkeypatch.setattr(compiled_module, "_kernel_stamps", lambda: stamps)
        kernel = compiled(module.twice)
        assert kernel(21) == 42
        return sum(kernel.stats.cache_hits.values())

    assert hits(((1.0, 10),)) == 0  # compiled, then saved in tmp_path's __pycache__
    assert hits(((1.0, 10),)) == 1  # the same kernel files: loaded from the cache
    assert hits(((2.0, 10),)) == 0  # one of them changed: compiled again
    assert hits(((2.0, 10),)) == 1


def test_kernel_files_take_their_constants_from_kernel_files_only() -> None:
    """numba freezes a global's value into the cached code: a constant a kernel reads from a file
    outside `KERNEL_FILES` could change without invalidating the cache (the replay loop gets
    INCREMENTAL's steps as an argument for that reason)."""
    kernel_modules = {"hpcpredict." + name.removesuffix(".py").replace("/", ".") for name in KERNEL_FILES}
    for name in KERNEL_FILES:
        imported = set(re.findall(r"^from (hpcpredict[\w.]*) import", (PACKAGE / name).read_text(),
                                  re.MULTILINE))
        assert imported <= kernel_modules | {"hpcpredict.compiled"}, (name, imported - kernel_modules)
