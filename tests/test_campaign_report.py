"""Leave-one-log-out, correlations and the written report, on hand-made result tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hpcpredict.experiments.campaign_report import (
    baseline_table,
    learned_table,
    leave_one_log_out,
    log_correlations,
    write_campaign_report,
)

# AVEbsld of four triples on three logs, built so that each held-out choice is known:
#   held out A: sums on B+C -> t1 30, t2 25, t3 50, t4 30  -> t2 (scores 50 on A, rank 4 of 4)
#   held out B: sums on A+C -> t1 20, t2 70, t3 35, t4 24  -> t1 (scores 20 on B, rank 3)
#   held out C: sums on A+B -> t1 30, t2 55, t3 25, t4 30  -> t3 (scores 30 on C, rank 4)
TABLE = pd.DataFrame(
    {"A": [10.0, 50.0, 5.0, 12.0], "B": [20.0, 5.0, 20.0, 18.0], "C": [10.0, 20.0, 30.0, 12.0]},
    index=["t1", "t2", "t3", "t4"],
)


def test_leave_one_log_out_picks_the_best_sum_on_the_other_logs() -> None:
    choices = {choice.held_out: choice for choice in leave_one_log_out(TABLE)}
    assert {log: c.triple for log, c in choices.items()} == {"A": "t2", "B": "t1", "C": "t3"}
    assert choices["A"].score_on_others == 25.0 and choices["A"].ave_bsld == 50.0
    assert (choices["A"].rank, choices["A"].of, choices["A"].best_on_held_out) == (4, 4, 5.0)
    assert (choices["B"].rank, choices["B"].ave_bsld) == (3, 20.0)  # t2 5, t4 18 are better
    assert (choices["C"].rank, choices["C"].ave_bsld) == (4, 30.0)


def test_ties_go_to_the_first_label_and_incomplete_triples_do_not_compete() -> None:
    table = TABLE.copy()
    table.loc["t0"] = [1.0, 1.0, float("nan")]  # best everywhere it ran, but missing on C
    table.loc["t5"] = table.loc["t2"]  # same sums as t2: t2 sorts first
    choices = {choice.held_out: choice.triple for choice in leave_one_log_out(table)}
    assert choices == {"A": "t2", "B": "t1", "C": "t3"}


def test_one_log_is_not_enough() -> None:
    with pytest.raises(ValueError, match="two logs"):
        leave_one_log_out(TABLE[["A"]])


def test_correlations_are_pearson_between_logs() -> None:
    correlation = log_correlations(TABLE)
    assert correlation.loc["A", "A"] == pytest.approx(1.0)
    assert correlation.loc["A", "B"] == pytest.approx(TABLE["A"].corr(TABLE["B"]))
    assert correlation.loc["A", "B"] < 0 < correlation.loc["A", "C"]


def _runs() -> pd.DataFrame:
    rows = []
    for log in TABLE.columns:
        for triple, value in TABLE[log].items():
            rows.append({"key": f"{log}-{triple}", "log": log, "label": triple,
                         "predictor": "learned", "ave_bsld": value, "wall_time_s": 1.0})
        for label, value in (("EASY", 100.0), ("EASY++", 40.0)):
            rows.append({"key": f"{log}-{label}", "log": log, "label": label,
                         "predictor": "requested", "ave_bsld": value, "wall_time_s": 1.0})
    return pd.DataFrame(rows)


def test_tables_split_learned_and_baselines() -> None:
    runs = _runs()
    assert list(baseline_table(runs).index) == ["EASY", "EASY++"]
    pd.testing.assert_frame_equal(
        learned_table(runs), TABLE, check_names=False, check_like=True
    )


def test_report_files(tmp_path: Path) -> None:
    paths = write_campaign_report(_runs(), tmp_path, "Campaign test")
    names = {path.name for path in paths}
    assert {"report.md", "runs.csv", "per_log.csv", "loo.csv", "correlation.csv",
            "triples_per_log.png", "triples_between_logs.png"} <= names
    loo = pd.read_csv(tmp_path / "loo.csv", index_col=0)
    assert loo.loc["A", "triple"] == "t2" and loo.loc["A", "vs EASY++"] == "+25.0%"
    report = (tmp_path / "report.md").read_text()
    assert "Leave-one-log-out" in report and "| A | t2 |" in report
    per_log = pd.read_csv(tmp_path / "per_log.csv", index_col=0)
    assert per_log.loc["best triple", "B"] == "t2" and float(per_log.loc["best learned", "B"]) == 5.0
    for png in ("triples_per_log.png", "triples_between_logs.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    json.dumps(loo.to_dict())  # plain values only


def test_pair_with_pairs_every_configuration_with_the_one_named(tmp_path: Path) -> None:
    rows = []
    for replica, (mine, reference) in enumerate(((10.0, 20.0), (12.0, 20.0), (14.0, 20.0))):
        for label, predictor, value in (("t1", "learned", mine), ("ref", "learned", reference),
                                        ("EASY++", "ave2", 30.0)):
            rows.append({"key": f"{label}-{replica}", "log": "A", "label": label, "replica": replica,
                         "predictor": predictor, "ave_bsld": value, "wall_time_s": 1.0,
                         "m_max_wait_s": 3600.0 * value, "m_p99_wait_s": 60.0})
    paths = write_campaign_report(pd.DataFrame(rows), tmp_path, "Campaign test", pair_with=("ref",))
    assert tmp_path / "replicas_vs_ref.csv" in paths
    paired = pd.read_csv(tmp_path / "replicas_vs_ref.csv", index_col=[0, 1])
    # differences -10, -8, -6 against a mean of 20: -40%, lower on all three replicas
    assert paired.loc[("t1", "A"), "AVEbsld vs ref"].startswith("-40.0% [")
    assert paired.loc[("t1", "A"), "wins vs ref"] == "3/3"
    assert "## Means over replicas, paired against ref" in (tmp_path / "report.md").read_text()


def test_the_report_names_runs_as_its_campaign_file_does(tmp_path: Path) -> None:
    """Runs shared through --store keep the label of the campaign that stored them first; a report
    relabels them from its own file, and --pair-with takes those labels."""
    from click.testing import CliRunner

    from hpcpredict.cli import main

    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    body = '[[logs]]\nname = "sample"\npath = "{log}"\n' \
           '[[baselines]]\nlabel = "{easy}"\nscheduler = "easy"\npredictor = "requested"\n' \
           'correction = "requested"\n' \
           '[[baselines]]\nlabel = "{plus}"\nscheduler = "easy-sjbf"\npredictor = "ave2"\n' \
           'correction = "incremental"\n'
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text('name = "first"\n' + body.format(log=sample, easy="EASY", plus="EASY++"))
    second.write_text('name = "second"\n' + body.format(log=sample, easy="plain", plus="EASY++"))
    db = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    runner = CliRunner()
    assert runner.invoke(main, ["campaign", str(first), "--store", db, "-j", "1"]).exit_code == 0
    out = tmp_path / "report"
    result = runner.invoke(main, ["campaign-report", str(second), "--store", db, "--out", str(out),
                                  "--pair-with", "plain"])
    assert result.exit_code == 0, result.output
    assert sorted(pd.read_csv(out / "runs.csv")["label"]) == ["EASY++", "plain"]
    assert (out / "replicas_vs_plain.csv").is_file()
    bad = runner.invoke(main, ["campaign-report", str(second), "--store", db, "--out", str(out),
                               "--pair-with", "EASY"])
    assert bad.exit_code == 2 and "EASY: not a label of" in bad.output
