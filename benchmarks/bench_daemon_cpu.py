"""The daemon's own CPU time per PREDICT, around benchmarks/bench_daemon.py.

On a machine shared with other work, predictions/s moves more between two runs of the same code
than between two versions; the CPU time the `hpcpredict serve` process spends per request (user +
system, read from /proc before and after each mode) is the steadier figure for "no slower":

    python benchmarks/bench_daemon_cpu.py                   # as bench_daemon.py runs it (--http '')
    python benchmarks/bench_daemon_cpu.py --http-on         # with the admin API listening
    cd OTHER_CHECKOUT && PYTHONPATH=. python /path/to/bench_daemon_cpu.py --tree .   # a baseline

It runs bench_daemon.py's own `main` (same store, same clients), watching the daemon it starts.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system seconds of process `pid` (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose benchmarks/bench_daemon.py and sample log to use")
    parser.add_argument("--http-on", action="store_true", help="serve the admin API on 127.0.0.1:0")
    parser.add_argument("--requests", type=int, default=10_000, help="per client and mode")
    args = parser.parse_args()

    spec = importlib.util.spec_from_file_location("bench_daemon", args.tree / "benchmarks" / "bench_daemon.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    daemons: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def watched_popen(command: list[str], *rest, **options) -> subprocess.Popen:
        if args.http_on and "--http" in command:
            command = list(command)
            command[command.index("--http") + 1] = "127.0.0.1:0"
        process = popen(command, *rest, **options)
        daemons.append(process)
        return process

    run_mode = bench.run_mode

    def measured_run_mode(*positional, **options) -> dict:
        before_s = cpu_s(daemons[-1].pid)
        row = run_mode(*positional, **options)
        row["cpu_us"] = 1e6 * (cpu_s(daemons[-1].pid) - before_s) / row["requests"]
        print(f"{'API on ' if args.http_on else 'API off'} {row['mode']:12s} {row['per_s']:8,.0f}/s  "
              f"daemon CPU {row['cpu_us']:6.1f} µs/request", flush=True)
        return row

    bench.subprocess.Popen = watched_popen
    bench.run_mode = measured_run_mode
    sys.argv = ["bench_daemon.py", str(args.tree / "swf" / "KTH-SP2-sample.swf"), "--requests", str(args.requests)]
    bench.main()


if __name__ == "__main__":
    main()
