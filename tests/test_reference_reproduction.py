"""docs/reproduction.md, run as written: its commands print its table.

The reference's baselines (EASY, EASY-SJBF, EASY++ and the clairvoyant schedulers, Gaussier et
al. SC 2015) involve no learning, so any difference is a cleaning or simulator difference. The
commands and the expected figures are read from the page itself, so that a change of a default
that would make the documented commands print something else (as the starvation guard's once
did) fails here, and so does a page edited without its figures.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import BLUE_LOG, CURIE_LOG, KTH_LOG, REPO_ROOT, shared_log
from hpcpredict.cli import main

PAGE = REPO_ROOT / "docs" / "reproduction.md"
# The table's rows start with these names; the commands name the log's file.
ROW_NAMES = {KTH_LOG: "KTH-SP2", BLUE_LOG: "SDSC-BLUE", CURIE_LOG: "CEA-Curie"}


@dataclass(frozen=True)
class DocumentedRun:
    argv: list[str]  # after `hpcpredict`, with $L as written
    column: str  # the table's column the command's figure is in
    expected_bsld: float
    expected_jobs: int


def documented_runs(log_name: str) -> list[DocumentedRun]:
    """The page's commands for one log, paired in order with its `hpcpredict` row's columns."""
    text = PAGE.read_text()
    header = next(line for line in text.splitlines() if line.startswith("| log (jobs kept)"))
    columns = [cell.strip() for cell in header.strip("|").split("|")][1:]
    row = next(line for line in text.splitlines()
               if line.startswith(f"| {ROW_NAMES[log_name]} (") and "hpcpredict |" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    jobs = int(re.match(r"\S+ \(([\d,]+)", cells[0]).group(1).replace(",", ""))
    block = text.split("```sh", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line)[1:] for line in block.splitlines()
                if line.startswith("hpcpredict simulate") and log_name in line]
    assert len(commands) == len(columns) == len(cells) - 1, "the page's commands and table disagree"
    return [DocumentedRun(argv, column, float(value), jobs)
            for argv, column, value in zip(commands, columns, cells[1:])]


def _check(log_name: str) -> None:
    swf_dir = shared_log(log_name).parent
    for documented in documented_runs(log_name):
        argv = [arg.replace("$L", str(swf_dir)) for arg in documented.argv]
        result = CliRunner().invoke(main, argv, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert f"{documented.expected_jobs:,} jobs" in result.output
        # the run names itself as the column does: the published, unbounded scheduler
        assert f"simulated: {documented.column} = " in result.output, result.output
        assert "starvation guard: off (" in result.output
        printed = re.search(r"^AVEbsld \(tau=10s\)\s+([\d.]+)$", result.output, re.MULTILINE)
        assert printed is not None, result.output
        assert float(printed.group(1)) == pytest.approx(documented.expected_bsld, abs=0.005), (
            f"{' '.join(documented.argv)} printed {printed.group(1)}, the page says "
            f"{documented.expected_bsld} ({documented.column})"
        )


def test_the_page_lists_fifteen_commands_matching_its_table() -> None:
    """Parsing the page is what the real-log tests stand on: check it without the logs."""
    for log_name in ROW_NAMES:
        runs = documented_runs(log_name)
        assert [run.column for run in runs] == [
            "EASY", "EASY-SJBF", "EASY++", "clairvoyant EASY", "clairvoyant EASY-SJBF"]
        assert all(run.argv[0] == "simulate" and "--no-baseline" in run.argv for run in runs)


@pytest.mark.reallog
def test_kth_sp2_commands_print_the_documented_table() -> None:
    _check(KTH_LOG)


@pytest.mark.reallog
@pytest.mark.slow
def test_sdsc_blue_commands_print_the_documented_table() -> None:
    _check(BLUE_LOG)


@pytest.mark.reallog
@pytest.mark.slow
def test_cea_curie_commands_print_the_documented_table() -> None:
    _check(CURIE_LOG)
