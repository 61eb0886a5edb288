"""The ``hpcpredict`` command: thin click wrappers over the library (no logic of its own)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from tqdm import tqdm

from hpcpredict.cli_options import slurm_settings_options
from hpcpredict.learn import parse_loss
from hpcpredict.learn.predictor import FEATURE_SCALINGS
from hpcpredict.outputs import OutputPathError, check_output_dir, check_output_file
from hpcpredict.sim.corrections import CORRECTION_NAMES
from hpcpredict.sim.metrics import compute_metrics, metrics_table, replica_table
from hpcpredict.sim.replica_stats import describe_change
from hpcpredict.sim.output import write_jobs_csv, write_result_swf
from hpcpredict.sim.runner import (
    COMPARED_METRICS,
    PREDICTORS,
    SCHEDULER_NAMES,
    RunSpec,
    run,
    run_replicated,
)
from hpcpredict.sim.schedulers import DEFAULT_STARVATION_GUARD_S, parse_starvation_guard
from hpcpredict.sim.slurm_backfill import NAME as SLURM_BACKFILL
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S
from hpcpredict.swf import SwfFormatError
from hpcpredict.workload import Workload, WorkloadError, load_workload

BASELINE = RunSpec(scheduler="easy", predictor="requested", correction="requested")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hpcpredict")
def main() -> None:
    """Predict HPC job runtimes online and measure what it does to backfilling schedulers.

    Start with `hpcpredict info LOG.swf` to see a log, then `hpcpredict simulate LOG.swf` to
    replay it under EASY-SJBF with learned predictions and compare with plain EASY.
    """


# ---------------------------------------------------------------------------- shared options
_log_argument = click.argument(
    "log", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
)
_procs_option = click.option(
    "--procs",
    type=click.IntRange(min=1),
    default=None,
    help="Machine size in processors. Default: MaxProcs from the log's header. Jobs larger "
    "than a smaller machine are clamped to it (CEA-Curie: --procs 80640).",
)
_lenient_option = click.option(
    "--lenient",
    is_flag=True,
    help="Skip malformed job lines (counted and reported) instead of stopping at the first.",
)
_json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the results as JSON instead of tables."
)


def _show_progress() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


@contextmanager
def _bar(total: int, unit: str, description: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr fed with absolute counts; silent when stderr is not a terminal."""
    with tqdm(
        total=total,
        unit=unit,
        unit_scale=unit == "B",
        desc=description,
        disable=not _show_progress(),
        leave=False,
        file=sys.stderr,
    ) as bar:

        def update(done: int) -> None:
            bar.update(done - bar.n)

        yield update


def _load(log: Path, procs: int | None, lenient: bool) -> Workload:
    try:
        with _bar(log.stat().st_size, "B", f"reading {log.name}") as update:
            return load_workload(log, machine_procs=procs, lenient=lenient, progress=update)
    except (SwfFormatError, WorkloadError) as error:
        # --lenient skips a bad *line*: no help for a corrupt .gz or an empty file.
        hint = (" (--lenient skips bad lines)"
                if isinstance(error, SwfFormatError) and not lenient and error.skippable else "")
        raise click.ClickException(f"{error}{hint}") from None


def _check_dir(folder: Path, option: str) -> None:
    """An output folder checked before the long work (hpcpredict.outputs says why)."""
    try:
        check_output_dir(folder, what=option)
    except OutputPathError as error:
        raise click.ClickException(str(error)) from None


def _check_file(path: Path, option: str) -> None:
    """An output file checked before the long work (its folder must exist already)."""
    try:
        check_output_file(path, what=option)
    except OutputPathError as error:
        raise click.ClickException(str(error)) from None


def _workload_summary(workload: Workload) -> dict[str, object]:
    jobs = workload.jobs
    users = {job.request.user_id for job in jobs}
    span_s = jobs[-1].submit_s - jobs[0].submit_s if jobs else 0
    return {
        "log": workload.path,
        "jobs": len(jobs),
        "users": len(users),
        "span_days": round(span_s / 86400, 2),
        "max_procs_header": workload.header.max_procs,
        "machine_procs": workload.machine_procs,
        "skipped_lines": len(workload.skipped_lines),
    }


def _echo_skipped(workload: Workload) -> None:
    if workload.skipped_lines:
        first_line, reason = workload.skipped_lines[0]
        click.echo(
            f"skipped {len(workload.skipped_lines):,} malformed lines (--lenient); "
            f"first: line {first_line}: {reason}",
            err=True,
        )


# ---------------------------------------------------------------------------- info
@main.command()
@_log_argument
@_procs_option
@_lenient_option
@_json_option
def info(log: Path, procs: int | None, lenient: bool, as_json: bool) -> None:
    """Summarise an SWF LOG: jobs, users, span, machine size, and what cleaning did.

    Cleaning applies the reference's rules (docs/reproduction.md) and reports how many jobs
    each rule dropped or changed, so results stay comparable across tools.

    \b
    Examples:
      hpcpredict info swf/KTH-SP2-sample.swf
      hpcpredict info CEA-Curie-2011-2.1-cln.swf.gz --procs 80640 --json
    """
    workload = _load(log, procs, lenient)
    summary = _workload_summary(workload)
    header = workload.header
    summary["unix_start_time"] = header.unix_start_time
    summary["time_zone_string"] = header.time_zone_string
    if workload.jobs:
        requested = sum(job.requested_s for job in workload.jobs)
        summary["requested_over_run"] = round(requested / sum(job.run_s for job in workload.jobs), 3)
    if as_json:
        summary["cleaning"] = workload.cleaning.to_dict()
        summary["header"] = {key: list(values) for key, values in header.entries.items()}
        click.echo(json.dumps(summary, indent=2))
        return
    _echo_skipped(workload)
    for key, label in (
        ("log", "log"),
        ("jobs", "jobs (after cleaning)"),
        ("users", "users"),
        ("span_days", "submission span (days)"),
        ("max_procs_header", "MaxProcs (header)"),
        ("machine_procs", "machine procs simulated"),
        ("unix_start_time", "UnixStartTime"),
        ("time_zone_string", "TimeZoneString"),
        ("requested_over_run", "sum requested / sum run"),
    ):
        value = summary.get(key)
        shown = f"{value:,}" if isinstance(value, int) and key != "unix_start_time" else value
        click.echo(f"{label:<26}{shown if value is not None else '-'}")
    click.echo("\ncleaning (docs/method.md §10 rules, in order):")
    for line in workload.cleaning.lines():
        click.echo(f"  {line}")


# ---------------------------------------------------------------------------- simulate
_LOSS_HELP = (
    "Loss the learner minimises: 'eloss' (over=square,under=linear,weight=large_area) or "
    "'over=linear|square,under=linear|square,weight=W' with W one of constant, short_wide, "
    "long_narrow, small_area, large_area (20 losses in all)."
)


def _check_loss(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse a bad --loss at parse time, so the error names the option (and comes before any work)."""
    try:
        parse_loss(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx=ctx, param=param) from None
    return value


def _learning_options(command: Callable[..., None]) -> Callable[..., None]:
    """--loss, --eta, --lambda, --loss-unit, --negative: the learned predictor's constants (shared by several commands)."""
    for option in reversed(
        [
            click.option("--loss", default=RunSpec.loss, show_default=True, help=_LOSS_HELP,
                         callback=_check_loss),
            click.option(
                "--eta",
                type=float,
                default=RunSpec.eta,
                show_default=True,
                help="NAG learning rate of the learned predictor.",
            ),
            click.option(
                "--lambda",
                "l2",
                type=float,
                default=RunSpec.l2,
                show_default=True,
                help="l2 regularisation of the learned predictor.",
            ),
            click.option(
                "--loss-unit",
                "loss_unit_s",
                type=click.FloatRange(min=0, min_open=True),
                default=RunSpec.loss_unit_s,
                show_default=True,
                help="Seconds in the unit the loss measures errors in (squared branches are "
                "z^2/unit): 3600 measures in hours, 1 is the reference's seconds.",
            ),
            click.option(
                "--negative",
                type=click.Choice(["abs", "clip"]),
                default=RunSpec.negative,
                show_default=True,
                help="A negative model output becomes |f| (abs, as the reference) or 1 s (clip).",
            ),
            click.option(
                "--censor-at-limit/--no-censor-at-limit",
                "censor_at_limit",
                default=RunSpec.censor_at_limit,
                show_default=True,
                help="Learn a job that ran to its request (killed at its limit) as a lower bound: "
                "only the under-prediction branch of the loss, no step when the model already "
                "predicts the limit.",
            ),
            click.option(
                "--features",
                "feature_scaling",
                type=click.Choice(list(FEATURE_SCALINGS)),
                default=RunSpec.feature_scaling,
                show_default=True,
                help="raw: the 20 features of docs/method.md §2. robust: the break time as "
                "log(1 + s), and predictions made with every term clamped to the range learned "
                "from (no extrapolation for a user back after a long gap).",
            ),
            click.option(
                "--calibration-alpha",
                "calibration_alpha",
                type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
                default=None,
                help="Calibrated confidence: publish the model's answer scaled, per user (global "
                "fallback), so that this share of jobs outlive it (online conformal quantile of "
                "log(runtime/prediction)). Default: off, the model's answer as it is.",
            ),
            click.option(
                "--per-user-experts/--no-per-user-experts",
                "per_user_experts",
                default=RunSpec.per_user_experts,
                show_default=True,
                help="Publish, per user, the learned model's, AVE2's or the request, whichever "
                "had the lowest recent loss on that user's jobs (the model learns as usual).",
            ),
        ]
    ):
        command = option(command)
    return command


_scheduler_option = click.option(
    "--scheduler",
    type=click.Choice(list(SCHEDULER_NAMES)),
    default=RunSpec.scheduler,
    show_default=True,
    help="fcfs: strict arrival order. easy: FCFS with EASY backfilling (a job may jump ahead if it "
    "does not delay the head job's reservation). easy-sjbf: EASY, backfilling the shortest "
    "predicted jobs first. slurm-backfill: Slurm 22.05's sched/backfill (priority order, a "
    "reservation for every job tested, periodic passes; --slurm-params).",
)
_correction_option = click.option(
    "--correction",
    type=click.Choice(list(CORRECTION_NAMES)),
    default=RunSpec.correction,
    show_default=True,
    help="What happens when a job outlives its prediction (always capped at the request). "
    "requested: jump to the request. incremental: initial prediction + 1 min, then + 5 min, "
    "15 min, 30 min, 1 h, ... 100 h, then the request. doubling: twice the elapsed time. "
    "survival: the --survival-quantile of the user's recent runtimes given the elapsed time "
    "(Kaplan-Meier, running jobs censored), incremental for users with fewer than 5 ended jobs.",
)


@main.command()
@_log_argument
@_scheduler_option
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
@_correction_option
@_learning_options
@_procs_option
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
    "Default: 24h with a backfilling scheduler (docs/results.md); off disables it.",
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
@_lenient_option
@_json_option
def simulate(
    log: Path,
    scheduler: str,
    slurm_params: str,
    predictor: str,
    correction: str,
    loss: str,
    eta: float,
    l2: float,
    loss_unit_s: float,
    negative: str,
    censor_at_limit: bool,
    feature_scaling: str,
    calibration_alpha: float | None,
    per_user_experts: bool,
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
    lenient: bool,
    as_json: bool,
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
      hpcpredict simulate LOG.swf.gz --replicas 10          # means, CIs, paired wins
      hpcpredict simulate LOG.swf.gz --predictor ave2 --json
    """
    try:
        if starvation_guard is None:  # the default: on wherever a prediction can starve a job
            # (with requested times it changes nothing: plain EASY is already its rule; under
            # slurm-backfill it is the daemon's live guard, which only acts on lowered limits).
            guarded = scheduler != "fcfs" and predictor != "requested"
            starvation_guard_s = DEFAULT_STARVATION_GUARD_S if guarded else None
        else:
            starvation_guard_s = parse_starvation_guard(starvation_guard)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--starvation-guard") from None
    try:
        spec = RunSpec(
            scheduler, predictor, correction, loss, eta, l2, decide_on_correction, negative,  # type: ignore[arg-type]
            loss_unit_s, starvation_guard_s, censor_at_limit, feature_scaling, per_user_experts,
            slurm_params, survival_quantile, calibration_alpha,
        )
        # SLURM without hpcpredict is the baseline a SLURM site compares with
        baseline_spec = BASELINE if scheduler != SLURM_BACKFILL else RunSpec(
            scheduler, "requested", "requested", slurm_params=slurm_params
        )
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    for path, option in ((output, "--output"), (csv_path, "--csv")):
        if path is not None:
            _check_file(path, option)
    workload = _load(log, procs, lenient)
    if not workload.jobs:
        raise click.ClickException(f"{log}: no job left after cleaning (see `hpcpredict info`)")
    specs = [spec] + ([baseline_spec] if baseline and spec != baseline_spec else [])
    with _bar(len(workload.jobs) * len(specs) * replicas, "job", "simulating") as update:
        runs = run_replicated(
            workload, specs, replicas=replicas, shake_s=shake_s, seed=seed, progress=update
        )
    main_result = runs.unshaken[0]
    if output is not None:
        write_result_swf(output, main_result, notes=[f"hpcpredict simulate: {spec.label}"])
    if csv_path is not None:
        write_jobs_csv(csv_path, main_result, workload_name=workload.name)
    comparison = runs.compare(0, 1) if len(specs) > 1 else {}
    if as_json:
        payload = {
            **_workload_summary(workload),
            "cleaning": workload.cleaning.to_dict(),
            "replicas": replicas,
            "shake_s": shake_s,
            "seed": seed,
            "runs": [runs.to_dict(position) for position in range(len(specs))],
        }
        if comparison:
            payload["comparison"] = {
                "against": specs[1].label,
                **{metric: difference.to_dict() for metric, difference in comparison.items()},
            }
        click.echo(json.dumps(payload, indent=2))
        return
    _echo_skipped(workload)
    summary = _workload_summary(workload)
    click.echo(
        f"{workload.name}: {summary['jobs']:,} jobs, {summary['users']:,} users, "
        f"{summary['span_days']} days, {workload.machine_procs:,} processors"
    )
    for position, each in enumerate(specs):
        click.echo(f"  {'simulated' if position == 0 else 'baseline '}: {each.label} "
                   f"({sum(runs.wall_time_s[position]):.1f} s)")
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
        if replicas == 1:
            click.echo("  (one replay proves little: --replicas 10 gives confidence intervals)")
    for path in (output, csv_path):
        if path is not None:
            click.echo(f"wrote {path}" + (" (replica 0: the log as it is)" if replicas > 1 else ""))


# ---------------------------------------------------------------------------- predict-eval
EVALUATED_PREDICTORS = ("learned", "ave2", "requested")


@main.command("predict-eval")
@_log_argument
@_learning_options
@_scheduler_option
@slurm_settings_options
@_correction_option
@_procs_option
@click.option(
    "--plots",
    "plot_dir",
    type=click.Path(file_okay=False, writable=True, path_type=Path),
    default=None,
    help="Folder for the ECDF plots (PNG). Default: predict-eval-<log name>/ here.",
)
@click.option("--no-plots", is_flag=True, help="Only print the statistics.")
@_lenient_option
@_json_option
def predict_eval(
    log: Path,
    loss: str,
    eta: float,
    l2: float,
    loss_unit_s: float,
    negative: str,
    censor_at_limit: bool,
    feature_scaling: str,
    calibration_alpha: float | None,
    per_user_experts: bool,
    scheduler: str,
    slurm_params: str,
    correction: str,
    procs: int | None,
    plot_dir: Path | None,
    no_plots: bool,
    lenient: bool,
    as_json: bool,
) -> None:
    """How good are the learned predictions on LOG, against AVE2 and the users' requests.

    Each predictor is replayed in the same simulation (--scheduler, --correction), since the
    learned features see the simulated running jobs; the initial prediction each job got at
    submission is compared with its runtime: MAE, median absolute error, mean --loss, how often
    it under-predicts, and the AVEbsld it led to. Two ECDF plots (errors, predicted values)
    are written as PNG.
    """
    from hpcpredict.analysis import error_by_history, plot_ecdfs, prediction_stats

    try:
        specs = [
            RunSpec(scheduler, name, correction, loss, eta, l2, False, negative, loss_unit_s,  # type: ignore[arg-type]
                    censor_at_limit=censor_at_limit, feature_scaling=feature_scaling,
                    per_user_experts=per_user_experts, slurm_params=slurm_params,
                    calibration_alpha=calibration_alpha)
            for name in EVALUATED_PREDICTORS
        ]
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    if plot_dir is not None and not no_plots:
        _check_dir(plot_dir, "--plots")
    workload = _load(log, procs, lenient)
    if not workload.jobs:
        raise click.ClickException(f"{log}: no job left after cleaning (see `hpcpredict info`)")
    if plot_dir is None and not no_plots:
        _check_dir(Path(f"predict-eval-{workload.name}"), "--plots")
    results = []
    for spec in specs:
        with _bar(len(workload.jobs), "job", spec.label) as update:
            results.append(run(workload, spec, progress=update))
    scored_loss = dataclasses.replace(parse_loss(loss), unit_s=loss_unit_s)  # as it was learned
    stats = [prediction_stats(result, scored_loss) for result in results]
    ave_bsld = [compute_metrics(result).ave_bsld for result in results]
    by_history = [error_by_history(result) for result in results]
    names = [spec.label.split(" + ")[1] for spec in specs]
    pngs: list[Path] = []
    if not no_plots:
        target = plot_dir if plot_dir is not None else Path(f"predict-eval-{workload.name}")
        pngs = plot_ecdfs(list(zip(names, results)), target, workload.name)
    if as_json:
        payload = {
            **_workload_summary(workload),
            "scheduler": scheduler,
            "correction": correction,
            "loss": loss,
            "predictors": {
                name: {**stat.to_dict(), "ave_bsld": bsld,
                       "by_history": [bucket.to_dict() for bucket in buckets]}
                for name, stat, bsld, buckets in zip(names, stats, ave_bsld, by_history)
            },
            "plots": [str(png) for png in pngs],
        }
        click.echo(json.dumps(payload, indent=2))
        return
    _echo_skipped(workload)
    click.echo(f"{workload.name}: {len(workload.jobs):,} jobs, {scheduler} + {correction}, "
               f"loss {loss}")
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


# ---------------------------------------------------------------------------- campaigns
_campaign_argument = click.argument(
    "campaign_file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
_db_option = click.option(
    "--db",
    "database_url",
    default=None,
    help="SQLAlchemy URL of the result store. Default: sqlite:///<campaign file>.sqlite.",
)


_logs_option = click.option(
    "--logs", "logs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the campaign's logs: each log is read from it by the file name its "
    "[[logs]] entry gives, instead of the path relative to the campaign file.",
)


def _load_campaign(campaign_file: Path, logs_dir: Path | None = None):  # -> Campaign (lazy import: SQLAlchemy is heavy)
    from hpcpredict.sim.campaign import CampaignError, load_campaign

    try:
        return load_campaign(campaign_file, logs_dir=logs_dir)
    except CampaignError as error:
        raise click.ClickException(str(error)) from None


@main.command()
@_campaign_argument
@click.option(
    "--jobs", "-j", type=click.IntRange(min=1), default=None,
    help="Simulations run at once. Default: one per core (local) or per Dask worker.",
)
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
    help="local: processes on this machine. dask: a Dask cluster (--scheduler-address) or, "
    "without an address, a LocalCluster of --jobs workers.",
)
@click.option("--scheduler-address", default=None, help="Dask scheduler, e.g. tcp://host:8786.")
@_db_option
@_logs_option
@click.option("--dry-run", is_flag=True, help="Only say how many runs are done and to do.")
def campaign(
    campaign_file: Path,
    jobs: int | None,
    executor: str,
    scheduler_address: str | None,
    database_url: str | None,
    logs_dir: Path | None,
    dry_run: bool,
) -> None:
    """Run every simulation of CAMPAIGN_FILE (TOML, see sim/) that is not stored yet.

    Results go to a database as each run finishes, so an interrupted campaign resumes where it
    stopped and never recomputes a finished run. Logs are read where the file says, or from
    --logs DIR. With `replicas = N` in the file every configuration runs on N shaken replicas
    of each log (docs/evaluation.md).

    \b
    Examples:
      hpcpredict campaign sim/smoke.toml
      hpcpredict campaign sim/paper.toml --logs /data/swf -j 2
      hpcpredict campaign sim/paper.toml --executor dask --scheduler-address tcp://head:8786
    """
    from hpcpredict.sim.campaign import execute
    from hpcpredict.sim.campaign_store import StoreError, open_store

    if executor == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise click.ClickException(
                "--executor dask needs Dask: pip install 'hpcpredict[dask]'"
            ) from None
    definition = _load_campaign(campaign_file, logs_dir)
    missing = [log.path for log in definition.logs if not Path(log.path).is_file()]
    if missing:
        hint = "" if logs_dir else " (give the folder holding the logs with --logs DIR)"
        raise click.ClickException(f"{campaign_file}: log not found: {', '.join(missing)}{hint}")
    try:
        store = open_store(database_url or definition.default_database_url)
    except StoreError as error:
        raise click.ClickException(str(error)) from None
    done = store.done_keys()
    todo = [cell for cell in definition.cells if cell.key not in done]
    click.echo(
        f"{definition.name}: {len(definition.cells):,} runs, {len(definition.cells) - len(todo):,} "
        f"already stored, {len(todo):,} to run ({store.url})",
        err=True,
    )
    if dry_run or not todo:
        store.close()
        return
    started = time.perf_counter()
    with tqdm(total=len(todo), unit="run", desc=definition.name, file=sys.stderr,
              disable=not _show_progress()) as bar:

        def on_result(cell, result) -> None:  # type: ignore[no-untyped-def]
            store.add(definition.name, cell, result)
            bar.update(1)

        try:
            execute(todo, executor=executor, jobs=jobs, scheduler_address=scheduler_address,
                    on_result=on_result)
        finally:
            store.close()
    click.echo(f"{len(todo):,} runs in {time.perf_counter() - started:.0f} s", err=True)


@main.command("campaign-report")
@_campaign_argument
@_db_option
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder for report.md, the CSV tables and the PNG plots. Default: "
    "sim/results/<campaign name>/ next to the campaign file.",
)
@click.option(
    "--pair-with", "pair_with", multiple=True, metavar="LABEL",
    help="Also pair every configuration with this one (a label of the campaign file), replica by "
    "replica, as with EASY++ (replicas_vs_<label>.csv). Repeatable.",
)
def campaign_report(
    campaign_file: Path, database_url: str | None, out_dir: Path | None, pair_with: tuple[str, ...]
) -> None:
    """Tables, leave-one-log-out selection, correlations and plots of a campaign's stored runs.

    Works on a partial campaign too (only the stored runs are reported); leave-one-log-out uses
    the triples stored on every log. With replicas, every figure is a mean over the replicas and
    each configuration is paired with EASY++ (CI, wins, sign test; replicas.csv).

    \b
    Examples:
      hpcpredict campaign-report sim/headline.toml
      hpcpredict campaign-report sim/paper.toml --out /tmp/paper-report
      hpcpredict campaign-report sim/censoring.toml --pair-with "learned default"
    """
    from hpcpredict.sim.campaign_report import write_campaign_report
    from hpcpredict.sim.campaign_store import StoreError, open_store, store_file

    definition = _load_campaign(campaign_file)
    url = database_url or definition.default_database_url
    file = store_file(url)
    if file is not None and not file.is_file():
        raise click.ClickException(f"{campaign_file}: never run (no {file}); "
                                   "run `hpcpredict campaign` first")
    if out_dir is not None:
        _check_dir(out_dir, "--out")
    labels = {cell.key: cell.label for cell in definition.cells}
    unknown = sorted(set(pair_with) - set(labels.values()))
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: not a label of {campaign_file}",
                                 param_hint="--pair-with")
    try:
        store = open_store(url)
    except StoreError as error:
        raise click.ClickException(str(error)) from None
    try:
        runs = store.frame(cell.key for cell in definition.cells)
    finally:
        store.close()
    if runs.empty:
        raise click.ClickException(f"{campaign_file}: no stored run yet (run `hpcpredict campaign`)")
    # A run is named as this campaign names it, not as the campaign that first stored it did
    # (runs are shared by key across campaigns of one database).
    runs["label"] = runs["key"].map(labels)
    target = out_dir or definition.path.parent / "results" / definition.name
    paths = write_campaign_report(runs, target, f"Campaign {definition.name}", pair_with=pair_with)
    click.echo(f"{len(runs):,} of {len(definition.cells):,} runs reported")
    for path in paths:
        click.echo(f"wrote {path}")


# ---------------------------------------------------------------------------- the daemon
from hpcpredict.cli_daemon import errors, report, serve, slurm_convert, train  # noqa: E402
from hpcpredict.cli_replay import replay_compare, replay_slurm  # noqa: E402

for _command in (serve, train, errors, report, slurm_convert, replay_slurm, replay_compare):
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    main()
