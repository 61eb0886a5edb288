"""The Debian packages the test suite's servers need, installed in one visible step (issue 28, item 11).

The README's test command (``pip install -e '.[test]' && python -m pytest -n 4 ...``) runs on a fresh
machine: as root with apt-get, the missing packages below are installed once, in one
``apt-get install``, when the session starts (tests/conftest.py, ``pytest_sessionstart``), before
any test is collected, and the run says so. Never from inside a fixture: a fixture that installed
SLURM mid-run left the Lua tests collected before it skipped. Elsewhere (not root, no apt-get) nothing
is installed and the tests that need a missing server skip, or fail with
``HPCPREDICT_REQUIRE_SERVERS=1`` (CI). ``HPCPREDICT_NO_INSTALL=1`` turns the step off.

``python3 -m testbed.system_packages`` does the same step by hand, and `.ci/run` runs it first:
this is the one list of the packages (tests/test_system_packages.py checks `.ci/run` has no other).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable

# package -> who needs it
PACKAGES: dict[str, str] = {
    "postgresql": "the daemon's store on a real PostgreSQL (testbed/pg_server.py)",
    "lua5.1": "the SLURM plugin scripts run by the real Lua (tests/test_slurm_plugin_lua.py)",
    "lua-socket": "the plugin's Unix socket, in Lua and inside slurmctld",
    "slurmctld": "a real SLURM on loopback (testbed/slurm_cluster.py)",
    "slurmd": "a real SLURM on loopback (testbed/slurm_cluster.py)",
    "slurm-client": "sbatch, squeue, scontrol, sacct",
    "munge": "SLURM's authentication",
    "slurmdbd": "SLURM accounting, for slurm-convert --sacct (tests/test_slurm_sacct.py)",
    "mariadb-server": "slurmdbd's database",
    "python3-venv": "a site's install with Debian's python3 (testbed/site_install.py)",
    "python3-pip": "a site's install with Debian's python3 (testbed/site_install.py)",
    "curl": "the quick start's health check (tests/test_quickstart_cluster.py)",
    "iproute2": "a private loopback for the quick start's fixed ports (testbed/site_install.py)",
    "systemd": "systemd-analyze verify of the daemon's unit file (tests/test_deploy.py)",
    "debootstrap": "the chroots of Debian's newer Slurm releases (testbed/slurm_chroot.py)",
    "prometheus": "promtool check/test rules of deploy/hpcpredict-alerts.yml (tests/test_deploy.py)",
    "libslurm-dev": "pyslurm's wheel, built against the host's libslurm (testbed/pyslurm_wheel.py)",
    "gcc": "pyslurm's wheel (testbed/pyslurm_wheel.py): Cython's C, compiled",
    "python3-dev": "pyslurm's wheel for Debian's python3 (testbed/pyslurm_wheel.py): Python.h",
    "chromium": "the sysadmin page in a real browser, headless (tests/test_report_page.py, testbed/browser.py)",
}
NO_INSTALL_VARIABLE = "HPCPREDICT_NO_INSTALL"
APT_TIMEOUT_S = 1200  # apt-get update + install on a slow mirror


def missing_packages() -> list[str]:
    """The packages above that dpkg does not have installed (all of them without dpkg)."""
    if shutil.which("dpkg-query") is None:
        return list(PACKAGES)
    absent = []
    for package in PACKAGES:
        done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
        if "ok installed" not in done.stdout:
            absent.append(package)
    return absent


def install_missing(say: Callable[[str], None] = print) -> list[str]:
    """Install the missing packages in one apt-get call when we may (root, apt-get, not turned off);
    returns what was installed. Says what it does and why; a failed install is said and left to the
    tests that need the servers (they skip, or fail in CI)."""
    absent = missing_packages()
    if not absent or os.environ.get(NO_INSTALL_VARIABLE) == "1":
        return []
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        say(f"not installing {' '.join(absent)} (needs root and apt-get): the tests that need them skip")
        return []
    say(f"installing Debian packages for the test servers, once, before any test: {' '.join(absent)}")
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *absent]):
        try:
            done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            say(f"{' '.join(command[:2])}: no answer in {APT_TIMEOUT_S} s; the tests that need {' '.join(absent)} skip")
            return []
        if done.returncode != 0:
            say(f"{' '.join(command[:2])} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
            return []
    return absent


if __name__ == "__main__":
    installed = install_missing()
    still = missing_packages()
    print(f"installed: {' '.join(installed) or 'nothing'}; missing: {' '.join(still) or 'nothing'}")
    sys.exit(1 if still and os.geteuid() == 0 else 0)
