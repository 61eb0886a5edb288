"""`hpcpredict train` leaves per-user errors behind: the replay's own judgements (issue 16, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.logs.workload import load_workload


def _train(tmp_path: Path, log: Path) -> str:
    db = f"sqlite:///{tmp_path}/d.db"
    result = CliRunner().invoke(main, ["train", str(log), "--db", db])
    assert result.exit_code == 0, result.output
    return db


def test_errors_after_train_list_every_user_with_jobs(tmp_path: Path, sample_log: Path) -> None:
    db = _train(tmp_path, sample_log)
    jobs = [job for job in load_workload(sample_log).jobs if job.run_s > 0]
    result = CliRunner().invoke(main, ["errors", "--db", db, "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    per_user = {row["user_id"]: row["count"] for row in rows if row["user_id"] != "all"}
    expected: dict[int, int] = {}
    for job in jobs:
        expected[job.request.user_id] = expected.get(job.request.user_id, 0) + 1
    assert per_user == expected
    assert all(row["corrections"] == 0 for row in rows)  # a replay corrects nothing


def test_sources_are_kept_apart_and_labelled(tmp_path: Path, sample_log: Path) -> None:
    db = _train(tmp_path, sample_log)
    judged = len([job for job in load_workload(sample_log).jobs if job.run_s > 0])
    live = CliRunner().invoke(main, ["errors", "--db", db, "--source", "live"])
    assert live.exit_code == 0 and f"jobs judged: 0 live" in live.output and "no judged job yet" in live.output
    both = CliRunner().invoke(main, ["errors", "--db", db])
    assert f"jobs judged: {judged:,} history + 0 live (--source both)" in both.output
    report = CliRunner().invoke(main, ["report", "--db", db, "--source", "history", "--out", str(tmp_path / "r")])
    assert report.exit_code == 0 and f"{judged:,} history" in report.output
    assert (tmp_path / "r" / "index.html").exists()


def test_a_second_train_replaces_the_history_judgements(tmp_path: Path, sample_log: Path) -> None:
    db = _train(tmp_path, sample_log)
    again = CliRunner().invoke(main, ["train", str(sample_log), "--db", db, "--replace"])
    assert again.exit_code == 0, again.output
    rows = json.loads(CliRunner().invoke(main, ["errors", "--db", db, "--format", "json"]).output)
    total = sum(row["count"] for row in rows if row["user_id"] != "all")
    assert total == len([job for job in load_workload(sample_log).jobs if job.run_s > 0])
