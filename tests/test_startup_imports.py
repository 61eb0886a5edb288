"""``hpcpredict --help`` and every command's ``--help`` import none of the heavy libraries
(issue 28: start-up under 0.5 s; issue 31). Only the command that runs imports what it needs.

A behaviour, not a timing: the time it buys is measured by `benchmarks/bench_startup.py` and
recorded in docs/performance.md ("Start-up"). Each check runs in a fresh interpreter, since this
test process has long imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Each costs 0.1-0.6 s to import; none is needed to print help.
HEAVY = (
    "numpy", "scipy", "pandas", "matplotlib", "numba", "llvmlite", "sqlalchemy", "alembic",
    "aiohttp", "prometheus_client", "psycopg", "tqdm",
)

_PROBE = """
import json, sys
preload, runs = json.loads(sys.argv[1])
for module in preload:
    __import__(module)
from hpcpredict.cli import main
for args in runs:
    try:
        main(args, prog_name="hpcpredict")
    except SystemExit:
        pass
heavy = {heavy!r}
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & set(heavy))))
""".format(heavy=HEAVY)


def heavy_modules_after(runs: list[list[str]], preload: tuple[str, ...] = ()) -> list[str]:
    """The heavy top-level packages a fresh interpreter holds after `runs` of the command line
    (each a list of arguments), with `preload` imported first."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([list(preload), runs])],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_help_of_the_command_and_of_every_subcommand_imports_no_heavy_library() -> None:
    from hpcpredict.cli import main

    runs = [["--help"], ["--version"]] + [[name, "--help"] for name in sorted(main.all_commands())]
    assert heavy_modules_after(runs) == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The check above can fail: the same probe reports scipy when something imports it."""
    assert heavy_modules_after([["--help"]], preload=("scipy.stats",)) == ["numpy", "scipy"]


@pytest.mark.parametrize("module", ["hpcpredict.sim", "hpcpredict.learn"])
def test_packages_still_export_their_names_lazily(module: str) -> None:
    """`from hpcpredict.sim import simulate` and the like keep working (hpcpredict.lazy_exports)."""
    package = __import__(module, fromlist=["__all__"])
    for name in package.__all__:
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def test_a_command_imports_only_its_own_module_of_the_cli() -> None:
    """`hpcpredict simulate` does not import the daemon's, campaigns', tune's or SLURM replay's
    command modules (hpcpredict.cli.LazyCommands)."""
    probe = (
        "import sys\nfrom hpcpredict.cli import main\n"
        "try:\n    main(['simulate', '--help'], prog_name='hpcpredict')\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('hpcpredict.cli.')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    loaded = set(eval(done.stdout.strip().splitlines()[-1]))  # noqa: S307 - our own probe's list
    assert "hpcpredict.cli.simulate" in loaded
    assert not loaded & {"hpcpredict.cli.daemon", "hpcpredict.cli.campaign", "hpcpredict.cli.replay",
                         "hpcpredict.cli.tune", "hpcpredict.cli.info"}, loaded


def test_every_command_defined_in_the_cli_modules_is_listed() -> None:
    """A command added to a module but not to `COMMAND_MODULES` would be unreachable."""
    import importlib

    import click

    from hpcpredict.cli import COMMAND_MODULES, main

    defined = set()
    for module_name in set(COMMAND_MODULES.values()):
        module = importlib.import_module(f"hpcpredict.cli.{module_name}")
        defined |= {value.name for value in vars(module).values()
                    if isinstance(value, click.Command) and value.callback.__module__ == module.__name__}
    assert defined == set(main.all_commands())


def test_a_command_whose_stderr_is_not_a_terminal_does_not_import_tqdm() -> None:
    """No bar is drawn into a pipe, a log file or CI, so tqdm is not imported either (0.05 s of
    a 1 s `simulate`); `info` reads a log through the same bar as every command."""
    log = str(REPO_ROOT / "swf" / "KTH-SP2-sample.swf")
    assert "tqdm" not in heavy_modules_after([["info", log]])
    assert "tqdm" in heavy_modules_after([["info", log]], preload=("tqdm",))


def test_the_bar_is_drawn_for_a_person_at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The silent path above must not take the bar away from a person watching."""
    import io

    from hpcpredict.cli import common

    screen = io.StringIO()
    monkeypatch.setattr(common, "show_progress", lambda: True)
    monkeypatch.setattr(common.sys, "stderr", screen)
    with common.progress_bar(10, "job", "simulating") as update:
        update(5)
        update(10)
    assert "simulating:" in screen.getvalue() and "/10 [" in screen.getvalue()


def test_the_failsafe_imports_no_model_no_store_and_no_numerics(tmp_path: Path) -> None:
    """The failsafe must not share the daemon's fate (issue 50): a look of `failsafe` (a fresh
    heartbeat: no SLURM command) and `restore-limits` (no squeue on this PATH: an error) import
    none of the heavy libraries, nor the daemon's store, service or model modules."""
    import time

    from hpcpredict.slurm.heartbeat import Heartbeat, write_heartbeat

    write_heartbeat(tmp_path / "hb", Heartbeat(time.time() + 60, 1, 1))  # fresh for the probe's start
    look = ["failsafe", "--once", "--heartbeat", str(tmp_path / "hb"), "--status", str(tmp_path / "st")]
    probe = (
        "import json, sys\nfrom hpcpredict.cli import main\n"
        f"for args in ({look!r}, ['restore-limits', '--dry-run'], ['restore-limits']):\n"
        "    try:\n        main(args, prog_name='hpcpredict')\n    except SystemExit:\n        pass\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps([sorted(m for m in sys.modules if m.startswith('hpcpredict.')),"
        " sorted({m.split('.')[0] for m in sys.modules} & set(heavy))]))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PATH": str(tmp_path)}  # no SLURM command
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    loaded, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert heavy == [] and "squeue: not found" in done.stderr, done.stderr
    assert "hpcpredict.slurm.failsafe" in loaded
    # (the CLI's shared options bring the learner's defaults and the corrections' names: plain Python)
    assert not {m for m in loaded if m.startswith(("hpcpredict.learn.features", "hpcpredict.learn.predictor",
                                                   "hpcpredict.learn.nag", "hpcpredict.daemon.core.store",
                                                   "hpcpredict.daemon.core.service", "hpcpredict.daemon.fronts.server"))
                or "kernel" in m}, loaded
