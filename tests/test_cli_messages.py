"""Issue 28, item 10: each mistake a sysadmin made on the way to production gets one line that
names the file or key, what was expected and what to do, never a misleading one.

Every test here failed on main at 195fcb0 (the message it replaces is quoted in its docstring).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from test_cli_errors import one_line_error

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trained_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real store: `hpcpredict train` on the bundled KTH-SP2 sample."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store')}/hpcpredict.db"
    result = CliRunner().invoke(main, ["train", str(REPO_ROOT / "swf" / "KTH-SP2-sample.swf"), "--db", url])
    assert result.exit_code == 0, result.output
    return url


def test_output_under_a_regular_file_says_the_file_is_in_the_way(tmp_path: Path) -> None:
    """Was: "--output: FILE/x.swf: folder FILE does not exist" (FILE exists, as a file)."""
    blocking = tmp_path / "FILE"
    blocking.write_text("not a folder\n")
    message = one_line_error(CliRunner().invoke(main, [
        "slurm-convert", "--sacct", "-o", str(blocking / "x.swf")]))
    assert f"{blocking} is a file, not a folder" in message and "-o/--output" in message
    assert "does not exist" not in message


def test_output_folder_under_a_regular_file_says_so(tmp_path: Path) -> None:
    from hpcpredict.outputs import OutputPathError, check_output_dir

    blocking = tmp_path / "FILE"
    blocking.write_text("")
    with pytest.raises(OutputPathError, match="FILE is a file, not a folder"):
        check_output_dir(blocking / "plots" / "more", what="--plots")


def test_time_zone_names_the_key_not_the_learner(trained_url: str, tmp_path: Path) -> None:
    """Was: "learner: 'No time zone found with key Mars/Olympus'"."""
    message = one_line_error(CliRunner().invoke(main, [
        "serve", "--db", trained_url, "--time-zone", "Mars/Olympus", "--http", ""]))
    assert "time_zone 'Mars/Olympus': no such IANA time zone" in message and "Europe/Paris" in message
    assert "learner" not in message
    config = tmp_path / "daemon.toml"
    config.write_text('[daemon]\ntime_zone = "Mars/Olympus"\n')
    message = one_line_error(CliRunner().invoke(main, ["errors", "--config", str(config)]))
    assert message.startswith(f"Error: {config}: time_zone 'Mars/Olympus'")


def test_a_number_where_the_db_url_goes_names_file_and_key(tmp_path: Path) -> None:
    """Was: "5 is not a database URL (...)": neither the file nor the key."""
    config = tmp_path / "daemon.toml"
    config.write_text("[daemon]\ndb = 5\n")
    message = one_line_error(CliRunner().invoke(main, ["errors", "--config", str(config)]))
    assert f"{config}: db: expected a database URL" in message and "got 5" in message


def test_train_into_an_unwritable_database_says_what_to_check() -> None:
    """Was: "(sqlite3.OperationalError) unable to open database file" + SQLAlchemy's link line."""
    result = CliRunner().invoke(main, [
        "train", str(REPO_ROOT / "swf" / "KTH-SP2-sample.swf"), "--db", "sqlite:////proc/x.db"])
    message = one_line_error(result)
    assert "sqlalche.me" not in result.output and "OperationalError" not in message
    assert "sqlite:////proc/x.db: cannot open the database (unable to open database file)" in message
    assert "check that /proc is a folder" in message


def test_a_user_filter_that_matches_nothing_is_not_an_empty_store(trained_url: str) -> None:
    """Was: "no judged job yet" for `errors --user 99999` on a store of 4,997 judged jobs."""
    result = CliRunner().invoke(main, ["errors", "--db", trained_url, "--user", "99999"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("no judged job matches user 99999"), result.output
    assert "yet" not in first


def test_serve_that_cannot_start_does_not_log_stopped(trained_url: str) -> None:
    """Was: "INFO hpcpredict.daemon.fronts.server: stopped" logged before the socket's error."""
    completed = subprocess.run(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", trained_url, "--http", "",
         "--socket", "/nonexistent/dir/x.sock"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert completed.returncode != 0
    assert "folder /nonexistent/dir does not exist" in completed.stderr
    assert "stopped" not in completed.stderr, completed.stderr
