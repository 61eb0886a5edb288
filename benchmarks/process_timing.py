"""Wall and CPU time of whole `hpcpredict` processes, interleaved across source trees.

On a shared machine a before/after comparison is fair only when both run in the same minutes:
`interleave` runs each command once per tree, round after round, and keeps every figure.
CPU time is the child's user + system time (``os.wait4``), less disturbed by the other load
than wall time; the 1-minute load average is kept beside each round.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Timings:
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)

    def summary(self) -> str:
        """``best / median`` wall and CPU seconds."""
        return (f"wall {min(self.wall_s):.2f} / {statistics.median(self.wall_s):.2f}, "
                f"cpu {min(self.cpu_s):.2f} / {statistics.median(self.cpu_s):.2f}")


def time_process(argv: list[str], tree: Path) -> tuple[float, float]:
    """(wall s, user + system CPU s) of one run of `argv` with `tree`'s hpcpredict imported
    (run in `tree`: ``python -m`` puts the working folder first on the path; give logs as
    absolute paths)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} in {tree} failed ({process.returncode}): {stderr[-2000:]}")
    return wall_s, usage.ru_utime + usage.ru_stime


def compile_bytecode(tree: Path) -> None:
    """Compile `tree`'s hpcpredict to bytecode first, as `pip install` does: otherwise, under
    PYTHONDONTWRITEBYTECODE (set in some shells and CI images), every run would compile its ~50
    modules from source (~0.1 s of KTH-SP2's 1 s), a cost no installed site pays."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "hpcpredict")], check=True)


def hpcpredict_argv(*args: str) -> list[str]:
    """The command line as the installed entry point runs it, through this interpreter (not
    pyenv's shell shim, which alone costs ~0.15 s)."""
    return [sys.executable, "-m", "hpcpredict.cli", *args]


def interleave(
    commands: dict[str, list[str]], trees: dict[str, Path], rounds: int, side_by_side: bool = False
) -> dict[tuple[str, str], Timings]:
    """Every command on every tree, `rounds` times, trees alternating inside each round, or
    started together (`side_by_side`: on a busy machine both then see the same slowdowns).
    Each figure is printed on stderr as it comes."""
    from concurrent.futures import ThreadPoolExecutor

    results = {(name, tree): Timings() for name in commands for tree in trees}
    for round_ in range(rounds):
        for name, argv in commands.items():
            order = list(trees.items()) if round_ % 2 == 0 else list(reversed(trees.items()))
            with ThreadPoolExecutor(len(order) if side_by_side else 1) as pool:
                timed = [(tree_name, pool.submit(time_process, argv, tree)) for tree_name, tree in order]
                for tree_name, future in timed:
                    wall_s, cpu_s = future.result()
                    results[(name, tree_name)].wall_s.append(wall_s)
                    results[(name, tree_name)].cpu_s.append(cpu_s)
                    print(f"  {name} [{tree_name}]: wall {wall_s:.2f} s, cpu {cpu_s:.2f} s, "
                          f"load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        print(f"round {round_ + 1}/{rounds} done, load average {os.getloadavg()[0]:.2f}",
              file=sys.stderr)
    return results


def print_table(results: dict[tuple[str, str], Timings], trees: list[str]) -> None:
    """A Markdown table: one row per command, one column per tree (best / median s)."""
    print("| command | " + " | ".join(f"{tree}: wall best / median s, CPU best / median s"
                                      for tree in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name in dict.fromkeys(name for name, _ in results):
        cells = []
        for tree in trees:
            t = results[(name, tree)]
            cells.append(f"{min(t.wall_s):.2f} / {statistics.median(t.wall_s):.2f}, "
                         f"{min(t.cpu_s):.2f} / {statistics.median(t.cpu_s):.2f}")
        print(f"| `{name}` | " + " | ".join(cells) + " |")


def compare(
    commands: dict[str, list[str]], here: Path, before: Path | None, rounds: int,
    side_by_side: bool = False, others: dict[str, Path] | None = None,
) -> None:
    """Interleave `commands` on this tree (`here`), an older one and any `others` (name -> tree,
    between the two in the table), print the table and the load."""
    trees = {} if before is None else {"before": before.resolve()}
    trees.update({name: tree.resolve() for name, tree in (others or {}).items()})
    trees["after"] = here
    for tree in trees.values():
        compile_bytecode(tree)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    results = interleave(commands, trees, rounds, side_by_side)
    print_table(results, list(trees))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
