"""What several commands do alike: a progress bar, reading a log, checking an output path.

Library errors become one-line `click.ClickException`s here, at the CLI boundary, so a command
never prints a traceback for a bad log or an unusable output path.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import Any
from contextlib import contextmanager
from pathlib import Path

import click

from hpcpredict.terminal import a_person_is_watching

from hpcpredict.outputs import OutputPathError, check_output_dir, check_output_file
from hpcpredict.logs.swf import SwfFormatError
from hpcpredict.logs.workload import Workload, WorkloadError, load_workload


def show_progress() -> bool:
    """Bars only for a person watching: not in a pipe, a log file or CI."""
    return a_person_is_watching()


@contextmanager
def progress_bar(total: int, unit: str, description: str) -> Iterator[Callable[[int], None]]:
    """A tqdm bar on stderr fed with absolute counts; silent when stderr is not a terminal, and
    then tqdm is not even imported (0.05 s of a piped or scripted KTH-SP2 `simulate`'s 1 s)."""
    if not show_progress():
        yield lambda done: None
        return
    from tqdm import tqdm  # here, not for --help

    with tqdm(
        total=total,
        unit=unit,
        unit_scale=unit == "B",
        desc=description,
        leave=False,
        file=sys.stderr,
    ) as bar:

        def update(done: int) -> None:
            bar.update(done - bar.n)

        yield update


def load_log(log: Path, procs: int | None, lenient: bool) -> Workload:
    """The cleaned workload of `log`, read with a bar by bytes; a bad log is a one-line error."""
    try:
        with progress_bar(log.stat().st_size, "B", f"reading {log.name}") as update:
            return load_workload(log, machine_procs=procs, lenient=lenient, progress=update)
    except (SwfFormatError, WorkloadError) as error:
        # --lenient skips a bad *line*: no help for a corrupt .gz or an empty file.
        hint = (" (--lenient skips bad lines)"
                if isinstance(error, SwfFormatError) and not lenient and error.skippable else "")
        raise click.ClickException(f"{error}{hint}") from None


def check_dir(folder: Path, option: str) -> None:
    """An output folder checked before the long work (hpcpredict.outputs says why)."""
    try:
        check_output_dir(folder, what=option)
    except OutputPathError as error:
        raise click.ClickException(str(error)) from None


def check_file(path: Path, option: str) -> None:
    """An output file checked before the long work (its folder must exist already)."""
    try:
        check_output_file(path, what=option)
    except OutputPathError as error:
        raise click.ClickException(str(error)) from None


def workload_summary(workload: Workload) -> dict[str, object]:
    """The figures every command that reads a log reports about it (also in its JSON)."""
    from hpcpredict.logs.job_table import job_column  # numpy: not for --help

    jobs = workload.jobs
    users = set(job_column(jobs, "user_id").tolist())
    submit_s = job_column(jobs, "submit_s")
    span_s = int(submit_s[-1] - submit_s[0]) if len(jobs) else 0
    return {
        "log": workload.path,
        "jobs": len(jobs),
        "users": len(users),
        "span_days": round(span_s / 86400, 2),
        "max_procs_header": workload.header.max_procs,
        "machine_procs": workload.machine_procs,
        "skipped_lines": len(workload.skipped_lines),
    }


def echo_skipped(workload: Workload) -> None:
    """Say on stderr how many lines --lenient skipped, and the first one's reason."""
    if workload.skipped_lines:
        first_line, reason = workload.skipped_lines[0]
        click.echo(
            f"skipped {len(workload.skipped_lines):,} malformed lines (--lenient); "
            f"first: line {first_line}: {reason}",
            err=True,
        )


def require_jobs(workload: Workload, log: Path) -> None:
    """Refuse a log with no job left after cleaning, before simulating nothing."""
    if not workload.jobs:
        raise click.ClickException(f"{log}: no job left after cleaning (see `hpcpredict info`)")


def run_into_store(name: str, todo: list[Any], store: Any, done: set[str], *, executor: str,
                   jobs: int | None, scheduler_address: str | None) -> None:
    """Run the cells `todo` (campaign.Cell) into `store` with a progress bar; Ctrl-C says what is
    kept and how to resume (`done`: the keys stored before). Shared with `hpcpredict tune`."""
    from tqdm import tqdm  # here, not for --help

    from hpcpredict.experiments.campaign import execute
    from hpcpredict.experiments.campaign_store import open_store

    started = time.perf_counter()
    with tqdm(total=len(todo), unit="run", desc=name, file=sys.stderr,
              disable=not show_progress()) as bar:

        def on_result(cell, result) -> None:  # type: ignore[no-untyped-def]
            store.add(name, cell, result)
            bar.update(1)

        try:
            execute(todo, executor=executor, jobs=jobs, scheduler_address=scheduler_address,
                    on_result=on_result)
        except KeyboardInterrupt:
            # Ctrl-C is how a long campaign is paused: say what is kept and how to go on, counted
            # from the store itself (the interrupt may have come between a write and its count).
            bar.close()
            store.close()
            reopened = open_store(store.url)
            stored = len(reopened.done_keys() - done)
            reopened.close()
            click.echo(
                f"interrupted: {stored:,} runs stored by this command, {len(todo) - stored:,} "
                f"not run ({store.url}); run the same command to resume",
                err=True,
            )
            raise SystemExit(130) from None
        finally:
            store.close()
    click.echo(f"{len(todo):,} runs in {time.perf_counter() - started:.0f} s", err=True)
