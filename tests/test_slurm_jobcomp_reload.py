"""Why docs/quickstart-cluster.md restarts slurmctld instead of `scontrol reconfigure` (issue 28,
item 4), measured on the real Slurm the tests start (22.05 on Debian 12).

With ``JobCompType=jobcomp/lua`` added to slurm.conf, ``scontrol reconfigure`` makes ``scontrol
show config`` print the new value, yet no finished job reaches jobcomp.lua: the completion plugin
is loaded only when slurmctld starts. After a restart, jobs are reported. (A completion script
that only writes the job id to a file stands in for hpcpredict's.) Should a newer Slurm switch on
reconfigure, this test fails and the page can say so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from testbed.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm]


@pytest.fixture
def cluster() -> Iterator[SlurmCluster]:
    slurm = SlurmCluster()
    slurm.extra_files["jobcomp.lua"] = f"""
function slurm_jobcomp_log_record(job)
  local f = io.open("{slurm.dir}/reported", "a"); f:write(tostring(job.job_id) .. "\\n"); f:close()
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""
    slurm.start_or_skip()
    yield slurm
    slurm.cleanup()


def reported(cluster: SlurmCluster) -> list[str]:
    path = cluster.dir / "reported"
    return path.read_text().split() if path.exists() else []


def finished(cluster: SlurmCluster, job_id: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while cluster.job_fields(job_id)["JobState"] != "COMPLETED":
        assert time.monotonic() < deadline, cluster.job_fields(job_id)
        time.sleep(0.3)


def test_jobcomp_is_switched_by_a_restart_not_by_reconfigure(cluster: SlurmCluster) -> None:
    cluster.conf.write_text(cluster.conf.read_text() + "JobCompType=jobcomp/lua\n")
    cluster.run(["scontrol", "reconfigure"])
    time.sleep(2)
    assert "jobcomp/lua" in cluster.run(["scontrol", "show", "config"]).stdout  # it says so...
    before = cluster.sbatch("--time=5", script="true")
    finished(cluster, before)
    time.sleep(3)
    assert reported(cluster) == []  # ...but reports nothing

    cluster.restart_controller()
    after = cluster.sbatch("--time=5", script="true")
    finished(cluster, after)
    deadline = time.monotonic() + 20
    while str(after) not in reported(cluster):
        assert time.monotonic() < deadline, reported(cluster)
        time.sleep(0.3)
