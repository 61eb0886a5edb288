"""What a site wants to know first about hpcpredict's predictions, and the go/no-go gate.

MAE and the under-prediction rate answer "how far from the runtime", which is not the question:
the E-Loss (over-predictions cost the square of the error, under-predictions the error itself,
docs/method.md §4) deliberately predicts short, because the corrector extends a lowered limit
before the job reaches it, up to the request. So the views lead with what lowering limits does
for a site (the `SiteSummary`):

* how many jobs get a limit below their request, and how many of those finish within it with no
  correction;
* how many corrections that takes (each one is a limit change the user sees and an
  ``scontrol update``), counted as the simulator counts them: INCREMENTAL (the daemon's
  default), a correction each time the job reaches its limit, until the limit covers the
  runtime (`corrections_needed`, with the policy object the simulator and the corrector use);
* how much earlier the scheduler can plan the jobs' ends: request minus the first (lowered)
  limit, and request minus the last limit after the corrections;
* live jobs killed at a lowered limit (the one outcome that must not happen).

The scheduling effect itself needs a replay of the history through the scheduler, not the store:
the summary names the `hpcpredict simulate` command. The gate (`GATE_TEXT`, docs/admin-guide.md
"Go/no-go") says which numbers decide the switch from ``mode=record`` to ``mode=lower``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from hpcpredict.corrections.policies import CorrectionPolicy, IncrementalCorrection

# The gate's thresholds (the reasons are in GATE_TEXT and docs/admin-guide.md).
MAX_CORRECTIONS_PER_LOWERED_JOB = 4.0
MIN_LIVE_JUDGED_JOBS = 231
MAX_WAIT_RATIO = 1.25  # simulated max and p99 wait against plain EASY's, mean over replicas

MAE_SENTENCE = (
    "MAE is the mean distance between prediction and runtime; hpcpredict's can be worse than the "
    "users' requests by design: the limit that matters is the corrected one, not the first guess.")
UNDER_SENTENCE = (
    "Under-predicted is the share of jobs that outlived their prediction; it is high on purpose: "
    "the E-Loss makes a prediction that is too short cheaper than one too long, because the "
    "corrector extends the limit before the job reaches it (never above the request).")


@dataclass(frozen=True)
class SiteSummary:
    """The headline numbers of a set of judged jobs (`errors.judged_jobs` rows)."""

    judged_jobs: int
    lowered_jobs: int  # prediction below the request
    lowered_share: float
    within_lowered_share: float  # of the lowered jobs: ended before their first limit, no correction
    corrections_per_lowered_job: float  # mean, INCREMENTAL, counted as the simulator counts
    corrections_median: float
    corrections_p90: float
    first_limit_earlier_median_s: float  # request - prediction, lowered jobs
    first_limit_earlier_mean_s: float
    final_limit_earlier_median_s: float  # request - limit after the corrections, lowered jobs
    final_limit_earlier_mean_s: float
    live_judged_jobs: int
    killed_at_lowered_limit: int  # live jobs; must stay 0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def corrections_needed(
    predicted_s: int, run_s: int, requested_s: int, policy: CorrectionPolicy | None = None
) -> tuple[int, int]:
    """(corrections, final limit) for a job predicted `predicted_s` that ran `run_s`: the policy
    is asked each time the job reaches its limit, until the limit covers the runtime or is the
    request (the simulator's rule, `Simulation._correct_until`)."""
    policy = IncrementalCorrection() if policy is None else policy
    limit_s, corrections = predicted_s, 0
    while run_s > limit_s and limit_s < requested_s:
        limit_s = policy.corrected_prediction_s(requested_s, predicted_s, corrections, limit_s)
        corrections += 1
    return corrections, limit_s


def site_summary(judged, killed_at_lowered_limit: int = 0) -> SiteSummary:  # judged: pd.DataFrame
    """`SiteSummary` of `judged_jobs` rows; `killed_at_lowered_limit` is counted from the jobs
    table (`killed_at_lowered_limit_count`)."""
    predicted = judged["predicted_s"].to_numpy(dtype=np.int64)
    run = judged["run_s"].to_numpy(dtype=np.int64)
    requested = judged["requested_s"].to_numpy(dtype=np.int64)
    lowered = predicted < requested
    policy = IncrementalCorrection()
    needed = [corrections_needed(int(p), int(r), int(q), policy)
              for p, r, q in zip(predicted[lowered], run[lowered], requested[lowered])]
    corrections = np.array([count for count, _ in needed], dtype=np.float64)
    final = np.array([limit for _, limit in needed], dtype=np.float64)
    first_gain = (requested - predicted)[lowered].astype(np.float64)
    final_gain = requested[lowered] - final
    nan = float("nan")

    def stat(values: np.ndarray, how) -> float:
        return float(how(values)) if values.size else nan

    return SiteSummary(
        judged_jobs=int(len(judged)),
        lowered_jobs=int(lowered.sum()),
        lowered_share=stat(lowered, np.mean),
        within_lowered_share=stat(corrections == 0, np.mean),
        corrections_per_lowered_job=stat(corrections, np.mean),
        corrections_median=stat(corrections, np.median),
        corrections_p90=stat(corrections, lambda values: np.percentile(values, 90)),
        first_limit_earlier_median_s=stat(first_gain, np.median),
        first_limit_earlier_mean_s=stat(first_gain, np.mean),
        final_limit_earlier_median_s=stat(final_gain, np.median),
        final_limit_earlier_mean_s=stat(final_gain, np.mean),
        live_judged_jobs=int((judged["source"] == "live").sum()) if "source" in judged else 0,
        killed_at_lowered_limit=int(killed_at_lowered_limit),
    )


def killed_at_lowered_limit_count(store, since_s: int | None = None, user_ids=None) -> int:  # store: Store
    """Live jobs killed at a limit hpcpredict lowered (the daemon was not there to extend it)."""
    from sqlalchemy import func, select

    from hpcpredict.daemon.core.store import JobRow

    statement = select(func.count()).select_from(JobRow).where(JobRow.killed_at_lowered_limit.is_(True))
    if since_s is not None:
        statement = statement.where(JobRow.end_s >= since_s)
    if user_ids:
        statement = statement.where(JobRow.user_id.in_(list(user_ids)))
    with store.session() as session:
        return int(session.scalar(statement) or 0)


def simulate_hint(db_url: str) -> str:
    """The commands that measure the scheduling effect on this store's jobs."""
    return (f"`hpcpredict simulate HISTORY.swf --replicas 10` on the log you trained with; for the "
            f"live jobs: `hpcpredict slurm-convert --db {db_url} -o live.swf`, then "
            f"`hpcpredict simulate live.swf --replicas 10`")


def gate_checks(summary: SiteSummary) -> list[tuple[str, str]]:
    """(verdict, what) for each part of the gate the store can check; verdict is "ok", "NO" or
    "wait" (not enough data yet)."""
    checks = []
    if summary.lowered_jobs:
        ok = summary.corrections_per_lowered_job <= MAX_CORRECTIONS_PER_LOWERED_JOB
        checks.append(("ok" if ok else "NO",
                       f"corrections per lowered job {summary.corrections_per_lowered_job:.1f} "
                       f"(at most {MAX_CORRECTIONS_PER_LOWERED_JOB:g})"))
    live_ok = summary.live_judged_jobs >= MIN_LIVE_JUDGED_JOBS
    checks.append(("ok" if live_ok else "wait",
                   f"{summary.live_judged_jobs:,} live jobs judged in mode=record "
                   f"(at least {MIN_LIVE_JUDGED_JOBS})"))
    checks.append(("ok" if summary.killed_at_lowered_limit == 0 else "NO",
                   f"{summary.killed_at_lowered_limit:,} live jobs killed at a lowered limit (must be 0)"))
    return checks


GATE_TEXT = (
    f"Go/no-go for mode=lower (docs/admin-guide.md): (1) the simulator, on your history with "
    f"--replicas 10, lowers AVEbsld with a 95% interval below 0, and mean max and p99 wait at most "
    f"{MAX_WAIT_RATIO:g}x plain EASY's (the guarded default measured 1.13x max wait on the archive "
    f"logs); (2) at most {MAX_CORRECTIONS_PER_LOWERED_JOB:g} corrections per lowered job (the 4th "
    f"INCREMENTAL correction is prediction + 30 min: beyond, corrections, not the model, set most "
    f"limits, and each is a change users see); (3) at least {MIN_LIVE_JUDGED_JOBS} live jobs "
    f"judged in mode=record (the model's size; history replays are not live submissions); "
    f"(4) the daemon ready (/health); and after the switch, no job killed at a lowered limit.")


def format_summary(summary: SiteSummary, db_url: str) -> str:
    """The summary as the lines that open `hpcpredict errors`."""
    if not summary.judged_jobs:
        return ""
    lines = [f"What lowering limits does ({summary.judged_jobs:,} judged jobs):"]
    if summary.lowered_jobs:
        lines += [
            f"  lowered: {100 * summary.lowered_share:.1f}% of jobs get a limit below their request",
            f"  finished within the lowered limit, no correction: {100 * summary.within_lowered_share:.1f}% "
            f"of lowered jobs (the others are extended by the corrector, never killed before their request)",
            f"  corrections: {summary.corrections_per_lowered_job:.1f} per lowered job (median "
            f"{summary.corrections_median:g}, 90th percentile {summary.corrections_p90:g}; INCREMENTAL, as "
            f"the simulator counts them)",
            f"  planned earlier: the first limit is {_hours(summary.first_limit_earlier_median_s)} below the "
            f"request (median; mean {_hours(summary.first_limit_earlier_mean_s)}), the limit after corrections "
            f"{_hours(summary.final_limit_earlier_median_s)} (mean {_hours(summary.final_limit_earlier_mean_s)})",
        ]
    else:
        lines.append("  lowered: no job got a limit below its request")
    lines.append(f"  scheduling effect: {simulate_hint(db_url)}")
    lines.append("  gate: " + "; ".join(f"{what}: {verdict}" for verdict, what in gate_checks(summary)))
    lines.append(f"  {MAE_SENTENCE}")
    lines.append(f"  {UNDER_SENTENCE}")
    return "\n".join(lines)


def _hours(seconds: float) -> str:
    if seconds != seconds:
        return "n/a"
    return f"{seconds / 3600:.2f} h" if abs(seconds) >= 3600 else f"{seconds / 60:.0f} min"
