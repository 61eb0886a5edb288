"""Which slices of a log to replay on a real SLURM for record against lower mode (docs/slurm-replay.md §4).

    python benchmarks/slurm_replay_slices.py ../shared/swf/KTH-SP2-1996-2.swf.gz --jobs 100 --speedup 60 \
        --count 10 --max-minutes 40

Every slice [skip, skip + jobs) of the cleaned log (skip a multiple of --jobs, after --train-jobs
jobs so that the daemon can be warmed on the jobs before it), scaled as replay-slurm scales it, is
run through the slurm-backfill model *on the users' requests* (plain SLURM, what record mode
does). A slice without a queue says nothing about lowering (both modes start every job at once),
so the COUNT slices with the highest plain AVEbsld are chosen among those whose modelled replay
ends within --max-minutes. The choice reads record mode only, never lowering's effect, so it does
not favour slices where lowering helps. Prints one line per chosen slice: skip, span, the model's
plain AVEbsld and its replay length.

With --versus NAME=VALUE,... (slurm.conf settings, as --slurm-params), the slices are ranked instead
by how much those settings change the model's plain AVEbsld: the slices on which a real slurmctld
can tell whether the model reads the settings as SLURM does (replay each twice, with and without
them: benchmarks/slurm_replay.py --scheduler-parameters).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hpcpredict.sim.metrics import compute_metrics  # noqa: E402
from hpcpredict.sim.runner import RunSpec, run  # noqa: E402
from hpcpredict.experiments.slurm_replay import ReplayError, Scaling, plan  # noqa: E402
from hpcpredict.logs.swf import MISSING, SwfRecord, write_swf  # noqa: E402
from hpcpredict.logs.workload import load_workload  # noqa: E402


def modelled(planned, nodes: int, folder: Path, slurm_params: str = "") -> tuple[float, float]:
    """(plain slurm-backfill AVEbsld, seconds from the first submission to the last end)."""
    records = [
        SwfRecord(job_id=k + 1, submit_s=round(job.offset_s), wait_s=0, run_s=job.sleep_s, allocated_procs=job.procs,
                  avg_cpu_s=MISSING, used_memory_kb=MISSING, requested_procs=job.procs,
                  requested_time_s=60 * job.time_limit_min, requested_memory_kb=MISSING, status=1,
                  user_id=max(1, job.log_user_id), group_id=MISSING, executable_id=MISSING, queue_id=MISSING,
                  partition_id=MISSING, preceding_job_id=MISSING, think_time_s=MISSING)
        for k, job in enumerate(planned)
    ]
    path = folder / "slice.swf"
    write_swf(path, ["; Version: 2.2", f"; MaxProcs: {nodes}"], records)
    result = run(load_workload(path), RunSpec("slurm-backfill", "requested", "incremental",
                                              slurm_params=slurm_params))
    end_s = max(start + job.run_s for start, job in zip(result.start_s, result.jobs))
    return compute_metrics(result).ave_bsld, end_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--speedup", type=float, default=60.0)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--train-jobs", type=int, default=300)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--max-minutes", type=float, default=40.0)
    parser.add_argument("--versus", default="", metavar="NAME=VALUE,...",
                        help="rank by how much these slurm.conf settings change the model's AVEbsld")
    args = parser.parse_args()
    workload = load_workload(args.log)
    scaling = Scaling(args.speedup, workload.machine_procs, args.nodes)
    candidates = []
    with tempfile.TemporaryDirectory() as folder:
        for skip in range(args.train_jobs, len(workload.jobs) - args.jobs, args.jobs):
            try:
                planned = plan(workload, jobs=args.jobs, skip=skip, scaling=scaling)
            except ReplayError:
                break
            ave_bsld, length_s = modelled(planned, args.nodes, Path(folder))
            if length_s > 60 * args.max_minutes:
                continue
            versus = modelled(planned, args.nodes, Path(folder), args.versus)[0] if args.versus else ave_bsld
            rank = abs(versus - ave_bsld) if args.versus else ave_bsld
            candidates.append((rank, skip, planned[-1].offset_s, length_s, ave_bsld, versus))
    chosen = sorted(sorted(candidates, reverse=True)[: args.count], key=lambda item: item[1])
    print(f"{len(candidates)} slices of {args.jobs} jobs end within {args.max_minutes:g} min in the model; chosen:")
    for _, skip, span_s, length_s, ave_bsld, versus in chosen:
        print(f"skip {skip}: submissions over {span_s / 60:.1f} min, modelled replay {length_s / 60:.1f} min, "
              f"plain AVEbsld {ave_bsld:.2f}" + (f", with {args.versus} {versus:.2f}" if args.versus else ""))
    print("skips:", " ".join(str(skip) for _, skip, *_ in chosen))


if __name__ == "__main__":
    main()
