"""The real-SLURM tests on Debian's newer Slurm releases: 24.11 (trixie) and 26.05 (sid), each in its
chroot (testbed/slurm_chroot.py), beside the host's 22.05 that the rest of the suite runs on.

A focused subset runs on each: job_submit.lua in lower and record mode, jobcomp.lua, the corrector
across a daemon restart, the starvation guard, arrays, heterogeneous jobs, jobs without --time,
fail-open, the CLI backend, ``slurm-convert --sacct`` on slurmdbd + MariaDB, the replay smoke,
and the site tests as that Debian's site runs them: a root-owned install made with its own
/usr/bin/python3 (3.13 on trixie, 3.14 on sid), the daemon and the views as an unprivileged user
with no home, and docs/quickstart-cluster.md word for word as SlurmUser.
The two long waits (the corrector's, ~100 s, and the guard's two tests, wait and xfactor rules,
~170 s on the host's 22.05), the other end-to-end tests and
the rest and the site tests run in five pytest processes, each on its own cluster, and both releases at once: the
whole costs about the longest of them, not their sum. Both chroots are built first (cached between runs:
/var/cache/hpcpredict-chroots; .ci/run starts the builds in the background before the suite).
Measured on 2026-11-26 on the 2-core machine while it ran eight replay clusters and other
developers' tests (load 10-20): the two releases' runs took 3.4 min with the chroots cached (the
longest process: the guard, 3 min 24 s); a cold build took 8.5 min per chroot, both at once
(debootstrap + apt 3.2 min, the venv 5 min). With the site group (2026-11-29): both releases
6.3 min alone on the 2-core machine (each release's quick start 2.2-2.8 min beside its guard
tests; ``python -m pytest tests/test_slurm_versions.py``), a whole fresh-clone CI 632-690 s where it
was 584 s; a cold build of each chroot on this machine, 2.6 min (system 70 s, venv 44 s, the site
venv 42 s; ``python -m testbed.slurm_chroot build trixie``). Run one release by hand with ``pytest --slurm-system 24.11 -m slurm``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.slurm_chroot import SYSTEMS, ChrootUnavailable, build

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions, pytest.mark.slow]
REPO = Path(__file__).resolve().parent.parent
CHROOT = [sys.executable, "-m", "testbed.slurm_chroot"]  # run from the repository's root (cwd=REPO)
E2E = "tests/test_slurm_e2e.py"
LONG = ("corrected_in_time", "starvation_guard")
# pytest arguments of each process run inside a chroot
GROUPS = {
    "corrector": ["-m", "slurm", E2E, "-k", LONG[0]],
    "guard": ["-m", "slurm", E2E, "-k", LONG[1]],
    "e2e": ["-m", "slurm", E2E, "-k", " and ".join(f"not {name}" for name in LONG)],
    # the failsafe's fault injection: eight clusters at once, ~3.5 min
    # (no PostgreSQL in the chroots: the store case runs on the host only)
    "failsafe": ["-m", "slurm", "tests/test_failsafe_faults.py", "-k", "not store_that_stops"],
    "rest": ["-m", "slurm", "tests/test_slurm_adapter.py", "tests/test_slurm_listing.py",
             "tests/test_slurm_replay.py", "tests/test_slurm_sacct.py", "tests/test_slurm_conf.py"],
    # as a site on that Debian runs it: its own python3's root-owned install, the daemon and the
    # views as SlurmUser with no home, the quick start word for word
    "site": ["-m", "site", "tests/test_site_install.py", "tests/test_quickstart_cluster.py"],
    # the pyslurm backend against that release's slurmctld, field for field beside the CLI's
    "pyslurm": ["-m", "slurm", "tests/test_pyslurm_backend.py"],
}
# Groups for some releases only: pyslurm has a release for 24.11 (trixie), none for 26.05 (sid).
ONLY_ON = {"pyslurm": {"trixie"}}
TIMEOUT_S = 1200


def _unavailable(reason: str) -> None:
    if os.environ.get("HPCPREDICT_REQUIRE_SERVERS") == "1":
        pytest.fail(f"the newer SLURM releases are required here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[tuple[str, subprocess.Popen, Path]]]]:
    """Every (release, group) pytest process, started at once once both chroots are built."""
    if os.environ.get("HPCPREDICT_SLURM_SYSTEM_INSIDE"):
        pytest.skip("already inside a chroot")
    if os.geteuid() != 0:
        _unavailable("building and entering the chroots needs root")
    folder = tmp_path_factory.mktemp("slurm-versions")
    builds = {name: subprocess.Popen([*CHROOT, "build", name], cwd=REPO, stdout=(folder / f"build-{name}.log").open("w"),
                                     stderr=subprocess.STDOUT) for name in SYSTEMS}
    for name, process in builds.items():
        if process.wait(TIMEOUT_S) != 0:
            _unavailable(f"the {name} chroot could not be built:\n{(folder / f'build-{name}.log').read_text()[-3000:]}")
    # The kernels compiled once per release before the groups start (testbed/warm_kernels.py): a
    # fresh clone's first dozen daemons compiling them all at once outlasted their start deadline.
    warming = {name: subprocess.Popen([*CHROOT, "exec", name, "-m", "testbed.warm_kernels"], cwd=REPO,
                                      stdout=(folder / f"warm-{name}.log").open("w"), stderr=subprocess.STDOUT)
               for name in SYSTEMS}
    for name, process in warming.items():
        if process.wait(TIMEOUT_S) != 0:
            pytest.fail(f"the kernels did not compile in the {name} chroot:\n{(folder / f'warm-{name}.log').read_text()[-3000:]}")
    started: dict[str, list[tuple[str, subprocess.Popen, Path]]] = {name: [] for name in SYSTEMS}
    for name in SYSTEMS:
        for group, arguments in GROUPS.items():
            if name not in ONLY_ON.get(group, {name}):
                continue
            log = folder / f"{name}-{group}.log"
            command = [*CHROOT, "run", name, "--", "-q", "-rfEs", *arguments]
            started[name].append((group, subprocess.Popen(command, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT), log))
    yield started
    for processes in started.values():
        for _, process, _ in processes:
            if process.poll() is None:
                process.kill()  # its namespace's processes end with it (slurm_chroot.py)
                process.wait(30)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_the_slurm_suite_passes_on_this_release(runs, name: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    failures = []
    for group, process, log in runs[name]:
        try:
            code = process.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            code = "timeout"
        text = log.read_text(errors="replace")
        # a selection that ran nothing (a renamed test) must not pass as green
        summary = text.strip().splitlines()[-1] if text.strip() else ""
        if code != 0 or " passed" not in summary or " skipped" in summary:
            failures.append(failure_report(f"{name} {group}", code, text, log))
    assert not failures, "\n".join(failures)


def failure_report(suite: str, code: object, text: str, log: Path) -> str:
    """A failed suite's FAILED/ERROR lines (pytest's -rfE summary) first, then its log's tail: a
    daemon's thread dump in a failure's message can fill the tail, and CI's output is all a reader
    of a failed run may have."""
    failed = [line for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return "\n".join([f"--- {suite} (exit {code}; whole log: {log}):", *failed, "--- its log's last 4,000 characters:",
                      text[-4000:]])


def test_the_releases_are_what_the_docs_say() -> None:
    """The chroot of each suite holds the Slurm release the compatibility table names."""
    for name, system in SYSTEMS.items():
        try:
            root = build(name, log=lambda _: None)
        except ChrootUnavailable as error:
            _unavailable(str(error))
        version = subprocess.run(["chroot", str(root), "slurmd", "-V"], capture_output=True, text=True).stdout
        assert version.split()[-1].startswith(system.slurm + "."), version


def test_a_failure_report_names_the_failed_test_whatever_fills_the_log_after_it(tmp_path: Path) -> None:
    text = "\n".join(["..F.", "FAILED tests/test_slurm_e2e.py::test_x - AssertionError: timed out",
                      "thread dump " * 2000, "1 failed, 3 passed in 60.00s"])
    report = failure_report("sid e2e", 1, text, tmp_path / "sid-e2e.log")
    assert report.splitlines()[1] == "FAILED tests/test_slurm_e2e.py::test_x - AssertionError: timed out"
    assert report.endswith("1 failed, 3 passed in 60.00s") and str(tmp_path / "sid-e2e.log") in report


def test_a_killed_chroot_run_takes_every_process_inside_with_it() -> None:
    """CI stops a run by killing it: the chroot runner (slurm_chroot.py) must then take down what it
    started inside (slurmctld, slurmd, munged, the daemon), which otherwise keep running, orphaned,
    in the namespace (seen when a `.ci/run` was stopped)."""
    if os.geteuid() != 0:
        _unavailable("entering a chroot needs root")
    try:
        build("sid", log=lambda _: None)
    except ChrootUnavailable as error:
        _unavailable(str(error))
    marker = f"{os.getpid()}.25"  # `sleep <marker>`: a process no one else runs
    code = f"import subprocess, time; subprocess.Popen(['sleep', '{marker}']); print('up', flush=True); time.sleep(600)"
    runner = subprocess.Popen([*CHROOT, "exec", "sid", "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout.readline().strip() == "up"
        assert _running(f"sleep {marker}")
        runner.kill()
        runner.wait(30)
        deadline = time.monotonic() + 15
        while _running(f"sleep {marker}") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(f"sleep {marker}"), "a process started inside outlived its killed runner"
    finally:
        subprocess.run(["pkill", "-9", "-f", f"sleep {marker}"], check=False)


def _running(command_line: str) -> bool:
    return subprocess.run(["pgrep", "-f", f"^{command_line}$"], capture_output=True).returncode == 0
