"""The ``hpcpredict`` command: one click group over thin commands, one module per family.

    info.py       info                                  a log and its cleaning
    simulate.py   simulate, predict-eval                a log replayed through a scheduler
    campaign.py   campaign, campaign-report             grids of simulations, stored and reported
    daemon.py     serve, train, errors, report,         the prediction daemon and its database
                  slurm-convert
    replay.py     replay-slurm, replay-compare          a log on a real SLURM, beside the simulator
    failsafe.py   failsafe, restore-limits              lowered limits back to requests, no daemon
    options.py    the options several commands share, and the deprecated names of renamed ones
    common.py     progress bars, reading a log, checking output paths

Each command module imports only options.py and common.py of this package, never this file, so
the package has no import cycle; expensive imports (SQLAlchemy, pandas, matplotlib) wait inside
the commands, so `--help` stays quick; and a command's module is imported only when that command
runs (`LazyCommands`), so `simulate` does not pay for the daemon's or the campaigns' modules.
"""

from __future__ import annotations

import importlib

import click

# Each command's module, imported when the command runs (or its help is shown): `hpcpredict
# simulate` does not import the daemon's, the campaigns' or the SLURM replay's modules.
COMMAND_MODULES = {
    "info": "info",
    "simulate": "simulate",
    "predict-eval": "simulate",
    "campaign": "campaign",
    "campaign-report": "campaign",
    "serve": "daemon",
    "train": "daemon",
    "errors": "daemon",
    "report": "daemon",
    "slurm-convert": "daemon",
    "replay-slurm": "replay",
    "replay-compare": "replay",
    "tune": "tune",
    "failsafe": "failsafe",
    "restore-limits": "failsafe",
}


class LazyCommands(click.Group):
    """A group whose commands are imported by name on first use (click's documented pattern for
    lazily loaded subcommands); `commands` holds those loaded so far."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            module = importlib.import_module(f"hpcpredict.cli.{COMMAND_MODULES[cmd_name]}")
            self.add_command(getattr(module, cmd_name.replace("-", "_")), cmd_name)
        return self.commands.get(cmd_name)

    def all_commands(self) -> dict[str, click.Command]:
        """Every command, loaded: for tests and documentation that walk them all."""
        return {name: self.get_command(None, name) for name in self.list_commands(click.Context(self))}


@click.group(cls=LazyCommands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


__all__ = ["main"]
