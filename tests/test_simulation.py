"""The simulator: hand-worked schedules, invariants on random workloads, fast path vs slow paths."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PAPER_STEPS_S
from hpcpredict.jobs import Job, JobRequest
from hpcpredict.learn.baselines import Ave2Predictor, ClairvoyantPredictor, RequestedPredictor, clip_prediction
from hpcpredict.corrections import CORRECTIONS
from hpcpredict.sim import SCHEDULERS, compute_metrics, simulate


def make_job(job_id: int, submit_s: int, procs: int, run_s: int, requested_s: int, user_id: int = 1) -> Job:
    return Job(JobRequest(job_id, submit_s, procs, requested_s, user_id), run_s)


class NoisyPredictor:
    """Deterministic pseudo-random predictions in [1, request], to exercise corrections."""

    name = "noisy"

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def predict(self, request: JobRequest, now_s: int) -> int:
        return clip_prediction(self._random.randint(1, request.requested_s), request.requested_s)

    def job_started(self, request: JobRequest, now_s: int) -> None:
        pass

    def job_ended(self, request: JobRequest, run_s: int, end_s: int) -> None:
        pass


# A 4-processor machine. A holds 3 processors until 100; B needs all 4, so it is reserved at 100.
# C (1 proc, 50 s) fits in the hole and ends by 100: backfilled at 2. D (1 proc, 200 s) would run
# past 100 and there are no extra processors then: it waits for B.
SCENARIO = [
    make_job(1, 0, 3, 100, 100),
    make_job(2, 1, 4, 10, 10),
    make_job(3, 2, 1, 50, 50),
    make_job(4, 3, 1, 200, 200),
]


def run(jobs, scheduler="easy", predictor=None, correction="incremental", procs=4, **options):
    return simulate(
        jobs, procs, SCHEDULERS[scheduler], predictor or RequestedPredictor(), CORRECTIONS[correction], **options
    )


def test_easy_backfills_only_what_does_not_delay_the_head():
    result = run(SCENARIO, "easy")
    assert result.start_s == [0, 100, 2, 110]
    assert result.backfilled == [False, False, True, False]
    assert result.first_reserved_start_s[1] == 100


def test_fcfs_never_backfills():
    result = run(SCENARIO, "fcfs")
    assert result.start_s == [0, 100, 110, 110]
    assert not any(result.backfilled)


def test_sjbf_backfills_the_shortest_prediction_first():
    # Jobs 1 and 5 fill the machine; job 2 (4 procs) is the head, reserved at 100. Jobs 3 (90 s)
    # and 4 (20 s) both wait until job 5 ends at 5 and frees 2 processors: EASY backfills the
    # older one (3), EASY-SJBF the shorter one (4); neither can end by 100 after that.
    jobs = [
        make_job(1, 0, 2, 100, 100),
        make_job(5, 0, 2, 5, 5),
        make_job(2, 1, 4, 10, 10),
        make_job(3, 2, 2, 90, 90),
        make_job(4, 2, 2, 20, 20),
    ]
    assert run(jobs, "easy").start_s == [0, 0, 100, 5, 110]
    assert run(jobs, "easy-sjbf").start_s == [0, 0, 100, 110, 5]


def test_incremental_correction_extends_an_under_predicted_job_and_counts_it():
    class TenSeconds(NoisyPredictor):
        def predict(self, request, now_s):
            return min(10, request.requested_s)

    jobs = [make_job(1, 0, 1, 200, 10_000)]
    result = run(jobs, "easy", TenSeconds(0), "incremental", procs=1)
    # 10 -> 10+60 -> 10+300: three predictions, two corrections.
    assert result.corrections == [2]
    assert result.final_prediction_s == [10 + PAPER_STEPS_S[1]]


@pytest.mark.parametrize(
    ("name", "requested", "corrections_done", "elapsed", "expected"),
    [
        ("requested", 1000, 0, 10, 1000),
        ("incremental", 1000, 0, 10, 10 + 60),
        ("incremental", 10_000, 3, 910, 10 + 1800),
        ("incremental", 1000, 3, 910, 1000),  # capped at the request
        ("incremental", 10**9, 11, 999, 10**9),  # after the 11th step: the request
        ("doubling", 1000, 0, 10, 20),
        ("doubling", 1000, 4, 600, 1000),
    ],
)
def test_correction_policies(name, requested, corrections_done, elapsed, expected):
    policy = CORRECTIONS[name]
    assert policy.corrected_prediction_s(requested, 10, corrections_done, elapsed) == expected


def test_incremental_steps_replace_each_other_and_end_at_the_request():
    policy = CORRECTIONS["incremental"]
    values = [policy.corrected_prediction_s(10**9, 100, k, 0) for k in range(12)]
    assert values[:11] == [100 + step for step in PAPER_STEPS_S]
    assert values[11] == 10**9


@pytest.mark.parametrize("as_table", [False, True])
@pytest.mark.parametrize("second, message", [
    (make_job(2, 1, 8, 1, 1), "job 2 needs 8 processors on a machine of 4"),
    (make_job(2, 1, 0, 1, 1), "job 2 needs 0 processors"),
    (make_job(2, 1, 1, 0, 1), "job 2 has run time 0 s"),
    (make_job(2, 1, 1, 5, 4), "job 2 runs 5 s, longer than its request 4 s"),
    (make_job(2, 0, 1, 1, 1), "job 2 is submitted before"),
])
def test_input_a_replay_cannot_take_is_refused_with_the_job_named(second, message, as_table):
    """Each check, on a list of jobs and on a `JobTable` (whose columns are checked as arrays
    first)."""
    import numpy as np

    from hpcpredict.logs.job_table import JOB_FIELDS, REQUEST_FIELDS, JobTable

    jobs = [make_job(1, 1, 1, 1, 1), second]
    if as_table:
        jobs = JobTable({name: np.array([getattr(job.request, name) if name in REQUEST_FIELDS
                                         else getattr(job, name) for job in jobs], dtype=np.int64)
                         for name in (*REQUEST_FIELDS, *JOB_FIELDS)})
    with pytest.raises(ValueError, match=message):
        run(jobs)


# ---------------------------------------------------------------------------------------------
# Random workloads


@st.composite
def workloads(draw, max_jobs: int = 40):
    machine = draw(st.integers(1, 16))
    count = draw(st.integers(1, max_jobs))
    submit = 0
    jobs = []
    for job_id in range(count):
        submit += draw(st.integers(0, 30))
        run_s = draw(st.integers(1, 200))
        requested = run_s + draw(st.integers(0, 300))
        procs = draw(st.integers(1, machine))
        user = draw(st.integers(1, 3))
        jobs.append(make_job(job_id + 1, submit, procs, run_s, requested, user))
    return machine, jobs


PREDICTORS = ["requested", "clairvoyant", "ave2", "noisy"]


def build_predictor(name: str, jobs, seed: int = 7):
    if name == "requested":
        return RequestedPredictor()
    if name == "clairvoyant":
        return ClairvoyantPredictor({job.job_id: job.run_s for job in jobs})
    if name == "ave2":
        return Ave2Predictor()
    return NoisyPredictor(seed)


def peak_usage(result) -> int:
    """Largest number of processors in use at any instant (ends release before starts)."""
    events = []
    for index, job in enumerate(result.jobs):
        events.append((result.start_s[index], 1, job.procs))
        events.append((result.start_s[index] + job.run_s, 0, -job.procs))
    used = peak = 0
    for _, _, delta in sorted(events):
        used += delta
        peak = max(peak, used)
    return peak


@settings(max_examples=150, deadline=None)
@given(
    workloads(),
    st.sampled_from(sorted(SCHEDULERS)),
    st.sampled_from(PREDICTORS),
    st.sampled_from(sorted(CORRECTIONS)),
    st.booleans(),
)
def test_schedule_invariants(workload, scheduler, predictor, correction, decide_on_correction):
    machine, jobs = workload
    result = run(
        jobs, scheduler, build_predictor(predictor, jobs), correction, machine,
        decide_on_correction=decide_on_correction,
    )
    assert peak_usage(result) <= machine
    for index, job in enumerate(jobs):
        assert result.start_s[index] >= job.submit_s  # wait >= 0, every job started
        assert 1 <= result.initial_prediction_s[index] <= job.requested_s
        assert result.initial_prediction_s[index] <= result.final_prediction_s[index] <= job.requested_s
        if result.corrections[index]:
            assert result.initial_prediction_s[index] < job.run_s
    metrics = compute_metrics(result)
    assert metrics.jobs == len(jobs) and metrics.ave_bsld >= 1.0


@settings(max_examples=100, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]))
def test_clairvoyant_backfilling_never_delays_the_reserved_head(workload, scheduler):
    machine, jobs = workload
    result = run(jobs, scheduler, build_predictor("clairvoyant", jobs), "requested", machine)
    for index in range(len(jobs)):
        promised = result.first_reserved_start_s[index]
        if promised >= 0:
            assert result.start_s[index] <= promised


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from(sorted(SCHEDULERS)), st.sampled_from(PREDICTORS), st.sampled_from(sorted(CORRECTIONS)))
def test_fast_path_takes_the_same_decisions_as_exhaustive_passes(workload, scheduler, predictor, correction):
    machine, jobs = workload
    fast = run(jobs, scheduler, build_predictor(predictor, jobs), correction, machine)
    slow = run(jobs, scheduler, build_predictor(predictor, jobs), correction, machine, exhaustive=True)
    assert fast.start_s == slow.start_s
    assert fast.corrections == slow.corrections


@pytest.mark.parametrize("scheduler", ["easy", "easy-sjbf"])
@pytest.mark.parametrize("correction", ["incremental", "doubling"])
def test_a_reservation_kept_after_corrections_takes_the_same_decisions(scheduler, correction, monkeypatch):
    """`Simulation._still_valid` (a submission after corrections decides in O(1) when the
    head's shadow time did not move) against full passes, on a workload long and under-predicted
    enough to take that path often, in both of its outcomes."""
    from hpcpredict.sim.easy.simulation import Simulation

    rng = random.Random(13)
    jobs, submit = [], 0
    for job_id in range(1, 1501):
        submit += rng.randint(0, 40)
        run_s = rng.randint(1, 600)
        jobs.append(make_job(job_id, submit, rng.randint(1, 16), run_s, run_s + rng.randint(0, 900),
                             rng.randint(1, 5)))
    outcomes = {"kept": 0, "recomputed in full": 0}
    still_valid = Simulation._still_valid

    def counted(self, reservation):
        kept = still_valid(self, reservation)
        outcomes["kept" if kept is not None else "recomputed in full"] += 1
        return kept

    monkeypatch.setattr(Simulation, "_still_valid", counted)
    fast = run(jobs, scheduler, NoisyPredictor(3), correction, 16)
    slow = run(jobs, scheduler, NoisyPredictor(3), correction, 16, exhaustive=True)
    assert fast.start_s == slow.start_s
    assert fast.corrections == slow.corrections
    assert fast.first_reserved_start_s == slow.first_reserved_start_s
    assert outcomes["kept"] > 50 and outcomes["recomputed in full"] > 50, outcomes


# A deliberately naive EASY, written straight from docs/method.md §7 with plain lists, to check the
# compiled backfilling pass and, for REQUESTED, the lazy corrections (this one pushes
# prediction-over events, as the simulator once did). Same event order: prediction-over,
# submission, termination.


def naive_easy(jobs, machine, predictions, order):
    import heapq

    start = [-1] * len(jobs)
    prediction = list(predictions)
    queue: list[int] = []
    running: dict[int, int] = {}  # index -> predicted end
    heap = [(job.submit_s, 1, index, index) for index, job in enumerate(jobs)]
    heapq.heapify(heap)
    sequence = len(jobs)
    corrections = [0] * len(jobs)

    def free_at(now):
        return machine - sum(jobs[i].procs for i, end in running.items() if end > now)

    def decide(now):
        nonlocal sequence
        free = free_at(now)
        while queue and jobs[queue[0]].procs <= free:
            begin(queue.pop(0), now)
            free = free_at(now)
        if not queue:
            return
        head = queue[0]
        ends = sorted((end, jobs[i].procs) for i, end in running.items() if end > now)
        avail, shadow = free, None
        for position, (end, procs) in enumerate(ends):
            avail += procs
            if avail >= jobs[head].procs:
                shadow = end
                avail += sum(p for e, p in ends[position + 1 :] if e == end)
                break
        extra = avail - jobs[head].procs
        candidates = queue[1:]
        if order == "shortest_prediction":
            candidates = sorted(candidates, key=lambda i: prediction[i])
        for index in candidates:
            need = jobs[index].procs
            if need > free:
                continue
            if now + prediction[index] > shadow:
                if need > extra:
                    continue
                extra -= need
            queue.remove(index)
            begin(index, now)
            free -= need

    def begin(index, now):
        nonlocal sequence
        start[index] = now
        running[index] = now + prediction[index]
        sequence += 1
        heapq.heappush(heap, (now + jobs[index].run_s, 2, sequence, index))
        if prediction[index] < jobs[index].run_s:
            sequence += 1
            heapq.heappush(heap, (now + prediction[index], 0, sequence, index))

    while heap:
        now, kind, _, index = heapq.heappop(heap)
        if kind == 1:
            queue.append(index)
            decide(now)
        elif kind == 2:
            del running[index]
            decide(now)
        else:
            corrections[index] += 1
            prediction[index] = jobs[index].requested_s
            running[index] = start[index] + prediction[index]
    return start


@settings(max_examples=150, deadline=None)
@given(workloads(), st.sampled_from(["easy", "easy-sjbf"]), st.sampled_from(["requested", "clairvoyant", "noisy"]))
def test_easy_agrees_with_a_naive_implementation(workload, scheduler, predictor):
    machine, jobs = workload
    result = run(jobs, scheduler, build_predictor(predictor, jobs), "requested", machine)
    expected = naive_easy(jobs, machine, result.initial_prediction_s, SCHEDULERS[scheduler].backfill_order)
    assert result.start_s == expected


@settings(max_examples=500, deadline=None)
@given(
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=False),
        st.integers(-10**6, 10**6),
        st.floats(-5.0, 50.0),
    ),
    requested_s=st.integers(0, 10**6),
)
def test_clip_prediction_is_max_one_min_int_request(value, requested_s) -> None:
    """`clip_prediction` spells max(1, min(int(value), requested_s)) as comparisons (it runs
    twice per job): the same answer, of the same type, NaN giving the request."""
    if value != value:
        expected = max(1, requested_s)
    else:
        expected = max(1, min(int(value), requested_s))
    got = clip_prediction(value, requested_s)
    assert got == expected and type(got) is type(expected)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**7), st.integers(1, 10**7), st.integers(0, 15))
def test_incremental_is_min_of_initial_plus_step_and_request(requested_s, initial_s, done) -> None:
    """The comparison form of INCREMENTAL (round 3 of docs/performance.md's issue 13, item 5)
    against the formula it replaced."""
    expected = (requested_s if done >= len(PAPER_STEPS_S)
                else min(initial_s + PAPER_STEPS_S[done], requested_s))
    assert CORRECTIONS["incremental"].corrected_prediction_s(requested_s, initial_s, done, 0) == expected
