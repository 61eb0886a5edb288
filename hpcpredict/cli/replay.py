"""``hpcpredict replay-slurm`` and ``hpcpredict replay-compare``: a log on a real SLURM, and the
simulator's slurm-backfill against what SLURM did (docs/slurm-replay.md). Thin."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click

from hpcpredict.cli.common import check_file, load_log
from hpcpredict.cli.options import (
    correction_option,
    deprecated_alias,
    format_option,
    procs_option,
    slurm_settings_options,
)
from hpcpredict.slurm.adapter import Runner

DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")


def _slurm_conf() -> Path:
    return Path(os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF)


def _machine_cpus(runner: Runner) -> int:
    """The partition's CPUs, from ``sinfo -h -o %C`` (allocated/idle/other/total)."""
    from hpcpredict.slurm.adapter import SlurmError

    try:
        done = runner(["sinfo", "-h", "-o", "%C"], 30.0)
    except SlurmError as error:
        raise click.ClickException(str(error)) from None
    totals = [int(line.split("/")[-1]) for line in done.stdout.split() if re.fullmatch(r"\d+/\d+/\d+/\d+", line)]
    if not totals:
        raise click.ClickException(f"sinfo -o %C: cannot read the CPU count from {done.stdout!r}")
    return max(totals)


_POLL_TYPE = click.FloatRange(min=0.2)


@click.command("replay-slurm")
@click.argument("log", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--jobs", "job_count", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many jobs of the cleaned log to replay.")
@click.option("--skip", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start at this job of the cleaned log (0: the first).")
@click.option("--speedup", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="Divide every time of the log by this: submit offsets, runtimes, requests (then "
              "rounded up to whole minutes, SLURM's unit; see the printed rounding report).")
@click.option("--mode", type=click.Choice(["record", "lower"]), default=None,
              help="Set the plugin's mode first (hpcpredict_slurm.conf beside slurm.conf). "
              "Default: leave it as configured.")
@procs_option("Processors of the machine replayed on. Default: the partition's CPUs (sinfo). "
              "Wider log machines have their jobs scaled down to it.")
@click.option("--log-procs", type=click.IntRange(min=1), default=None,
              help="The log's machine size (default: its MaxProcs header).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="SWF file for what SLURM did (measure it with replay-compare or simulate).")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also one CSV line per job: log and SLURM ids, limits, the plugin's prediction.")
@click.option("--poll-s", "poll_s", type=_POLL_TYPE, default=5.0, show_default=True,
              help="Seconds between two readings of squeue --json (keep it below MinJobAge).")
@deprecated_alias("--poll", "--poll-s", "poll_s", type=_POLL_TYPE)
@click.option("--users", type=click.Choice(["log", "self"]), default="log", show_default=True,
              help="log: submit each job as its log user (root creates the missing accounts hpr<U>, "
              "uid 30000+U, and submits with sbatch --uid/--gid; the SWF keeps the log's user ids), "
              "so the daemon learns each user as a site's would. self: every job as you (one user).")
def replay_slurm(log: Path, job_count: int, skip: int, speedup: float, mode: str | None,
                 procs: int | None, log_procs: int | None, output: Path, csv_path: Path | None,
                 poll_s: float, users: str) -> None:
    """Replay a slice of an SWF LOG on the running SLURM as sleep jobs; write what SLURM did as SWF.

    Each job is submitted at its scaled submit time with `sbatch -n PROCS -t LIMIT --wrap "sleep
    RUN"` (SLURM_CONF and the Slurm commands from the environment), as its log user by default
    (--users; needs root).
    The plugin and the daemon act as they are configured (--mode sets the mode). Then
    `hpcpredict replay-compare OUTPUT` measures it and sets it beside the simulator's
    slurm-backfill on the same jobs.

    \b
    Examples (docs/slurm-replay.md):
      hpcpredict replay-slurm swf/KTH-SP2-sample.swf --jobs 200 --skip 1000 --speedup 10 \\
          --mode record -o /tmp/record.swf
      hpcpredict replay-slurm swf/KTH-SP2-sample.swf --jobs 50 --mode lower -o /tmp/lower.swf --csv /tmp/lower.csv
    """
    from hpcpredict.experiments import slurm_replay
    from hpcpredict.slurm.adapter import CliBackend, SlurmError, run_command
    from hpcpredict.logs.swf import write_swf

    check_file(output, "-o/--output")
    if csv_path is not None:
        check_file(csv_path, "--csv")
    workload = load_log(log, log_procs, False)
    machine = procs if procs is not None else _machine_cpus(run_command)
    scaling = slurm_replay.Scaling(speedup, workload.machine_procs, machine)
    try:
        planned = slurm_replay.plan(workload, jobs=job_count, skip=skip, scaling=scaling)
    except slurm_replay.ReplayError as error:
        raise click.ClickException(str(error)) from None
    if users == "log":
        try:
            gid, created = slurm_replay.ensure_log_users(planned)
        except slurm_replay.ReplayError as error:
            raise click.ClickException(str(error)) from None
        planned = slurm_replay.as_log_users(planned, gid)
        count = len({job.log_user_id for job in planned})
        click.echo(f"{count} log users, as local accounts {slurm_replay.USER_PREFIX}<U> "
                   f"(uid {slurm_replay.USER_UID_BASE}+U; {len(created)} created now)")
    report = slurm_replay.rounding_report(planned)
    click.echo(
        f"{workload.name}: jobs {skip + 1}-{skip + len(planned)} at speedup {speedup:g} on "
        f"{machine} processors: submissions over {report['submission_span_s'] / 60:.1f} min, "
        f"limits up to {report['longest_limit_min']} min; whole minutes put "
        f"{report['limits_over_10pct']:.0%} of the limits more than 10% above request/{speedup:g} "
        f"(median limit/request {report['median_limit_ratio']:.2f})"
    )
    if mode is not None:
        try:
            settings = slurm_replay.set_plugin_mode(_slurm_conf(), mode)
        except slurm_replay.ReplayError as error:
            raise click.ClickException(str(error)) from None
        click.echo(f"plugin mode={mode} ({settings})")

    def progress(submitted: int, ended: int) -> None:
        click.echo(f"  submitted {submitted}/{len(planned)}, ended {ended}", err=True)

    try:
        outcome = slurm_replay.run_replay(planned, CliBackend(), poll_s=poll_s, progress=progress)
    except (SlurmError, slurm_replay.ReplayError) as error:
        raise click.ClickException(f"{error} (the jobs submitted were cancelled)") from None
    notes = [
        f"hpcpredict replay-slurm {log.name} --jobs {job_count} --skip {skip} --speedup {speedup:g} "
        f"--procs {machine} --users {users} (plugin mode: {mode or 'as configured'})",
        "times are the replay's (log times / speedup); requests are the users' (the plugin's mark)",
    ]
    if users == "log":
        notes.append(f"user and group ids are the log's (each job ran as {slurm_replay.USER_PREFIX}<U>, uid "
                     f"{slurm_replay.USER_UID_BASE}+U)")
    header, records = slurm_replay.replay_swf(outcome, machine, notes)
    write_swf(output, header, records)
    if csv_path is not None:
        slurm_replay.write_outcome_csv(csv_path, outcome)
    states: dict[str, int] = {}
    for _, job in outcome.values():
        states[job.state] = states.get(job.state, 0) + 1
    click.echo(f"wrote {len(records)} jobs to {output} ({', '.join(f'{n} {s}' for s, n in sorted(states.items()))})")


@click.command("replay-compare")
@click.argument("replay", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--scheduler", type=click.Choice(["slurm-backfill", "easy", "easy-sjbf", "fcfs"]),
              default="slurm-backfill", show_default=True,
              help="The model set beside SLURM (the EASY family too, to see which models SLURM best).")
@slurm_settings_options
@click.option("--predictor", type=click.Choice(["requested", "clairvoyant", "ave2", "learned", "plugin"]),
              default="requested", show_default=True,
              help="What the model plans with. requested: the users' limits (a replay in record "
              "mode). plugin: the limits the plugin set in lower mode (needs --plugin-csv).")
@click.option("--plugin-csv", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="replay-slurm's --csv of this replay (the plugin's predictions).")
@correction_option("incremental")
@click.option("--correction-lead-s", "correction_lead_s", type=click.IntRange(min=0), default=0,
              show_default=True,
              help="With --predictor plugin: seconds before the limit at which the model corrects, "
              "as the daemon's corrector does (serve's --correction-margin-s).")
@deprecated_alias("--correction-lead", "--correction-lead-s", "correction_lead_s", type=click.IntRange(min=0))
@format_option()
def replay_compare(replay: Path, scheduler: str, slurm_params: str, predictor: str,
                   plugin_csv: Path | None, correction: str, correction_lead_s: int, output_format: str) -> None:
    """What SLURM did in a REPLAY (replay-slurm's SWF) beside the simulator's slurm-backfill on the
    same jobs: AVEbsld and waits side by side, and per-job agreement of the start times (mean and
    median absolute difference, Spearman rank correlation of the start order).

    \b
    Examples (replays of swf/KTH-SP2-sample.swf and KTH-SP2 recorded on a real SLURM):
      hpcpredict replay-compare docs/slurm-replay/KTH-SP2-sample-350-200-k60-record.swf
      hpcpredict replay-compare docs/slurm-replay/KTH-SP2-sample-350-200-k60-record.swf \\
          --scheduler easy --format json
      hpcpredict replay-compare docs/slurm-replay/KTH-SP2-5780-120-k60-lower.swf --predictor plugin \\
          --plugin-csv docs/slurm-replay/KTH-SP2-5780-120-k60-lower.csv --correction-lead-s 45
    """
    from hpcpredict.corrections.policies import CORRECTIONS
    from hpcpredict.sim.metrics import compute_metrics, metrics_table
    from hpcpredict.sim.runner import RunSpec, run
    from hpcpredict.sim.slurm_model.slurm_backfill import SlurmBackfill, SlurmParams, simulate_slurm
    from hpcpredict.experiments.slurm_replay import PluginLimitPredictor, ReplayError, agreement, real_result

    if (predictor == "plugin") != (plugin_csv is not None):
        raise click.UsageError("--predictor plugin and --plugin-csv go together")
    try:
        spec = RunSpec(scheduler, "requested" if predictor == "plugin" else predictor, correction,
                       slurm_params=slurm_params)
        if plugin_csv is not None and scheduler != "slurm-backfill":
            raise ValueError("--predictor plugin is for the slurm-backfill model")
    except ValueError as error:
        raise click.BadParameter(str(error)) from None
    workload = load_log(replay, None, False)
    try:
        real = real_result(workload)
    except ReplayError as error:
        raise click.ClickException(str(error)) from None
    if plugin_csv is not None:
        try:
            limits = PluginLimitPredictor.from_csv(plugin_csv)
            model = simulate_slurm(workload.jobs, workload.machine_procs,
                                   SlurmBackfill(SlurmParams.parse(slurm_params)), limits, CORRECTIONS[correction],
                                   correction_lead_s=correction_lead_s)
        except (KeyError, ValueError) as error:
            raise click.ClickException(f"{plugin_csv}: not this replay's CSV ({error})") from None
        label = f"slurm-backfill + plugin limits + {correction}" + (
            f" {correction_lead_s} s ahead" if correction_lead_s else "")
    else:
        model = run(workload, spec)
        label = spec.label
    real_metrics, model_metrics = compute_metrics(real), compute_metrics(model)
    match = agreement(real, model)
    if output_format == "json":
        click.echo(json.dumps({
            "replay": str(replay), "model": label, "slurm": real_metrics.to_dict(),
            "simulated": model_metrics.to_dict(), "agreement": match.to_dict(),
        }, indent=2))
        return
    click.echo(f"{workload.name}: {len(workload.jobs)} jobs on {workload.machine_procs} processors; "
               f"model: {label}")
    for line in metrics_table([("SLURM (real)", real_metrics), (scheduler, model_metrics)]):
        click.echo(line)
    click.echo(
        f"\nstart times: mean |difference| {match.mean_abs_start_diff_s:.1f} s, median "
        f"{match.median_abs_start_diff_s:.1f} s, {match.same_start_share:.0%} within "
        f"{match.tolerance_s} s; Spearman rank correlation of the start order "
        f"{match.spearman_start_order:.3f}"
    )
