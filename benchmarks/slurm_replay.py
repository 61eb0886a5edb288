"""A log slice on a real SLURM (record or lower mode), then the simulator's slurm-backfill beside it.

Run on demand (as root; installs Debian's Slurm if needed) and copy the printed numbers into
docs/slurm-replay.md:

    python benchmarks/slurm_replay.py --jobs 200 --skip 270 --speedup 60 --mode record --out runs/

Starts the loopback cluster of tests/slurm_cluster.py with NODES one-CPU nodes (one slurmd each:
SLURM's backfill reserves whole nodes, so one-CPU nodes make it processor-granular like the
model), slurm-plugin's scripts and a real `hpcpredict serve --slurm`, then runs exactly

    hpcpredict replay-slurm LOG --jobs N --skip M --speedup K --mode MODE --procs NODES -o OUT.swf
    hpcpredict replay-compare OUT.swf [--slurm-params ...]

with SLURM_CONF pointing at the cluster. Slurm's scheduler settings are its defaults unless
--scheduler-parameters is given (then the same text goes to slurm.conf and to the model).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from daemon_thread import wait_until_answering  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402

PLUGIN_DIR = REPO / "slurm-plugin"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", type=Path, default=REPO / "swf" / "KTH-SP2-sample.swf")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--skip", type=int, default=270)
    parser.add_argument("--speedup", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=100, help="one-CPU nodes (KTH SP2: 100)")
    parser.add_argument("--mode", choices=["record", "lower"], default="record")
    parser.add_argument("--scheduler-parameters", default="",
                        help="slurm.conf SchedulerParameters (bf_* names), also given to the model")
    parser.add_argument("--out", type=Path, default=Path("slurm-replay"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{args.log.stem}-{args.skip}-{args.jobs}-k{args.speedup:g}-{args.mode}"
    extra = [f"SchedulerParameters={args.scheduler_parameters}"] if args.scheduler_parameters else []
    cluster = SlurmCluster(job_submit_lua=PLUGIN_DIR / "job_submit.lua", jobcomp_lua=PLUGIN_DIR / "jobcomp.lua",
                           nodes=args.nodes, node_cpus=1, extra_config=extra)
    cluster.extra_files["hpcpredict_slurm.conf"] = (
        f"socket={cluster.dir}/hpcpredict.sock\ntimeout_ms=300\nspool={cluster.dir}/jobcomp.spool\n"
    )
    cluster.start()
    serve = None
    try:
        socket_path = str(cluster.dir / "hpcpredict.sock")
        db = f"sqlite:///{cluster.dir / 'hpcpredict.db'}"
        serve = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--socket", socket_path, "--http", "",
             "--spool", str(cluster.dir / "jobcomp.spool"), "--slurm", "--slurm-backend", "cli",
             "--slurm-interval", "2", "--correction-margin", "45"],
            env=cluster.env, stdout=(args.out / f"{name}.serve.log").open("wb"), stderr=subprocess.STDOUT,
        )
        wait_until_answering(socket_path, serve, lambda: "")
        output = args.out / f"{name}.swf"
        replay = ["hpcpredict", "replay-slurm", str(args.log), "--jobs", str(args.jobs), "--skip", str(args.skip),
                  "--speedup", f"{args.speedup:g}", "--mode", args.mode, "--procs", str(args.nodes),
                  "-o", str(output), "--csv", str(args.out / f"{name}.csv")]
        print("$", " ".join(replay), flush=True)
        started = time.monotonic()
        subprocess.run(replay, env=cluster.env, check=True)
        print(f"replay took {time.monotonic() - started:.0f} s", flush=True)
        compare = ["hpcpredict", "replay-compare", str(output)]
        if args.scheduler_parameters:
            compare += ["--slurm-params", args.scheduler_parameters]
        print("$", " ".join(compare), flush=True)
        subprocess.run(compare, env=cluster.env, check=True)
        subprocess.run([*compare, "--json"], env=cluster.env, check=True,
                       stdout=(args.out / f"{name}.compare.json").open("w"))
    finally:
        if serve is not None and serve.poll() is None:
            serve.terminate()
            serve.wait(30)
        cluster.cleanup()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
