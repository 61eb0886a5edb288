"""``failsafe`` and ``restore-limits``: lowered limits back to the requests, without the daemon.

Both use hpcpredict.slurm.failsafe alone (SLURM's commands, the plugin's marks, the watcher's
heartbeat): nothing here imports the model, the store or numpy, so they run when the daemon
cannot (a damaged store, a broken upgrade, a missing module of the learner).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import threading
from pathlib import Path

import click

from hpcpredict.cli.options import format_option


def _load(config_path: Path | None, *, lenient: bool = False, **overrides: object):  # -> FailsafeConfig
    """The [failsafe] settings, options on top. `lenient` (the failsafe's own loop): a file that
    cannot be read or used leaves it on its defaults, said in its log, rather than down: a bad
    configuration after an upgrade is one of the failures it exists for."""
    from hpcpredict.slurm.failsafe import FailsafeConfig, FailsafeConfigError, load_failsafe_config

    given = {key: value for key, value in overrides.items() if value is not None}
    try:
        return dataclasses.replace(load_failsafe_config(config_path), **given).check()
    except FailsafeConfigError as error:
        if not lenient:
            raise click.ClickException(str(error)) from None
        logging.getLogger("hpcpredict.slurm.failsafe").error(
            "%s: watching with the defaults (and the command line's options) instead", error)
    try:
        return dataclasses.replace(FailsafeConfig(), **given).check()
    except FailsafeConfigError as error:
        raise click.ClickException(str(error)) from None


_config_option = click.option(
    "--config", "config_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
    help="The daemon's TOML configuration, whose [failsafe] section to read (its other sections are "
    "not read). Command-line options override it. A file that cannot be read or used leaves the "
    "failsafe on its defaults, said in its log: it keeps watching.")


@click.command()
@_config_option
@click.option("--heartbeat", default=None, help="The watcher's heartbeat file (default: "
              "watcher.heartbeat in the daemon's state directory; [failsafe] heartbeat).")
@click.option("--status", default=None, help="Where to write what the failsafe sees and does at "
              "each look, for the daemon's /health and /metrics (default: failsafe.status beside it).")
@click.option("--stale-after-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="A heartbeat older than this means the watcher no longer vouches for the lowered "
              "limits (default 40; with --interval-s and 10 s for SLURM's commands, below the one "
              "minute a job lowered to the least limit has).")
@click.option("--interval-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds between looks at the heartbeat (default 5).")
@click.option("--once", is_flag=True, help="One look, then exit (status 1 if limits had to be restored "
              "and some could not be).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def failsafe(config_path: Path | None, heartbeat: str | None, status: str | None,
             stale_after_s: float | None, interval_s: float | None, once: bool, log_level: str) -> None:
    """Watch the daemon's watcher; when it stops vouching for the lowered limits, put them back.

    Run it beside `hpcpredict serve --slurm` as its own service (deploy/hpcpredict-failsafe.service),
    as the same user. Every few seconds it reads the heartbeat the watcher writes after each look at
    SLURM in which every limit change it owed went through. While the heartbeat is fresh it does
    nothing else. Once it is older than --stale-after-s (the daemon killed, stopped, crash-looping,
    its watcher stuck or failing), it puts every job that job_submit.lua lowered back at the request
    recorded in its mark, running and pending, the ones closest to their limit first, and again at
    each look until the heartbeat is fresh. It only raises limits, only to the request, and only for
    jobs the plugin marked in lower mode. Meanwhile the daemon, if it answers, tells the plugin not
    to lower new jobs (hold=watcher_stale).

    \b
    Examples:
      hpcpredict failsafe --config deploy/daemon.toml
      hpcpredict failsafe --heartbeat /var/lib/hpcpredict/watcher.heartbeat --once
    """
    from hpcpredict.slurm.failsafe import Failsafe

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = _load(config_path, lenient=True, heartbeat=heartbeat, status=status,
                   stale_after_s=stale_after_s, interval_s=interval_s)
    watch = Failsafe(config)
    if once:
        seen = watch.look()
        click.echo(json.dumps(dataclasses.asdict(seen)))
        raise SystemExit(1 if seen.state == "restoring" and (seen.lowered_left or seen.errors) else 0)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    watch.run(stop)


@click.command("restore-limits")
@click.option("--dry-run", is_flag=True, help="List the jobs that would be restored; change nothing.")
@format_option()
def restore_limits(dry_run: bool, output_format: str) -> None:
    """Put every limit hpcpredict lowered back at its request, now.

    The one command that undoes what lowering did: every pending or running job whose mark
    (admin_comment, written by job_submit.lua in lower mode) records a request above its current
    limit gets that request, the jobs closest to their limit first. Nothing else is touched: jobs
    without the mark, jobs in record mode, limits at or above the request. It needs no daemon, no
    model and no database (SLURM's squeue and scontrol, as the daemon's user or root).

    A running watcher lowers pending jobs again at its next look: to keep them at their requests,
    stop the lowering first (enabled=0 or mode=record in hpcpredict_slurm.conf; docs/admin-guide.md).

    \b
    Examples:
      hpcpredict restore-limits --dry-run
      hpcpredict restore-limits
      hpcpredict restore-limits --format json
    """
    from hpcpredict.slurm.adapter import SlurmError
    from hpcpredict.slurm.failsafe import RUNNING_STATES, list_lowered, request_minutes, restore

    try:
        lowered = list_lowered()
    except SlurmError as error:
        raise click.ClickException(f"cannot list the jobs hpcpredict lowered: {error}") from None
    done = None if dry_run else restore(lowered)
    restored = {job.update_id for job in lowered} if done is None else {job.update_id for job in done.restored}
    if output_format == "json":
        click.echo(json.dumps({
            "dry_run": dry_run,
            "jobs": [{**dataclasses.asdict(job), "restored": not dry_run and job.update_id in restored}
                     for job in lowered],
            "errors": [] if done is None else done.errors,
        }, indent=2))
    else:
        verb = "would restore" if dry_run else "restored"
        for job in sorted(lowered, key=lambda job: job.left_s):
            if job.update_id in restored:
                click.echo(f"job {job.update_id:>12} {job.state.lower():<10} used {job.used_s:>7} s  "
                           f"limit {job.limit_s // 60:>6} -> {request_minutes(job.request_s)} min")
        running = sum(job.state in RUNNING_STATES for job in lowered if job.update_id in restored)
        click.echo(f"{verb} {len(restored)} limit(s): {running} running, {len(restored) - running} pending"
                   + ("" if lowered else " (no job is below the request its mark records)"))
    if done is not None and done.errors:
        for error in done.errors:
            click.echo(f"error: {error}", err=True)
        raise SystemExit(1)
