"""``hpcpredict simulate`` and ``hpcpredict predict-eval``: a log replayed through a scheduler,
and the learned predictions it gave judged against AVE2's and the requests' (thin over hpcpredict.sim)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcpredict.cli.common import (
    check_dir,
    check_file,
    echo_skipped,
    load_log,
    progress_bar,
    require_jobs,
    workload_summary,
)
from hpcpredict.cli.options import (
    LearnerSettings,
    correction_option,
    format_option,
    learning_options,
    lenient_option,
    log_argument,
    procs_option,
    scheduler_option,
    slurm_settings_options,
)
from hpcpredict.corrections.starvation import (
    DEFAULT_STARVATION_GUARD_S, GuardSettings, default_starvation_guard_s, parse_starvation_guard,
)
from hpcpredict.learn.losses import parse_loss
from hpcpredict.sim.load_scaling import MAX_LOAD_FACTOR, scaled_load
from hpcpredict.sim.replica_stats import describe_change, tail_warning
from hpcpredict.sim.runner import COMPARED_METRICS, PREDICTORS, RunSpec, run, run_replicated
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S
from hpcpredict.sim.slurm_model.slurm_params import NAME as SLURM_BACKFILL

if TYPE_CHECKING:  # the simulator loads when a replay runs, not for --help
    from hpcpredict.sim.easy.simulation import SimulationResult

BASELINE = RunSpec(scheduler="easy", predictor="requested", correction="requested")


@click.command()
@log_argument
@scheduler_option
@slurm_settings_options
@click.option(
    "--predictor",
    type=click.Choice(list(PREDICTORS)),
    default=RunSpec.predictor,
    show_default=True,
    help="Runtime the scheduler plans with. requested: the user's time limit. clairvoyant: the "
    "true runtime (the unreachable best). ave2: mean of the user's last two runtimes. learned: "
    "the online polynomial model trained with --loss.",
)
@correction_option()
@learning_options
@procs_option()
@click.option(
    "--baseline/--no-baseline",
    default=True,
    show_default=True,
    help="Also replay plain EASY with requested times (plain slurm-backfill with --scheduler "
    "slurm-backfill) and show the change against it.",
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the per-job outcome as SWF (wait, run, procs; prediction, corrections in the "
    "last fields); '.gz' compresses.",
)
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the per-job outcome as an evalys-style jobs CSV.",
)
@click.option(
    "--survival-quantile",
    "survival_quantile",
    type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
    default=RunSpec.survival_quantile,
    show_default=True,
    help="With --correction survival: extend a job that outlives its prediction to this quantile "
    "of its user's runtime given the time it has run.",
)
@click.option(
    "--decide-on-correction",
    is_flag=True,
    help="Re-plan as soon as a prediction is corrected (the reference waits for the next event).",
)
@click.option(
    "--starvation-guard",
    "starvation_guard",
    default=None,
    metavar="DURATION|off",
    help="Once the head job has waited this long (24h, 90m, seconds), plan its reservation and "
    "backfill around it with the users' requested times (plain EASY's rule), and keep the jobs "
    "then running at their requests, as the daemon does live; its start cannot slide any more. "
    "Default: 24h for --predictor learned (hpcpredict's default, as the daemon runs it; "
    "docs/results.md); off for the published baselines (requested, ave2, clairvoyant: EASY, "
    "EASY-SJBF, EASY++ and the clairvoyant schedulers are unbounded as published, "
    "docs/reproduction.md; give a duration for their bounded variant, e.g. 'EASY++ (guard 24 h)').",
)
@click.option(
    "--replicas",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Replay on N shaken copies of the log (replica 0 is the log itself; docs/evaluation.md) "
    "and report means, 95%% confidence intervals and paired differences against the baseline. "
    "Backfilling is chaotic: judge a difference on 10 or more.",
)
@click.option(
    "--shake",
    "shake_s",
    type=click.IntRange(min=0),
    default=DEFAULT_SHAKE_S,
    show_default=True,
    help="Seconds: each replica moves every submission by a uniform offset in [-SHAKE, +SHAKE].",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=DEFAULT_SEED,
    show_default=True,
    help="Seed of the shaken replicas (the same seed gives the same replicas).",
)
@click.option(
    "--load",
    "load",
    type=click.FloatRange(min=0, max=MAX_LOAD_FACTOR, min_open=True),
    default=1.0,
    show_default=True,
    help="Replay the log under a heavier load: every gap between submissions divided by LOAD "
    "(1.2: jobs arriving 1.2 times as fast; below 1 lighter), jobs and runtimes unchanged. A "
    "stress test of the starvation guard and the predictions, not a forecast (docs/evaluation.md).",
)
@click.option(
    "--jobs", "-j", "jobs", type=click.IntRange(min=1), default=None,
    help="Replays run at once, in processes that share the log read once (the run and its "
    "baseline, the replicas). Default: one per core this process may use.",
)
@lenient_option
@format_option()
def simulate(
    log: Path,
    scheduler: str,
    slurm_params: str,
    predictor: str,
    correction: str,
    learning: LearnerSettings,
    procs: int | None,
    baseline: bool,
    output: Path | None,
    csv_path: Path | None,
    survival_quantile: float,
    decide_on_correction: bool,
    starvation_guard: str | None,
    replicas: int,
    shake_s: int,
    seed: int,
    load: float,
    jobs: int | None,
    lenient: bool,
    output_format: str,
) -> None:
    """Replay an SWF LOG through a backfilling scheduler and report AVEbsld and friends.

    The defaults answer "what would runtime prediction do on this cluster": EASY-SJBF with the
    learned predictor, incremental corrections and the 24 h starvation guard (the daemon's
    defaults), next to plain EASY on the users' requests.
    Waits are reported beside AVEbsld (mean, p99, max): short predictions can lower the average
    while a few jobs wait far longer.

    \b
    Examples:
      hpcpredict simulate swf/KTH-SP2-sample.swf
      hpcpredict simulate swf/KTH-SP2-sample.swf --replicas 10      # means, CIs, paired wins
      hpcpredict simulate swf/KTH-SP2-sample.swf --predictor ave2 --format json
      hpcpredict simulate swf/KTH-SP2-sample.swf --l2 0 --loss-unit-s 1 --feature-scaling robust
      hpcpredict simulate swf/KTH-SP2-sample.swf --scheduler slurm-backfill \\
          --slurm-params bf_interval=10 --output /tmp/kth.swf.gz --csv /tmp/kth-jobs.csv
    """
    from hpcpredict.sim.metrics import metrics_table, replica_table  # the simulator: not for --help
    from hpcpredict.sim.output import write_jobs_csv, write_result_swf

    guard = guard_option(starvation_guard, scheduler, predictor)
    try:
        spec = RunSpec(
            scheduler, predictor, correction, decide_on_correction=decide_on_correction,
            guard=guard, slurm_params=slurm_params,
            survival_quantile=survival_quantile, learner=learning,
        )
        # SLURM without hpcpredict is the baseline a SLURM site compares with
        baseline_spec = BASELINE if scheduler != SLURM_BACKFILL else RunSpec(
            scheduler, "requested", "requested", slurm_params=slurm_params
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    for path, option in ((output, "--output"), (csv_path, "--csv")):
        if path is not None:
            check_file(path, option)
    workload = scaled_load(load_log(log, procs, lenient), load)
    require_jobs(workload, log)
    specs = [spec] + ([baseline_spec] if baseline and spec != baseline_spec else [])
    with progress_bar(len(workload.jobs) * len(specs) * replicas, "job", "simulating") as update:
        runs = run_replicated(
            workload, specs, replicas=replicas, shake_s=shake_s, seed=seed, progress=update,
            jobs=jobs if jobs is not None else _usable_cores(),
        )
    main_result = runs.unshaken[0]
    if output is not None:
        write_result_swf(output, main_result, notes=[f"hpcpredict simulate: {spec.label}"])
    if csv_path is not None:
        write_jobs_csv(csv_path, main_result, workload_name=workload.name)
    comparison = runs.compare(0, 1) if len(specs) > 1 else {}
    from hpcpredict.sim.guard_due import MOSTLY_DUE, guard_due_share

    due_share = guard_due_share(main_result, spec)  # simulate's guard: the wait rule
    if output_format == "json":
        payload = {
            **workload_summary(workload),
            "cleaning": workload.cleaning.to_dict(),
            "replicas": replicas,
            "shake_s": shake_s,
            "seed": seed,
            "load": load,
            **({} if due_share is None else {"guard_due_share": round(due_share, 4)}),
            "runs": [runs.to_dict(position) for position in range(len(specs))],
        }
        if comparison:
            payload["comparison"] = {
                "against": specs[1].label,
                **{metric: difference.to_dict() for metric, difference in comparison.items()},
            }
        click.echo(json.dumps(payload, indent=2))
        return
    echo_skipped(workload)
    summary = workload_summary(workload)
    click.echo(
        f"{workload.name}: {summary['jobs']:,} jobs, {summary['users']:,} users, "
        f"{summary['span_days']} days, {workload.machine_procs:,} processors"
        + (f"; under {load:g}x its load (gaps between submissions divided by {load:g})"
           if load != 1.0 else "")
    )
    for position, each in enumerate(specs):
        click.echo(f"  {'simulated' if position == 0 else 'baseline '}: {spec_title(each)} "
                   f"({sum(runs.wall_time_s[position]):.1f} s, {loop_words(runs.unshaken[position])})")
    click.echo(f"  starvation guard: {guard_sentence(spec, starvation_guard is None)}")
    if due_share is not None:
        click.echo(f"    due {due_share:.0%} of the time (some job had waited "
                   f"{spec.guard.wait_s / 3600:g} h)" + ("; replica 0" if replicas > 1 else ""))
        if due_share >= MOSTLY_DUE:
            click.echo(f"    due {MOSTLY_DUE:.0%} of the time or more: on the logs measured so, the "
                       "learned limits did no better than AVE2's under the same guard "
                       "(docs/results.md, \"Under a heavier load\")")
    plain = "SLURM" if scheduler == SLURM_BACKFILL else "EASY"
    titles = ["simulated"] + ([f"{plain} baseline"] if len(specs) > 1 else [])
    click.echo("")
    if replicas == 1:
        for line in metrics_table(list(zip(titles, (m[0] for m in runs.metrics)))):
            click.echo(line)
    else:
        click.echo(f"means over {replicas} replicas (shake +-{shake_s} s, seed {seed}), "
                   "+- the 95% CI half-width:")
        for line in replica_table(titles, runs.metrics):
            click.echo(line)
    if comparison:
        click.echo(f"\nChange against {plain} with the users' requested times:")
        for metric, difference in comparison.items():
            click.echo(f"  {describe_change(COMPARED_METRICS[metric], difference)}")
        warning = tail_warning(comparison["ave_bsld"], {
            COMPARED_METRICS[metric]: comparison[metric] for metric in ("p99_wait_s", "max_wait_s")},
            tail_advice(None if spec.guard is None else spec.guard.wait_s))
        if warning:
            click.echo(f"\n{warning}")
        if replicas == 1:
            click.echo("  (one replay proves little: --replicas 10 gives confidence intervals)")
    for path in (output, csv_path):
        if path is not None:
            click.echo(f"wrote {path}" + (" (replica 0: the log as it is)" if replicas > 1 else ""))


def tail_advice(guard_s: int | None) -> str:
    """What to do when the average improves and the tail worsens: turn a guard on, or, when one
    was on, tune it on the site's own history."""
    if guard_s is None:
        return (f"Turn a starvation guard on (--starvation-guard "
                f"{DEFAULT_STARVATION_GUARD_S // 3600}h, hpcpredict's default for the learned "
                "predictor), or choose one with `hpcpredict tune` (docs/tune.md).")
    return (f"This is with a {guard_s / 3600:g} h starvation guard on: `hpcpredict tune` chooses the "
            "bound and correction on your own history and checks the choice on a later part of it "
            "(docs/tune.md).")


def guard_option(starvation_guard: str | None, scheduler: str, predictor: str) -> GuardSettings | None:
    """--starvation-guard as given, or the default for this scheduler and predictor
    (`default_starvation_guard_s`: bounded for hpcpredict's learned default, unbounded for the
    published baselines)."""
    if starvation_guard is None:
        wait_s = default_starvation_guard_s(scheduler, predictor)
    else:
        try:
            wait_s = parse_starvation_guard(starvation_guard)
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--starvation-guard") from None
    return None if wait_s is None else GuardSettings(wait_s)


def loop_words(result: SimulationResult) -> str:
    """Which event loop replayed a configuration, and why the Python one when it did."""
    if result.loop == "compiled":
        return "compiled loop"
    return "Python loop" + (f": {result.loop_reason}" if result.loop_reason else "")


def spec_title(spec: RunSpec) -> str:
    """The configuration's label, after its published name when it has one
    (``EASY++ (guard 24 h) = easy-sjbf + ave2 + incremental + guard 24 h``)."""
    name = spec.published_name
    return spec.label if name is None else f"{name} = {spec.label}"


def guard_sentence(spec: RunSpec, defaulted: bool) -> str:
    """Which starvation guard a replay ran, and why, in one line."""
    if spec.guard is None:
        if spec.scheduler == "fcfs":
            return "none (FCFS does not backfill)"
        if defaulted and spec.predictor == "requested":
            return "off (with the users' requested times it would change nothing)"
        why = ("the published baselines are replayed unbounded, as published"
               if defaulted else "--starvation-guard off")
        return f"off ({why}; --starvation-guard 24h runs the bounded variant)"
    hours = f"{spec.guard.wait_s / 3600:g} h"
    why = "hpcpredict's default for the learned predictor" if defaulted else "--starvation-guard"
    return f"{hours} ({why}; --starvation-guard off runs it unbounded)"


def _usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform says), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


# ---------------------------------------------------------------------------- predict-eval
EVALUATED_PREDICTORS = ("learned", "ave2", "requested")


@click.command("predict-eval")
@log_argument
@learning_options
@scheduler_option
@slurm_settings_options
@correction_option()
@procs_option()
@click.option(
    "--plots",
    "plot_dir",
    type=click.Path(file_okay=False, writable=True, path_type=Path),
    default=None,
    help="Folder for the ECDF plots (PNG). Default: predict-eval-<log name>/ here.",
)
@click.option("--no-plots", is_flag=True, help="Only print the statistics.")
@click.option(
    "--starvation-guard",
    "starvation_guard",
    default=None,
    metavar="DURATION|off",
    help="The starvation guard every predictor is replayed under (simulate --starvation-guard "
    "says what it does), so that they are compared under the same bound. Default: the learned "
    "predictor's (24h, what simulate and the daemon run); off replays them unbounded (AVE2 is "
    "then EASY++'s predictor as published).",
)
@lenient_option
@format_option()
def predict_eval(
    log: Path,
    learning: LearnerSettings,
    scheduler: str,
    slurm_params: str,
    correction: str,
    procs: int | None,
    plot_dir: Path | None,
    no_plots: bool,
    starvation_guard: str | None,
    lenient: bool,
    output_format: str,
) -> None:
    """How good are the learned predictions on LOG, against AVE2 and the users' requests.

    Each predictor is replayed in the same simulation (--scheduler, --correction), since the
    learned features see the simulated running jobs; the initial prediction each job got at
    submission is compared with its runtime: MAE, median absolute error, mean --loss, how often
    it under-predicts, and the AVEbsld it led to. Every predictor runs under the same
    starvation guard (--starvation-guard; the output says which). Two ECDF plots (errors,
    predicted values) are written as PNG.

    \b
    Examples:
      hpcpredict predict-eval swf/KTH-SP2-sample.swf --no-plots
      hpcpredict predict-eval swf/KTH-SP2-sample.swf --feature-scaling robust --plots /tmp/kth-plots
      hpcpredict predict-eval swf/KTH-SP2-sample.swf --scheduler easy --no-plots --format json
    """
    from hpcpredict.sim.analysis import error_by_history, plot_ecdfs, prediction_stats
    from hpcpredict.sim.metrics import compute_metrics

    guard = guard_option(starvation_guard, scheduler, "learned")
    try:
        specs = [
            RunSpec(scheduler, name, correction, slurm_params=slurm_params,
                    guard=guard, learner=learning)
            for name in EVALUATED_PREDICTORS
        ]
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if plot_dir is not None and not no_plots:
        check_dir(plot_dir, "--plots")
    workload = load_log(log, procs, lenient)
    require_jobs(workload, log)
    if plot_dir is None and not no_plots:
        check_dir(Path(f"predict-eval-{workload.name}"), "--plots")
    results = []
    for spec in specs:
        with progress_bar(len(workload.jobs), "job", spec.label) as update:
            results.append(run(workload, spec, progress=update))
    loss, loss_unit_s = learning.loss, learning.loss_unit_s
    scored_loss = dataclasses.replace(parse_loss(loss), unit_s=loss_unit_s)  # as it was learned
    stats = [prediction_stats(result, scored_loss) for result in results]
    ave_bsld = [compute_metrics(result).ave_bsld for result in results]
    by_history = [error_by_history(result) for result in results]
    names = [spec.label.split(" + ")[1] for spec in specs]
    pngs: list[Path] = []
    if not no_plots:
        target = plot_dir if plot_dir is not None else Path(f"predict-eval-{workload.name}")
        pngs = plot_ecdfs(list(zip(names, results)), target, workload.name)
    if output_format == "json":
        payload = {
            **workload_summary(workload),
            "scheduler": scheduler,
            "correction": correction,
            "loss": loss,
            "starvation_guard_s": None if guard is None else guard.wait_s,
            "predictors": {
                name: {**stat.to_dict(), "ave_bsld": bsld,
                       "by_history": [bucket.to_dict() for bucket in buckets]}
                for name, stat, bsld, buckets in zip(names, stats, ave_bsld, by_history)
            },
            "plots": [str(png) for png in pngs],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    echo_skipped(workload)
    click.echo(f"{workload.name}: {len(workload.jobs):,} jobs, {scheduler} + {correction}, "
               f"loss {loss}")
    click.echo(f"starvation guard, every predictor: "
               f"{guard_sentence(specs[0], starvation_guard is None)}")
    rows = (
        ("MAE (s)", lambda st: f"{st.mae_s:,.0f}"),
        ("median |error| (s)", lambda st: f"{st.median_abs_error_s:,.0f}"),
        (f"mean loss ({loss}, unit {loss_unit_s:g} s)", lambda st: f"{st.mean_loss:.3g}"),
        ("under-predicted", lambda st: f"{st.under_prediction_rate:.1%}"),
        ("exact", lambda st: f"{st.exact_rate:.1%}"),
        ("mean predicted/run", lambda st: f"{st.mean_prediction_over_run:.2f}"),
        ("median prediction (s)", lambda st: f"{st.median_prediction_s:,.0f}"),
        ("predictions of 1 s", lambda st: f"{st.one_second_rate:.1%}"),
    )
    widths = [max(len(name), 12) for name in names]
    label_width = max(len(label) for label, _ in rows)
    click.echo(" " * label_width + "".join(f"  {n:>{w}}" for n, w in zip(names, widths)))
    for label, cell in rows:
        click.echo(f"{label:<{label_width}}" + "".join(
            f"  {cell(st):>{w}}" for st, w in zip(stats, widths)))
    click.echo(f"{'AVEbsld':<{label_width}}" + "".join(
        f"  {b:>{w}.2f}" for b, w in zip(ave_bsld, widths)))
    click.echo("\nBy the user's history at submission (their jobs ended before it; the job "
               f"counts are {names[0]}'s schedule's, each predictor's own decides its buckets):")
    buckets = [bucket.bucket for bucket in by_history[0]]
    bucket_width = max(len(b) for b in buckets) + 2
    for title, cell_of in (
        ("MAE (s)", lambda b: f"{b.mae_s:,.0f}"),
        ("under-predicted", lambda b: f"{b.under_prediction_rate:.1%}"),
        ("prediction = request", lambda b: f"{b.at_request_rate:.1%}"),
    ):
        click.echo(f"{title:<{bucket_width + 8}}" + "".join(
            f"  {n:>{w}}" for n, w in zip(names, widths)))
        for row, bucket in enumerate(buckets):
            jobs = f"{by_history[0][row].jobs:,}"
            click.echo(f"  {bucket:<{bucket_width - 2}}{jobs:>8}" + "".join(
                f"  {cell_of(stats_[row]) if stats_[row].jobs else '-':>{w}}"
                for stats_, w in zip(by_history, widths)))
    for png in pngs:
        click.echo(f"wrote {png}")
