"""One read of N held jobs through each backend of the SLURM adapter, on a real slurmctld: the
first figure of docs/admin-guide.md ("pyslurm"). The watcher's whole cost at 1k-100k jobs (wall,
CPU, RSS, bytes, slurmctld's CPU) is benchmarks/watcher_poll_cost.py's.

    python benchmarks/pyslurm_read_timing.py            # 1,000 jobs, root, Slurm installed
    python benchmarks/pyslurm_read_timing.py 5000

The pyslurm matching the installed Slurm is built (or taken from the cache) by
`testbed.pyslurm_wheel` and installed into a temporary folder for this run. Both backends' reads
are checked equal first; then each call 7 times: median, min, max.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # testbed/, from any folder

from testbed.pyslurm_wheel import wheel  # noqa: E402
from testbed.slurm_cluster import SlurmCluster  # noqa: E402


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    folder = Path(tempfile.mkdtemp(prefix="pyslurm-"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--target", str(folder), str(wheel())], check=True)
    cluster = SlurmCluster()
    cluster.start()
    os.environ["SLURM_CONF"] = str(cluster.conf)
    sys.path.insert(0, str(folder))
    import pyslurm

    from hpcpredict.slurm.adapter import CliBackend, PyslurmBackend

    try:
        began = time.monotonic()
        script = (f"for i in $(seq {count}); do sbatch --hold --time=10 -o /dev/null --wrap 'sleep 1'"
                  " >/dev/null || exit 1; done")
        subprocess.run(["bash", "-c", script], env=cluster.env, check=True)
        print(f"submitted {count} held jobs in {time.monotonic() - began:.0f} s")
        cli, through_pyslurm = CliBackend(), PyslurmBackend(pyslurm)
        assert sorted(cli.jobs(), key=lambda j: j.job_id) == sorted(through_pyslurm.jobs(), key=lambda j: j.job_id)
        for name, call in (("CliBackend.jobs()", cli.jobs), ("PyslurmBackend.jobs()", through_pyslurm.jobs),
                           ("CliBackend.job(id)", lambda: cli.job(count // 2)),
                           ("PyslurmBackend.job(id)", lambda: through_pyslurm.job(count // 2))):
            times = []
            for _ in range(7):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            print(f"{name:24s} median {statistics.median(times) * 1000:7.1f} ms  "
                  f"min {min(times) * 1000:7.1f}  max {max(times) * 1000:7.1f}")
        print("load average", open("/proc/loadavg").read().split()[0])
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
