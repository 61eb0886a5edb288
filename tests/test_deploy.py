"""The deployment pieces in deploy/ are real: the config loads, the unit file verifies (issue 16, item 6)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import skip_or_fail
from hpcpredict.daemon.config import ConfigError, load_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_example_config_loads_with_the_documented_paths() -> None:
    config = load_config(DEPLOY / "daemon.toml")
    assert config.db == "sqlite:////var/lib/hpcpredict/hpcpredict.db"
    assert config.socket == "/run/hpcpredict/hpcpredict.sock"
    assert config.socket_mode == 0o600
    assert config.http == "127.0.0.1:8765" and config.http_token_file == "/etc/hpcpredict/http-token"
    assert config.slurm is False  # record mode first
    assert config.learner.loss == "eloss"
    assert config.starvation_guard_s == 86_400


@pytest.mark.parametrize(("value", "seconds"), [('"off"', None), ('"12h"', 43_200), ("7200", 7200)])
def test_the_starvation_guard_is_configurable(tmp_path: Path, value: str, seconds: int | None) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\nstarvation_guard = {value}\n")
    assert load_config(path).starvation_guard_s == seconds


@pytest.mark.parametrize("value", ['"soon"', "30", "true"])
def test_a_bad_starvation_guard_names_the_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\nstarvation_guard = {value}\n")
    with pytest.raises(ConfigError, match="starvation_guard"):
        load_config(path)


def test_unit_paths_match_the_example_config() -> None:
    unit = (DEPLOY / "hpcpredict.service").read_text()
    assert "RuntimeDirectory=hpcpredict\n" in unit  # /run/hpcpredict: the socket's folder
    assert "StateDirectory=hpcpredict\n" in unit  # /var/lib/hpcpredict: the database
    assert "--config /etc/hpcpredict/daemon.toml" in unit
    for option in ("User=", "Restart=on-failure", "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        assert option in unit


def test_unit_file_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify: unknown keys, bad values and a missing ExecStart binary all show.

    The binary is pointed at this test's interpreter's hpcpredict (the unit's /opt path does not
    exist here); verify prints problems as warnings with exit 0, so stderr must be clean too.
    """
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze not installed (apt-get install systemd; .ci/run does)")
    hpcpredict = Path(sys.executable).parent / "hpcpredict"
    if not hpcpredict.exists():
        skip_or_fail(f"no hpcpredict entry point beside {sys.executable}")
    unit = tmp_path / "hpcpredict.service"
    unit.write_text((DEPLOY / "hpcpredict.service").read_text().replace(
        "/opt/hpcpredict/venv/bin/hpcpredict", str(hpcpredict)))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    problems = [line for line in done.stderr.splitlines() if "hpcpredict.service" in line]
    assert done.returncode == 0 and not problems, done.stderr


def test_quickstart_names_only_files_the_repository_has() -> None:
    """Every `src/...` file docs/quickstart-cluster.md copies exists in the repository."""
    import re

    root = DEPLOY.parent
    text = (root / "docs" / "quickstart-cluster.md").read_text()
    copied = set(re.findall(r"/opt/hpcpredict/src/([\w./-]+\.(?:toml|service|lua))", text))
    assert {"deploy/daemon.toml", "deploy/hpcpredict.service", "slurm-plugin/job_submit.lua"} <= copied
    for relative in copied:
        assert (root / relative).is_file(), relative
