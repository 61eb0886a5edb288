"""What job_submit.lua adds to each ``sbatch``, on a real SLURM (goal < 5 ms).

Run on demand (as root; installs Debian's Slurm if needed) and copy the table into
docs/performance.md:

    python benchmarks/bench_plugin_latency.py [--jobs 60]

Starts the test cluster of testbed/slurm_cluster.py with slurm-plugin's scripts and a real
`hpcpredict serve`, then times ``sbatch --time=60`` (wall clock of the whole command, held jobs so
the node stays free) in three settings, interleaved round by round so that drift hits all alike:
plugin ``enabled=0`` (the Lua script runs and returns at once: the baseline), plugin asking the
daemon, and plugin with the daemon down (connection refused). The plugin's cost is the difference
of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed/

from testbed.slurm_cluster import SlurmCluster  # noqa: E402

from hpcpredict.daemon.fronts.client import DaemonClient  # noqa: E402


def settings(cluster: SlurmCluster, **values: object) -> None:
    (cluster.dir / "hpcpredict_slurm.conf").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    script = cluster.dir / "job_submit.lua"
    os.utime(script, (time.time(), time.time() + 1))  # slurmctld reloads a script whose file changed
    cluster.sbatch("--hold", "--time=1", script="true")  # let the reload happen outside the timing


def timed_sbatch(cluster: SlurmCluster) -> float:
    began = time.perf_counter()
    cluster.sbatch("--hold", "--time=60", script="true")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=60, help="sbatch calls per setting")
    args = parser.parse_args()

    cluster = SlurmCluster(job_submit_lua=REPO / "slurm-plugin" / "job_submit.lua")
    cluster.start()
    socket_path = str(cluster.dir / "hpcpredict.sock")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", f"sqlite:///{cluster.dir / 'd.db'}", "--create-db",
         "--socket", socket_path, "--http", "", "--spool", str(cluster.dir / "jobcomp.spool"), "--log-level", "warning"],
        env=cluster.env,
    )
    try:
        while not os.path.exists(socket_path):
            time.sleep(0.05)
        with DaemonClient(socket_path) as client:
            client.request("PING")
        samples: dict[str, list[float]] = {"plugin disabled (baseline)": [], "daemon up": [], "daemon down": []}
        down = str(cluster.dir / "nobody.sock")
        for _ in range(args.jobs // 10):
            for label, values in (("plugin disabled (baseline)", {"socket": socket_path, "enabled": 0}),
                                  ("daemon up", {"socket": socket_path}),
                                  ("daemon down", {"socket": down})):
                settings(cluster, **values)
                samples[label] += [timed_sbatch(cluster) for _ in range(10)]
    finally:
        daemon.terminate()
        daemon.wait(30)
        cluster.cleanup()

    baseline = statistics.median(samples["plugin disabled (baseline)"])
    print(f"# sbatch wall time, {args.jobs} calls per setting, interleaved")
    print("| setting | median ms | p90 ms | added vs baseline (median) ms |")
    print("|---|---:|---:|---:|")
    for label, values in samples.items():
        values.sort()
        median = statistics.median(values)
        p90 = values[int(0.9 * (len(values) - 1))]
        print(f"| {label} | {1e3 * median:.2f} | {1e3 * p90:.2f} | {1e3 * (median - baseline):+.2f} |")


if __name__ == "__main__":
    main()
