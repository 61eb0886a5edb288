"""Read the scheduler settings of a real slurm.conf into the slurm-backfill model's `SlurmParams`.

A site asks "what would lowered limits do on *my* SLURM?": the answer must use its own
settings, not the ones someone retyped. `read_slurm_conf` takes what the model represents
(SchedulerType, the bf_* SchedulerParameters, the priority plugin and the weights of age and
size) and lists what it read but does not model (fair-share or QOS weights, other scheduler
parameters), so that the report can say which parts of the cluster's behaviour are left out.

slurm.conf syntax, as slurm.conf(5) of Slurm 22.05 gives it: one ``Key=Value`` per line (node
and partition lines hold several and are skipped here), keys case-insensitive, ``#`` starts a
comment, ``Include`` pulls another file in (followed, relative to the including file).

>>> conf = read_slurm_conf_text("SchedulerParameters=bf_window=2880,bf_continue\\n"
...                             "PriorityType=priority/multifactor\\nPriorityWeightAge=1000\\n"
...                             "PriorityMaxAge=2-0\\nPriorityWeightFairshare=10000\\n")
>>> conf.params.to_text()
'bf_window=2880,PriorityWeightAge=1000,PriorityMaxAge=172800'
>>> conf.not_modelled
['SchedulerParameters bf_continue', 'PriorityWeightFairshare=10000']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hpcpredict.sim.slurm_model.slurm_params import SlurmParams, SlurmParamsError
from hpcpredict.slurm_time import slurm_duration_s

# SchedulerParameters the model reads (slurm.conf names, as --slurm-params takes them).
_BACKFILL_PARAMETERS = ("bf_interval", "bf_max_job_test", "bf_window", "bf_resolution",
                        "bf_job_part_count_reserve")
# Priority weights that change the order in ways the model does not represent.
_UNMODELLED_WEIGHTS = (
    "PriorityWeightAssoc", "PriorityWeightFairshare", "PriorityWeightPartition",
    "PriorityWeightQOS", "PriorityWeightTRES",
)


@dataclass
class SlurmConf:
    """What `read_slurm_conf` found: the model's settings and what it leaves out."""

    params: SlurmParams
    not_modelled: list[str] = field(default_factory=list)


def read_slurm_conf(path: str | Path) -> SlurmConf:
    """The model's settings from a slurm.conf file (raises SlurmParamsError naming file and line)."""
    settings: dict[str, tuple[str, str]] = {}
    _collect(Path(path), settings, depth=0)
    return _interpret(settings)


def read_slurm_conf_text(text: str, name: str = "<slurm.conf>") -> SlurmConf:
    """`read_slurm_conf` on the text of a file (Include lines are refused: no folder to follow)."""
    settings: dict[str, tuple[str, str]] = {}
    _collect_lines(text, name, None, settings, depth=0)
    return _interpret(settings)


def _collect(path: Path, settings: dict[str, tuple[str, str]], depth: int) -> None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise SlurmParamsError(f"{path}: cannot read ({error.strerror or error})") from None
    _collect_lines(text, str(path), path.parent, settings, depth)


def _collect_lines(
    text: str, name: str, folder: Path | None, settings: dict[str, tuple[str, str]], depth: int
) -> None:
    """Last value wins, as in slurmctld; each value remembers its file and line for errors."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{name}:{number}"
        key, sep, value = line.partition("=")
        key = key.strip()
        if key.lower() == "include" or (not sep and line.lower().startswith("include ")):
            target = (value if sep else line[len("include"):]).strip()
            if folder is None or depth >= 8:
                raise SlurmParamsError(f"{where}: cannot follow Include {target!r} here")
            _collect(folder / target, settings, depth + 1)
            continue
        if not sep:
            raise SlurmParamsError(f"{where}: expected Key=Value, got {line!r}")
        lowered = key.lower()
        if lowered in ("nodename", "partitionname", "frontendname", "nodeset", "downnodes"):
            continue  # several pairs per line; nothing the model reads
        settings[lowered] = (value.strip(), where)


def _interpret(settings: dict[str, tuple[str, str]]) -> SlurmConf:
    values: list[str] = []
    not_modelled: list[str] = []
    scheduler, where = settings.get("schedulertype", ("sched/backfill", "default"))
    if scheduler != "sched/backfill":
        raise SlurmParamsError(
            f"{where}: SchedulerType={scheduler}: the slurm-backfill model is sched/backfill's "
            "(sched/builtin is first in, first out without backfilling: --scheduler fcfs)"
        )
    text, _ = settings.get("schedulerparameters", ("", ""))
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if key in _BACKFILL_PARAMETERS and sep:
            values.append(f"{key}={value}")
        else:
            not_modelled.append(f"SchedulerParameters {item}")
    priority_type, _ = settings.get("prioritytype", ("priority/basic", "default"))
    if priority_type == "priority/multifactor":
        for key in ("PriorityWeightAge", "PriorityWeightJobSize"):
            if key.lower() in settings:
                values.append(f"{key}={settings[key.lower()][0]}")
        if "prioritymaxage" in settings:
            value, where = settings["prioritymaxage"]
            values.append(f"PriorityMaxAge={_time_s(value, where)}")
        if "priorityfavorsmall" in settings:
            values.append(f"PriorityFavorSmall={settings['priorityfavorsmall'][0]}")
        for key in _UNMODELLED_WEIGHTS:
            value, _ = settings.get(key.lower(), ("0", ""))
            if value not in ("0", ""):
                not_modelled.append(f"{key}={value}")
    elif priority_type != "priority/basic":
        not_modelled.append(f"PriorityType={priority_type} (modelled as priority/basic)")
    try:
        params = SlurmParams.parse(",".join(values))
    except SlurmParamsError as error:
        raise SlurmParamsError(f"in the slurm.conf settings: {error}") from None
    return SlurmConf(params, not_modelled)


def _time_s(value: str, where: str) -> int:
    """slurm.conf's time strings: minutes, min:sec, hr:min:sec, days-hr, days-hr:min[:sec]."""
    seconds = slurm_duration_s(value)
    if seconds is None:
        raise SlurmParamsError(f"{where}: PriorityMaxAge={value!r} is not a SLURM time string")
    return seconds

