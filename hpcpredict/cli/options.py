"""Command-line options shared by several commands, defined once so they read the same everywhere.

An option is named as the campaign and daemon TOML files name the same setting (``--l2`` for
``l2``, ``--loss-unit-s`` for ``loss_unit_s``), with its unit in the name where it has one. A
name we had before is kept as a hidden alias (`deprecated_alias`): it still works, says on stderr
what to write instead, and is refused beside its new name.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hpcpredict.corrections import CORRECTION_NAMES
from hpcpredict.history_keys import HISTORY_KEYS
from hpcpredict.learn.defaults import FEATURE_SCALINGS
from hpcpredict.learn.losses import parse_loss
from hpcpredict.learn.settings import LearnerSettings
from hpcpredict.retired import RETIRED_SETTINGS, retired_message
from hpcpredict.sim.runner import SCHEDULER_NAMES, RunSpec
from hpcpredict.sim.slurm_model.slurm_conf import read_slurm_conf
from hpcpredict.sim.slurm_model.slurm_params import NAME as SLURM_BACKFILL
from hpcpredict.sim.slurm_model.slurm_params import SlurmParams, SlurmParamsError

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

# ---------------------------------------------------------------------------- renamed options


def deprecated_alias(old: str, new: str, dest: str, *, value: object = None, **option: Any) -> Decorator:
    """Keep `old`, the name an option had before it became `new`, working: hidden from --help, it
    warns on stderr and hands its value to the command's `dest` parameter. Given with `new` as
    well, it is refused (which one would win?). `value` is what a flag stands for (``--json``
    means ``--format json``); otherwise `option` gives the value's type, as `new` has it."""
    hidden = f"deprecated_{old.lstrip('-').replace('-', '_')}"
    if value is not None:
        option = {"is_flag": True, "flag_value": value}

    def decorator(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def with_alias(*args: Any, **kwargs: Any) -> Any:
            given = kwargs.pop(hidden)
            if given is not None:
                context = click.get_current_context()
                if context.get_parameter_source(dest) is click.core.ParameterSource.COMMANDLINE:
                    raise click.UsageError(f"{old} is the old name of {new.split()[0]}: give only {new.split()[0]}")
                click.echo(f"warning: {old} is deprecated, write {new}", err=True)
                kwargs[dest] = given
            return command(*args, **kwargs)

        return click.option(old, hidden, default=None, hidden=True, **option)(with_alias)

    return decorator


# ---------------------------------------------------------------------------- the log and its machine
log_argument = click.argument(
    "log", type=click.Path(exists=True, dir_okay=False, readable=True, path_type=Path)
)

MACHINE_PROCS_HELP = (
    "Machine size in processors. Default: MaxProcs from the log's header. Jobs larger than a "
    "smaller machine are clamped to it (CEA-Curie: --procs 80640)."
)


def procs_option(help: str = MACHINE_PROCS_HELP) -> Decorator:
    """--procs N: a machine's processors (the log's, unless the command says which machine)."""
    return click.option("--procs", type=click.IntRange(min=1), default=None, metavar="N", help=help)


lenient_option = click.option(
    "--lenient",
    is_flag=True,
    help="Skip malformed job lines (counted and reported) instead of stopping at the first.",
)


def format_option(*formats: str) -> Decorator:
    """--format table|json[|csv] (the command receives `output_format`), with --json kept as a
    deprecated alias of --format json."""
    choices = ("table", "json", *formats)

    def decorator(command: Callable[..., Any]) -> Callable[..., Any]:
        command = deprecated_alias("--json", "--format json", "output_format", value="json")(command)
        return click.option(
            "--format", "output_format", type=click.Choice(choices), default="table", show_default=True,
            help="table: for people; json: every figure, for programs"
            + ("; csv: the table as CSV." if "csv" in formats else "."),
        )(command)

    return decorator


# ---------------------------------------------------------------------------- the learner
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


_L2_TYPE = float
_LOSS_UNIT_TYPE = click.FloatRange(min=0, min_open=True)
_FEATURE_SCALING_TYPE = click.Choice(list(FEATURE_SCALINGS))


def learning_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The learned predictor's constants, named as in a campaign's [learned] table and the
    daemon's [learner] section: --loss, --eta, --l2, --loss-unit-s, --negative,
    --censor-at-limit, --feature-scaling, --calibration-alpha, --history-by. The command receives them as one
    `learning` (`LearnerSettings`, whose validation says what a value cannot be)."""
    fields = [field.name for field in dataclasses.fields(LearnerSettings)]
    inner = command

    @functools.wraps(inner)
    def with_learning(*args: Any, **kwargs: Any) -> Any:
        try:
            learning = LearnerSettings(**{name: kwargs.pop(name) for name in fields})
        except ValueError as error:
            raise click.BadParameter(str(error)) from None
        return inner(*args, learning=learning, **kwargs)

    command = with_learning
    for option in reversed(
        [
            click.option("--loss", default=LearnerSettings.loss, show_default=True, help=_LOSS_HELP,
                         callback=_check_loss),
            click.option("--eta", type=float, default=LearnerSettings.eta, show_default=True,
                         help="NAG learning rate of the learned predictor."),
            click.option("--l2", "l2", type=_L2_TYPE, default=LearnerSettings.l2, show_default=True,
                         help="l2 regularisation of the learned predictor (lambda in docs/method.md)."),
            deprecated_alias("--lambda", "--l2", "l2", type=_L2_TYPE),
            click.option(
                "--loss-unit-s", "loss_unit_s", type=_LOSS_UNIT_TYPE, default=LearnerSettings.loss_unit_s,
                show_default=True,
                help="Seconds in the unit the loss measures errors in (squared branches are "
                "z^2/unit): 3600 measures in hours, 1 is the reference's seconds.",
            ),
            deprecated_alias("--loss-unit", "--loss-unit-s", "loss_unit_s", type=_LOSS_UNIT_TYPE),
            click.option(
                "--negative", type=click.Choice(["abs", "clip"]), default=LearnerSettings.negative,
                show_default=True,
                help="A negative model output becomes |f| (abs, as the reference) or 1 s (clip).",
            ),
            click.option(
                "--censor-at-limit/--no-censor-at-limit", "censor_at_limit",
                default=LearnerSettings.censor_at_limit, show_default=True,
                help="Learn a job that ran to its request (killed at its limit) as a lower bound: "
                "only the under-prediction branch of the loss, no step when the model already "
                "predicts the limit.",
            ),
            click.option(
                "--feature-scaling", "feature_scaling", type=_FEATURE_SCALING_TYPE,
                default=LearnerSettings.feature_scaling, show_default=True,
                help="raw: the 20 features of docs/method.md §2. robust: the break time as "
                "log(1 + s), and predictions made with every term clamped to the range learned "
                "from (no extrapolation for a user back after a long gap).",
            ),
            deprecated_alias("--features", "--feature-scaling", "feature_scaling", type=_FEATURE_SCALING_TYPE),
            click.option(
                "--calibration-alpha", "calibration_alpha",
                type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=None,
                help="Calibrated confidence: publish the model's answer scaled, per user (global "
                "fallback), so that this share of jobs outlive it (online conformal quantile of "
                "log(runtime/prediction)). Default: off, the model's answer as it is.",
            ),
            click.option(
                "--history-by", "history_by", type=click.Choice(list(HISTORY_KEYS)),
                default=LearnerSettings.history_by, show_default=True,
                help="What a history (the features' last runtimes, running jobs, break time) is kept "
                "for: the user (the paper), or the user and one field of the job: its group, "
                "executable (SLURM: the job name), queue, partition, or request (jobs of a user "
                "with the same time limit). Measured in docs/results.md, \"Predictions beyond "
                "the paper\".",
            ),
            retired_flag("--per-user-experts/--no-per-user-experts", "per_user_experts"),
        ]
    ):
        command = option(command)
    return command


def retired_flag(declaration: str, key: str) -> Decorator:
    """A retired option's flag (`hpcpredict.retired`), hidden: its negative form is accepted
    with a warning (it asked for nothing), its positive form is an error that says why."""

    def check(context: click.Context, parameter: click.Parameter, value: bool | None) -> None:
        if value is None:
            return
        flag = f"--{'' if value else 'no-'}{key.replace('_', '-')}"
        default, what = RETIRED_SETTINGS[key]
        if value != default:
            raise click.UsageError(f"{flag}: {retired_message(what)}", context)
        click.echo(f"warning: {flag} is ignored: {retired_message(what)}", err=True)

    return click.option(declaration, key, default=None, hidden=True, expose_value=False,
                        callback=check)


# ---------------------------------------------------------------------------- the simulated scheduler
scheduler_option = click.option(
    "--scheduler",
    type=click.Choice(list(SCHEDULER_NAMES)),
    default=RunSpec.scheduler,
    show_default=True,
    help="fcfs: strict arrival order. easy: FCFS with EASY backfilling (a job may jump ahead if it "
    "does not delay the head job's reservation). easy-sjbf: EASY, backfilling the shortest "
    "predicted jobs first. slurm-backfill: Slurm 22.05's sched/backfill (priority order, a "
    "reservation for every job tested, periodic passes; --slurm-params).",
)


def correction_option(default: str = RunSpec.correction) -> Decorator:
    """--correction NAME, one of the policies of hpcpredict.corrections."""
    return click.option(
        "--correction",
        type=click.Choice(list(CORRECTION_NAMES)),
        default=default,
        show_default=True,
        help="What happens when a job outlives its prediction (always capped at the request). "
        "requested: jump to the request. incremental: initial prediction + 1 min, then + 5 min, "
        "15 min, 30 min, 1 h, ... 100 h, then the request. doubling: twice the elapsed time. "
        "survival: the --survival-quantile of the user's recent runtimes given the elapsed time "
        "(Kaplan-Meier, running jobs censored), incremental for users with fewer than 5 ended jobs.",
    )


_slurm_params_option = click.option(
    "--slurm-params",
    default="",
    metavar="NAME=VALUE,...",
    help="slurm-backfill's slurm.conf settings, by their slurm.conf names: bf_interval (s, "
    "default 30), bf_max_job_test (500), bf_window (min, 1440), bf_resolution (s, 60), "
    "bf_job_part_count_reserve (0: a reservation for every job tested), PriorityWeightAge, PriorityWeightJobSize (0: first in, first out), PriorityMaxAge (s), "
    "PriorityFavorSmall (YES/NO). Example: bf_interval=10,bf_window=2880.",
)
_slurm_conf_option = click.option(
    "--slurm-conf",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    metavar="SLURM.CONF",
    help="slurm-backfill: read the scheduler settings from a slurm.conf (SchedulerType, the bf_* "
    "SchedulerParameters, PriorityType and the age and size weights; Include lines are "
    "followed). --slurm-params given too override them. What the model does not represent "
    "(fair-share, QOS, other parameters) is listed on stderr.",
)


def slurm_settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--slurm-conf and --slurm-params; the command receives one `slurm_params` text (the
    file's settings, then the explicit ones, which win)."""

    @functools.wraps(command)
    def with_settings(*args: Any, slurm_conf: Path | None, slurm_params: str, **kwargs: Any) -> Any:
        if slurm_conf is not None:
            if kwargs.get("scheduler") != SLURM_BACKFILL:
                raise click.BadParameter("is for --scheduler slurm-backfill", param_hint="--slurm-conf")
            slurm_params = merge_slurm_settings(slurm_conf, slurm_params)
        return command(*args, slurm_params=slurm_params, **kwargs)

    return _slurm_conf_option(_slurm_params_option(with_settings))


def merge_slurm_settings(slurm_conf: Path, slurm_params: str) -> str:
    """The settings of `slurm_conf` overridden by `slurm_params`, in --slurm-params syntax;
    what the model leaves out of the file is said on stderr."""
    try:
        conf = read_slurm_conf(slurm_conf)
        for item in conf.not_modelled:
            click.echo(f"{slurm_conf}: not modelled: {item}", err=True)
        merged = ",".join(filter(None, (conf.params.to_text(), slurm_params)))
        return SlurmParams.parse(merged).to_text()
    except SlurmParamsError as error:
        raise click.BadParameter(str(error), param_hint="--slurm-conf/--slurm-params") from None
