"""Survival-based correction (hpcpredict/corrections/survival.py, issue 14 idea 5): the Kaplan-Meier
conditional quantile on hand-made distributions, its bounds (never above the request, always
above the elapsed time), the INCREMENTAL fallback, fewer corrections in a replay, and the same
policy in the SLURM corrector, fed by the daemon's service and surviving a restart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.daemon.core.config import ConfigError, load_config
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store
from hpcpredict.jobs import JobRequest
from hpcpredict.corrections import CORRECTIONS, make_correction
from hpcpredict.sim import SCHEDULERS, compute_metrics, simulate
from hpcpredict.corrections.survival import (
    RuntimeHistory,
    SurvivalCorrection,
    conditional_quantile_s,
    incremental_above_s,
)
from hpcpredict.slurm.corrector import corrected_limit_s
from hpcpredict.slurm.tag import PredictionTag
from test_simulation import make_job
from test_starvation_guard import OneSecond
from test_slurm_watcher import Clock, Job, ScriptedSlurm, watcher_for


def job(job_id: int, user_id: int = 7, requested_s: int = 100_000) -> JobRequest:
    return JobRequest(job_id=job_id, submit_s=0, procs=1, requested_s=requested_s, user_id=user_id)


# ---------------------------------------------------------------------- the estimate
def test_the_conditional_quantile_of_a_hand_made_distribution() -> None:
    runtimes = [100 * k for k in range(1, 11)]  # 100, 200, ..., 1000 s
    # Given T > 450: {500, ..., 1000}, six equally likely; survival 5/6, 4/6, 3/6 at 500, 600, 700.
    assert conditional_quantile_s(runtimes, [], 450, 0.5) == 700
    assert conditional_quantile_s(runtimes, [], 450, 0.1) == 500  # 1/6 >= 0.1 already at 500
    assert conditional_quantile_s(runtimes, [], 450, 0.9) == 1000
    assert conditional_quantile_s(runtimes, [], 0, 0.5) == 500  # the plain median
    # A censored observation (a job still running after 650 s) stays at risk up to 650 s:
    # 6/7 at 500, 5/7 at 600, then 4 at risk: 5/7 * 3/4 = 0.536 at 700, * 2/3 = 0.357 at 800.
    assert conditional_quantile_s(runtimes, [650], 450, 0.5) == 800
    assert conditional_quantile_s(runtimes, [650, 10], 450, 0.5) == 800  # below the elapsed: ignored
    # Ties: two jobs end at 300 of four beyond 250: survival 1/2 at 300.
    assert conditional_quantile_s([300, 300, 400, 500], [], 250, 0.5) == 300


def test_no_estimate_without_enough_mass_beyond_the_elapsed_time() -> None:
    assert conditional_quantile_s([100, 200], [], 200, 0.5) is None  # nothing ran longer
    # One event beyond, three still running past it: survival never falls below 3/4.
    assert conditional_quantile_s([100, 500], [600, 700, 800], 400, 0.5) is None
    with pytest.raises(ValueError):
        conditional_quantile_s([100], [], 0, 1.0)


def history_of(runtimes: list[int], user_id: int = 7) -> RuntimeHistory:
    history = RuntimeHistory()
    for index, run_s in enumerate(runtimes):
        history.job_ended(job(index, user_id), run_s, run_s)
    return history


def test_the_policy_answers_the_user_quantile_and_falls_back_to_incremental() -> None:
    policy = SurvivalCorrection(quantile=0.5, history=history_of([600, 3_000, 3_000, 7_200, 9_000]))
    # Given > 700 s: {3000, 3000, 7200, 9000}: survival 1/2 at 3000.
    assert policy.corrected_prediction_s(20_000, 700, 0, 700, user_id=7, now_s=0) == 3_000
    # Another user, no history: INCREMENTAL (700 + 1 min).
    assert policy.corrected_prediction_s(20_000, 700, 0, 700, user_id=8, now_s=0) == 760
    # Past every runtime: INCREMENTAL from its first step above the elapsed time.
    # (steps 5 min, ..., 2 h from 700 s are below 9,500 s; 5 h is the first above)
    assert policy.corrected_prediction_s(20_000, 700, 1, 9_500, user_id=7, now_s=0) == 700 + 5 * 3600
    assert incremental_above_s(20_000, 700, 1, 19_500) == 20_000  # capped at the request
    assert (policy.estimated, policy.fallbacks) == (1, 2)
    # Four ended jobs are too few (min_history = 5).
    few = SurvivalCorrection(history=history_of([3_000] * 4))
    assert few.corrected_prediction_s(20_000, 700, 0, 700, user_id=7) == 760


def test_running_jobs_count_as_censored() -> None:
    history = history_of([1_000, 2_000, 3_000, 4_000, 5_000])
    policy = SurvivalCorrection(quantile=0.5, history=history)
    # Given > 1,500 s: {2000, 3000, 4000, 5000}: survival 3/4, then 1/2 at 3,000.
    assert policy.corrected_prediction_s(99_999, 1, 0, 1_500, user_id=7, now_s=10_000) == 3_000
    # Two of the user's jobs have run 4,500 s and go on (censored): 6 at risk, survival 5/6 at
    # 2,000, 5/6 * 4/5 = 2/3 at 3,000, 2/3 * 3/4 = 1/2 at 4,000.
    history.job_started(job(100), 5_500)
    history.job_started(job(101), 5_500)
    assert policy.corrected_prediction_s(99_999, 1, 0, 1_500, user_id=7, now_s=10_000) == 4_000
    # A third, running for 10,000 s: 6/7, 5/7, 4/7 at 4,000; the two at 4,500 leave the risk set;
    # at 5,000 two remain: 4/7 * 1/2 = 2/7.
    history.job_started(job(102), 0)
    assert policy.corrected_prediction_s(99_999, 1, 0, 1_500, user_id=7, now_s=10_000) == 5_000
    history.job_ended(job(102), 10_500, 10_500)
    events, bounds = history.observations(7, 10_000)
    assert 10_500 in events and sorted(bounds) == [4_500, 4_500]


@settings(max_examples=300, deadline=None)
@given(
    runtimes=st.lists(st.integers(1, 50_000), min_size=0, max_size=60),
    running=st.lists(st.integers(0, 50_000), max_size=5),
    requested_s=st.integers(2, 60_000),
    elapsed_fraction=st.floats(0.0, 0.999),
    corrections_done=st.integers(0, 15),
    quantile=st.floats(0.01, 0.99),
)
def test_never_above_the_request_and_always_above_the_elapsed_time(
    runtimes, running, requested_s, elapsed_fraction, corrections_done, quantile
) -> None:
    history = history_of(runtimes)
    for index, start_s in enumerate(running):
        history.job_started(job(1_000 + index), start_s)
    policy = SurvivalCorrection(quantile=quantile, history=history)
    elapsed_s = min(int(requested_s * elapsed_fraction), requested_s - 1)
    answer = policy.corrected_prediction_s(requested_s, 1, corrections_done, elapsed_s,
                                           user_id=7, now_s=50_000)
    assert elapsed_s < answer <= requested_s


def test_the_history_keeps_a_window_and_round_trips_through_its_state() -> None:
    history = RuntimeHistory(window=3)
    for index, run_s in enumerate([10, 20, 30, 40]):
        history.job_ended(job(index), run_s, 0)
    history.job_ended(job(9), 50, 0, censored=True)
    history.job_started(job(10), 100)
    assert history.observations(7, 160) == ([30, 40], [50, 60])
    copy = RuntimeHistory(window=3)
    copy.load_state({key: np.array(value) for key, value in history.to_state().items()})
    assert copy.observations(7, 160) == history.observations(7, 160)
    copy.load_state({})
    assert copy.observations(7, 160) == ([], [])


# ---------------------------------------------------------------------- in a replay


def test_survival_needs_fewer_corrections_than_incremental_on_a_regular_user() -> None:
    # One user, one job at a time, each runs 2 h (request 10 h), each predicted 1 s.
    jobs = [make_job(k + 1, k * 10_000, 1, 7_200, 36_000) for k in range(20)]
    incremental = simulate(jobs, 4, SCHEDULERS["easy-sjbf"], OneSecond(), CORRECTIONS["incremental"])
    survival = simulate(jobs, 4, SCHEDULERS["easy-sjbf"], OneSecond(), make_correction("survival"))
    # INCREMENTAL: 1 s + 1, 5, 15, 30 min, 1 h, 2 h: 6 corrections per job.
    assert incremental.corrections == [6] * 20
    # SURVIVAL: INCREMENTAL for the first five (no history), then one step to 7,200 s exactly.
    assert survival.corrections == [6] * 5 + [1] * 15
    assert survival.final_prediction_s[5:] == [7_200] * 15
    assert compute_metrics(survival).corrections_per_job < compute_metrics(incremental).corrections_per_job


# ---------------------------------------------------------------------- live: the SLURM corrector
def test_the_corrector_asks_successive_limits_as_the_simulator_does() -> None:
    policy = SurvivalCorrection(quantile=0.5, history=history_of([600, 900, 3_000, 3_000, 3_000, 7_200], user_id=1000))
    # Within the margin of a 600 s limit: the median of T given T > 600 s is 3,000 s = 50 min.
    assert corrected_limit_s(request_s=36_000, prediction_s=540, current_limit_s=600, elapsed_s=500,
                             policy=policy, user_id=1000, now_s=0) == 3_000
    # An unknown user gets INCREMENTAL's limits, unchanged.
    assert corrected_limit_s(request_s=36_000, prediction_s=540, current_limit_s=600, elapsed_s=500,
                             policy=policy, user_id=1, now_s=0) == 840


@pytest.fixture
def survival_service(tmp_path: Path):
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    yield store, PredictionService.open(store, correction=make_correction("survival"), checkpoint_every=4)
    store.close()


def run_jobs_through(watcher, slurm: ScriptedSlurm, clock: Clock, first_id: int, runtimes: list[int]) -> None:
    """Each job pends, runs and completes (at its request's limit: never corrected)."""
    for offset, run_s in enumerate(runtimes):
        job_id = first_id + offset
        start_s = clock.now
        slurm.jobs_by_id[job_id] = Job(job_id, state="RUNNING", submit_s=start_s, start_s=start_s,
                                       time_limit_s=3600, admin_comment="")
        watcher.poll()
        clock.now = start_s + run_s
        slurm.jobs_by_id[job_id] = replace(slurm.jobs_by_id[job_id], state="COMPLETED", end_s=clock.now)
        watcher.poll()
        clock.now += 10


def test_the_slurm_corrector_uses_the_history_the_service_feeds_and_keeps_it_over_a_restart(
    survival_service,
) -> None:
    store, service = survival_service
    slurm, clock = ScriptedSlurm(), Clock(10_000)
    watcher = watcher_for(service, slurm, clock, policy=service.correction)
    run_jobs_through(watcher, slurm, clock, 1, [1_500, 1_800, 1_800, 1_800, 2_400])
    assert service.job_status(5) == "ended"

    # A lowered job (prediction 540 s, limit 10 min) reaches its limit: the user's median beyond
    # 600 s is 1,800 s: 30 min at once, where INCREMENTAL would give 14 min.
    start_s = clock.now
    slurm.jobs_by_id[50] = Job(50, state="RUNNING", submit_s=start_s, start_s=start_s,
                               time_limit_s=600, admin_comment=PredictionTag(7200, 540).format())
    watcher.poll()
    clock.now = start_s + 500
    watcher.poll()
    assert slurm.limit_updates == [(50, 30)]

    # The daemon restarts: checkpoint + replayed events give the policy the same history.
    restarted = PredictionService.open(store, correction=make_correction("survival"), checkpoint_every=4)
    assert restarted.correction.history.observations(1000, None) == service.correction.history.observations(1000, None)
    assert restarted.state_dict()["correction/ended"].tolist() == service.state_dict()["correction/ended"].tolist()
    slurm.jobs_by_id[51] = Job(51, state="RUNNING", submit_s=start_s, start_s=start_s,
                               time_limit_s=600, admin_comment=PredictionTag(7200, 540).format())
    watcher_for(restarted, slurm, clock, policy=restarted.correction).poll()
    assert slurm.limit_updates[-1] == (51, 30)


def test_the_daemon_config_chooses_the_corrector_policy(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text('[daemon]\ncorrection = "survival"\nsurvival_quantile = 0.8\n')
    policy = load_config(path).correction_policy()
    assert isinstance(policy, SurvivalCorrection) and policy.quantile == 0.8
    assert load_config(None).correction_policy() is CORRECTIONS["incremental"]
    path.write_text('[daemon]\ncorrection = "survival"\nsurvival_quantile = 1.5\n')
    with pytest.raises(ConfigError, match="survival_quantile"):
        load_config(path)
    path.write_text('[daemon]\ncorrection = "sometimes"\n')
    with pytest.raises(ConfigError, match="correction must be one of"):
        load_config(path)


# ---------------------------------------------------------------------- campaigns
def test_the_campaign_files_of_ideas_2_and_5_load_and_reuse_the_headline_runs() -> None:
    from hpcpredict.experiments.campaign import load_campaign
    from hpcpredict.sim.runner import RunSpec

    sim = Path(__file__).resolve().parent.parent / "sim"
    headline = {cell.key for cell in load_campaign(sim / "headline.toml").cells}
    survival = load_campaign(sim / "survival.toml").cells
    calibration = load_campaign(sim / "calibration.toml").cells
    both = {cell.key for cell in load_campaign(sim / "ideas-2-5.toml").cells}
    # EASY, EASY++, the learned default and the model without the guard: the headline's runs.
    for cells in (survival, calibration):
        shared = [cell for cell in cells if cell.key in headline]
        assert len(shared) == 4 * 3 * 10 and len(cells) == 6 * 3 * 10
    assert both == {cell.key for cell in survival} | {cell.key for cell in calibration}
    quantiles = {cell.spec.survival_quantile for cell in survival if cell.spec.correction == "survival"}
    assert quantiles == {0.5, 0.9}
    # The quantile is part of a run's key only for the survival correction.
    assert RunSpec(survival_quantile=0.9).to_dict() == RunSpec().to_dict()
    assert RunSpec(correction="survival").to_dict() != RunSpec(correction="survival", survival_quantile=0.9).to_dict()
    assert RunSpec(correction="survival", survival_quantile=0.9).label.endswith("survival(q=0.9)")


def test_a_history_is_empty_until_it_hears_a_start_or_an_end_and_again_once_emptied() -> None:
    history = RuntimeHistory()
    assert history.is_empty()
    history.job_started(JobRequest(1, 0, 1, 100, 7), 0)
    assert not history.is_empty()
    history.job_ended(JobRequest(1, 0, 1, 100, 7), 50, 50)
    assert not history.is_empty()  # the runtime is heard: not empty, though nothing runs
    history.load_state({})
    assert history.is_empty()
    only_running = RuntimeHistory()
    only_running.load_state({"running": np.array([[7, 1, 0]], dtype=np.int64)})
    assert not only_running.is_empty()
