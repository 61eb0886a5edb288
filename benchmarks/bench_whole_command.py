"""The whole command as a user waits for it: `hpcpredict info` and `hpcpredict
simulate` on the three archive logs, process start to exit, interleaved with an older tree.

    python benchmarks/bench_whole_command.py --before /tmp/speed-before --rounds 3
    python benchmarks/bench_whole_command.py --before /tmp/speed-before --tree main=/tmp/speed-main --rounds 2
    python benchmarks/bench_whole_command.py --only "simulate CEA-Curie --replicas 10" --rounds 1

Goals (default configuration): `simulate LOG --no-baseline` KTH-SP2 <= 1.0 s,
SDSC-BLUE <= 3 s, CEA-Curie <= 4 s; with the baseline CEA-Curie <= 6 s; `info` CEA-Curie
<= 0.8 s. Prints best / median wall and CPU (user + system of the process and its workers).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from process_timing import compare, hpcpredict_argv

HERE = Path(__file__).resolve().parents[1]
SWF = HERE.parent / "shared" / "swf"
KTH, BLUE, CURIE = (str(SWF / name) for name in (
    "KTH-SP2-1996-2.swf.gz", "SDSC-BLUE-2000-4.1-cln.swf.gz", "CEA-Curie-2011-2.1-cln.swf.gz"))

COMMANDS = {
    "info CEA-Curie": hpcpredict_argv("info", CURIE, "--procs", "80640"),
    "simulate KTH-SP2 --no-baseline": hpcpredict_argv("simulate", KTH, "--no-baseline"),
    "simulate SDSC-BLUE --no-baseline": hpcpredict_argv("simulate", BLUE, "--no-baseline"),
    "simulate CEA-Curie --no-baseline": hpcpredict_argv("simulate", CURIE, "--procs", "80640", "--no-baseline"),
    "simulate CEA-Curie": hpcpredict_argv("simulate", CURIE, "--procs", "80640"),
    "simulate CEA-Curie --replicas 10": hpcpredict_argv("simulate", CURIE, "--procs", "80640", "--replicas", "10"),
}
DEFAULT = [name for name in COMMANDS if "--replicas" not in name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="an older tree to compare with")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                        help="one more tree to interleave (e.g. main=/tmp/speed-main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=sorted(COMMANDS), default=None)
    parser.add_argument("--extra-args", default="", help="appended to every simulate command "
                        "(e.g. '--jobs 1'; only for trees that have the option)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="start before and after together (a busy machine slows both alike)")
    args = parser.parse_args()
    chosen = {name: COMMANDS[name] + (args.extra_args.split() if name.startswith("simulate") else [])
              for name in (args.only or DEFAULT)}
    others = {}
    for option in args.tree:
        name, separator, path = option.partition("=")
        if not separator or not name or not path:
            parser.error(f"--tree takes NAME=PATH, got {option!r}")
        others[name] = Path(path)
    compare(chosen, HERE, args.before, args.rounds, args.side_by_side, others)


if __name__ == "__main__":
    main()
