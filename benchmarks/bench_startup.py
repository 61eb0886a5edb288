"""Start-up: `hpcpredict --help` and `hpcpredict simulate --help` as whole processes (goal:
under 0.5 s), interleaved with an older tree for comparison.

    python benchmarks/bench_startup.py                          # this tree only
    python benchmarks/bench_startup.py --before /tmp/speed-before --rounds 10

Run through this interpreter (``python -m hpcpredict.cli``), as the installed entry point runs;
pyenv's shim adds ~0.15 s of shell before Python starts, which no change here can remove.
Prints best / median wall and CPU (user + system) seconds per command and tree.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from process_timing import compare, hpcpredict_argv

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="an older tree to compare with")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    commands = {
        "hpcpredict --help": hpcpredict_argv("--help"),
        "hpcpredict simulate --help": hpcpredict_argv("simulate", "--help"),
        "python -c 'import hpcpredict.cli'": [hpcpredict_argv()[0], "-c", "import hpcpredict.cli"],
    }
    compare(commands, HERE, args.before, args.rounds)


if __name__ == "__main__":
    main()
