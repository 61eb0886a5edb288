"""The ``hpcpredict`` command: one click group over thin commands, one module per family.

    info.py       info                                  a log and its cleaning
    simulate.py   simulate, predict-eval                a log replayed through a scheduler
    campaign.py   campaign, campaign-report             grids of simulations, stored and reported
    daemon.py     serve, train, errors, report,         the prediction daemon and its database
                  slurm-convert
    replay.py     replay-slurm, replay-compare          a log on a real SLURM, beside the simulator
    options.py    the options several commands share, and the deprecated names of renamed ones
    common.py     progress bars, reading a log, checking output paths

Each command module imports only options.py and common.py of this package, never this file, so
the package has no import cycle; expensive imports (SQLAlchemy, pandas, matplotlib) wait inside
the commands, so `--help` stays quick.
"""

from __future__ import annotations

import click

from hpcpredict.cli.campaign import campaign, campaign_report
from hpcpredict.cli.daemon import errors, report, serve, slurm_convert, train
from hpcpredict.cli.info import info
from hpcpredict.cli.replay import replay_compare, replay_slurm
from hpcpredict.cli.simulate import predict_eval, simulate
from hpcpredict.cli.tune import tune


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="hpcpredict")
def main() -> None:
    """Predict HPC job runtimes online and measure what it does to backfilling schedulers.

    Start with `hpcpredict info LOG.swf` to see a log, then `hpcpredict simulate LOG.swf` to
    replay it under EASY-SJBF with learned predictions and compare with plain EASY.

    \b
    Examples:
      hpcpredict info swf/KTH-SP2-sample.swf
      hpcpredict simulate swf/KTH-SP2-sample.swf
      hpcpredict campaign sim/smoke.toml
    """


for _command in (info, simulate, predict_eval, campaign, campaign_report, serve, train, errors, report,
                 slurm_convert, replay_slurm, replay_compare, tune):
    main.add_command(_command)

__all__ = ["main"]
