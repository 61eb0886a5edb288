"""The read-only views find the installed daemon's configuration by themselves (issue 28, item 5),
and `train` says in one line how to make a database folder it may not create (item 2).

The lookup order (`hpcpredict.daemon.core.config.find_config`): --config, $HPCPREDICT_CONFIG,
/etc/hpcpredict/daemon.toml when present and readable, the per-user defaults. Here the system path
is moved into a temporary folder; tests/test_quickstart_cluster.py runs the real one, as root and as
SlurmUser, on a controller set up by docs/quickstart-cluster.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.core import config as daemon_config
from hpcpredict.daemon.core.config import ConfigError, FoundConfig, find_config

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"


def small_history(tmp_path: Path, jobs: int = 300) -> Path:
    """The sample's header and its first `jobs` jobs: enough for judged rows, quick to train."""
    lines = SAMPLE.read_text().splitlines(keepends=True)
    header = [line for line in lines if line.startswith(";")]
    body = [line for line in lines if not line.startswith(";") and line.strip()][:jobs]
    path = tmp_path / "history.swf"
    path.write_text("".join(header + body))
    return path


def daemon_toml(tmp_path: Path, name: str) -> Path:
    """A configuration naming its own database, as /etc/hpcpredict/daemon.toml does."""
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "daemon.toml"
    path.write_text(f'[daemon]\ndb = "sqlite:///{folder / "hpcpredict.db"}"\n')
    return path


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No configuration anywhere: an empty per-user state directory, no variable, no system file."""
    monkeypatch.setenv("HPCPREDICT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("HPCPREDICT_CONFIG", raising=False)
    monkeypatch.setattr(daemon_config, "SYSTEM_CONFIG", tmp_path / "etc" / "daemon.toml")
    return tmp_path


def invoke(*args: str):  # -> click.testing.Result
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def trained(tmp_path: Path, config: Path) -> Path:
    done = invoke("train", str(small_history(tmp_path)), "--config", str(config))
    assert done.exit_code == 0, done.output
    return config


def test_the_lookup_order(tmp_path: Path) -> None:
    system = tmp_path / "system.toml"
    chosen = tmp_path / "chosen.toml"
    named = tmp_path / "named.toml"
    for path in (system, chosen, named):
        path.write_text("")
    assert find_config(chosen, system_config=system, environ={"HPCPREDICT_CONFIG": str(named)}) \
        == FoundConfig(chosen, "--config")
    assert find_config(None, system_config=system, environ={"HPCPREDICT_CONFIG": str(named)}) \
        == FoundConfig(named, "$HPCPREDICT_CONFIG")
    assert find_config(None, system_config=system, environ={}) == FoundConfig(system, "the system configuration")
    assert find_config(None, system_config=tmp_path / "absent.toml", environ={}) == FoundConfig(None, "the defaults")
    with pytest.raises(ConfigError, match="HPCPREDICT_CONFIG=.*typo.toml: no such configuration file"):
        find_config(None, system_config=system, environ={"HPCPREDICT_CONFIG": str(tmp_path / "typo.toml")})


def test_errors_and_report_read_the_system_configuration_with_no_flag(isolated: Path) -> None:
    system = daemon_toml(isolated, "etc")
    assert system == daemon_config.SYSTEM_CONFIG
    trained(isolated, system)
    table = invoke("errors")
    assert table.exit_code == 0, table.output
    assert "no judged job" not in table.output and "history" in table.output
    page = invoke("report", "--out", str(isolated / "page"))
    assert page.exit_code == 0, page.output
    assert (isolated / "page" / "index.html").is_file()


def test_the_variable_comes_before_the_system_configuration(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon_toml(isolated, "etc")  # a system configuration whose database does not exist
    monkeypatch.setenv("HPCPREDICT_CONFIG", str(trained(isolated, daemon_toml(isolated, "other"))))
    table = invoke("errors", "--format", "json")
    assert table.exit_code == 0, table.output
    assert '"user_id": "all"' in table.output


def test_a_missing_database_never_says_start_serve(isolated: Path) -> None:
    """Not "start `hpcpredict serve`" (on a controller the daemon runs, with a configuration the
    view did not read): what names the database and what to do."""
    alone = invoke("errors")
    assert alone.exit_code == 1
    assert "start `hpcpredict serve`" not in alone.output
    assert "--config or $HPCPREDICT_CONFIG" in alone.output
    system = daemon_toml(isolated, "etc")
    named = invoke("errors")
    assert named.exit_code == 1 and "start `hpcpredict serve`" not in named.output
    assert f"the database named by the system configuration {system}" in named.output
    assert f"hpcpredict train HISTORY.swf --config {system}" in named.output


def test_train_says_how_to_make_a_folder_it_may_not_create(tmp_path: Path) -> None:
    """`train --config /etc/hpcpredict/daemon.toml` as SlurmUser before /var/lib/hpcpredict exists
    gave a PermissionError traceback (issue 28, item 2): now one line with the command to run.
    Here the folder cannot be made because a file stands where its parent should be (that stops
    root too); the real case, SlurmUser and root's /var/lib, is in tests/test_quickstart_cluster.py
    and tests/test_site_install.py."""
    parent = tmp_path / "var-lib"
    parent.write_text("a file, not a folder\n")
    config = tmp_path / "daemon.toml"
    config.write_text(f'[daemon]\ndb = "sqlite:///{parent / "hpcpredict" / "hpcpredict.db"}"\n')
    done = CliRunner().invoke(main, ["train", str(small_history(tmp_path, 50)), "--config", str(config)])
    assert done.exit_code == 1 and done.exc_info[0] is SystemExit, done.output
    assert f"{parent / 'hpcpredict'}: cannot create the database's folder (Not a directory)" in done.output
    assert f"-m 0750 {parent / 'hpcpredict'}" in done.output and "Traceback" not in done.output
