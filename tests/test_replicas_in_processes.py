"""`run_replicated` with worker processes (issue 31: `simulate --replicas 10` on both cores,
the log read once): the same metrics and the same replica-0 schedules as in one process."""

from __future__ import annotations

import os

from conftest import SAMPLE_LOG
from hpcpredict.sim.runner import RunSpec, run_replicated
from hpcpredict.logs.workload import load_workload

SPECS = [RunSpec.from_keys("easy-sjbf", "learned", "incremental", starvation_guard_s=86_400),
         RunSpec("easy", "requested", "requested")]


def test_worker_processes_give_what_one_process_gives():
    workload = load_workload(SAMPLE_LOG)
    alone = run_replicated(workload, SPECS, replicas=3, shake_s=60, seed=4, jobs=1)
    seen: list[int] = []
    forked = run_replicated(workload, SPECS, replicas=3, shake_s=60, seed=4, jobs=2,
                            progress=seen.append)
    assert forked.metrics == alone.metrics
    for mine, theirs in zip(forked.unshaken, alone.unshaken):
        assert mine.jobs is workload.jobs  # the caller's jobs, not copies sent back
        assert (mine.start_s, mine.final_prediction_s, mine.corrections) == (
            theirs.start_s, theirs.final_prediction_s, theirs.corrections)
    assert seen == sorted(seen) and seen[-1] == 3 * len(SPECS) * len(workload.jobs)


def test_the_workers_are_other_processes(monkeypatch, tmp_path):
    """Not vacuous: with jobs=2 the runs happen outside this process (each run notes its pid in
    a file, since a forked worker's memory is its own)."""
    import hpcpredict.sim.runner as runner

    notes = tmp_path / "pids"
    original = runner._ReplicaTasks.run_group

    def noting_pid(self, group, progress=None, done=0):  # type: ignore[no-untyped-def]
        with notes.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return original(self, group, progress, done)

    monkeypatch.setattr(runner._ReplicaTasks, "run_group", noting_pid)
    workload = load_workload(SAMPLE_LOG)
    run_replicated(workload, SPECS, replicas=1, jobs=2)
    pids = set(notes.read_text().split())
    assert pids and str(os.getpid()) not in pids
    notes.unlink()
    run_replicated(workload, SPECS, replicas=1, jobs=1)
    assert set(notes.read_text().split()) == {str(os.getpid())}
