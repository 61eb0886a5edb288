"""The one error-statistics kernel (hpcpredict/learn/error_stats.py) and the reports built on it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcpredict.sim.analysis import prediction_stats
from hpcpredict.daemon.core.judged_errors import statistics_by_user
from hpcpredict.learn.error_stats import error_stats
from hpcpredict.sim.metrics import compute_metrics, job_arrays
from hpcpredict.sim.runner import RunSpec, run
from hpcpredict.logs.workload import load_workload


def test_a_hand_computed_example() -> None:
    # errors: +10, -5, 0, +90 (runtimes 10, 20, 30, 10)
    stats = error_stats([20, 15, 30, 100], [10, 20, 30, 10])
    assert stats.jobs == 4
    assert stats.mae_s == (10 + 5 + 0 + 90) / 4
    assert stats.median_ae_s == 7.5
    assert stats.under_rate == 0.25 and stats.exact_rate == 0.25
    assert stats.mean_ratio == pytest.approx((2.0 + 0.75 + 1.0 + 10.0) / 4)
    assert math.isnan(error_stats([], []).mae_s)
    with pytest.raises(ValueError, match="predictions for"):
        error_stats([1, 2], [1])


@given(st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), min_size=1, max_size=50))
def test_rates_are_shares_and_errors_are_non_negative(pairs: list[tuple[int, int]]) -> None:
    predicted, runtimes = zip(*pairs)
    stats = error_stats(predicted, runtimes)
    assert stats.mae_s >= 0 and stats.median_ae_s >= 0
    assert 0 <= stats.under_rate + stats.exact_rate <= 1
    assert stats.mae_s == pytest.approx(np.mean(np.abs(np.subtract(predicted, runtimes))))


def test_the_simulator_predict_eval_and_the_daemons_report_say_the_same(sample_log) -> None:
    result = run(load_workload(sample_log), RunSpec("easy-sjbf", "ave2", "incremental"))
    columns = job_arrays(result)
    kernel = error_stats(columns["initial_prediction_s"], columns["run_s"])
    metrics = compute_metrics(result)
    evaluated = prediction_stats(result)
    assert metrics.prediction_mae_s == evaluated.mae_s == kernel.mae_s
    assert metrics.under_prediction_rate == evaluated.under_prediction_rate == kernel.under_rate
    judged = pd.DataFrame({
        "user_id": 1, "predicted_s": columns["initial_prediction_s"], "run_s": columns["run_s"],
        "requested_s": columns["requested_s"], "ave2_s": columns["requested_s"], "corrections": 0,
    })
    per_user = statistics_by_user(judged).iloc[0]
    assert per_user["mae_s"] == kernel.mae_s and per_user["median_ae_s"] == kernel.median_ae_s
    assert per_user["under_rate"] == kernel.under_rate and per_user["count"] == kernel.jobs
