"""How much of a replay the starvation guard was due (`metrics.waited_share`), and `simulate`
saying it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcpredict.cli import main
from hpcpredict.sim.guard_due import MOSTLY_DUE, guard_due_share
from hpcpredict.sim.metrics import waited_share

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"


@given(jobs=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 150), st.integers(0, 100)),
                     min_size=1, max_size=25),
       one_threshold=st.booleans(), from_s=st.none() | st.integers(0, 200))
@settings(max_examples=300, deadline=None)
def test_the_share_is_the_seconds_some_job_had_waited_its_threshold(
    jobs: list[tuple[int, int, int]], one_threshold: bool, from_s: int | None
) -> None:
    """Against a second-by-second count: second t is covered when a job submitted at s and
    started at b, with threshold h, has s + h <= t < b; from `from_s` on when given (`tune`'s
    later part), one threshold for all or one per job (the xfactor rule's)."""
    submit = [s for s, _, _ in jobs]
    start = [s + wait for s, wait, _ in jobs]
    thresholds = [jobs[0][2]] * len(jobs) if one_threshold else [h for _, _, h in jobs]
    first, last = min(submit) if from_s is None else from_s, max(start)
    covered = sum(any(s + h <= t < b for s, b, h in zip(submit, start, thresholds))
                  for t in range(first, last))
    expected = covered / (last - first) if last > first else 0.0
    threshold_s = thresholds[0] if one_threshold else np.asarray(thresholds)
    assert waited_share(submit, start, threshold_s, from_s) == pytest.approx(expected, abs=1e-12)


def _due_share(load: float) -> float:
    from hpcpredict.logs.job_table import job_column
    from hpcpredict.sim.load_scaling import scaled_load
    from hpcpredict.sim.runner import RunSpec, run
    from hpcpredict.logs.workload import load_workload

    result = run(scaled_load(load_workload(SAMPLE), load), RunSpec.from_keys(starvation_guard_s=86_400))
    return waited_share(job_column(result.jobs, "submit_s"), result.start_s, 86_400)


def test_simulate_says_how_often_the_guard_was_due_and_when_it_was_most_of_the_time() -> None:
    runner = CliRunner()
    as_is, loaded = _due_share(1.0), _due_share(1.5)
    assert as_is < MOSTLY_DUE - 0.1 and loaded > MOSTLY_DUE + 0.1  # the sample as it is, and 1.5x
    quiet = runner.invoke(main, ["simulate", str(SAMPLE), "--no-baseline"])
    assert quiet.exit_code == 0, quiet.output
    assert f"due {as_is:.0%} of the time (some job had waited 24 h)" in quiet.output
    assert "of the time or more" not in quiet.output
    busy = runner.invoke(main, ["simulate", str(SAMPLE), "--no-baseline", "--load", "1.5"])
    assert f"due {loaded:.0%} of the time" in busy.output
    assert "70% of the time or more" in busy.output
    payload = json.loads(runner.invoke(main, ["simulate", str(SAMPLE), "--no-baseline",
                                              "--format", "json"]).output)
    assert payload["guard_due_share"] == round(as_is, 4)
    unbounded = runner.invoke(main, ["simulate", str(SAMPLE), "--no-baseline",
                                     "--starvation-guard", "off", "--format", "json"])
    assert "guard_due_share" not in json.loads(unbounded.output)


def test_the_xfactor_rule_is_due_at_each_jobs_own_time_and_other_rules_are_not_said() -> None:
    """`guard_due_share` under the xfactor rule: each job's threshold is xfactor - 1 times its
    request, at most the guard's time (the simulator's and the daemon's rule); the rules whose
    due times depend on more than the job ("promise") are not reported."""
    from hpcpredict.logs.job_table import job_column
    from hpcpredict.sim.runner import RunSpec, run
    from hpcpredict.logs.workload import load_workload

    workload = load_workload(SAMPLE)
    spec = RunSpec.from_keys(starvation_guard_s=86_400, guard_rule="xfactor", guard_xfactor=3.0)
    result = run(workload, spec)
    requested = np.asarray(job_column(result.jobs, "requested_s"))
    by_hand = waited_share(job_column(result.jobs, "submit_s"), result.start_s,
                           np.minimum(2 * requested, 86_400))
    assert guard_due_share(result, spec) == by_hand
    assert by_hand != waited_share(job_column(result.jobs, "submit_s"), result.start_s, 86_400)
    promise = RunSpec.from_keys(starvation_guard_s=86_400, guard_rule="promise")
    assert guard_due_share(run(workload, promise), promise) is None
