"""Mutation testing of the core, one module group at a time, with mutmut (on demand, not in CI).

Each group mutates a few modules and runs only the fast test files that exercise them: mutmut
runs the selected tests once to learn which test reaches which function, then, for each mutant,
only the tests that reach the mutated function. A mutant *survives* when they all still pass.
docs/mutation.md has the scores, every surviving mutant and why it is equivalent or which test
now kills it.

    pip install -e '.[mutation]'
    nice -n 10 python benchmarks/mutation.py                      # every group
    nice -n 10 python benchmarks/mutation.py protocol corrections # some groups
    python benchmarks/mutation.py --report                        # scores and survivors again

Why a scratch copy: mutmut writes its mutated tree (``mutants/``) and its results in the folder
it runs from, and reads its settings from ``pyproject.toml`` there. Each group gets its own
folder under --work-dir (a copy of hpcpredict/, the files the tests read and pyproject.toml with the group's
``[tool.mutmut]`` table), so groups do not share results and the checkout is never touched.

Why the compiled kernels are turned into Python for their group: mutmut skips decorated
functions, and a mutant of an ``@njit(cache=True)`` function could be judged on a stale cache.
In the kernels' copy the ``@njit`` and ``@compiled`` lines are removed and NUMBA_DISABLE_JIT=1 is set (numba's
own pure-Python mode, where ``njit`` returns the function unchanged), and the three calls that
only compile (`nag_kernels._fma`, ``_libm_log``, ``_libm_pow``) get Python versions that round
exactly as the compiled ones: a correctly rounded a * b + c through `fractions.Fraction`, and
CPython's own ``math.log`` and ``**`` (the C ``log`` and ``pow`` the kernels bind to). The
kernels then compute what they compile to, bit for bit (tests/test_nag.py checks the kernels
against numpy to the bit, and passes in that copy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Group:
    """Modules mutated together and the test files that judge their mutants."""

    modules: tuple[str, ...]
    tests: tuple[str, ...]
    compiled: bool = False  # has @njit kernels: run them as Python (module doc)
    # Tests of those files left out (pytest node ids): slow ones that reach the modules only
    # through a whole command (the CLI) or judge another group's module, where the other
    # tests judge these modules more directly.
    deselect: tuple[str, ...] = ()


GROUPS: dict[str, Group] = {
    "schedulers": Group(
        ("hpcpredict/sim/easy/schedulers.py",),
        ("tests/test_scheduler_fast_path.py", "tests/test_scheduler_edges.py",
         "tests/test_simulation.py", "tests/test_starvation_guard.py",
         "tests/test_backfill_kernel.py"),
        deselect=(
            # the kernel against the slow rule (hypothesis): the backfill_kernel group's
            "tests/test_backfill_kernel.py::test_the_kernel_starts_what_the_slow_rule_starts",
            "tests/test_starvation_guard.py::test_simulate_guards_learned_predictions_by_default_as_the_daemon_does",
            "tests/test_starvation_guard.py::test_published_baselines_are_named_as_published_and_their_bounded_variants_as_such",
            "tests/test_starvation_guard.py::test_predict_eval_runs_every_predictor_under_the_guard_it_names",
        ),
    ),
    "backfill_kernel": Group(
        ("hpcpredict/sim/easy/backfill_kernel.py",),
        ("tests/test_backfill_kernel.py", "tests/test_simulation.py"),
        compiled=True,
    ),
    "corrections": Group(
        ("hpcpredict/corrections/policies.py", "hpcpredict/corrections/starvation.py",
         "hpcpredict/corrections/survival.py"),
        ("tests/test_survival.py", "tests/test_corrections_boundaries.py",
         "tests/test_starvation_guard.py", "tests/test_simulation.py", "tests/test_censoring.py",
         "tests/test_slurm_corrector.py"),
    ),
    "survival_kernel": Group(
        ("hpcpredict/corrections/survival_kernel.py",),
        ("tests/test_survival.py", "tests/test_corrections_boundaries.py"),
        compiled=True,
        deselect=(
            # the daemon's learner too, whose kernels have no Python stand-ins outside nag's group
            "tests/test_survival.py::test_the_slurm_corrector_uses_the_history_the_service_feeds_and_keeps_it_over_a_restart",
        ),
    ),
    "features": Group(
        ("hpcpredict/learn/features.py",),
        ("tests/test_features.py", "tests/test_features_edges.py", "tests/test_learned_predictor.py",
         "tests/test_cold_start.py", "tests/test_features_compiled.py"),
    ),
    "nag": Group(
        ("hpcpredict/learn/nag.py", "hpcpredict/learn/nag_kernels.py"),
        ("tests/test_nag.py", "tests/test_nag_checkpoint.py", "tests/test_nag_edges.py"),
        compiled=True,
    ),
    "events": Group(
        ("hpcpredict/daemon/core/events.py", "hpcpredict/daemon/core/learning.py"),
        # The service and its store in the test process; no daemon thread (too slow to start
        # under mutmut's trampolines on a loaded machine).
        ("tests/test_daemon_learning_rules.py", "tests/test_daemon_events_format.py",
         "tests/test_daemon_service.py",
         "tests/test_daemon_newest_end.py", "tests/test_censoring.py"),
    ),
    "protocol": Group(
        ("hpcpredict/daemon/fronts/protocol.py",),
        ("tests/test_daemon_protocol.py", "tests/test_daemon_protocol_fields.py"),
    ),
}

# Fixed hypothesis seed: a mutant is judged on the same examples every run. No real SLURM,
# PostgreSQL or full real log: those suites are slow, and the modules' own tests cover them.
PYTEST_ARGS = ["--hypothesis-seed=0", "-p", "no:cacheprovider", "-m",
               "not slow and not postgres and not slurm and not reallog"]

# What the tests read beside the package: copied into the scratch folder and into mutants/.
ALSO_COPY = ("tests", "swf", "sim", "deploy", "docs", "slurm-plugin", "benchmarks")

# The compiled-only calls of nag_kernels, as Python that rounds the same (module doc).
PYTHON_STAND_INS = '''
# --- benchmarks/mutation.py: Python stand-ins for the compiled-only calls ---  # pragma: no mutate
from fractions import Fraction as _Fraction  # pragma: no mutate


def _fma(a, b, c):  # pragma: no mutate
    return float(_Fraction(a) * _Fraction(b) + _Fraction(c))  # pragma: no mutate


def _libm_log(x):  # pragma: no mutate
    return math.log(x)  # pragma: no mutate


def _libm_pow(x, y):  # pragma: no mutate
    return x ** y  # pragma: no mutate
'''


def as_python(source: str) -> str:
    """A kernel module's source with its compiling decorators removed (``@njit``, ``@njit(...)``
    and ``@compiled``, hpcpredict.compiled's cached njit) and the stand-ins appended."""
    source = re.sub(r"^@(njit|compiled)(\(.*\))?\n", "", source, flags=re.MULTILINE)
    if "_libm_log = _c_function" in source:
        source += PYTHON_STAND_INS
    return source


def toml_list(values: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(value) for value in values) + "]"


def prepare(name: str, group: Group, work_dir: Path) -> Path:
    """The group's scratch folder, fresh (module doc)."""
    folder = work_dir / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for part in ("hpcpredict", *ALSO_COPY):
        shutil.copytree(REPO / part, folder / part, ignore=ignore)
    if group.compiled:
        for module in group.modules:
            path = folder / module
            path.write_text(as_python(path.read_text()))
    pytest_args = PYTEST_ARGS + [f"--deselect={test}" for test in group.deselect]
    settings = (
        "\n[tool.mutmut]\n"
        'source_paths = ["hpcpredict"]\n'
        f"also_copy = {toml_list(ALSO_COPY)}\n"
        f"only_mutate = {toml_list(group.modules)}\n"
        f"pytest_add_cli_args = {toml_list(pytest_args)}\n"
        f"pytest_add_cli_args_test_selection = {toml_list(group.tests)}\n"
        "use_git_change_detection = false\n"
    )
    (folder / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text() + settings)
    return folder


def environment(folder: Path, group: Group) -> dict[str, str]:
    env = dict(os.environ)
    # mutmut puts mutants/ first on sys.path itself. Not PYTHONPATH: a checkout there would be
    # imported instead, and mutants/ there would be looked up (and remembered as missing) before
    # mutmut makes it, so that an installed hpcpredict would be imported instead.
    env.pop("PYTHONPATH", None)
    env["NUMBA_CACHE_DIR"] = str(folder / "numba-cache")
    if group.compiled:
        env["NUMBA_DISABLE_JIT"] = "1"
    return env


def mutmut(folder: Path, group: Group, *args: str, capture: bool = False) -> str:
    command = [sys.executable, "-m", "mutmut", *args]
    result = subprocess.run(command, cwd=folder, env=environment(folder, group), text=True,
                            stdout=subprocess.PIPE if capture else None, check=False)
    return result.stdout or ""


def report(name: str, group: Group, work_dir: Path) -> dict[str, object]:
    """The group's counts (mutmut's CI/CD stats) and its surviving mutants' names."""
    folder = work_dir / name
    mutmut(folder, group, "export-cicd-stats", capture=True)
    stats_file = folder / "mutants" / "mutmut-cicd-stats.json"
    if not stats_file.is_file():  # mutmut stopped early: its own output says why
        return {"error": f"no results in {folder} (see mutmut's output above)"}
    stats = json.loads(stats_file.read_text())
    survivors = [line.split(":")[0].strip()
                 for line in mutmut(folder, group, "results", capture=True).splitlines()
                 if line.strip().endswith("survived")]
    judged = stats["killed"] + stats["survived"]
    stats["score"] = round(100.0 * stats["killed"] / judged, 1) if judged else None
    stats["survivors"] = survivors
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP",
                        help=f"groups to run, of {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/hpcpredict-mutation"),
                        help="where the groups' scratch copies go (default: %(default)s)")
    parser.add_argument("--max-children", type=int, default=1,
                        help="mutants tested at once (default: %(default)s)")
    parser.add_argument("--report", action="store_true",
                        help="only print the scores and survivors of finished runs")
    arguments = parser.parse_args()
    names = arguments.groups or list(GROUPS)
    unknown = sorted(set(names) - set(GROUPS))
    if unknown:
        parser.error(f"no such group: {', '.join(unknown)} (groups: {', '.join(GROUPS)})")
    for name in names:
        group = GROUPS[name]
        if not arguments.report:
            folder = prepare(name, group, arguments.work_dir)
            mutmut(folder, group, "run", "--max-children", str(arguments.max_children))
        stats = report(name, group, arguments.work_dir)
        print(json.dumps({"group": name, **stats}, indent=1), flush=True)


if __name__ == "__main__":
    main()
