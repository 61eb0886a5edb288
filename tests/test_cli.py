"""The `hpcpredict` command end to end on the bundled sample, through click's CliRunner."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.logs.swf import read_swf


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_simulate_defaults_compare_learned_sjbf_with_easy(runner: CliRunner, sample_log: Path) -> None:
    result = runner.invoke(main, ["simulate", str(sample_log)])
    assert result.exit_code == 0, result.output
    assert "easy-sjbf + learned(eloss) + incremental" in result.output
    assert "easy + requested + requested" in result.output
    assert "AVEbsld" in result.output and "against EASY" in result.output


def test_simulate_json_matches_the_reference_easy_on_the_sample(
    runner: CliRunner, sample_log: Path
) -> None:
    result = runner.invoke(
        main,
        ["simulate", str(sample_log), "--scheduler", "easy", "--predictor", "requested",
         "--correction", "requested", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["jobs"] == 4_997 and payload["machine_procs"] == 100
    (only_run,) = payload["runs"]  # the baseline is the run itself: not repeated
    assert only_run["settings"]["scheduler"] == "easy"
    metrics = only_run["metrics"]
    assert metrics["jobs"] == 4_997
    assert metrics["ave_bsld"] >= 1.0 and metrics["under_prediction_rate"] == 0.0
    assert payload["cleaning"]["rules"][4]["name"] == "run_time_not_positive"
    assert payload["cleaning"]["rules"][4]["dropped"] == 3


@pytest.mark.parametrize("predictor", ["requested", "clairvoyant", "ave2", "learned"])
@pytest.mark.parametrize("scheduler", ["fcfs", "easy", "easy-sjbf"])
def test_every_scheduler_predictor_pair_runs(
    runner: CliRunner, sample_log: Path, scheduler: str, predictor: str
) -> None:
    result = runner.invoke(
        main,
        ["simulate", str(sample_log), "--scheduler", scheduler, "--predictor", predictor,
         "--correction", "doubling", "--no-baseline", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output)["runs"][0]["metrics"]
    assert metrics["jobs"] == 4_997
    if predictor == "clairvoyant":
        assert metrics["prediction_mae_s"] == 0.0


def test_simulate_writes_swf_and_csv_outputs(
    runner: CliRunner, sample_log: Path, tmp_path: Path
) -> None:
    swf_out, csv_out = tmp_path / "out.swf.gz", tmp_path / "jobs.csv"
    result = runner.invoke(
        main,
        ["simulate", str(sample_log), "--predictor", "ave2", "--no-baseline",
         "--output", str(swf_out), "--csv", str(csv_out)],
    )
    assert result.exit_code == 0, result.output
    with gzip.open(swf_out, "rt") as handle:
        assert handle.read(1) == ";"
    written = read_swf(swf_out)
    assert len(written.records) == 4_997
    assert all(record.wait_s >= 0 for record in written.records)
    rows = list(csv.DictReader(csv_out.open()))
    assert len(rows) == 4_997
    # the same jobs, waits and predictions in both (SWF fields 3, 17 and 18: docs of sim/output.py)
    assert [(r.job_id, r.wait_s, r.preceding_job_id, r.think_time_s) for r in written.records] == [
        (int(row["job_id"]), int(row["waiting_time"]), int(row["corrections"]),
         int(row["initial_prediction"])) for row in rows
    ]


def test_malformed_log_names_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    log = tmp_path / "bad.swf"
    good = "1 0 0 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n"
    log.write_text("; MaxProcs: 8\n" + good + "2 10 0 oops 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n")
    result = runner.invoke(main, ["simulate", str(log)])
    assert result.exit_code != 0
    assert "bad.swf:3" in result.output and "--lenient" in result.output
    lenient = runner.invoke(main, ["simulate", str(log), "--lenient", "--predictor", "ave2"])
    assert lenient.exit_code == 0, lenient.output
    assert "skipped 1 malformed lines" in lenient.output


def test_missing_machine_size_asks_for_procs(runner: CliRunner, tmp_path: Path) -> None:
    log = tmp_path / "noheader.swf"
    log.write_text("1 0 0 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1\n")
    result = runner.invoke(main, ["info", str(log)])
    assert result.exit_code != 0 and "--procs" in result.output
    result = runner.invoke(main, ["info", str(log), "--procs", "8", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["machine_procs"] == 8


def test_bad_loss_is_a_usage_error(runner: CliRunner, sample_log: Path) -> None:
    result = runner.invoke(main, ["simulate", str(sample_log), "--loss", "over=cubic"])
    assert result.exit_code == 2
    assert "over" in result.output


def test_info_reports_header_and_cleaning(runner: CliRunner, sample_log: Path) -> None:
    result = runner.invoke(main, ["info", str(sample_log)])
    assert result.exit_code == 0, result.output
    assert "Europe/Stockholm" in result.output
    assert "run time <= 0" in result.output
    assert "4,997" in result.output


def test_help_explains_the_choices(runner: CliRunner) -> None:
    result = runner.invoke(main, ["simulate", "--help"])
    assert result.exit_code == 0
    for word in ("easy-sjbf", "clairvoyant", "ave2", "incremental", "doubling", "--procs"):
        assert word in result.output


def test_predict_eval_reports_three_predictors_and_writes_plots(
    runner: CliRunner, sample_log: Path, tmp_path: Path
) -> None:
    plots = tmp_path / "plots"
    result = runner.invoke(main, ["predict-eval", str(sample_log), "--plots", str(plots), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert set(payload["predictors"]) == {"learned(eloss)", "ave2", "requested"}
    requested = payload["predictors"]["requested"]
    assert requested["under_prediction_rate"] == 0.0  # a request is never below the cleaned run
    assert requested["mean_prediction_over_run"] >= 1.0
    ave2 = payload["predictors"]["ave2"]
    assert 0.0 < ave2["under_prediction_rate"] < 1.0
    for png in payload["plots"]:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(payload["plots"]) == 2


def test_simulate_verdict_names_max_wait_beside_avebsld(runner: CliRunner, sample_log: Path) -> None:
    result = runner.invoke(main, ["simulate", str(sample_log)])
    assert result.exit_code == 0, result.output
    for row in ("p99 wait (s)", "max wait (s)", "worst user's mean bsld"):
        assert row in result.output
    verdict = result.output.split("against EASY")[1]
    assert "AVEbsld" in verdict and "max wait" in verdict and "p99 wait" in verdict
    assert "--replicas 10" in verdict  # one replay is flagged as such


@pytest.mark.parametrize(("guard", "advice"), [
    ([], "This is with a 24 h starvation guard on: `hpcpredict tune` chooses"),
    (["--starvation-guard", "off"], "Turn a starvation guard on (--starvation-guard 24h"),
])
def test_a_worse_tail_is_met_with_advice_for_the_bound_the_replay_ran_under(
    runner: CliRunner, sample_log: Path, guard: list[str], advice: str
) -> None:
    """On the sample the learned limits lower AVEbsld and lengthen the p99 wait, guard or not;
    'keep a guard on' said to a replay that had one would send the admin nowhere."""
    result = runner.invoke(main, ["simulate", str(sample_log), *guard])
    assert result.exit_code == 0, result.output
    assert "the unluckiest jobs wait longer" in result.output
    assert advice in result.output


def test_simulate_replicas_report_means_cis_and_paired_comparison(
    runner: CliRunner, sample_log: Path
) -> None:
    args = ["simulate", str(sample_log), "--replicas", "3", "--shake", "30", "--seed", "4"]
    result = runner.invoke(main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert (payload["replicas"], payload["shake_s"], payload["seed"]) == (3, 30, 4)
    learned, easy = payload["runs"]
    assert len(learned["replicas"]) == 3 and len(easy["replicas"]) == 3
    assert learned["metrics"] == learned["replicas"][0]  # replica 0: the log as it is
    values = [m["ave_bsld"] for m in learned["replicas"]]
    summary = learned["summary"]["ave_bsld"]
    assert summary["mean"] == pytest.approx(sum(values) / 3)
    assert summary["ci_low"] <= summary["mean"] <= summary["ci_high"]
    comparison = payload["comparison"]
    assert comparison["against"] == "easy + requested + requested"
    differences = [a["ave_bsld"] - b["ave_bsld"] for a, b in zip(learned["replicas"], easy["replicas"])]
    assert comparison["ave_bsld"]["mean"] == pytest.approx(sum(differences) / 3)
    assert comparison["ave_bsld"]["wins"] == sum(d < 0 for d in differences)
    assert set(comparison) >= {"max_wait_s", "p99_wait_s"}
    assert "worst_user_mean_bsld" in learned["replicas"][1]
    again = runner.invoke(main, [*args, "--format", "json"])
    assert json.loads(again.output)["runs"][0]["replicas"] == learned["replicas"]  # seeded
    text = runner.invoke(main, args)
    assert text.exit_code == 0, text.output
    assert "means over 3 replicas" in text.output and "95% CI" in text.output
    assert "significant" in text.output.lower()


def test_simulate_refuses_an_unwritable_output_before_simulating(
    runner: CliRunner, sample_log: Path, tmp_path: Path
) -> None:
    for option in ("--output", "--csv"):
        target = tmp_path / "missing" / "out.swf"
        result = runner.invoke(main, ["simulate", str(sample_log), option, str(target)])
        assert result.exit_code != 0
        assert "does not exist" in result.output and "Traceback" not in result.output
        assert "AVEbsld" not in result.output  # refused before any replay
