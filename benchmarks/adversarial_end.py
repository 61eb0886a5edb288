"""How far can one absurd job move everybody else's predictions?

Run on demand (never from the test suite); docs/daemon.md ("Bounded influence") quotes it:

    python benchmarks/adversarial_end.py                   # swf/KTH-SP2-sample.swf
    python benchmarks/adversarial_end.py LOG.swf --format json

The log is replayed as it happened (`hpcpredict.learn.history`, what `hpcpredict train` does)
through the daemon's learner with its default constants. Then every user's next job is probed:
their last job's request submitted again one minute after the log's last end, predicted by
`peek` (what the plugin's PREDICT asks; nothing recorded). One adversary then sends what the
daemon would receive from SLURM for one absurd job (submitted, started, ended with a runtime of
`--years` years), and every *other* user's probe is predicted again. The table gives, per
scenario, the largest factor by which any other user's probe moved (up or down; probes of at
least `--floor-s` seconds),
the adversary being each of the `--adversaries` busiest users in turn (the worst of them):

* ``absurd END, 1 h request``: the job asked for 1 h (SLURM would have killed it there);
* ``absurd END, absurd request``: it asked for as long as it ran (an INFINITE time limit);
* ``... then its next job``: the adversary's next ordinary job (1 h asked, 10 min run) ends
  after it, with the absurd runtime in its features (its user's last runtimes);
* ``200 one-second jobs``: one user's 200 jobs of 1 s each (1 h asked), one after another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np

from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.jobs import JobRequest
from hpcpredict.learn.history import replay_history
from hpcpredict.learn.predictor import LearnedPredictor
from hpcpredict.logs.workload import load_workload

REPO = Path(__file__).resolve().parents[1]
YEAR_S = 365 * 86_400


def trained(log: Path) -> tuple[LearnedPredictor, dict[int, JobRequest], int]:
    """The daemon's learner after the log, each user's last request and the log's last end."""
    jobs = load_workload(log).jobs
    learner = DaemonConfig().predictor_factory()
    replay_history(jobs, learner)
    last: dict[int, JobRequest] = {}
    end_s = 0
    for job in jobs:
        last[job.request.user_id] = job.request
        end_s = max(end_s, job.request.submit_s + max(job.wait_s, 0) + job.run_s)
    return learner, last, end_s


def probes(learner: LearnedPredictor, last: dict[int, JobRequest], now_s: int,
           skip_user: int) -> dict[int, int]:
    """Each other user's next job, predicted now (peek: nothing recorded)."""
    return {
        user: learner.peek(dataclasses.replace(request, job_id=10**9 + user, submit_s=now_s), now_s)
        for user, request in last.items() if user != skip_user
    }


def run_job(learner: LearnedPredictor, job_id: int, user: int, requested_s: int, run_s: int,
            now_s: int) -> int:
    """Submit, start and end one job as the daemon would; returns the time after its end."""
    request = JobRequest(job_id=job_id, submit_s=now_s, procs=1, requested_s=requested_s,
                         user_id=user)
    learner.predict(request, now_s)
    learner.job_started(request, now_s)
    learner.job_ended(request, run_s, now_s + run_s)
    return now_s + run_s


def end_unseen(learner: LearnedPredictor, job_id: int, user: int, requested_s: int, run_s: int,
               now_s: int) -> int:
    """An END for a job the daemon never saw submitted (it was down): learned from
    `late_submission`'s features at the end."""
    request = JobRequest(job_id=job_id, submit_s=now_s, procs=1, requested_s=requested_s,
                         user_id=user)
    learner.job_ended(request, run_s, now_s + run_s)
    return now_s + run_s


def largest_change(before: dict[int, int], after: dict[int, int],
                   floor_s: int) -> tuple[float, int, int, int]:
    """The largest factor max(after / before, before / after) over the users predicted at least
    `floor_s` before (below it, a change of a few seconds is a large ratio of nothing). A factor,
    not |after - before| / before, which caps a fall at 100% (1532 s -> 101 s is 15x)."""
    def factor(user: int) -> float:
        return max(after[user] / before[user], before[user] / after[user])
    users = [user for user in before if before[user] >= floor_s]
    worst = max(users, key=factor)
    return factor(worst), worst, before[worst], after[worst]


def measure(log: Path, years: float, adversaries: int, floor_s: int) -> dict[str, dict[str, object]]:
    base, last, end_s = trained(log)
    busiest = [user for user, _ in Counter(
        request.user_id for request in last.values()).most_common()]
    jobs_by_user = Counter()
    for job in load_workload(log).jobs:
        jobs_by_user[job.request.user_id] += 1
    busiest = [user for user, _ in jobs_by_user.most_common(adversaries)]
    absurd_s = int(years * YEAR_S)
    now_s = end_s + 60
    scenarios = {
        "ordinary END (1 h asked, 1 h run), for scale": lambda l, u: run_job(l, 1, u, 3600, 3600, now_s),
        "absurd END, 1 h request": lambda l, u: run_job(l, 1, u, 3600, absurd_s, now_s),
        "absurd END, absurd request": lambda l, u: run_job(l, 1, u, absurd_s, absurd_s, now_s),
        "absurd END (1 h request), then its next job": lambda l, u: run_job(
            l, 2, u, 3600, 600, run_job(l, 1, u, 3600, absurd_s, now_s)),
        "absurd END (absurd request), then its next job": lambda l, u: run_job(
            l, 2, u, 3600, 600, run_job(l, 1, u, absurd_s, absurd_s, now_s)),
        "absurd END of a job never submitted, 1 h request": lambda l, u: end_unseen(
            l, 1, u, 3600, absurd_s, now_s),
        "200 one-second jobs": lambda l, u: [
            run_job(l, 100 + k, u, 3600, 1, now_s + 2 * k) for k in range(200)][-1],
    }
    results: dict[str, dict[str, object]] = {}
    for name, attack in scenarios.items():
        worst: tuple[float, int, int, int, int] | None = None
        for adversary in busiest:
            learner = _copy(base)
            probe_s = now_s + 120  # the same instant before and after (other users are untouched)
            before = probes(learner, last, probe_s, adversary)
            attack(learner, adversary)
            after = probes(learner, last, probe_s, adversary)
            change, user, was, became = largest_change(before, after, floor_s)
            if worst is None or change > worst[0]:
                worst = (change, adversary, user, was, became)
        assert worst is not None
        results[name] = {"largest_factor": worst[0], "adversary": worst[1],
                         "user": worst[2], "before_s": worst[3], "after_s": worst[4]}
    return results


def _copy(learner: LearnedPredictor) -> LearnedPredictor:
    copy = learner.clone()
    copy.load_state_dict(learner.state_dict())
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", nargs="?", type=Path, default=REPO / "swf" / "KTH-SP2-sample.swf")
    parser.add_argument("--years", type=float, default=10.0)
    parser.add_argument("--adversaries", type=int, default=10,
                        help="try the N busiest users as the adversary (the worst is reported)")
    parser.add_argument("--floor-s", type=int, default=600,
                        help="judge only other users' predictions of at least this many seconds")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    args = parser.parse_args()
    results = measure(args.log, args.years, args.adversaries, args.floor_s)
    if args.format == "json":
        print(json.dumps(results, indent=2))
        return
    print(f"{args.log.name}: runtime {args.years:g} years; worst of the {args.adversaries} busiest "
          f"users as adversary; other users' predictions of at least {args.floor_s} s")
    print(f"{'scenario':50} {'largest factor':>14}  other user: before -> after")
    for name, r in results.items():
        print(f"{name:50} {r['largest_factor']:>13.2f}x  "
              f"uid {r['user']}: {r['before_s']} s -> {r['after_s']} s (adversary uid {r['adversary']})")


if __name__ == "__main__":
    main()
