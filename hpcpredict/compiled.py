"""`compiled`: numba's ``njit``, with its on-disk cache where one can be written, never a crash.

Why not plain ``njit(cache=True)``: numba looks for a writable cache folder as it decorates the
function, at import, and raises ``RuntimeError: cannot cache function ...: no locator available``
when it finds none. That is the normal case on a production host: hpcpredict installed by root in
a venv (its ``__pycache__`` read-only to everyone else), run by slurmctld's ``SlurmUser`` whose
home is ``/nonexistent`` (no ``~/.cache``), under systemd's ``ProtectSystem=strict``. Every
command then died at import, and the unit restarted every 5 s for ever.

Where the cache goes, in numba's own order (nothing here second-guesses it):

1. ``$NUMBA_CACHE_DIR`` when set and writable: the shipped unit sets it to its
   ``CacheDirectory=`` (``/var/cache/hpcpredict``), which systemd creates for ``User=``;
2. the package's own ``__pycache__`` when writable (a checkout, a user's own venv);
3. ``$XDG_CACHE_HOME/numba`` (``~/.cache/numba``) when writable;
4. otherwise no cache: the kernels are compiled in memory at each start (seconds: the first
   learning step took 7.6-22 s instead of 5-5.6 s from a warm cache on the loaded 2-core
   development machine, docs/journal/performance-2026-11.md, "A command's start without a numba
   cache"), which only slows a command's start. The daemon compiles them in its warm-up,
   before its socket opens, so no PREDICT ever waits for it.

The fallback is decided per kernel, by numba's own test (it writes a temporary file in each
candidate folder), so a folder that exists but is not writable counts as absent.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from numba import njit
from numba.core import event

from hpcpredict.terminal import a_person_is_watching

_log = logging.getLogger(__name__)
_NO_CACHE_FOLDER = "no locator available"  # numba's words when no candidate folder is writable


# The package's files that define compiled functions. One calls another's (the replay loop calls
# the four others'), and numba compiles a callee into its caller's cached code, but invalidates a
# cache only when the function's own file changes ("Cache invalidation fails to recognize changes
# in symbols defined in a different file", numba's Notes on Caching): an edited kernel file would
# leave its callers running its old code from the cache. So each cached function's stamp is its
# own file's with all of these and `RULE_FILES` (tests/test_compiled_cache.py checks both lists
# are complete).
KERNEL_FILES: tuple[str, ...] = (
    "learn/feature_kernels.py", "learn/nag_kernels.py", "learn/predictor_kernel.py",
    "sim/easy/backfill_kernel.py", "sim/engine/profile_kernel.py", "sim/easy/replay_kernel.py",
    "sim/slurm_model/slurm_backfill_kernel.py", "sim/slurm_model/slurm_replay_kernel.py",
    "corrections/survival_kernel.py", "corrections/correction_kernel.py",
)
# The files of plain-Python rules that kernels compile into theirs (`usable_in_kernels`): the
# Python objects call them as they are. Part of every cached function's stamp, as kernel files.
RULE_FILES: tuple[str, ...] = ("learn/rules.py", "corrections/limits.py")


def compiled(function: Callable[..., Any]) -> Any:
    """``njit(cache=True)(function)``, or ``njit(function)`` when numba finds no writable cache
    folder (module doc); any other error of numba's is raised as it is. A cached function's
    cache is stale once any of `KERNEL_FILES` changes."""
    try:
        dispatcher = njit(cache=True)(function)
    except RuntimeError as error:
        if _NO_CACHE_FOLDER not in str(error):
            raise
        _log.debug("%s: no writable numba cache folder (set NUMBA_CACHE_DIR): compiled in memory",
                   function.__qualname__)
        return njit(function)
    index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if index is not None and hasattr(index, "_source_stamp"):  # (numba's cache index, 0.59-0.68)
        index._source_stamp = (index._source_stamp, _kernel_stamps())
    _listen_for_compiles()
    return dispatcher


def usable_in_kernels(*rules: Callable[..., Any]) -> None:
    """Let compiled functions call these plain-Python rules (numba's ``register_jitable``: each
    stays an ordinary function for Python callers, and a kernel that calls it compiles it in).
    Why: one source for a rule that the Python objects and the compiled loops both apply
    (`RULE_FILES`), without the numba import in the rule's own module."""
    from numba.extending import register_jitable

    for rule in rules:
        register_jitable(rule)


@functools.cache
def _listen_for_compiles() -> None:
    """Once per process: say it when one of hpcpredict's kernels really compiles (numba's
    "numba:compile" event fires on a cache miss only, never on a load from the cache)."""
    event.register("numba:compile", _CompileNotice())


class _CompileNotice(event.Listener):
    """The first command after an install (or an upgrade of the kernels) pays numba's compile,
    15-20 s on a 2-core machine, with nothing to show for it: one line says why, and that it
    happens once. Where no cache folder is writable (a view run by a user with no home on a
    read-only install) the kernels compile at every start, which is expected there: not said; nor
    where no person watches (`terminal.a_person_is_watching`: a pipe, a journal, CI)."""

    def __init__(self) -> None:
        self.said = False

    def on_end(self, happening: Any) -> None:
        return None

    def on_start(self, happening: Any) -> None:
        dispatcher = (happening.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        folder = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
        if self.said or not module.startswith("hpcpredict.") or not folder or not a_person_is_watching():
            return  # (no cache folder: compiled at every start, said at debug level by `compiled`)
        self.said = True
        _log.warning("hpcpredict: compiling its numba kernels for this machine, once (15-20 s on a "
                     "small machine); later runs load them from %s", folder)


@functools.cache
def _kernel_stamps() -> tuple[tuple[float, int], ...]:
    """(modification time, size) of each of `KERNEL_FILES` and `RULE_FILES`, numba's own kind
    of stamp."""
    package = Path(__file__).resolve().parent
    stamps = []
    for name in KERNEL_FILES + RULE_FILES:
        status = (package / name).stat()
        stamps.append((status.st_mtime, status.st_size))
    return tuple(stamps)
