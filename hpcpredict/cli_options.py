"""Command-line options shared by several commands, defined once so they read the same everywhere."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hpcpredict.sim.slurm_backfill import NAME as SLURM_BACKFILL
from hpcpredict.sim.slurm_backfill import SlurmParams, SlurmParamsError
from hpcpredict.sim.slurm_conf import read_slurm_conf

_slurm_params_option = click.option(
    "--slurm-params",
    default="",
    metavar="NAME=VALUE,...",
    help="slurm-backfill's slurm.conf settings, by their slurm.conf names: bf_interval (s, "
    "default 30), bf_max_job_test (500), bf_window (min, 1440), bf_resolution (s, 60), "
    "PriorityWeightAge, PriorityWeightJobSize (0: first in, first out), PriorityMaxAge (s), "
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
