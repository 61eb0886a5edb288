"""``hpcpredict tune``: the starvation bound and correction chosen on a site's own history, checked
out of sample, written as a daemon.toml fragment (thin over hpcpredict.experiments.tune)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hpcpredict.cli.common import check_file, load_log, require_jobs, run_into_store
from hpcpredict.cli.options import (
    LearnerSettings,
    format_option,
    learning_options,
    lenient_option,
    log_argument,
    procs_option,
    slurm_settings_options,
)
from hpcpredict.history_keys import check_history_by
from hpcpredict.sim.replica_stats import PairedDifference
from hpcpredict.sim.runner import RunSpec
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S
from hpcpredict.sim.slurm_model.slurm_params import NAME as SLURM_BACKFILL

_HOURS = {"p99_wait_s", "max_wait_s"}
_NAMES = {"ave_bsld": "AVEbsld", "p99_wait_s": "p99 wait h", "max_wait_s": "max wait h"}


@click.command()
@log_argument
@click.option(
    "--scheduler", type=click.Choice(["easy-sjbf", "easy", SLURM_BACKFILL]), default="easy-sjbf",
    show_default=True,
    help="The model of the site's scheduler: slurm-backfill for SLURM (with --slurm-conf), or the "
    "EASY family. The bound is judged against plain scheduling on the users' requests: the "
    "SLURM model for slurm-backfill, plain EASY for the EASY family (as simulate's baseline).",
)
@slurm_settings_options
@learning_options
@procs_option()
@click.option("--split", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=2 / 3,
              show_default="2/3",
              help="Share of the jobs, in submission order, in the earlier part (where the "
              "settings are chosen); the rest checks the choice out of sample.")
@click.option("--guards", "guards", default="auto", show_default=True, metavar="auto|DURATIONS",
              help="The starvation guards tried: auto (1/4, 1/2, 1 and 2 times plain "
              "scheduling's p99 wait in the earlier part, and 24 h), or your own list, e.g. "
              "6h,12h,24h,48h.")
@click.option("--xfactors", "xfactors", default="none", show_default=True, metavar="none|FACTORS",
              help="Also try the guard's xfactor rule at these expansion factors, e.g. 5 (a job is "
              "protected once it has waited FACTOR - 1 times its request, or 24 h). Not tried "
              "unless asked: on KTH-SP2 it won in sample and broke the longest-wait bound out of "
              "sample (docs/tune.md).")
@click.option("--slacks", "slacks", default="none", show_default=True, metavar="none|SLACK@AFTER,...",
              help="Also try the guard's slack stage, e.g. 2h@4h (from 4 h of waiting, before the "
              "24 h guard, limits at least the request less 2 h: docs/admin-guide.md). Not "
              "tried unless asked: the best bound measured on two archive "
              "logs, 3-6x the AVEbsld on the third (docs/tune.md).")
@click.option("--corrections", default="incremental,survival", show_default=True,
              help="Corrections tried, comma-separated (with every bound of the grid).")
@click.option("--histories", "histories", default=None, metavar="KEYS",
              help="Also choose what the learner's histories are kept for, comma-separated "
              "(user, user+group, user+executable, user+queue, user+partition, user+request: "
              "--history-by), each with every bound and correction. Default: --history-by's alone. "
              "The daemon.toml fragment then carries [learner] history_by.")
@click.option("--replicas", type=click.IntRange(min=2), default=10, show_default=True,
              help="Shaken replicas of each part (replica 0 is the history itself).")
@click.option("--shake", "shake_s", type=click.IntRange(min=0), default=DEFAULT_SHAKE_S,
              show_default=True, help="Seconds each replica moves every submission by, at most.")
@click.option("--seed", type=click.IntRange(min=0), default=DEFAULT_SEED, show_default=True)
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Replays run at once. Default: one per core (local) or per Dask worker.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local",
              show_default=True, help="As for `hpcpredict campaign`.")
@click.option("--scheduler-address", default=None, help="Dask scheduler, e.g. tcp://host:8786.")
@click.option("--store", "store_url", default="hpcpredict-tune.sqlite", show_default=True,
              metavar="FILE.jsonl|URL|FILE.sqlite",
              help="Where finished replays are kept: the same command run again resumes there "
              "and recomputes nothing.")
@click.option("--write", "fragment_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the daemon.toml fragment to this file.")
@lenient_option
@format_option()
def tune(
    log: Path, scheduler: str, slurm_params: str, learning: LearnerSettings, procs: int | None,
    split: float, guards: str, xfactors: str, slacks: str, corrections: str, histories: str | None,
    replicas: int, shake_s: int,
    seed: int, jobs: int | None,
    executor: str, scheduler_address: str | None, store_url: str, fragment_path: Path | None,
    lenient: bool, output_format: str,
) -> None:
    """Choose the starvation bound and correction for a site from its own HISTORY (SWF, e.g.
    from `hpcpredict slurm-convert`), and show the evidence.

    The history is split in time. On the earlier part, plain scheduling (plain EASY on the
    users' requests; the SLURM model on them with slurm-backfill) is replayed first, and its p99
    wait sets the guards tried: after 1/4, 1/2, 1 and 2 times that wait, and after the default
    24 h (or those of --guards), and the xfactor rule at --xfactors if given (a threshold relative
    to each job's request), each with every --corrections, on shaken replicas with the model of
    the site's scheduler. The choice is the lowest mean AVEbsld whose longest wait stays within 1.25x
    plain's and whose p99 wait is no worse, both at the upper end of their 95% CI (relaxed, and
    said so, when no setting keeps both). The later part then checks the choice out of sample
    against hpcpredict's default, plain scheduling, the learner without a guard (what the bound
    costs) and AVE2 under the same guard (what the predictions add). Prints AVEbsld, p99 and max
    wait with 95% CIs, the verdict on each, and the daemon.toml fragment (docs/tune.md).

    \b
    Examples:
      hpcpredict tune swf/KTH-SP2-sample.swf --replicas 3 -j 2
      hpcpredict tune swf/KTH-SP2-sample.swf --scheduler slurm-backfill \\
          --slurm-params bf_window=2880 --write tune.toml    # or --slurm-conf your slurm.conf
    """
    from hpcpredict.experiments import tune as tuning
    from hpcpredict.experiments.campaign_store import StoreError, open_store
    from hpcpredict.sim.guard_due import replayed_due_share

    try:
        base = RunSpec(scheduler, "learned", "incremental", slurm_params=slurm_params,
                       learner=learning)
        correction_names = [c.strip() for c in corrections.split(",") if c.strip()]
        tuning.grid(base, correction_names)  # validates the corrections before any replay
        given_guards_s = tuning.parse_guards(guards)
        factors = tuning.parse_xfactors(xfactors)
        slack_pairs = tuning.parse_slacks(slacks)
        history_names = None if histories is None else [h.strip() for h in histories.split(",") if h.strip()]
        for name in history_names or ():
            check_history_by(name)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if fragment_path is not None:
        check_file(fragment_path, "--write")
    workload = load_log(log, procs, lenient)
    require_jobs(workload, log)
    try:
        split_at_s = tuning.split_s(workload, split)
    except ValueError as error:
        raise click.ClickException(f"{log}: {error}") from None
    if store_url.endswith(".sqlite"):
        store_url = f"sqlite:///{Path(store_url).resolve()}"
    parts = tuning.parts(workload.name, str(log.resolve()), procs, split_at_s)
    plain, default = tuning.plain_setting(base), tuning.default_setting(base)
    # plain scheduling first: its p99 wait in the earlier part sets the guards tried
    plain_cells = tuning.cells(parts.earlier, [plain], replicas, shake_s, seed)
    plain_earlier = _evidence(tuning, _run(f"tune {workload.name}: plain", plain_cells, store_url,
                                           executor, jobs, scheduler_address, open_store,
                                           StoreError), plain_cells, "plain")
    guards_s = given_guards_s or tuning.thresholds_s(plain_earlier.mean("p99_wait_s"))
    tried = tuning.grid(base, correction_names, guards_s, factors, slack_pairs, history_names)
    chooser = [plain, *tried]
    choose_cells = tuning.cells(parts.earlier, chooser, replicas, shake_s, seed)
    evidence = _run(f"tune {workload.name}: choosing", choose_cells, store_url, executor, jobs,
                    scheduler_address, open_store, StoreError)
    by_label = {setting.label: _evidence(tuning, evidence, choose_cells, setting.label)
                for setting in chooser}
    choice = tuning.choose([by_label[s.label] for s in tried], by_label["plain"])
    chosen = next(setting for setting in tried if setting.label == choice.label)
    unbounded, ave2 = tuning.goal_settings(chosen)
    checked = [chosen, *([default] if default.label != chosen.label else []), plain, unbounded, ave2]
    check_cells = tuning.cells(parts.later, checked, replicas, shake_s, seed)
    checking = _run(f"tune {workload.name}: checking", check_cells, store_url, executor, jobs,
                    scheduler_address, open_store, StoreError)
    later = {setting.label: _evidence(tuning, checking, check_cells, setting.label)
             for setting in checked}
    goal = tuning.Goal.of(later[chosen.label], later["plain"], later[unbounded.label],
                          later[ave2.label])
    due_share = replayed_due_share(workload, chosen.spec, split_at_s)
    fragment = tuning.daemon_fragment(chosen.spec, log.name, choice)
    if fragment_path is not None:
        fragment_path.write_text(fragment)
    if output_format == "json":
        click.echo(json.dumps({
            "log": str(log), "jobs": len(workload.jobs), "split_s": split_at_s,
            "earlier_jobs": sum(job.submit_s < split_at_s for job in workload.jobs),
            "scheduler": scheduler, "replicas": replicas, "shake_s": shake_s, "seed": seed,
            "guards_s": list(guards_s), "xfactors": list(factors),
            "slacks_s": [list(pair) for pair in slack_pairs],
            "histories": history_names or [learning.history_by],
            "chosen": {"label": chosen.label, "settings": chosen.spec.to_dict(), "rule": choice.rule},
            "default": default.label, "unbounded": unbounded.label, "ave2_same_bound": ave2.label,
            "earlier": {label: _summary(e) for label, e in by_label.items()},
            "later": {label: _summary(e) for label, e in later.items()},
            "later_vs_default": _pairs(later[chosen.label], later.get(default.label)),
            "later_vs_plain": _pairs(later[chosen.label], later["plain"]),
            "later_goal": goal.to_dict(),
            "later_guard_due_share": None if due_share is None else round(due_share, 4),
            "period_shift": tuning.period_shift(plain_earlier, later["plain"]),
            "daemon_toml": fragment,
        }, indent=2))
        return
    earlier_jobs = sum(job.submit_s < split_at_s for job in workload.jobs)
    click.echo(f"{workload.name}: {len(workload.jobs):,} jobs; earlier part {earlier_jobs:,} jobs "
               f"(choice), later part {len(workload.jobs) - earlier_jobs:,} jobs (check); "
               f"{replicas} replicas, {scheduler}{f'({slurm_params})' if slurm_params else ''}")
    why = ("given with --guards" if given_guards_s else "1/4, 1/2, 1 and 2 times plain's p99 wait "
           "in the earlier part, and the default 24 h")
    click.echo(f"\nGuards tried: {', '.join(f'{g / 3600:g} h' for g in guards_s)} ({why}; plain's "
               f"p99 wait in the earlier part: {plain_earlier.mean('p99_wait_s') / 3600:.1f} h)"
               + (f"; and the xfactor rule at {', '.join(f'{x:g}' for x in factors)}, capped at 24 h"
                  if factors else "")
               + (f"; and the slack stage at {_slacks_text(slack_pairs)} of waiting, before the 24 h "
                  "guard" if slack_pairs else ""))
    click.echo(f"\nEarlier part, every setting tried (means over the replicas, 95% CI):")
    _table([by_label[s.label] for s in chooser], chosen.label)
    click.echo(f"\nchosen: {chosen.label} ({choice.rule})")
    click.echo("\nLater part, out of sample (the whole history replayed, the later jobs judged):")
    _table([later[s.label] for s in checked], chosen.label)
    for other in ([default] if default.label != chosen.label else []) + [plain, ave2]:
        click.echo(f"\n{chosen.label} against {other.label}, paired over the replicas:")
        for metric, difference in later[chosen.label].against(later[other.label]).items():
            click.echo(f"  {_NAMES[metric]}: {_difference(difference)}")
    p99 = later[chosen.label].against(later["plain"])["p99_wait_s"]
    p99_verdict = ("no worse than plain's" if p99.mean <= 0 else
                   f"WORSE than plain's ({p99.relative:+.1%}, "
                   + ("significantly)" if p99.significant else "within the noise)"))
    click.echo(f"\nOut of sample the longest wait is {goal.max_ratio:.2f}x plain's "
               f"({'within' if goal.kept[0] else 'OVER'} the "
               f"{tuning.MAX_WAIT_BOUND:g}x bound) and the p99 wait is {p99_verdict}.")
    click.echo(_goal_sentence(goal, ave2.label))
    if due_share is not None:
        click.echo(_due_sentence(due_share, chosen.spec))
    shift = tuning.period_shift(plain_earlier, later["plain"])
    if shift is not None:
        click.echo(shift)
    click.echo(f"\ndaemon.toml{f' (written to {fragment_path})' if fragment_path else ''}:\n")
    click.echo(fragment, nl=False)


def _due_sentence(share: float, spec) -> str:  # type: ignore[no-untyped-def]
    """How often the chosen guard was due out of sample, and what that has meant elsewhere."""
    from hpcpredict.sim.guard_due import MOSTLY_DUE

    guard = spec.guard
    waited = (f"{guard.wait_s / 3600:g} h" if guard.rule == "wait" else
              f"{guard.xfactor:g} - 1 times its request, at most {guard.wait_s / 3600:g} h")
    sentence = (f"The chosen guard was due {share:.0%} of the later period (the history as it is; "
                f"some job had waited {waited}).")
    if share >= MOSTLY_DUE:
        sentence += (f" Due {MOSTLY_DUE:.0%} of the time or more: every job is then planned on its "
                     "request, and on the loaded logs measured so the learned limits did no better "
                     "than AVE2's under the same guard (docs/results.md, \"Under a heavier load\").")
    return sentence


def _goal_sentence(goal, ave2_label: str) -> str:  # type: ignore[no-untyped-def]
    """The bound's price and the predictions' worth, out of sample, in the words an admin needs."""
    from hpcpredict.experiments.tune import AVEBSLD_BOUND

    difference = goal.against_ave2
    if goal.kept[3]:
        worth = "the learned predictions add to what the guard does"
    elif difference.significant:
        worth = "AVE2 under the same guard does better than the learned model"
    else:
        worth = "the learned predictions add nothing established to what the guard does"
    verdicts = " ".join("yes" if kept else "NO" for kept in goal.kept)
    return (f"The bound costs {goal.bsld_ratio - 1:+.1%} AVEbsld against the learner without a guard "
            f"({'within' if goal.kept[2] else 'OVER'} the {AVEBSLD_BOUND - 1:.0%} allowed); against "
            f"{ave2_label} its AVEbsld is {difference.relative:+.1%} (95% CI "
            f"{difference.relative_ci_low:+.1%} to {difference.relative_ci_high:+.1%}): {worth}.\n"
            f"Goal (longest wait, p99 wait, the bound's cost, against AVE2): {verdicts}.")


def _run(name, cells, store_url, executor, jobs, address, open_store, store_error):  # type: ignore[no-untyped-def]
    """Run the cells not stored yet, then read every cell's metrics back from the store."""
    try:
        store = open_store(store_url)
    except store_error as error:
        raise click.ClickException(str(error)) from None
    done = store.done_keys()
    todo = [cell for cell in cells if cell.key not in done]
    click.echo(f"{name}: {len(cells):,} replays, {len(cells) - len(todo):,} already stored "
               f"({store.url})", err=True)
    if todo:
        run_into_store(name, todo, store, done, executor=executor, jobs=jobs,
                       scheduler_address=address)
        store = open_store(store_url)
    try:
        frame = store.frame(cell.key for cell in cells)
    finally:
        store.close()
    return frame.set_index("key")


def _evidence(tuning, frame, cells, label):  # type: ignore[no-untyped-def]
    """One setting's metrics, replica by replica (cells are in replica order)."""
    keys = [cell.key for cell in cells if cell.label == label]
    return tuning.Evidence.of(label, {
        metric: [float(frame.at[key, f"m_{metric}"]) for key in keys] for metric in tuning.JUDGED})


def _value(metric: str, value: float) -> str:
    return f"{value / 3600:,.1f}" if metric in _HOURS else f"{value:,.2f}"


def _slacks_text(pairs: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    """``request - 2 h from 4 h, request - 1 h from 3 h``: the slack stages tried."""
    return ", ".join(f"request - {slack / 3600:g} h from {after / 3600:g} h" for slack, after in pairs)


def _table(rows, chosen_label: str) -> None:  # type: ignore[no-untyped-def]
    width = max(len(row.label) for row in rows) + 2
    click.echo(f"  {'setting':<{width}}" + "".join(f"{_NAMES[m]:>24}" for m in _NAMES))
    for row in rows:
        cells = []
        for metric in _NAMES:
            estimate = row.estimates[metric]
            cells.append(f"{_value(metric, estimate.mean)} ({_value(metric, estimate.ci_low)}-"
                         f"{_value(metric, estimate.ci_high)})")
        mark = "*" if row.label == chosen_label else " "
        click.echo(f"{mark} {row.label:<{width}}" + "".join(f"{cell:>24}" for cell in cells))


def _difference(difference: PairedDifference) -> str:
    verdict = ("significantly " + ("lower" if difference.ci_high < 0 else "higher")
               if difference.significant else "not significant")
    return (f"{difference.relative:+.1%} (95% CI {difference.relative_ci_low:+.1%} to "
            f"{difference.relative_ci_high:+.1%}), lower on {difference.wins} of {difference.n}: "
            f"{verdict}")


def _summary(evidence) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {metric: {**evidence.estimates[metric].to_dict(), "replicas": evidence.values[metric]}
            for metric in evidence.estimates}


def _pairs(chosen, other) -> dict[str, object] | None:  # type: ignore[no-untyped-def]
    if other is None:
        return None
    return {metric: difference.to_dict() for metric, difference in chosen.against(other).items()}
