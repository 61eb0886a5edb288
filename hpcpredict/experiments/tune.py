"""`hpcpredict tune`: a site's starvation bound and correction chosen from its own history.

Why a command: the guard's best setting differs between logs and is not monotone in its
threshold (docs/results.md), so a default chosen on three archive logs is a guess for a fourth
site. The site's own history (from `slurm-convert`) answers better, if it is used honestly:

* **split in time**: the jobs submitted before the split (the earlier part, by default the first
  two thirds of the jobs) are replayed alone, on shaken replicas, under every setting of a small
  grid, with the model of the site's scheduler; the choice is made there;
* **checked out of sample**: the chosen setting, hpcpredict's default and the plain scheduler
  are replayed on the whole history and judged on the jobs submitted after the split only (the
  earlier part warms the model and the queue, as a daemon trained on history would be);
* **the grid** (`thresholds_s`): the guard's durations are relative to the site's own waits,
  a quarter, a half, one and two times plain scheduling's p99 wait in the earlier part (plus the
  shipped 24 h): a guard protects a job only once it has waited that long, and it then still
  waits for the machine to drain, so a site whose tail is 6 h needs a shorter guard than one
  whose tail is 30 h, and no fixed list fits both (docs/results.md); and, when asked, the
  "xfactor" rule, a threshold relative to each job's request (`grid`'s comment says why not by
  default);
* **the rule** (`choose`): the lowest mean AVEbsld among the settings whose longest wait is at
  most `MAX_WAIT_BOUND` times the plain scheduler's mean and whose p99 wait is at most its, both
  at the upper end of their 95% interval over the replicas;
  if none keeps both, the max-wait bound alone; if none keeps that, the lowest max-wait ratio.
  What was relaxed is said, and the out-of-sample check shows whether the bound held.

* **the goal** (`Goal`): out of sample, the chosen setting is also set beside the learner
  without a guard (what the bound costs) and AVE2 under the same bound (whether the learned
  predictions add anything to the bound), so that the four conditions a bound is judged by
  (docs/results.md) are printed for the site.

Every replay is a campaign cell (`hpcpredict.experiments.campaign`), stored as it finishes, so an
interrupted tune resumes where it stopped, runs in parallel and on Dask like a campaign.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hpcpredict.corrections.starvation import (
    DEFAULT_STARVATION_GUARD_S, GuardSettings, is_expansion_factor, parse_starvation_guard,
)
from hpcpredict.experiments.campaign import Cell, LogEntry
from hpcpredict.history_keys import DEFAULT_HISTORY_BY
from hpcpredict.sim.replica_stats import Estimate, PairedDifference, mean_ci, paired_difference
from hpcpredict.sim.runner import RunSpec
from hpcpredict.sim.slurm_model.slurm_backfill import NAME as SLURM_BACKFILL
from hpcpredict.logs.workload import Workload

MAX_WAIT_BOUND = 1.25  # the longest wait allowed, over the plain scheduler's (the bound's goal)
AVEBSLD_BOUND = 1.10  # what the bound may cost: AVEbsld over the unbounded learner's
DEFAULT_SPLIT = 2 / 3  # share of the jobs, in submission order, in the earlier part
DEFAULT_CORRECTIONS = ("incremental", "survival")
# The bounds tried: the guard (the wait rule, the one the daemon applies to SLURM; the
# simulator's "promise" rule has no live counterpart yet, docs/results.md) after these multiples
# of plain scheduling's p99 wait in the earlier part, and after the shipped 24 h.
P99_FACTORS = (0.25, 0.5, 1.0, 2.0)
# `grid`: the "xfactor" rule (the daemon's `starvation_guard_xfactor`) is tried only at the factors an
# admin gives (`--xfactors`), capped by the shipped 24 h: added to the grid at 5 (the best of 3,
# 5 and 9 on KTH-SP2 and SDSC-BLUE over whole logs), it won KTH-SP2's earlier part and broke the
# longest-wait bound on its later part, where the grid without it met the whole goal; it was not
# chosen on the two other logs (docs/results.md, "`hpcpredict tune` on the archive logs").
HOUR_S = 3600
JUDGED = ("ave_bsld", "p99_wait_s", "max_wait_s")


@dataclass(frozen=True)
class Setting:
    """One configuration tried: its label and the replay it stands for."""

    label: str
    spec: RunSpec


def bound_label(spec: RunSpec) -> str:
    """``guard 24 h + incremental``, ``guard promise or 48 h + survival(q=0.5)``, ``plain``,
    ``AVE2, guard 24 h + incremental``."""
    if spec.predictor == "requested":
        return "plain"
    predictor = "" if spec.predictor == "learned" else f"{spec.predictor.upper()}, "
    history = (f", history by {spec.learner.history_by}"
               if spec.predictor == "learned" and spec.learner.history_by != DEFAULT_HISTORY_BY else "")
    return f"{predictor}{spec.guard_label.removeprefix(' + ') or 'no guard'} + {spec.correction_label}{history}"


NEAR_DEFAULT = 0.10  # a scaled guard this close to the default is the default's twin


def thresholds_s(plain_p99_wait_s: float) -> tuple[int, ...]:
    """The guard's durations tried, in seconds, ascending: `P99_FACTORS` times plain
    scheduling's p99 wait, each rounded to the hour (at least one hour), and the shipped default.
    A scaled guard within `NEAR_DEFAULT` of the default is left out: its replays would differ
    from the default's by noise alone (25 h against 24 h on KTH-SP2: AVEbsld 70.18 against
    70.66, max wait 79.9 against 82.4 h, docs/journal/results-2026-11.md, "`hpcpredict tune` with
    guards scaled") and cost a tenth of the run."""
    relative = {max(1, round(factor * plain_p99_wait_s / HOUR_S)) * HOUR_S for factor in P99_FACTORS}
    kept = {seconds for seconds in relative
            if abs(seconds / DEFAULT_STARVATION_GUARD_S - 1) > NEAR_DEFAULT}
    return tuple(sorted(kept | {DEFAULT_STARVATION_GUARD_S}))


def parse_guards(text: str) -> tuple[int, ...] | None:
    """`--guards`: ``auto`` (None: `thresholds_s` on the site's p99 wait) or durations as the
    daemon reads them (``6h,12h,24h``, ``90m``, seconds), ascending and without repeats. A guard
    that is off is no bound to choose: the learner without one is replayed anyway."""
    if text.strip().lower() == "auto":
        return None
    guards = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        seconds = parse_starvation_guard(item)
        if not seconds:
            raise ValueError(f"--guards takes durations above 0 s such as 6h,24h (or auto), got {item!r}")
        guards.add(seconds)
    if not guards:
        raise ValueError(f"--guards takes durations such as 6h,24h (or auto), got {text!r}")
    return tuple(sorted(guards))


def parse_xfactors(text: str) -> tuple[float, ...]:
    """`--xfactors`: ``none`` (no xfactor rule tried) or expansion factors above 1 (``3,5``),
    ascending and without repeats."""
    if text.strip().lower() == "none":
        return ()
    factors = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            factor = float(item)
        except ValueError:
            raise ValueError(f"--xfactors takes numbers above 1 such as 3,5 (or none), got {item!r}") from None
        if not is_expansion_factor(factor):
            raise ValueError(f"--xfactors takes numbers above 1 such as 3,5 (or none), got {item!r}")
        factors.add(factor)
    if not factors:
        raise ValueError(f"--xfactors takes numbers above 1 such as 3,5 (or none), got {text!r}")
    return tuple(sorted(factors))


def parse_slacks(text: str) -> tuple[tuple[int, int], ...]:
    """`--slacks`: ``none`` (no slack stage tried) or SLACK@AFTER pairs of durations in whole
    minutes (``2h@4h,1h@3h``: the slack, and the wait from which it applies, at most the shipped
    24 h guard), as the daemon's `starvation_guard_slack` and `starvation_guard_slack_after`."""
    if text.strip().lower() == "none":
        return ()
    expected = "--slacks takes SLACK@AFTER pairs of durations in whole minutes such as 2h@4h,1h@3h (or none)"
    pairs = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        slack, at, after = item.partition("@")
        try:
            pair = (parse_starvation_guard(slack), parse_starvation_guard(after))
        except ValueError:
            raise ValueError(f"{expected}, got {item!r}") from None
        if not at or None in pair or pair[0] < 60 or any(seconds % 60 for seconds in pair) \
                or pair[1] > DEFAULT_STARVATION_GUARD_S:  # type: ignore[operator]
            raise ValueError(f"{expected}, the wait at most 24h, got {item!r}")
        pairs.add(pair)
    if not pairs:
        raise ValueError(f"{expected}, got {text!r}")
    return tuple(sorted(pairs))  # type: ignore[arg-type]


def grid(base: RunSpec, corrections: Sequence[str] = DEFAULT_CORRECTIONS,
         guards_s: Sequence[int] = (DEFAULT_STARVATION_GUARD_S,),
         xfactors: Sequence[float] = (), slacks: Sequence[tuple[int, int]] = (),
         histories: Sequence[str] | None = None) -> list[Setting]:
    """The settings tried: every guard of `guards_s` (`thresholds_s`), then the xfactor rule at
    every factor of `xfactors` and the slack stage at every (slack, after) of `slacks`, both under
    the shipped 24 h guard, with every correction, on `base` (the learned predictor under the
    site's scheduler and learner settings), its histories kept by each of `histories`
    (`hpcpredict.history_keys`; None: `base`'s own)."""
    if histories is None:
        return _grid(base, corrections, guards_s, xfactors, slacks)
    return [setting for history in histories for setting in _grid(
        replace(base, learner=replace(base.learner, history_by=history)), corrections, guards_s, xfactors, slacks)]


def _grid(base: RunSpec, corrections: Sequence[str], guards_s: Sequence[int], xfactors: Sequence[float],
          slacks: Sequence[tuple[int, int]]) -> list[Setting]:
    settings = []
    for correction in corrections:
        for seconds in guards_s:
            spec = replace(base, correction=correction, guard=GuardSettings(seconds))
            settings.append(Setting(bound_label(spec), spec))
        for factor in xfactors:
            spec = replace(base, correction=correction,
                           guard=GuardSettings(DEFAULT_STARVATION_GUARD_S, "xfactor", float(factor)))
            settings.append(Setting(bound_label(spec), spec))
        for slack_s, after_s in slacks:
            spec = replace(base, correction=correction,
                           guard=GuardSettings(DEFAULT_STARVATION_GUARD_S, slack_s=slack_s,
                                               slack_after_s=after_s))
            settings.append(Setting(bound_label(spec), spec))
    return settings


def default_setting(base: RunSpec) -> Setting:
    """What hpcpredict ships: the daemon's default bound and correction."""
    spec = replace(base, correction=RunSpec.correction, guard=GuardSettings())
    return Setting(bound_label(spec), spec)


def plain_setting(base: RunSpec) -> Setting:
    """What the bound is measured against, as `simulate`'s baseline: plain EASY on the users'
    requests for the EASY schedulers, the SLURM model on the requests for slurm-backfill."""
    if base.scheduler == SLURM_BACKFILL:
        return Setting("plain", RunSpec(SLURM_BACKFILL, "requested", "requested",
                                        slurm_params=base.slurm_params))
    return Setting("plain", RunSpec("easy", "requested", "requested"))


def goal_settings(chosen: Setting) -> tuple[Setting, Setting]:
    """What the chosen bound is judged against besides plain scheduling: the same learner and
    correction without a guard (the bound's cost), and AVE2 with the incremental correction
    (EASY++'s predictor) under the same guard (the predictions' worth under the bound)."""
    unbounded = replace(chosen.spec, guard=None)
    ave2 = replace(chosen.spec, predictor="ave2", correction="incremental")
    return Setting(bound_label(unbounded), unbounded), Setting(bound_label(ave2), ave2)


@dataclass(frozen=True)
class Goal:
    """The four conditions a bound is judged by (docs/results.md), for one setting on one part:
    (1) mean longest wait <= `MAX_WAIT_BOUND` x plain's, (2) mean p99 wait <= plain's, (3) mean
    AVEbsld <= `AVEBSLD_BOUND` x the unbounded learner's, (4) AVEbsld below AVE2's under the same
    bound, the paired 95% interval of the difference below zero."""

    max_ratio: float
    p99_ratio: float
    bsld_ratio: float
    against_ave2: PairedDifference

    @classmethod
    def of(cls, setting: Evidence, plain: Evidence, unbounded: Evidence, ave2: Evidence) -> Goal:
        return cls(
            max_ratio=setting.mean("max_wait_s") / max(1.0, plain.mean("max_wait_s")),
            p99_ratio=setting.mean("p99_wait_s") / max(1.0, plain.mean("p99_wait_s")),
            bsld_ratio=setting.mean("ave_bsld") / unbounded.mean("ave_bsld"),
            against_ave2=setting.against(ave2)["ave_bsld"],
        )

    @property
    def kept(self) -> tuple[bool, bool, bool, bool]:
        return (self.max_ratio <= MAX_WAIT_BOUND, self.p99_ratio <= 1.0,
                self.bsld_ratio <= AVEBSLD_BOUND,
                self.against_ave2.n >= 2 and self.against_ave2.ci_high < 0)

    def to_dict(self) -> dict[str, object]:
        return {"max_wait_over_plain": self.max_ratio, "p99_wait_over_plain": self.p99_ratio,
                "ave_bsld_over_unbounded": self.bsld_ratio,
                "against_ave2_same_bound": self.against_ave2.to_dict(),
                "kept": dict(zip(("max_wait", "p99_wait", "ave_bsld", "against_ave2"), self.kept))}


PERIOD_SHIFT = 0.25  # plain's p99 wait moving by more than this between the parts: said


def period_shift(earlier_plain: Evidence, later_plain: Evidence) -> str | None:
    """A warning when plain scheduling's own p99 wait differs by more than `PERIOD_SHIFT` between
    the parts: the guards tried were scaled to the earlier part's tail, and a choice that kept
    the bounds there may not in a busier or calmer period (on SDSC-BLUE plain EASY's p99 wait
    went from 21.9 h to 37.7 h, and the choice lost to the default out of sample,
    docs/results.md). None when the periods are alike."""
    before, after = earlier_plain.mean("p99_wait_s"), later_plain.mean("p99_wait_s")
    if before <= 0 or abs(after / before - 1) <= PERIOD_SHIFT:
        return None
    busier = "busier" if after > before else "calmer"
    return (f"Plain scheduling's own p99 wait was {before / HOUR_S:.1f} h in the earlier part and "
            f"{after / HOUR_S:.1f} h in the later: the later period is {busier}, so what the earlier "
            "part said of the tail is weak evidence here; trust the later part's figures.")


def split_s(workload: Workload, fraction: float) -> int:
    """The submit time before which `fraction` of the jobs were submitted."""
    if not 0 < fraction < 1:
        raise ValueError(f"the split is a share of the jobs in (0, 1), got {fraction}")
    jobs = workload.jobs
    if len(jobs) < 2:
        raise ValueError("a history of fewer than 2 jobs cannot be split")
    position = min(len(jobs) - 1, max(1, round(len(jobs) * fraction)))
    return jobs[position].submit_s


@dataclass(frozen=True)
class Parts:
    """The two parts of the history as campaign logs."""

    earlier: LogEntry
    later: LogEntry


def parts(name: str, path: str, procs: int | None, split_at_s: int) -> Parts:
    return Parts(
        earlier=LogEntry(f"{name} (earlier part)", path, procs, submit_until_s=split_at_s),
        later=LogEntry(f"{name} (later part)", path, procs, measure_from_s=split_at_s),
    )


def cells(log: LogEntry, settings: Sequence[Setting], replicas: int, shake_s: int,
          seed: int) -> list[Cell]:
    """Every setting on replicas 0..N-1 of `log`, replica by replica."""
    return [Cell(log, setting.label, setting.spec, number, shake_s, seed)
            for number in range(replicas) for setting in settings]


@dataclass(frozen=True)
class Evidence:
    """One setting's figures over the replicas of one part, and its paired differences."""

    label: str
    values: dict[str, list[float]]  # metric -> replica by replica
    estimates: dict[str, Estimate] = field(default_factory=dict)

    @classmethod
    def of(cls, label: str, values: dict[str, list[float]]) -> Evidence:
        return cls(label, values, {metric: mean_ci(values[metric]) for metric in JUDGED})

    def mean(self, metric: str) -> float:
        return self.estimates[metric].mean

    def upper(self, metric: str) -> float:
        """The upper end of the metric's 95% interval (the mean itself for equal replicas)."""
        high = self.estimates[metric].ci_high
        return self.mean(metric) if math.isnan(high) else high

    def against(self, other: Evidence) -> dict[str, PairedDifference]:
        return {metric: paired_difference(self.values[metric], other.values[metric])
                for metric in JUDGED}


@dataclass(frozen=True)
class Choice:
    label: str
    rule: str  # which constraints the choice kept, in words


def choose(candidates: Sequence[Evidence], plain: Evidence) -> Choice:
    """`choose`'s rule (module docstring) over the earlier part's evidence. A setting keeps a
    bound only if the upper end of its 95% interval does: the longest wait is a few jobs' and
    varies much between replicas and periods (on KTH-SP2 a guard whose mean was 1.24x plain's in
    the earlier part reached 2.2x in the later one, docs/journal/results-2026-11.md,
    "`hpcpredict tune` on the shared logs"), so a mean just under the bound is no evidence that
    the bound holds."""
    max_bound = MAX_WAIT_BOUND * plain.mean("max_wait_s")
    p99_bound = plain.mean("p99_wait_s")
    tiers = (
        ([c for c in candidates if c.upper("max_wait_s") <= max_bound
          and c.upper("p99_wait_s") <= p99_bound],
         f"lowest AVEbsld with max wait <= {MAX_WAIT_BOUND:g}x and p99 wait <= plain's "
         "(upper 95% CI)"),
        ([c for c in candidates if c.upper("max_wait_s") <= max_bound],
         f"no setting kept p99 wait <= plain's: lowest AVEbsld with max wait <= "
         f"{MAX_WAIT_BOUND:g}x plain's (upper 95% CI)"),
    )
    for eligible, rule in tiers:
        if eligible:
            best = min(eligible, key=lambda c: c.mean("ave_bsld"))
            return Choice(best.label, rule)
    best = min(candidates, key=lambda c: c.mean("max_wait_s"))
    return Choice(best.label, f"no setting kept max wait <= {MAX_WAIT_BOUND:g}x plain's: the "
                              "lowest max wait")


def daemon_fragment(spec: RunSpec, history: str, choice: Choice) -> str:
    """The `[daemon]` keys of daemon.toml that carry the choice (docs/daemon.md)."""
    guard = ['starvation_guard = "off"'] if spec.guard is None else spec.guard.daemon_toml_lines()
    lines = [
        f"# chosen by `hpcpredict tune` on {history}: {choice.rule}",
        "[daemon]",
        *guard,
        f'correction = "{spec.correction}"',
    ]
    if spec.correction == "survival":
        lines.append(f"survival_quantile = {spec.survival_quantile:g}")
    if spec.learner.history_by != DEFAULT_HISTORY_BY:
        lines += ["# train with the same [learner] section (hpcpredict train --config): a model",
                  "# trained otherwise is refused", "[learner]", f'history_by = "{spec.learner.history_by}"']
    return "\n".join(lines) + "\n"

