"""`hpcpredict errors` and `hpcpredict report` on a store filled by the service (issue 6, part 5)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.core.judged_errors import ERROR_COLUMNS, judged_jobs, user_error_statistics
from hpcpredict.paths import default_db_url
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.daemon.views.pages import ViewError, parse_since
from hpcpredict.daemon.views.report_page import collect_page, write_report
from hpcpredict.instants import Instant
from hpcpredict.learn.history import history_events
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload

SUBMITTED, STARTED, ENDED = Instant.SUBMISSION, Instant.START, Instant.TERMINATION

JOBS = 200


@pytest.fixture
def filled_url(store_url: str, sample_log: Path) -> str:
    """The first jobs of the sample log through the daemon's service, as SLURM would report them."""
    workload = load_workload(sample_log)
    events, _ = history_events(workload.jobs[:JOBS], offset_s=workload.header.unix_start_time or 0)
    store = Store(store_url)
    try:
        service = PredictionService.open(store)
        report_to_service(service, events)
        service.limit_changed(workload.jobs[0].job_id, 10**6, 0)  # ignored: the job has ended
    finally:
        store.close()
    return store_url


def report_to_service(service: PredictionService, events: list) -> None:
    """`history_events` reported to the daemon's service as SLURM would report them."""
    for event in events:
        job = event.request
        if event.kind == SUBMITTED:
            service.submitted(job, event.time_s)
        elif event.kind == STARTED:
            service.started(job.job_id, event.time_s)
        else:
            assert event.kind == ENDED
            service.ended(job.job_id, event.run_s, event.time_s, "COMPLETED")


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
    # the site summary, a blank line, the table, the source label, then why (issue 28, item 8)
    table = text.split("\n\n")[1]
    lines = [line for line in table.strip().splitlines() if not line.startswith("jobs judged:")]
    assert lines[0].split()[:3] == ["user", "jobs", "MAE"]
    assert lines[1].split()[0] == str(busiest) and lines[-1].split()[0] == "all"
    assert len(lines) == 3
    assert f"Why user {busiest}'s next job is predicted" in text

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
    # Not even converted to WAL, as the daemon's connections would.
    connection = sqlite3.connect(other)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        connection.close()
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
        assert f"<tr data-user='{user}'" in page
    for image in ("planned_ends.png", "error_ecdf.png", "users_mae.png", "error_over_time.png"):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"src='{image}'" in page


def statistics(url: str, **filters: int) -> pd.DataFrame:
    store = Store(url)
    try:
        return user_error_statistics(store, **filters)
    finally:
        store.close()


def test_since_in_the_middle_and_repeated_users(filled_url: str) -> None:
    store = Store(filled_url)
    try:
        ends = judged_jobs(store)["end_s"]
    finally:
        store.close()
    middle_s = int(ends.median())
    expected = statistics(filled_url, since_s=middle_s)
    assert 0 < expected["count"].sum() < JOBS
    rows = json.loads(run("errors", "--db", filled_url, "--since", str(middle_s), "--format", "json"))
    assert [row["user_id"] for row in rows[:-1]] == expected["user_id"].tolist()
    assert [row["count"] for row in rows[:-1]] == expected["count"].tolist()
    assert [row["median_ae_s"] for row in rows[:-1]] == pytest.approx(expected["median_ae_s"].tolist())
    # The same instant as a local ISO datetime selects the same jobs.
    local = datetime.fromtimestamp(middle_s).isoformat()
    assert json.loads(run("errors", "--db", filled_url, "--since", local, "--format", "json")) == rows

    first, second = (int(u) for u in statistics(filled_url)["user_id"].iloc[:2])
    rows = json.loads(run("errors", "--db", filled_url, "--format", "json",
                          "--user", str(second), "--user", str(first), "--user", str(second)))
    counts = {row["user_id"]: row["count"] for row in rows}
    assert list(counts) == [first, second, "all"]
    assert counts["all"] == counts[first] + counts[second]
    assert counts[first] == statistics(filled_url, user_id=first)["count"].iloc[0]


def test_parse_since_reads_dates_in_local_time() -> None:
    assert parse_since("1700000000") == 1_700_000_000
    assert parse_since("2026-11-01") == int(datetime(2026, 11, 1).timestamp())
    assert parse_since("2026-11-01T08:30") == int(datetime(2026, 11, 1, 8, 30).timestamp())
    assert parse_since("2026-11-01T08:30+00:00") == int(
        datetime(2026, 11, 1, 8, 30, tzinfo=UTC).timestamp()
    )
    with pytest.raises(ViewError, match="yesterday"):
        parse_since("yesterday")


def failure(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.output


def test_a_store_of_another_schema_revision_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    store = Store(f"sqlite:///{path}")
    store.upgrade()
    current = store.current_revision()
    with store.engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    store.close()
    url = f"sqlite:///{path}"
    assert "upgraded by a newer hpcpredict" in failure("errors", "--db", url)

    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{current}'")
    store.close()
    # An older store: the revision is known but is not the head this hpcpredict expects.
    monkeypatch.setattr(Store, "head_revision", lambda self: "9999_future")
    output = failure("report", "--db", url, "--out", str(tmp_path / "out"))
    assert f"schema at revision {current}" in output and "hpcpredict serve" in output
    assert not (tmp_path / "out").exists()
    store = Store(url)
    try:
        assert store.current_revision() == current  # never upgraded by a read-only command
    finally:
        store.close()


def test_unusable_urls_say_why_without_a_password_or_a_traceback(tmp_path: Path) -> None:
    assert "not a database URL" in failure("errors", "--db", "hpcpredict.db")
    output = failure("errors", "--db", "postgresql+psycopg://admin:s3cret@127.0.0.1:1/hpcpredict")
    assert "cannot read the database" in output and "s3cret" not in output and "***" in output
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not sqlite at all\n" * 100)
    assert "file is not a database" in failure("errors", "--db", f"sqlite:///{garbage}")


def test_default_database_is_under_the_state_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCPREDICT_STATE_DIR", str(tmp_path / "state"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'state' / 'hpcpredict.db'}"
    monkeypatch.delenv("HPCPREDICT_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_db_url() == f"sqlite:///{tmp_path / 'xdg' / 'hpcpredict' / 'hpcpredict.db'}"
    output = failure("errors")
    assert str(tmp_path / "xdg" / "hpcpredict" / "hpcpredict.db") in output
    assert not (tmp_path / "xdg").exists()


def test_report_of_an_empty_store_and_escaped_text(store: Store, tmp_path: Path) -> None:
    store_url = store.url
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. matplotlib's "no artists with labels"
        assert "0 jobs reported" in run("report", "--db", store_url, "--out", str(tmp_path / "r"))
    assert "No judged job yet." in (tmp_path / "r" / "index.html").read_text()
    assert "no judged job yet" in run("errors", "--db", store_url)
    assert run("errors", "--db", store_url, "--format", "json").strip() == "[]"
    assert run("errors", "--db", store_url, "--format", "csv").strip() == ",".join(ERROR_COLUMNS)

    page_data = collect_page(store, LearnedPredictor, since_s=None, source="both", db_url=store_url,
                             title="<script>x</script> & co")
    page = write_report(page_data, tmp_path / "t").index.read_text()
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt; &amp; co" in page
