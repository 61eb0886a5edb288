"""`hpcpredict errors` and `hpcpredict report` on a store filled by the service (issue 6, part 5)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.errors import user_error_statistics
from hpcpredict.daemon.service import PredictionService
from hpcpredict.daemon.store import Store
from hpcpredict.learn.history import ENDED, STARTED, SUBMITTED, history_events
from hpcpredict.workload import load_workload

JOBS = 200


@pytest.fixture
def filled_url(store_url: str, sample_log: Path) -> str:
    """The first jobs of the sample log through the daemon's service, as SLURM would report them."""
    workload = load_workload(sample_log)
    events, _ = history_events(workload.jobs[:JOBS], offset_s=workload.header.unix_start_time or 0)
    store = Store(store_url)
    try:
        service = PredictionService.open(store)
        for event in events:
            job = event.request
            if event.kind == SUBMITTED:
                service.submitted(job, event.time_s)
            elif event.kind == STARTED:
                service.started(job.job_id, event.time_s)
            else:
                assert event.kind == ENDED
                service.ended(job.job_id, event.run_s, event.time_s, "COMPLETED")
        service.limit_changed(workload.jobs[0].job_id, 10**6, 0)  # ignored: the job has ended
    finally:
        store.close()
    return store_url


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_json_and_csv_carry_the_statistics(filled_url: str) -> None:
    store = Store(filled_url)
    try:
        expected = user_error_statistics(store)
    finally:
        store.close()
    rows = json.loads(run("errors", "--db", filled_url, "--format", "json"))
    assert [row["user_id"] for row in rows] == [*expected["user_id"].tolist(), "all"]
    for row, (_, want) in zip(rows, expected.iterrows()):
        assert row["count"] == want["count"]
        assert row["mae_s"] == pytest.approx(want["mae_s"])
        assert row["ave2_mae_s"] == pytest.approx(want["ave2_mae_s"])
    assert rows[-1]["count"] == JOBS == expected["count"].sum()

    table = list(csv.DictReader(io.StringIO(run("errors", "--db", filled_url, "--format", "csv"))))
    assert [r["user_id"] for r in table] == [str(u) for u in expected["user_id"]] + ["all"]
    assert float(table[0]["requested_mae_s"]) == pytest.approx(expected["requested_mae_s"].iloc[0])


def test_table_filters_by_user_and_date(filled_url: str) -> None:
    store = Store(filled_url)
    try:
        statistics = user_error_statistics(store)
    finally:
        store.close()
    busiest = int(statistics.sort_values("count").iloc[-1]["user_id"])
    text = run("errors", "--db", filled_url, "--user", str(busiest))
    lines = text.strip().splitlines()
    assert lines[0].split()[:3] == ["user", "jobs", "MAE"]
    assert lines[1].split()[0] == str(busiest) and lines[-1].split()[0] == "all"
    assert len(lines) == 3

    rows = json.loads(run("errors", "--db", filled_url, "--since", "2100-01-01", "--format", "json"))
    assert rows == []
    assert "no judged job" in run("errors", "--db", filled_url, "--since", "2100-01-01")
    everything = json.loads(run("errors", "--db", filled_url, "--since", "0", "--format", "json"))
    assert everything[-1]["count"] == JOBS


def test_read_only_commands_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    for command in (["errors"], ["report", "--out", str(tmp_path / "out")]):
        result = CliRunner().invoke(main, [*command, "--db", f"sqlite:///{missing}"])
        assert result.exit_code == 1 and "no such database file" in result.output
    assert not missing.exists()
    other = tmp_path / "other.db"
    pd.DataFrame({"a": [1]}).to_sql("something", f"sqlite:///{other}")
    result = CliRunner().invoke(main, ["errors", "--db", f"sqlite:///{other}"])
    assert result.exit_code == 1 and "not a hpcpredict database" in result.output
    result = CliRunner().invoke(main, ["errors", "--db", f"sqlite:///{other}", "--since", "yesterday-ish"])
    assert result.exit_code == 1


def test_report_writes_a_page_naming_every_user(filled_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    assert f"{JOBS} jobs reported" in run("report", "--db", filled_url, "--out", str(out))
    page = (out / "index.html").read_text()
    store = Store(filled_url)
    try:
        users = user_error_statistics(store)["user_id"].tolist()
    finally:
        store.close()
    for user in users:
        assert f"<td>{user}</td>" in page
    for image in ("error_ecdf.png", "users_mae.png", "error_over_time.png"):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f'src="{image}"' in page
