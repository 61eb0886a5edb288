"""A log slice on a real SLURM (record or lower mode), then the simulator's slurm-backfill beside it.

Run on demand (as root; installs Debian's Slurm if needed) and copy the printed numbers into
docs/slurm-replay.md:

    python benchmarks/slurm_replay.py --jobs 200 --skip 270 --speedup 60 --mode record --out runs/

Starts the loopback cluster of testbed/slurm_cluster.py with NODES one-CPU nodes (one slurmd each:
SLURM's backfill reserves whole nodes, so one-CPU nodes make it processor-granular like the
model), slurm-plugin's scripts and a real `hpcpredict serve --slurm`, then runs exactly

    hpcpredict replay-slurm LOG --jobs N --skip M --speedup K --mode MODE --procs NODES -o OUT.swf
    hpcpredict replay-compare OUT.swf [--predictor plugin --plugin-csv OUT.csv] [--slurm-params ...]

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
sys.path.insert(0, str(REPO))  # testbed/

from testbed.daemon_thread import wait_until_answering  # noqa: E402
from testbed.slurm_cluster import SlurmCluster  # noqa: E402

PLUGIN_DIR = REPO / "slurm-plugin"
CORRECTION_MARGIN_S = 45  # the corrector raises a limit this long before it (>= 2 looks + SLURM's 30 s check)


def write_training_history(log: Path, skip: int, count: int, speedup: float, nodes: int, path: Path,
                           users: str = "log") -> None:
    """Jobs [skip - count, skip) of the cleaned log, scaled exactly as replay-slurm scales the slice,
    as an SWF history run at once (wait 0): what the daemon would have learned had they been
    replayed before the slice, by the accounts the replay submits as (`users`: each log user's,
    uid 30000+U, or this process's)."""
    from hpcpredict.experiments.slurm_replay import Scaling, plan, replay_uid
    from hpcpredict.logs.swf import MISSING, SwfRecord, write_swf
    from hpcpredict.logs.workload import load_workload

    workload = load_workload(log)
    first = max(0, skip - count)
    planned = plan(workload, jobs=skip - first, skip=first, scaling=Scaling(speedup, workload.machine_procs, nodes))
    records = [
        SwfRecord(job_id=job.log_job_id, submit_s=round(job.offset_s), wait_s=0, run_s=job.sleep_s,
                  allocated_procs=job.procs, avg_cpu_s=MISSING, used_memory_kb=MISSING,
                  requested_procs=job.procs, requested_time_s=60 * job.time_limit_min,
                  requested_memory_kb=MISSING, status=1,
                  user_id=replay_uid(job.log_user_id) if users == "log" else os.getuid(), group_id=os.getgid(),
                  executable_id=MISSING, queue_id=MISSING, partition_id=MISSING,
                  preceding_job_id=MISSING, think_time_s=MISSING)
        for job in planned
    ]
    # Dated so that the history ends now: the daemon treats a user whose last job ended long ago as
    # stale and falls back to the request (docs/daemon.md), which would turn lower mode into record.
    last_end_s = max(record.submit_s + record.run_s for record in records)
    header = ["; Version: 2.2", f"; Computer: {log.name} jobs {first + 1}-{skip}, speedup {speedup:g}",
              f"; MaxProcs: {nodes}", f"; MaxJobs: {len(records)}",
              f"; UnixStartTime: {int(time.time()) - last_end_s - 1}", "; TimeZoneString: UTC"]
    write_swf(path, header, records)


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
    parser.add_argument("--train-jobs", type=int, default=0,
                        help="warm the daemon with `hpcpredict train` on this many jobs just before the "
                        "slice, scaled like it, by the accounts the replay submits as (--users); below "
                        "the daemon's min_trained_jobs "
                        "(231) it is not ready and answers the requests, so lower mode lowers nothing")
    parser.add_argument("--users", choices=["log", "self"], default="log",
                        help="replay-slurm --users: each job as its log user (default), or all as you")
    parser.add_argument("--out", type=Path, default=Path("slurm-replay"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{args.log.name.split('.swf')[0]}-{args.skip}-{args.jobs}-k{args.speedup:g}-{args.mode}"
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
        if args.train_jobs:
            history = args.out / f"{name}.train.swf"
            write_training_history(args.log, args.skip, args.train_jobs, args.speedup, args.nodes, history,
                                   args.users)
            train = ["hpcpredict", "train", str(history), "--db", db, "--procs", str(args.nodes)]
            print("$", " ".join(train), flush=True)
            subprocess.run(train, env=cluster.env, check=True)
        serve = subprocess.Popen(
            [sys.executable, "-m", "hpcpredict.cli", "serve", "--db", db, "--create-db", "--socket", socket_path, "--http", "",
             "--spool", str(cluster.dir / "jobcomp.spool"), "--slurm", "--slurm-backend", "cli",
             "--slurm-interval-s", "2", "--correction-margin-s", str(CORRECTION_MARGIN_S)],
            env=cluster.env, stdout=(args.out / f"{name}.serve.log").open("wb"), stderr=subprocess.STDOUT,
        )
        wait_until_answering(socket_path, serve, lambda: "")
        output = args.out / f"{name}.swf"
        replay = ["hpcpredict", "replay-slurm", str(args.log), "--jobs", str(args.jobs), "--skip", str(args.skip),
                  "--speedup", f"{args.speedup:g}", "--mode", args.mode, "--procs", str(args.nodes),
                  "--users", args.users, "-o", str(output), "--csv", str(args.out / f"{name}.csv")]
        print("$", " ".join(replay), flush=True)
        started = time.monotonic()
        subprocess.run(replay, env=cluster.env, check=True)
        print(f"replay took {time.monotonic() - started:.0f} s", flush=True)
        compare = ["hpcpredict", "replay-compare", str(output)]
        if args.mode == "lower":  # the model plans with the limits the plugin set
            compare += ["--predictor", "plugin", "--plugin-csv", str(args.out / f"{name}.csv"),
                        "--correction-lead-s", str(CORRECTION_MARGIN_S)]
        if args.scheduler_parameters:
            compare += ["--slurm-params", args.scheduler_parameters]
        print("$", " ".join(compare), flush=True)
        subprocess.run(compare, env=cluster.env, check=True)
        subprocess.run([*compare, "--format", "json"], env=cluster.env, check=True,
                       stdout=(args.out / f"{name}.compare.json").open("w"))
    finally:
        if serve is not None and serve.poll() is None:
            serve.terminate()
            serve.wait(30)
        cluster.cleanup()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
