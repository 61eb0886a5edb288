"""``hpcpredict info``: what a log holds and what cleaning did to it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from hpcpredict.cli.common import echo_skipped, load_log, workload_summary
from hpcpredict.cli.options import format_option, lenient_option, log_argument, procs_option


@click.command()
@log_argument
@procs_option()
@lenient_option
@format_option()
def info(log: Path, procs: int | None, lenient: bool, output_format: str) -> None:
    """Summarise an SWF LOG: jobs, users, span, machine size, and what cleaning did.

    Cleaning applies the reference's rules (docs/reproduction.md) and reports how many jobs
    each rule dropped or changed, so results stay comparable across tools.

    \b
    Examples:
      hpcpredict info swf/KTH-SP2-sample.swf
      hpcpredict info swf/KTH-SP2-sample.swf --procs 80 --format json   # a smaller machine
    """
    workload = load_log(log, procs, lenient)
    summary = workload_summary(workload)
    header = workload.header
    summary["unix_start_time"] = header.unix_start_time
    summary["time_zone_string"] = header.time_zone_string
    if len(workload.jobs):
        from hpcpredict.logs.job_table import job_column  # numpy: not for --help

        requested = sum(job_column(workload.jobs, "requested_s").tolist())
        summary["requested_over_run"] = round(requested / sum(job_column(workload.jobs, "run_s").tolist()), 3)
    if output_format == "json":
        summary["cleaning"] = workload.cleaning.to_dict()
        summary["header"] = {key: list(values) for key, values in header.entries.items()}
        click.echo(json.dumps(summary, indent=2))
        return
    echo_skipped(workload)
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
