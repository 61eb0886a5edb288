"""The test run's one set-up step (issue 28, item 11): what it installs, that `.ci/run` installs the
same before it, that `.ci/run` runs the README's test command in a venv, and that no fixture
installs anything mid-run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import testbed.slurm_cluster as slurm_cluster
from testbed.system_packages import PACKAGES

ROOT = Path(__file__).resolve().parent.parent


def ci_script() -> str:
    return (ROOT / ".ci" / "run").read_text()


def readme_commands() -> list[str]:
    block = re.search(r"## Set-up: two commands.*?```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_ci_installs_every_package_the_suite_needs_before_the_run() -> None:
    """From the one list (testbed/system_packages.py), before the venv and the suite: no second list
    in `.ci/run` to fall behind it."""
    script = ci_script()
    assert "python3 -m testbed.system_packages" in script
    assert script.index("python3 -m testbed.system_packages") < script.index("python3 -m venv")
    assert "apt-get install" not in script and "PACKAGES=(" not in script
    assert {"slurmctld", "postgresql", "prometheus", "debootstrap"} <= set(PACKAGES)


def test_ci_runs_the_readme_test_command_in_a_venv() -> None:
    """On a stock Debian 12 a bare `pip install` is refused (PEP 668): `.ci/run` makes the venv the
    README's first command makes, then runs exactly its second command."""
    first, second = readme_commands()
    lines = [line.strip() for line in ci_script().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[-1] == second
    venv = first.split(" && pip install")[0]  # "python3 -m venv .venv && . .venv/bin/activate"
    assert lines[-2] == venv


def test_no_fixture_installs_packages() -> None:
    """apt-get only in the set-up step, never from a fixture in the middle of a run."""
    for path in [*(ROOT / "tests").glob("*.py"), *(ROOT / "testbed").glob("*.py")]:
        if path.name in ("system_packages.py", "test_system_packages.py"):
            continue
        assert '"apt-get"' not in path.read_text() and "apt_get" not in path.read_text(), path


def test_a_missing_runuser_skips_instead_of_erroring(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ensure_munge` starts munged with runuser: without it the SLURM tests errored
    (FileNotFoundError); now the cluster is unavailable, which skips (or fails in CI)."""
    real_which = slurm_cluster.shutil.which
    monkeypatch.setattr(slurm_cluster.shutil, "which",
                        lambda name, *a, **k: None if name == "runuser" else (real_which(name, *a, **k) or f"/usr/bin/{name}"))
    with pytest.raises(slurm_cluster.ClusterUnavailable, match="runuser"):
        slurm_cluster.ensure_packages()


@pytest.mark.parametrize(("arguments", "selection"), [
    ([], False), (["tests"], False), (["tests/"], False),
    (["tests/test_swf.py"], True), (["tests/test_swf.py::test_x"], True), (["-k", "swf", "tests"], False),
    (["tests", "tests/test_deploy.py"], True),
])
def test_one_file_run_as_root_does_not_start_the_suites_apt_step(arguments: list[str], selection: bool) -> None:
    """The apt step is the whole suite's set-up: a run that names files or tests skips it."""
    from conftest import runs_a_selection

    assert runs_a_selection(arguments) is selection
