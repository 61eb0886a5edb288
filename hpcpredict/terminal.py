"""Whether a person is watching this command's stderr: a terminal, and not CI.

Progress bars and the one-time notice that numba is compiling (`hpcpredict.compiled`) are for a
person waiting at a terminal; in a pipe, a log file, a daemon's journal or CI they are noise (and
a command whose output a program reads must not change with the state of a cache).
"""

from __future__ import annotations

import os
import sys


def a_person_is_watching() -> bool:
    return sys.stderr is not None and sys.stderr.isatty() and not os.environ.get("CI")
