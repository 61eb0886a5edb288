"""The README's test command runs the suite in several pytest-xdist processes, each collecting the
tests itself; they must collect the same ids in the same order, or xdist refuses the whole run
("Different tests were collected"). An id made from the clock (a gzip header's mtime, once) or
from a set's order (string hashing differs per process) collects differently in another process
or another second: two collections, in processes with different hash seeds and seconds apart,
must agree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def collected(hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "HPCPREDICT_NO_INSTALL": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_two_processes_collect_the_same_tests_in_the_same_order() -> None:
    first = collected("1")
    time.sleep(1.1)  # a clock-made id changes at least once a second
    second = collected("2")
    assert len(first) > 1000
    assert first == second, sorted(set(first) ^ set(second))[:10]
