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
from hpcpredict.compiled import KERNEL_FILES, RULE_FILES, compiled

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
    kernel_modules = {"hpcpredict." + name.removesuffix(".py").replace("/", ".")
                      for name in KERNEL_FILES + RULE_FILES}
    for name in KERNEL_FILES + RULE_FILES:
        imported = set(re.findall(r"^from (hpcpredict[\w.]*) import", (PACKAGE / name).read_text(),
                                  re.MULTILINE))
        assert imported <= kernel_modules | {"hpcpredict.compiled"}, (name, imported - kernel_modules)


def test_the_rule_files_are_every_file_whose_rules_kernels_compile() -> None:
    """A rule compiled into a kernel (`usable_in_kernels`) lives in one of `RULE_FILES`, whose
    changes invalidate the cache; and a rule file imports no numba (the objects that call its
    rules are imported by the command line for their names)."""
    registered: set[str] = set()
    for name in KERNEL_FILES:
        source = (PACKAGE / name).read_text()
        origins = {imported: module for module, names in re.findall(
                       r"^from (hpcpredict[\w.]*) import (\([^)]*\)|[^\n]*)", source, re.MULTILINE)
                   for imported in re.findall(r"\w+", names)}
        for call in re.findall(r"^usable_in_kernels\(([^)]*)\)", source, re.MULTILINE):
            for rule in re.findall(r"\w+", call):
                registered.add(origins[rule].removeprefix("hpcpredict.").replace(".", "/") + ".py")
    assert registered == set(RULE_FILES)
    for name in RULE_FILES:
        assert not re.search(r"^\s*(import|from) numba", (PACKAGE / name).read_text(), re.MULTILINE), name


def _at_a_terminal(code: str, env: dict[str, str]) -> str:
    """What `python -c code` writes to a terminal (a pseudo-terminal as its stderr and stdout)."""
    import os
    import pty
    import subprocess

    controller, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=terminal,
                              stderr=terminal, env=env, timeout=300, check=False)
        os.close(terminal)
        terminal = -1
        chunks = []
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert done.returncode == 0, b"".join(chunks)
        return b"".join(chunks).decode(errors="replace")
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)


def test_the_first_compile_says_so_once_to_a_person_at_a_terminal(tmp_path) -> None:
    """A new install's first command pays numba's compile with nothing to show for it: one line
    says so, the first time only (the next run loads the kernel from the cache), and only where a
    person watches (not in CI, a pipe or a journal)."""
    import os

    code = ("from hpcpredict.corrections.survival import conditional_quantile_s\n"
            "print('quantile', conditional_quantile_s([600, 1200], [900], 300, 0.5))")
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(PACKAGE.parent))
    first = _at_a_terminal(code, env)
    assert first.count("compiling its numba kernels for this machine, once") == 1, first
    assert str(tmp_path / "cache") in first and "quantile" in first
    again = _at_a_terminal(code, env)
    assert "compiling" not in again and "quantile" in again, again
    fresh = {**env, "NUMBA_CACHE_DIR": str(tmp_path / "other"), "CI": "true"}
    assert "compiling" not in _at_a_terminal(code, fresh)
