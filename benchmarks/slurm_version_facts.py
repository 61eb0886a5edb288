"""What differs between Slurm releases for hpcpredict, measured on the Slurm installed here: the rows
of the compatibility table (slurm-plugin/README.md, docs/admin-guide.md "SLURM versions").

    python benchmarks/slurm_version_facts.py                                 # the host's Slurm (22.05)
    python -m testbed.slurm_chroot exec trixie benchmarks/slurm_version_facts.py   # 24.11
    python -m testbed.slurm_chroot exec sid benchmarks/slurm_version_facts.py      # 26.05

As root; starts the loopback cluster of testbed/slurm_cluster.py with two probe scripts beside
slurm.conf (a job_submit.lua and a jobcomp.lua that log what SLURM hands them), runs a job with
--time, one without, an array and one submitted with --uid, and prints one line per fact.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed/

from testbed.slurm_cluster import SlurmCluster  # noqa: E402

SUBMIT_PROBE = """
function slurm_job_submit(job_desc, part_list, submit_uid)
  slurm.log_info("probe-submit: time_limit=%s user_id=%s submit_uid=%s min_cpus=%s NO_VAL=%s INFINITE=%s",
    tostring(job_desc.time_limit), tostring(job_desc.user_id), tostring(submit_uid), tostring(job_desc.min_cpus),
    tostring(slurm.NO_VAL), tostring(slurm.INFINITE))
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
slurm.log_info("probe-submit: loaded")
return slurm.SUCCESS
"""
COMP_PROBE = """
function slurm_jobcomp_log_record(job)
  slurm.log_info("probe-comp: job_id=%s time_limit=%s job_state=%s user_id=%s total_cpus=%s admin_comment=%s",
    tostring(job.job_id), tostring(job.time_limit), tostring(job.job_state), tostring(job.user_id),
    tostring(job.total_cpus), tostring(job.admin_comment))
  return slurm.SUCCESS
end
return slurm.SUCCESS
"""


def fact(name: str, value: object) -> None:
    print(f"{name}: {value}", flush=True)


def main() -> None:
    folder = Path(os.environ.get("TMPDIR", "/tmp"))
    submit_probe, comp_probe = folder / "probe_submit.lua", folder / "probe_comp.lua"
    submit_probe.write_text(SUBMIT_PROBE)
    comp_probe.write_text(COMP_PROBE)
    (folder / "hpcpredict_common.lua").write_text("return {}\n")  # SlurmCluster copies it beside
    cluster = SlurmCluster(job_submit_lua=submit_probe, jobcomp_lua=comp_probe)
    cluster.start()
    try:
        run = cluster.run
        fact("slurmctld -V", run(["slurmctld", "-V"]).stdout.strip())
        no_conf = subprocess.run(["scontrol", "--version"], capture_output=True, text=True,
                                 env={k: v for k, v in os.environ.items() if k != "SLURM_CONF"})
        fact("scontrol --version without slurm.conf", f"exit {no_conf.returncode} {no_conf.stdout.strip()!r}")
        fact("cgroup.conf written by the test cluster", (cluster.dir / "cgroup.conf").read_text().strip()
             if (cluster.dir / "cgroup.conf").exists() else "none")
        timed = cluster.sbatch("--time=5", script="true")
        unlimited = cluster.sbatch(script="true")
        as_user = cluster.sbatch("--uid=65534", "--gid=65534", "-D", "/tmp", "--time=5", script="true")
        array = cluster.sbatch("--time=5", "--array=0-1", script="sleep 3")
        time.sleep(8)
        bare = json.loads(run(["squeue", "--json"]).stdout)
        every = json.loads(run(["squeue", "--json", "--states=all"]).stdout)
        fact("squeue --json lists ended jobs", f"{len(bare['jobs'])} of {len(every['jobs'])} (--states=all)")
        entry = next(job for job in every["jobs"] if job["job_id"] == unlimited)
        fact("squeue --json time_limit of a job without --time", json.dumps(entry.get("time_limit")))
        fact("squeue --json job_state", json.dumps(entry.get("job_state")))
        timed_entry = next(job for job in every["jobs"] if job["job_id"] == timed)
        fact("squeue --json end_time", json.dumps(timed_entry.get("end_time")))
        tasks = [(job["job_id"], job.get("array_job_id"), job.get("array_task_id"))
                 for job in every["jobs"] if job.get("name") == "wrap" and job["job_id"] >= array]
        fact("array tasks (job_id, array_job_id, array_task_id)", json.dumps(tasks))
        user_entry = next(job for job in every["jobs"] if job["job_id"] == as_user)
        fact("sbatch --uid=65534 as root: job's user_id", user_entry.get("user_id"))
        fact("scontrol show job TimeLimit without --time", cluster.job_fields(unlimited).get("TimeLimit"))
        scontrol_json = subprocess.run(["scontrol", "--json", "show", "job", str(timed)], capture_output=True,
                                       text=True, env=cluster.env)
        fact("scontrol --json show job", "works" if scontrol_json.returncode == 0 and scontrol_json.stdout.startswith("{")
             else f"exit {scontrol_json.returncode}: {scontrol_json.stderr.strip()[:120]}")
        log = (cluster.dir / "slurmctld.log").read_text(errors="replace")
        for line in re.findall(r"probe-(?:submit|comp): .*", log):
            fact("lua", line)
        pid = cluster.processes[0].pid
        began = time.monotonic()
        reconfigure = run(["scontrol", "reconfigure"], check=False)
        time.sleep(3)
        alive = run(["sinfo", "-h", "-o", "%t"], check=False)
        fact("scontrol reconfigure", f"exit {reconfigure.returncode} in {time.monotonic() - began - 3:.1f} s; "
             f"slurmctld pid {pid} {'still running' if cluster.processes[0].poll() is None else 'exited'}; "
             f"sinfo afterwards: {alive.stdout.split()} (exit {alive.returncode}); "
             f"jobs still listed: {len(json.loads(run(['squeue', '--json', '--states=all']).stdout)['jobs'])}")
        after = (cluster.dir / "slurmctld.log").read_text(errors="replace")[len(log):]
        fact("after reconfigure, job_submit.lua reloaded", "probe-submit: loaded" in after)
        fact("after reconfigure, log says", [line[26:110] for line in after.splitlines()
                                             if "reconfig" in line.lower() or "restart" in line.lower()][:3])
    finally:
        cluster.cleanup()


def cgroup_fact() -> None:
    """slurmd with the default cgroup.conf where no cgroup filesystem is mounted. Only inside a
    chroot of testbed/slurm_chroot.py, whose private mount namespace lets /sys/fs/cgroup be hidden
    under an empty tmpfs without touching the host."""
    if not os.environ.get("HPCPREDICT_SLURM_SYSTEM_INSIDE"):
        fact("slurmd without a cgroup filesystem", "not measured (only inside a chroot)")
        return
    subprocess.run(["mount", "-t", "tmpfs", "none", "/sys/fs/cgroup"], check=True)
    cluster = SlurmCluster(extra_files={"cgroup.conf": "CgroupPlugin=autodetect\n"})
    try:
        cluster.start()
        fact("slurmd without a cgroup filesystem, CgroupPlugin=autodetect", "starts")
    except Exception as error:  # noqa: BLE001 - the fact is whether it starts
        out = (cluster.dir / "slurmd-node1.out")
        lines = [line for line in out.read_text(errors="replace").splitlines() if "error" in line] if out.exists() else []
        fact("slurmd without a cgroup filesystem, CgroupPlugin=autodetect", f"does not start: {lines[:2] or error}")
    finally:
        cluster.cleanup()
        subprocess.run(["umount", "/sys/fs/cgroup"], check=False)


if __name__ == "__main__":
    main()
    cgroup_fact()
