"""`ensure_munge` (testbed/slurm_cluster.py) on a machine where other munged processes run that do not
serve this system's socket: the newer releases' chroots (testbed/slurm_chroot.py) run theirs in PID
namespaces the host's process list shows. Asking the process list took one of those for the host's
munged, started none, and the host's slurmd then failed to register ("Failed to access
/run/munge/munge.socket.2")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm
TESTS = Path(__file__).resolve().parent

# In a private mount namespace whose /run/munge is an empty tmpfs: every munged of the machine stays
# in the process list (the host's included), none serves this socket. ensure_munge must start one.
SCRIPT = f"""
import os, signal, subprocess, sys
sys.path.insert(0, {str(TESTS)!r})
from testbed.slurm_cluster import ensure_munge, munge_answers
assert subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0, "no munged runs"
assert not munge_answers(), "the empty /run/munge answered"
try:
    ensure_munge()
    print("answers" if munge_answers() else "silent", flush=True)
finally:
    pid_file = "/run/munge/munged.pid"
    if os.path.exists(pid_file):
        os.kill(int(open(pid_file).read()), signal.SIGTERM)
"""


def test_munged_is_started_for_this_socket_whatever_other_munged_processes_run() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("munged", path="/usr/sbin:/usr/bin") is None:
        if os.environ.get("HPCPREDICT_REQUIRE_SERVERS") == "1":
            pytest.fail("root, unshare and munge are required here")
        pytest.skip("needs root, unshare and munge")
    from testbed.slurm_cluster import ensure_munge

    ensure_munge()  # the host's own munged: the process list the namespace sees is never empty
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-ec",
         'mount -t tmpfs -o mode=755 tmpfs /run/munge && chown munge:munge /run/munge && exec "$0" -c "$1"',
         sys.executable, SCRIPT],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "answers", done.stdout + done.stderr
