"""`pyplot()`: matplotlib for writing plot files on a server, quietly, whoever runs it.

Why not a plain ``import matplotlib.pyplot``: the views (`hpcpredict report`, `predict-eval`'s
plots, `campaign-report`) run on the controller, often as slurmctld's ``SlurmUser``, whose home
is ``/nonexistent``. matplotlib then cannot make its config and cache folder under ``~``: it
works from a temporary one, but says so in two warnings on every run ("mkdir -p failed ...",
"it is highly recommended to set the MPLCONFIGDIR environment variable"), and the ``fc-list`` it
runs to find the system's fonts prints "Fontconfig error: No writable cache directories" four
times. An admin reading that cannot tell it from a failure. So when nothing writable is
configured, matplotlib and fontconfig are given the same temporary folder matplotlib would have
made, removed when the process ends, and say nothing.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (files only: no display on a headless server),
    with a writable config and cache folder (module doc)."""
    if "MPLCONFIGDIR" not in os.environ and not _home_is_writable():
        folder = tempfile.mkdtemp(prefix="hpcpredict-matplotlib-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["MPLCONFIGDIR"] = folder  # matplotlib's config and font cache
        os.environ.setdefault("XDG_CACHE_HOME", folder)  # fontconfig's cache, for fc-list
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _home_is_writable() -> bool:
    """Can matplotlib make its folders where it looks first (under ``~``, or XDG's folders)?"""
    home = Path.home()
    candidates = [Path(os.environ.get(variable) or home) for variable in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME")]
    for candidate in candidates:
        existing = candidate
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
            return False
    return True
