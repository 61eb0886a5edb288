"""prediction_stats on a hand-made simulation result."""

from __future__ import annotations

import math

import pytest

from hpcpredict.sim.analysis import prediction_stats
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.sim.easy.simulation import SimulationResult


def _result(runs: list[int], predictions: list[int], procs: int = 4) -> SimulationResult:
    jobs = [
        Job(JobRequest(job_id=i, submit_s=0, procs=procs, requested_s=10_000, user_id=1), run, 1)
        for i, run in enumerate(runs)
    ]
    n = len(jobs)
    return SimulationResult(
        jobs=jobs, machine_procs=procs, scheduler="easy", predictor="x", correction="requested",
        start_s=[0] * n, initial_prediction_s=predictions, final_prediction_s=predictions,
        corrections=[0] * n, backfilled=[False] * n, first_reserved_start_s=[-1] * n,
    )


def test_statistics_by_hand() -> None:
    stats = prediction_stats(_result([100, 100, 100, 100], [1, 50, 100, 300]))
    assert stats.mae_s == pytest.approx((99 + 50 + 0 + 200) / 4)
    assert stats.median_abs_error_s == pytest.approx((50 + 99) / 2)
    assert stats.under_prediction_rate == 0.5
    assert stats.exact_rate == 0.25
    assert stats.one_second_rate == 0.25
    assert stats.median_prediction_s == 75
    # E-Loss: gamma = log(q p) = log(400); under linear, over squared
    gamma = math.log(400)
    assert stats.mean_loss == pytest.approx(gamma * (99 + 50 + 0 + 200**2) / 4)


def test_another_loss_is_used_when_asked() -> None:
    stats = prediction_stats(
        _result([100, 100], [90, 110]), "over=linear,under=linear,weight=constant"
    )
    assert stats.mean_loss == pytest.approx(10.0)
