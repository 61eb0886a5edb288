"""Campaigns: a grid of simulations defined in TOML, run in parallel, stored so they resume.

A campaign file names logs, baseline configurations and a grid of learned configurations
(losses x corrections x schedulers x learning constants); `cells` expands it into one `Cell` per
(log, configuration). Each cell has a stable `key` (a hash of the log and the configuration, not
of the file), so a run finished once is never run again, even after the file is edited to add
cells. `run_campaign` sends the cells not yet in the store to an executor — local processes by
default, a Dask cluster when asked — and the driver alone writes each finished run to the store,
one transaction per run: a campaign killed at any point loses only the runs in flight.

Replicas (docs/evaluation.md): with ``replicas = N`` every configuration runs on replicas 0..N-1
of each log (replica 0 the log itself, the others shaken by up to ``shake`` seconds, seeded by
``seed``), every configuration on the same replicas, so the report can pair them. Replica 0 keeps
the key it had before replicas existed: a campaign grown from 1 to 10 replicas runs only the new
ones.

File format (paths relative to the file, or found in the folder given by ``--logs``)::

    name = "smoke"
    replicas = 10                     # optional, default 1
    shake = 60                        # optional, seconds, default 60
    seed = 0                          # optional, default 0
    store = "results/smoke/runs.jsonl" # optional: where runs are stored (a .jsonl file relative
                                      # to this file, or a SQLAlchemy URL); default
                                      # sqlite:///<this file>.sqlite
    [[logs]]
    name = "KTH-SP2"
    path = "../swf/KTH-SP2-sample.swf"
    procs = 100                       # optional: default MaxProcs from the header
    load = 1.2                        # optional: submit gaps divided by this (load_scaling.py)
    [[baselines]]
    label = "EASY++"
    scheduler = "easy-sjbf"
    predictor = "ave2"
    correction = "incremental"
    [learned]
    losses = "all"                    # or a list: ["eloss", "over=linear,under=square,weight=constant"]
    corrections = ["incremental"]
    schedulers = ["easy-sjbf"]
    eta = [5000.0]                    # optional lists; defaults: the learner's defaults
    l2 = [4e9]                        # `lambda` in files written before the CLI said --l2
    loss_unit_s = [3600.0]
    negative = ["abs"]
    starvation_guard_s = [86400]      # optional: the starvation guard (seconds); omitted = off
    censor_at_limit = [false, true]   # optional: learn jobs killed at their limit as lower bounds
    feature_scaling = ["raw", "robust"]  # optional: robust = log break time, no extrapolation
    history_by = ["user", "user+queue"]   # optional: histories by user, or user and a job field
    slurm_params = ["bf_interval=10"] # optional, for scheduler "slurm-backfill": slurm.conf
                                      # settings (SlurmParams.parse); omitted = Slurm's defaults
    survival_quantile = [0.5, 0.9]    # optional: with corrections = ["survival"], its quantile
    calibration_alpha = [0.5]         # optional: publish at this under-prediction rate (omitted: off)
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import signal
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from hpcpredict.learn import all_losses, parse_loss
from hpcpredict.retired import RetiredSettingError, drop_retired
from hpcpredict.learn.losses import display_name
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.load_scaling import check_load_factor, scaled_load
from hpcpredict.sim.runner import SEMANTICS_VERSION, RunSpec, run
from hpcpredict.sim.shaking import DEFAULT_SEED, DEFAULT_SHAKE_S, replica
from hpcpredict.logs.workload import Workload, load_workload


class CampaignError(ValueError):
    """The campaign file is not valid: says which file and which entry."""


@dataclass(frozen=True)
class LogEntry:
    name: str
    path: str  # absolute
    procs: int | None = None
    # A part of the log in time (`hpcpredict tune`), by the cleaned log's own submit times: only
    # the jobs submitted before `submit_until_s` are replayed; the metrics are taken over the
    # jobs submitted at or after `measure_from_s` (all of them are replayed).
    submit_until_s: int | None = None
    measure_from_s: int | None = None
    # The log under a heavier load (`load_scaling.scaled_load`, before the parts and the shaking):
    # its inter-arrival times divided by this. 1: the log as it is.
    load: float = 1.0

    def identity(self) -> dict[str, object]:
        """What makes two entries the same log for a run's key (the parts and the load only
        when set, so the keys of whole logs as they are stay what they always were)."""
        identity: dict[str, object] = {"log": self.name, "procs": self.procs}
        if self.load != 1.0:
            identity["load"] = self.load
        if self.submit_until_s is not None:
            identity["submit_until_s"] = self.submit_until_s
        if self.measure_from_s is not None:
            identity["measure_from_s"] = self.measure_from_s
        return identity


@dataclass(frozen=True)
class Cell:
    """One simulation of a campaign: a log, a replica of it and a configuration."""

    log: LogEntry
    label: str
    spec: RunSpec
    replica: int = 0
    shake_s: int = DEFAULT_SHAKE_S
    seed: int = DEFAULT_SEED

    @property
    def key(self) -> str:
        """Stable identity: the log's name and machine size, the replica, every spec setting,
        and the simulator's semantics version.

        Replica 0 is the log itself whatever the shake and seed, and keeps the identity cells had
        before replicas existed, so stored unshaken runs are never recomputed. The semantics
        version joins the identity from version 2 on (`runner.SEMANTICS_VERSION`): a run stored
        by code that computed it differently is a different run, done again, not a stale result.
        """
        identity: dict[str, object] = {**self.log.identity(), **self.spec.to_dict()}
        if self.replica:
            identity.update(replica=self.replica, shake_s=self.shake_s, seed=self.seed)
        if SEMANTICS_VERSION > 1:
            identity["semantics"] = SEMANTICS_VERSION
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Campaign:
    name: str
    path: Path
    logs: tuple[LogEntry, ...]
    cells: tuple[Cell, ...]
    replicas: int = 1
    shake_s: int = DEFAULT_SHAKE_S
    seed: int = DEFAULT_SEED
    store: str | None = None  # the file's `store`: an absolute .jsonl path or a URL
    report: Path | None = None  # the file's `report`: the report's folder, made absolute

    @property
    def default_report_dir(self) -> Path:
        """The file's `report` folder (relative to the file: the tracked campaigns keep their
        results in sim/results/<name>/), else <name>-report/ in the current directory: a quick
        try such as sim/smoke.toml writes where its user is, not into the source tree."""
        return self.report or Path(f"{self.name}-report")

    @property
    def default_database_url(self) -> str:
        """The file's `store`, else SQLite next to the campaign file: sim/x.toml -> sim/x.sqlite."""
        return self.store or f"sqlite:///{self.path.with_suffix('.sqlite')}"


def load_campaign(
    path: str | os.PathLike[str], *, logs_dir: str | os.PathLike[str] | None = None
) -> Campaign:
    """Parse and validate a campaign file; every error names the file and the entry.

    With `logs_dir`, every log is read from that folder by the file name its entry gives (so a
    campaign written for one machine's layout runs on another's).
    """
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise CampaignError(f"{path}: not valid TOML: {error}") from None
    name = str(data.get("name", path.stem))
    if not isinstance(data.get("logs", []), list):
        raise CampaignError(f"{path}: logs must be written [[logs]] (a list of tables)")
    if not isinstance(data.get("learned", {}), dict):
        raise CampaignError(f"{path}: learned must be written [learned] (one table)")
    unknown = set(data) - {"name", "logs", "baselines", "learned", "replicas", "shake", "seed",
                           "store", "report"}
    if unknown:
        raise CampaignError(f"{path}: unknown keys {sorted(unknown)}")
    replicas = _natural(path, data, "replicas", 1, minimum=1)
    shake_s = _natural(path, data, "shake", DEFAULT_SHAKE_S, minimum=0)
    seed = _natural(path, data, "seed", DEFAULT_SEED, minimum=0)
    store = _store(path, data.get("store"))
    report = data.get("report")
    if report is not None and (not isinstance(report, str) or not report):
        raise CampaignError(f"{path}: report must be a folder path (relative to the file), got {report!r}")
    logs = tuple(
        _log_entry(path, index, entry, logs_dir)
        for index, entry in enumerate(data.get("logs", []))
    )
    if not logs:
        raise CampaignError(f"{path}: no [[logs]] entry")
    if len({log.name for log in logs}) != len(logs):
        raise CampaignError(f"{path}: two [[logs]] entries have the same name")
    configurations = [
        _baseline(path, index, entry) for index, entry in enumerate(data.get("baselines", []))
    ]
    if "learned" in data:
        configurations.extend(_learned_grid(path, data["learned"]))
    if not configurations:
        raise CampaignError(f"{path}: neither [[baselines]] nor [learned]: nothing to run")
    labels = [label for label, _ in configurations]
    if len(set(labels)) != len(labels):
        raise CampaignError(f"{path}: two configurations have the same label")
    # Log, then replica, then configuration: a worker runs the cells of one shaken log in a row.
    cells = tuple(
        Cell(log, label, spec, number, shake_s, seed)
        for log in logs
        for number in range(replicas)
        for label, spec in configurations
    )
    if len({cell.key for cell in cells}) != len(cells):
        raise CampaignError(f"{path}: two configurations are the same simulation")
    return Campaign(name=name, path=path, logs=logs, cells=cells, replicas=replicas,
                    shake_s=shake_s, seed=seed, store=store,
                    report=None if report is None else path.parent / report)


def _store(path: Path, value: object) -> str | None:
    """The `store` key: a URL as it is, a .jsonl path made absolute (relative to the file)."""
    if value is None:
        return None
    if not isinstance(value, str) or not (value.endswith(".jsonl") or "://" in value):
        raise CampaignError(
            f"{path}: store must be a .jsonl file or a SQLAlchemy URL, got {value!r}"
        )
    return value if "://" in value else str(path.parent / value)


def _natural(path: Path, data: dict[str, Any], key: str, default: int, *, minimum: int) -> int:
    value = data.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise CampaignError(f"{path}: {key} must be an integer >= {minimum}, got {value!r}")
    return value


def _log_entry(
    path: Path, index: int, entry: dict[str, Any], logs_dir: str | os.PathLike[str] | None
) -> LogEntry:
    where = f"{path}: [[logs]] entry {index + 1}"
    if "path" not in entry:
        raise CampaignError(f"{where}: missing 'path'")
    if logs_dir is not None:
        log_path = (Path(logs_dir) / Path(entry["path"]).name).resolve()
    else:
        log_path = (path.parent / entry["path"]).resolve()
    procs = entry.get("procs")
    if procs is not None and (not isinstance(procs, int) or isinstance(procs, bool) or procs < 1):
        raise CampaignError(f"{where}: procs must be a positive integer, got {procs!r}")
    unknown = set(entry) - {"name", "path", "procs", "load"}
    if unknown:
        raise CampaignError(f"{where}: unknown keys {sorted(unknown)}")
    try:
        load = check_load_factor(entry.get("load", 1.0))
    except ValueError as error:
        raise CampaignError(f"{where}: {error}") from None
    name = str(entry.get("name", log_path.name))
    return LogEntry(name=name, path=str(log_path), procs=procs, load=load)


def _spec(where: str, **settings: Any) -> RunSpec:
    """A validated RunSpec in canonical form (floats as floats, the loss by its full name), so
    that one simulation always has one key however the file spells it."""
    settings = {
        key: float(value) if key in ("eta", "l2", "loss_unit_s") and type(value) is int else value
        for key, value in settings.items()
    }
    try:
        spec = RunSpec.from_keys(**settings)
        learner = dataclasses.replace(spec.learner, loss=parse_loss(spec.learner.loss).name)
        return dataclasses.replace(spec, learner=learner)
    except (TypeError, ValueError, AttributeError) as error:
        raise CampaignError(f"{where}: {error}") from None


def _baseline(path: Path, index: int, entry: dict[str, Any]) -> tuple[str, RunSpec]:
    where = f"{path}: [[baselines]] entry {index + 1}"
    entry = dict(entry)
    label = entry.pop("label", None)
    _rename_lambda(where, entry)
    _drop_retired(where, entry)
    spec = _spec(where, **entry)
    return (str(label) if label else spec.label), spec


def _drop_retired(where: str, entry: dict[str, Any]) -> None:
    """The retired options' keys (`hpcpredict.retired`): dropped with a warning on stderr at
    their old default, an error otherwise (in place: `entry` is the caller's copy)."""
    try:
        for warning in drop_retired(entry, where):
            print(f"warning: {warning}", file=sys.stderr)
    except RetiredSettingError as error:
        raise CampaignError(str(error)) from None


def _rename_lambda(where: str, entry: dict[str, Any]) -> None:
    """`lambda`, the l2 key's name before it matched the command line's --l2, read as `l2`
    (in place: `entry` is the caller's copy). The labels keep saying lambda=, as stored runs do."""
    if "lambda" in entry:
        if "l2" in entry:
            raise CampaignError(f"{where}: l2 and lambda are the same setting (lambda its old name): give l2 only")
        entry["l2"] = entry.pop("lambda")


def _learned_grid(path: Path, entry: dict[str, Any]) -> Iterator[tuple[str, RunSpec]]:
    where = f"{path}: [learned]"
    entry = dict(entry)
    _rename_lambda(where, entry)
    _drop_retired(where, entry)
    losses = entry.get("losses", ["eloss"])
    if losses == "all":
        losses = [loss.name for loss in all_losses()]
    try:
        losses = [parse_loss(loss).name for loss in losses]
    except (ValueError, AttributeError) as error:
        raise CampaignError(f"{where}: {error}") from None
    defaults, learner = RunSpec(), LearnerSettings()
    axes = {
        "loss": losses,
        "correction": entry.get("corrections", [defaults.correction]),
        "scheduler": entry.get("schedulers", [defaults.scheduler]),
        "eta": entry.get("eta", [learner.eta]),
        "l2": entry.get("l2", [learner.l2]),
        "loss_unit_s": entry.get("loss_unit_s", [learner.loss_unit_s]),
        "negative": entry.get("negative", [learner.negative]),
        "starvation_guard_s": entry.get("starvation_guard_s", [None]),
        "censor_at_limit": entry.get("censor_at_limit", [learner.censor_at_limit]),
        "feature_scaling": entry.get("feature_scaling", [learner.feature_scaling]),
        "slurm_params": entry.get("slurm_params", [defaults.slurm_params]),
        "survival_quantile": entry.get("survival_quantile", [defaults.survival_quantile]),
        "calibration_alpha": entry.get("calibration_alpha", [learner.calibration_alpha]),
        "history_by": entry.get("history_by", [learner.history_by]),
    }
    unknown = set(entry) - {"losses", "corrections", "schedulers", "eta", "l2",
                            "loss_unit_s", "negative", "starvation_guard_s", "censor_at_limit",
                            "feature_scaling", "slurm_params",
                            "survival_quantile", "calibration_alpha", "history_by"}
    if unknown:
        raise CampaignError(f"{where}: unknown keys {sorted(unknown)}")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise CampaignError(f"{where}: {key} must be a non-empty list")
    for values in itertools.product(*axes.values()):
        settings = dict(zip(axes, values))
        spec = _spec(where, predictor="learned", **settings)
        label = (
            f"learned {display_name(spec.learner.loss)} + {spec.correction_label} + {spec.scheduler}"
            f"{f'({spec.slurm_params})' if spec.slurm_params else ''}"
            f" (eta={spec.learner.eta:g}, lambda={spec.learner.l2:g}, unit={spec.learner.loss_unit_s:g}s, "
            f"{spec.learner.negative}"
            f"{spec.learning_label}){spec.guard_label}"
        )
        yield label, spec


# ---------------------------------------------------------------------------- running cells
@dataclass(frozen=True)
class CellResult:
    key: str
    metrics: dict[str, float | int]
    wall_time_s: float
    host: str


@lru_cache(maxsize=2)  # a worker runs many cells of one log in a row: load it once
def _workload(path: str, procs: int | None, submit_until_s: int | None = None,
              load: float = 1.0) -> Workload:
    if submit_until_s is not None:
        whole = _workload(path, procs, None, load)
        return dataclasses.replace(
            whole, jobs=[job for job in whole.jobs if job.submit_s < submit_until_s])
    if load != 1.0:
        return scaled_load(_workload(path, procs), load)
    return load_workload(path, machine_procs=procs)


@lru_cache(maxsize=2)  # ... and of one replica in a row: shake it once
def _replica(path: str, procs: int | None, number: int, shake_s: int, seed: int,
             submit_until_s: int | None = None, load: float = 1.0) -> Workload:
    return replica(_workload(path, procs, submit_until_s, load), number, shake_s=shake_s,
                   seed=seed)


def run_cell(cell: Cell) -> CellResult:
    """Simulate one cell; runs in a worker process (local or Dask), touches no store."""
    log = cell.log
    workload = _replica(log.path, log.procs, cell.replica, cell.shake_s, cell.seed,
                        log.submit_until_s, log.load)
    result = run(workload, cell.spec)
    measured = None
    if log.measure_from_s is not None:  # by the log's own submit times, not the shaken ones
        later = {job.job_id for job in _workload(log.path, log.procs, None, log.load).jobs
                 if job.submit_s >= log.measure_from_s}
        measured = np.fromiter((job.job_id in later for job in result.jobs), dtype=bool,
                               count=len(result.jobs))
    return CellResult(
        key=cell.key,
        metrics=compute_metrics(result, measured).to_dict(),
        wall_time_s=result.wall_time_s,
        host=os.uname().nodename,
    )


Submit = Callable[[Cell], Any]  # a Future of CellResult (concurrent.futures or Dask)
WaitAny = Callable[[list[Any]], Iterable[Any]]  # the futures done among those given, >= 1


def execute(
    cells: Iterable[Cell],
    *,
    executor: str = "local",
    jobs: int | None = None,
    scheduler_address: str | None = None,
    on_result: Callable[[Cell, CellResult], None],
) -> None:
    """Run `cells` and hand each result to `on_result` in the calling process, as they finish.

    Cells are submitted in order (log by log), so a worker's cache keeps one log loaded. At most
    twice the number of workers are in flight: a kill loses little and memory stays flat.
    """
    pending = list(cells)
    if not pending:
        return
    if executor == "local":
        workers = jobs or os.cpu_count() or 1
        with ProcessPoolExecutor(max_workers=workers, initializer=quiet_on_interrupt) as pool:
            _drain(pending, lambda cell: pool.submit(run_cell, cell), _wait_local, 2 * workers,
                   on_result)
        return
    if executor != "dask":
        raise ValueError(f"unknown executor {executor!r}: local or dask")
    from distributed import Client, LocalCluster

    def submit(client: Any) -> Submit:
        return lambda cell: client.submit(run_cell, cell, key=f"cell-{cell.key}", pure=False)

    if scheduler_address:
        with Client(scheduler_address) as client:
            workers = max(1, sum(client.nthreads().values()))
            _drain(pending, submit(client), _wait_dask, 2 * workers, on_result)
        return
    workers = jobs or os.cpu_count() or 1
    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        _drain(pending, submit(client), _wait_dask, 2 * workers, on_result)


def quiet_on_interrupt() -> None:
    """A local worker's Ctrl-C (the terminal signals the whole process group): exit, not a
    KeyboardInterrupt whose traceback multiprocessing prints when the signal finds the worker
    waiting for its next cell. The campaign's own process says what was stored and how to resume
    (cli/campaign.py); a run in flight is lost either way and computed again on resume. A
    campaign started with SIGINT ignored (in the background of a non-interactive shell) keeps it
    ignored in its workers too, as in its own process: a stray SIGINT to the group must not take
    the workers away from a parent that carries on."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return

    def exit_quietly(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, exit_quietly)


def _wait_local(futures: list[Future[CellResult]]) -> Iterable[Future[CellResult]]:
    return wait(futures, return_when=FIRST_COMPLETED).done


def _wait_dask(futures: list[Any]) -> Iterable[Any]:
    from distributed import wait as dask_wait

    return dask_wait(futures, return_when="FIRST_COMPLETED").done


def _drain(
    cells: list[Cell],
    submit: Submit,
    wait_any: WaitAny,
    in_flight: int,
    on_result: Callable[[Cell, CellResult], None],
) -> None:
    queue = iter(cells)
    running: dict[Any, Cell] = {submit(cell): cell for cell in itertools.islice(queue, in_flight)}
    while running:
        for future in wait_any(list(running)):
            cell = running.pop(future)
            on_result(cell, future.result())
            for next_cell in itertools.islice(queue, 1):
                running[submit(next_cell)] = next_cell

