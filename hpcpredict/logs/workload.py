"""A log ready to simulate: read (strict or lenient), cleaned, with its machine size decided.

Every command that replays a log goes through `load_workload`, so `simulate`, `info` and the
campaigns agree on which jobs a log has and on how many processors the machine has: the header's
MaxProcs unless the caller says otherwise (CEA-Curie's header counts 93,312 processors, of which
the log covers 80,640; docs/method.md §10).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # reading and cleaning (numpy, pandas) load with the first log, not with --help
    from hpcpredict.logs.cleaning import CleaningReport
    from hpcpredict.jobs import Job
    from hpcpredict.logs.swf import SwfHeader


class WorkloadError(ValueError):
    """The log cannot be simulated as asked (e.g. no machine size anywhere)."""


@dataclass(frozen=True)
class Workload:
    path: str
    header: SwfHeader
    # A `job_table.JobTable` when read from a file: its columns serve summaries without
    # building the Job objects, which the first job read builds.
    jobs: Sequence[Job]
    machine_procs: int
    cleaning: CleaningReport
    skipped_lines: list[tuple[int, str]]

    @property
    def name(self) -> str:
        base = os.path.basename(self.path)
        for suffix in (".gz", ".swf"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        return base


def load_workload(
    path: str | os.PathLike[str],
    *,
    machine_procs: int | None = None,
    lenient: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Workload:
    """Read and clean `path`; `machine_procs` overrides the header's MaxProcs.

    The log is read as columns (`swf_table.read_swf_table`: a C parser, or the careful
    line-by-line reader for any file that is not plain job lines) and cleaned as columns."""
    from hpcpredict.logs.cleaning import clean_columns
    from hpcpredict.logs.swf_table import read_swf_table

    log = read_swf_table(path, lenient=lenient, progress=progress)
    header_procs = log.header.max_procs
    if machine_procs is None:
        if header_procs is None or header_procs < 1:
            raise WorkloadError(
                f"{path}: the header has no MaxProcs line; give the machine size with --procs N"
            )
        machine_procs = header_procs
    elif machine_procs < 1:
        raise WorkloadError(f"the machine needs at least 1 processor, got {machine_procs}")
    # Jobs larger than a machine smaller than the header's are clamped to it, as the reference
    # did for CEA-Curie; without a header MaxProcs the machine size is the only bound there is.
    smaller_machine = header_procs is None or machine_procs < header_procs
    jobs, report = clean_columns(
        log.columns,
        max_procs_header=header_procs,
        machine_procs=machine_procs if smaller_machine else None,
    )
    return Workload(
        path=str(path),
        header=log.header,
        jobs=jobs,
        machine_procs=machine_procs,
        cleaning=report,
        skipped_lines=list(log.skipped_lines),
    )
