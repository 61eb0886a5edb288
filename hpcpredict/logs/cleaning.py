"""Turn parsed SWF records into the jobs a simulation replays (docs/method.md §10).

`clean` applies the reference implementation's rules, in its order, and counts every job each rule
drops or changes, so a kept count that differs from the published one (KTH-SP2 28,481;
SDSC-BLUE 232,542; CEA-Curie 295,540) points at one rule instead of "somewhere in the parser".
It is a pure function: records in, jobs and a `CleaningReport` out.

The rules, in order (each sees only the jobs the previous ones kept):

1. ``procs_above_max_procs``: drop a job whose allocated *or* requested processors exceed the
   header's MaxProcs. Skipped, and reported as skipped, when the header has no MaxProcs.
2. ``no_procs``: drop a job with neither allocated nor requested processors > 0.
3. ``allocated_from_requested`` / ``requested_from_allocated``: when only one of the two is > 0,
   use it for both (counted as changed). The job's processor count is then the *requested*
   processors: that is what the reference simulator scheduled with (a scheduler only knows the
   request at submission), and with it all fifteen reference AVEbsld figures of docs/method.md §10 are
   reproduced exactly; with the allocated count they are off by up to 4% (docs/reproduction.md).
4. ``run_time_not_positive``: drop run_s <= 0.
5. ``requested_time_not_positive``: drop requested_time_s <= 0.
6. ``submit_negative``: drop submit_s < 0.
7. ``run_time_above_request``: set run_s = requested_time_s when run_s exceeds it (changed).
8. ``procs_above_machine``: when `machine_procs` is given, clamp processors to it (changed).
   CEA-Curie's header says 93,312 processors but the reference simulated 80,640 (docs/method.md §10)
   and clamped the few larger jobs rather than dropping them.

Finally the jobs are stable-sorted by submission time, as the simulator requires; the report
says how many were listed before an earlier-submitted job.

Missing values (`-1` in SWF) are handled deliberately, field by field:

* processors, run time, requested time, submit time: -1 is caught by rules 2-6 (a job without
  them cannot be simulated); a -1 on one processor field alone is filled from the other (rule 3).
* status -1 and user -1 stay in, as in the reference: failed and cancelled jobs used the machine,
  and "unknown user" is one more user id for the per-user history (all -1 jobs pool together).
* group, executable, queue and partition are copied as they are (-1 included) into the
  `JobRequest`, whose defaults are -1 too.
* wait time, CPU time, memory, preceding job and think time are not used: the simulator computes
  its own waits, and nothing known only at completion may reach a predictor (docs/method.md §2).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hpcpredict.logs.job_table import JOB_FIELDS, REQUEST_FIELDS, JobTable
from hpcpredict.jobs import Job
from hpcpredict.logs.swf import SwfRecord
from hpcpredict.logs.swf_table import columns_of

# Rule names in application order, with the text the report prints.
RULES: tuple[tuple[str, str], ...] = (
    ("procs_above_max_procs", "allocated or requested procs > header MaxProcs"),
    ("no_procs", "neither allocated nor requested procs > 0"),
    ("allocated_from_requested", "allocated procs <= 0: taken from requested"),
    ("requested_from_allocated", "requested procs <= 0: taken from allocated"),
    ("run_time_not_positive", "run time <= 0"),
    ("requested_time_not_positive", "requested time <= 0"),
    ("submit_negative", "submit time < 0"),
    ("run_time_above_request", "run time > requested time: set to requested"),
    ("procs_above_machine", "procs > machine procs: clamped to machine"),
)


@dataclass
class RuleCount:
    """How many jobs one rule dropped or changed; `applied` is False when it could not run."""

    name: str
    description: str
    dropped: int = 0
    changed: int = 0
    applied: bool = True


@dataclass
class CleaningReport:
    """What `clean` did, rule by rule. Invariant: input_count - total dropped == kept_count."""

    input_count: int
    kept_count: int
    max_procs_header: int | None
    machine_procs: int | None
    rules: list[RuleCount]
    out_of_order_count: int
    notes: list[str] = field(default_factory=list)

    @property
    def dropped_count(self) -> int:
        return sum(rule.dropped for rule in self.rules)

    def rule(self, name: str) -> RuleCount:
        """The count of the rule called `name` (see `RULES`)."""
        for rule in self.rules:
            if rule.name == name:
                return rule
        raise KeyError(name)

    def lines(self) -> list[str]:
        """A plain-text table, one rule a line, for the CLI and logs."""
        width = max(len(description) for _, description in RULES)
        out = [f"{'rule':<{width}}  {'dropped':>8}  {'changed':>8}"]
        for rule in self.rules:
            if rule.applied:
                out.append(f"{rule.description:<{width}}  {rule.dropped:>8,}  {rule.changed:>8,}")
            else:
                out.append(f"{rule.description:<{width}}  {'skipped':>8}  {'':>8}")
        out.append(f"{'input jobs':<{width}}  {self.input_count:>8,}")
        out.append(f"{'kept jobs':<{width}}  {self.kept_count:>8,}")
        out.append(f"{'listed before an earlier submission':<{width}}  {self.out_of_order_count:>8,}")
        out.extend(f"note: {note}" for note in self.notes)
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, object]:
        """Plain types only, ready for `json.dumps`."""
        return {
            "input_count": self.input_count,
            "kept_count": self.kept_count,
            "dropped_count": self.dropped_count,
            "max_procs_header": self.max_procs_header,
            "machine_procs": self.machine_procs,
            "out_of_order_count": self.out_of_order_count,
            "rules": [
                {
                    "name": rule.name,
                    "description": rule.description,
                    "applied": rule.applied,
                    "dropped": rule.dropped,
                    "changed": rule.changed,
                }
                for rule in self.rules
            ],
            "notes": list(self.notes),
        }


def clean(
    records: Iterable[SwfRecord],
    *,
    max_procs_header: int | None,
    machine_procs: int | None = None,
) -> tuple[list[Job], CleaningReport]:
    """Apply docs/method.md §10's cleaning rules; return the kept jobs sorted by submit time.

    `max_procs_header` is the header's MaxProcs (None when the log has none: rule 1 is then
    skipped and the report says so). `machine_procs` is the simulated machine's size when it
    differs from the header (CEA-Curie: 80,640); None means no clamping. The rules run on
    columns (`clean_columns`), the way `load_workload` applies them to a whole log.
    """
    table, report = clean_columns(
        columns_of(list(records)), max_procs_header=max_procs_header, machine_procs=machine_procs
    )
    return table.jobs(), report


def clean_columns(
    columns: dict[str, np.ndarray],
    *,
    max_procs_header: int | None,
    machine_procs: int | None = None,
) -> tuple[JobTable, CleaningReport]:
    """`clean` on a log's columns (one array per SWF field, `swf_table`), without a Python
    object per job: each rule is a mask over the jobs the previous rules kept, in the order
    of the module doc, so every count is the one a job-by-job pass gives."""
    if machine_procs is not None and machine_procs < 1:
        raise ValueError(f"machine_procs must be >= 1, got {machine_procs}")
    counts = {name: RuleCount(name, description) for name, description in RULES}
    notes: list[str] = []
    if max_procs_header is None:
        counts["procs_above_max_procs"].applied = False
        notes.append("the header has no MaxProcs: jobs were not checked against it")
    if machine_procs is None:
        counts["procs_above_machine"].applied = False
    allocated, requested = columns["allocated_procs"], columns["requested_procs"]
    run_s, requested_s, submit_s = columns["run_s"], columns["requested_time_s"], columns["submit_s"]
    kept = np.ones(len(allocated), dtype=bool)

    def rule(name: str, hit: np.ndarray, *, drop: bool) -> np.ndarray:
        """Count `name` on the jobs still kept that `hit` selects; drop them if asked."""
        hit = hit & kept
        number = int(np.count_nonzero(hit))
        if drop:
            counts[name].dropped += number
            kept[hit] = False
        else:
            counts[name].changed += number
        return hit

    if max_procs_header is not None:
        rule("procs_above_max_procs", (allocated > max_procs_header) | (requested > max_procs_header), drop=True)
    rule("no_procs", (allocated <= 0) & (requested <= 0), drop=True)
    rule("allocated_from_requested", allocated <= 0, drop=False)
    from_allocated = rule("requested_from_allocated", (allocated > 0) & (requested <= 0), drop=False)
    procs = np.where(from_allocated, allocated, requested)  # the requested processors, filled
    rule("run_time_not_positive", run_s <= 0, drop=True)
    rule("requested_time_not_positive", requested_s <= 0, drop=True)
    rule("submit_negative", submit_s < 0, drop=True)
    run_s = np.where(rule("run_time_above_request", run_s > requested_s, drop=False), requested_s, run_s)
    if machine_procs is not None:
        procs = np.where(rule("procs_above_machine", procs > machine_procs, drop=False), machine_procs, procs)
    order = np.flatnonzero(kept)
    kept_submit = submit_s[order]
    out_of_order = int(np.count_nonzero(kept_submit[1:] < kept_submit[:-1]))
    order = order[np.argsort(kept_submit, kind="stable")]  # equal submit times keep file order
    sources = {"requested_s": requested_s, "procs": procs, "run_s": run_s}
    table = JobTable({
        name: sources.get(name, columns.get(name))[order]
        for name in (*REQUEST_FIELDS, *JOB_FIELDS)
    })
    report = CleaningReport(
        input_count=len(allocated),
        kept_count=len(order),
        max_procs_header=max_procs_header,
        machine_procs=machine_procs,
        rules=list(counts.values()),
        out_of_order_count=out_of_order,
        notes=notes,
    )
    return table, report
