"""A log under a heavier load (hpcpredict/sim/load_scaling.py), in `simulate` and in campaigns."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.cli import main
from hpcpredict.jobs import Job
from hpcpredict.logs.job_table import JOB_FIELDS, REQUEST_FIELDS, JobTable, job_column
from hpcpredict.experiments.campaign import CampaignError, load_campaign, run_cell
from hpcpredict.sim.load_scaling import check_load_factor, scaled_load
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.sim.shaking import replica
from hpcpredict.logs.workload import Workload, load_workload
from job_strategies import jobs_in_submission_order

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
EASY = RunSpec("easy", "requested", "requested")

jobs_strategy = jobs_in_submission_order(max_submit_s=100_000, min_size=1)
factors = st.floats(min_value=0.05, max_value=10.0, allow_nan=False)


@cache
def _sample() -> Workload:
    return load_workload(SAMPLE)


def _workload(jobs) -> Workload:  # type: ignore[no-untyped-def]
    """The sample's header and machine around `jobs` (the header is read once)."""
    sample = _sample()
    return Workload(sample.path, sample.header, jobs, sample.machine_procs, sample.cleaning, [])


def _everything_but_the_submission(job: Job) -> tuple[int, int, int, int, int, int]:
    return (job.job_id, job.user_id, job.procs, job.requested_s, job.run_s, job.status)


@given(jobs=jobs_strategy, factor=factors)
@settings(max_examples=200, deadline=None)
def test_scaling_divides_every_gap_from_the_first_submission_and_keeps_the_rest(
    jobs: list[Job], factor: float
) -> None:
    scaled = scaled_load(_workload(jobs), factor).jobs
    assert [_everything_but_the_submission(j) for j in scaled] == \
        [_everything_but_the_submission(j) for j in jobs]  # same jobs, same order
    first = jobs[0].submit_s
    for before, after in zip(jobs, scaled):
        assert after.submit_s == first + int(np.floor((before.submit_s - first) / factor))
        # within one second of the exact compression
        assert abs((after.submit_s - first) - (before.submit_s - first) / factor) < 1
    submits = [job.submit_s for job in scaled]
    assert submits == sorted(submits)


@given(jobs=jobs_strategy, factor=factors)
@settings(max_examples=100, deadline=None)
def test_a_table_is_scaled_as_its_jobs_are(jobs: list[Job], factor: float) -> None:
    table = JobTable({name: np.asarray(job_column(jobs, name), dtype=np.int64)
                      for name in (*REQUEST_FIELDS, *JOB_FIELDS)})
    scaled = scaled_load(_workload(table), factor).jobs
    assert isinstance(scaled, JobTable) and scaled._jobs is None  # columns, no objects built
    assert list(scaled) == list(scaled_load(_workload(jobs), factor).jobs)


def test_factor_one_is_the_log_itself_and_bad_factors_are_refused() -> None:
    workload = load_workload(SAMPLE)
    assert scaled_load(workload, 1.0) is workload
    for bad in (0, -1.0, 10.5, float("nan"), float("inf"), True, "1.2"):
        with pytest.raises(ValueError, match="load factor"):
            check_load_factor(bad)  # type: ignore[arg-type]


def test_a_heavier_load_makes_plain_easy_wait_longer_on_the_sample() -> None:
    """The transform is the stress it says: the same jobs sooner, longer queues, a shorter span."""
    workload = load_workload(SAMPLE)
    heavier = scaled_load(workload, 1.3)
    span = workload.jobs[-1].submit_s - workload.jobs[0].submit_s
    assert heavier.jobs[-1].submit_s - heavier.jobs[0].submit_s == pytest.approx(span / 1.3, abs=1)
    as_is, loaded = compute_metrics(run(workload, EASY)), compute_metrics(run(heavier, EASY))
    assert loaded.mean_wait_s > 1.5 * as_is.mean_wait_s
    assert loaded.utilisation > as_is.utilisation


CAMPAIGN = f"""\
name = "loaded"
replicas = 2

[[logs]]
name = "kth"
path = "{SAMPLE}"

[[logs]]
name = "kth x1.3"
path = "{SAMPLE}"
load = 1.3

[[baselines]]
label = "EASY"
scheduler = "easy"
predictor = "requested"
correction = "requested"
"""


def test_a_campaign_log_under_a_load_is_its_own_run_and_replays_the_scaled_replicas(
    tmp_path: Path,
) -> None:
    path = tmp_path / "loaded.toml"
    path.write_text(CAMPAIGN, encoding="utf-8")
    cells = load_campaign(path).cells
    assert [(cell.log.name, cell.log.load, cell.replica) for cell in cells] == [
        ("kth", 1.0, 0), ("kth", 1.0, 1), ("kth x1.3", 1.3, 0), ("kth x1.3", 1.3, 1)]
    assert len({cell.key for cell in cells}) == 4
    for cell in cells[2:]:
        expected = compute_metrics(run(replica(scaled_load(load_workload(SAMPLE), 1.3),
                                               cell.replica), EASY)).to_dict()
        assert run_cell(cell).metrics == expected


@pytest.mark.parametrize("line, message", [
    ("load = 0", "load factor"),
    ('load = "heavy"', "load factor"),
    ("loads = 1.2", "unknown keys ['loads']"),
])
def test_bad_log_entries_name_the_file_and_the_entry(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(CAMPAIGN.replace("load = 1.3", line), encoding="utf-8")
    with pytest.raises(CampaignError) as error:
        load_campaign(path)
    assert f"{path}: [[logs]] entry 2" in str(error.value) and message in str(error.value)


def test_simulate_under_a_load_says_so_and_replays_the_scaled_log() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["simulate", str(SAMPLE), "--load", "1.3", "--predictor",
                                  "requested", "--scheduler", "easy", "--no-baseline",
                                  "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["load"] == 1.3
    expected = compute_metrics(run(scaled_load(load_workload(SAMPLE), 1.3), EASY))
    assert payload["runs"][0]["metrics"]["ave_bsld"] == pytest.approx(expected.ave_bsld, rel=1e-12)
    text = runner.invoke(main, ["simulate", str(SAMPLE), "--load", "1.3", "--predictor",
                                "requested", "--scheduler", "easy", "--no-baseline"])
    assert "under 1.3x its load" in text.output
    refused = runner.invoke(main, ["simulate", str(SAMPLE), "--load", "0"])
    assert refused.exit_code == 2 and "--load" in refused.output
    assert Counter(j.job_id for j in scaled_load(load_workload(SAMPLE), 1.3).jobs) == \
        Counter(j.job_id for j in load_workload(SAMPLE).jobs)
