"""``hpcpredict campaign`` and ``hpcpredict campaign-report``: a grid of simulations run into a
store, and reported from it (thin over hpcpredict.experiments.campaign)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hpcpredict.cli.common import check_dir, run_into_store
from hpcpredict.cli.options import deprecated_alias
_campaign_argument = click.argument(
    "campaign_file", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)


def _store_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--store: the campaign's result store, as the file's `store` key names it (the daemon's
    database is --db: another thing)."""
    command = deprecated_alias("--db", "--store", "store_url")(command)
    return click.option(
        "--store", "store_url", default=None, metavar="FILE.jsonl|URL",
        help="Where the runs are stored: a .jsonl file or a SQLAlchemy URL. Default: the campaign "
        "file's store key, else sqlite:///<campaign file>.sqlite.",
    )(command)


_logs_option = click.option(
    "--logs", "logs_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder holding the campaign's logs: each log is read from it by the file name its "
    "[[logs]] entry gives, instead of the path relative to the campaign file.",
)


def _load_campaign(campaign_file: Path, logs_dir: Path | None = None):  # -> Campaign (lazy import: SQLAlchemy is heavy)
    from hpcpredict.experiments.campaign import CampaignError, load_campaign

    try:
        return load_campaign(campaign_file, logs_dir=logs_dir)
    except CampaignError as error:
        raise click.ClickException(str(error)) from None


@click.command()
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
@_store_option
@_logs_option
@click.option("--dry-run", is_flag=True, help="Only say how many runs are done and to do.")
def campaign(
    campaign_file: Path,
    jobs: int | None,
    executor: str,
    scheduler_address: str | None,
    store_url: str | None,
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
      hpcpredict campaign sim/smoke.toml --dry-run                  # how many runs to do
      hpcpredict campaign sim/smoke.toml -j 2
      hpcpredict campaign sim/smoke.toml --logs swf --store /tmp/smoke-runs.jsonl
      hpcpredict campaign sim/smoke.toml --executor dask -j 2       # or --scheduler-address tcp://head:8786
    """
    from hpcpredict.experiments.campaign import execute
    from hpcpredict.experiments.campaign_store import StoreError, open_store

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
        store = open_store(store_url or definition.default_database_url)
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
    run_into_store(definition.name, todo, store, done, executor=executor, jobs=jobs,
                   scheduler_address=scheduler_address)


@click.command("campaign-report")
@_campaign_argument
@_store_option
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder for report.md, the CSV tables and the PNG plots. Default: the campaign file's "
    "report key (relative to the file; the tracked campaigns write sim/results/<name>/), else "
    "<name>-report/ in the current directory.",
)
@click.option(
    "--pair-with", "pair_with", multiple=True, metavar="LABEL",
    help="Also pair every configuration with this one (a label of the campaign file), replica by "
    "replica, as with EASY++ (replicas_vs_<label>.csv). Repeatable.",
)
def campaign_report(
    campaign_file: Path, store_url: str | None, out_dir: Path | None, pair_with: tuple[str, ...]
) -> None:
    """Tables, leave-one-log-out selection, correlations and plots of a campaign's stored runs.

    Works on a partial campaign too (only the stored runs are reported); leave-one-log-out uses
    the triples stored on every log. With replicas, every figure is a mean over the replicas and
    each configuration is paired with EASY++ (CI, wins, sign test; replicas.csv).

    \b
    Examples:
      hpcpredict campaign-report sim/smoke.toml                     # -> ./smoke-report/
      hpcpredict campaign-report sim/smoke.toml --out /tmp/smoke-report --pair-with EASY
      hpcpredict campaign-report sim/smoke.toml --store /tmp/smoke-runs.jsonl
    """
    from hpcpredict.experiments.campaign_report import write_campaign_report
    from hpcpredict.experiments.campaign_store import StoreError, open_store, store_file

    definition = _load_campaign(campaign_file)
    url = store_url or definition.default_database_url
    file = store_file(url)
    if file is not None and not file.is_file():
        raise click.ClickException(f"{campaign_file}: never run (no {file}); "
                                   "run `hpcpredict campaign` first")
    if out_dir is not None:
        check_dir(out_dir, "--out")
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
    target = out_dir or definition.default_report_dir
    paths = write_campaign_report(runs, target, f"Campaign {definition.name}", pair_with=pair_with)
    click.echo(f"{len(runs):,} of {len(definition.cells):,} runs reported")
    for path in paths:
        click.echo(f"wrote {path}")
