"""A sysadmin's mistakes give one line and a non-zero exit, never a traceback (issue 16, item 3).

Each case is a mistake made for real on the way to production: an output folder that does not
exist or cannot be written, a mistyped socket path, a bad --loss, no `sacct` on the machine.
Output paths are checked before the long work, so no run is lost to a typo.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hpcpredict.cli import main
from hpcpredict.slurm.adapter import run_command, SlurmError

# A folder nobody can create files in, even root: the kernel refuses regular files in /proc.
UNWRITABLE = Path("/proc/hpcpredict-test/out")


def one_line_error(result: Result) -> str:
    """The error a command printed, asserted to be a single line with exit status non-zero."""
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert "Traceback" not in result.output
    assert len(lines) == 1 or lines[-1].startswith("Error"), result.output
    return lines[-1]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_predict_eval_unwritable_plots_fails_before_running(
    runner: CliRunner, sample_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before reading the log and before any replay: both are recorded here if they happen."""
    import importlib

    from hpcpredict.sim.easy.simulation import Simulation

    commands = importlib.import_module("hpcpredict.cli.simulate")  # the module, not the command
    work: list[str] = []
    monkeypatch.setattr(Simulation, "run", lambda *args, **kwargs: work.append("replay"))
    monkeypatch.setattr(commands, "load_log",
                        lambda *args, **kwargs: work.append("read the log"))
    message = one_line_error(runner.invoke(main, ["predict-eval", str(sample_log), "--plots", str(UNWRITABLE)]))
    assert "--plots" in message and "cannot create" in message
    assert work == []


def test_report_unwritable_out(runner: CliRunner, tmp_path: Path) -> None:
    from hpcpredict.daemon.core.store import Store

    store = Store(f"sqlite:///{tmp_path}/state.db")
    store.upgrade()
    store.close()
    message = one_line_error(runner.invoke(main, ["report", "--db", f"sqlite:///{tmp_path}/state.db",
                                                  "--out", str(UNWRITABLE)]))
    assert "--out" in message


def test_slurm_convert_into_a_missing_folder(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "history.swf"
    message = one_line_error(runner.invoke(main, ["slurm-convert", "--sacct", "-o", str(missing)]))
    assert "does not exist" in message and "-o/--output" in message
    assert not missing.parent.exists()


def test_slurm_convert_without_sacct_is_short(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    (empty_bin / "env").symlink_to(shutil.which("env"))  # env exists, sacct does not
    monkeypatch.setenv("PATH", str(empty_bin))
    message = one_line_error(runner.invoke(main, ["slurm-convert", "--sacct", "-o", str(tmp_path / "h.swf")]))
    assert "sacct: command not found" in message
    assert len(message) < 120


def test_failed_command_names_the_program_not_its_options(tmp_path: Path) -> None:
    with pytest.raises(SlurmError) as raised:
        run_command(["env", "A_VARIABLE=1", "false", "--an-option=" + "x" * 200], 10.0)
    assert str(raised.value).startswith("false failed (exit 1)")
    assert "x" * 20 not in str(raised.value)


def test_bad_loss_names_the_option(runner: CliRunner, sample_log: Path) -> None:
    message = one_line_error(runner.invoke(main, ["predict-eval", str(sample_log), "--loss", "bogus"]))
    assert "'--loss'" in message


@pytest.mark.parametrize("content", [b"", gzip.compress(b"; MaxProcs: 4\n" + b"1 0 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n" * 500, mtime=0)[:60]],
                         ids=["empty", "truncated gzip"])
def test_lenient_not_suggested_for_whole_file_faults(runner: CliRunner, tmp_path: Path, content: bytes) -> None:
    log = tmp_path / "log.swf.gz"
    log.write_bytes(content)
    message = one_line_error(runner.invoke(main, ["info", str(log)]))
    assert "--lenient" not in message


def test_lenient_still_suggested_for_a_bad_line(runner: CliRunner, tmp_path: Path) -> None:
    log = tmp_path / "log.swf"
    log.write_text("; MaxProcs: 4\n1 0 0 5 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n2 x\n")
    assert "--lenient" in one_line_error(runner.invoke(main, ["info", str(log)]))


def test_serve_refuses_a_socket_in_a_missing_folder(runner: CliRunner, tmp_path: Path) -> None:
    socket_path = tmp_path / "nonexistent" / "x.sock"
    message = one_line_error(runner.invoke(main, ["serve", "--db", f"sqlite:///{tmp_path}/d.db", "--create-db", "--http", "",
                                                  "--socket", str(socket_path)]))
    assert "does not exist" in message
    assert not socket_path.parent.exists()
