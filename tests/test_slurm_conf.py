"""slurm.conf -> the slurm-backfill model's settings (`hpcpredict/sim/slurm_model/slurm_conf.py`), and the
settings file the repository recommends (deploy/slurm-scheduler.conf), read by the model and by a
real slurmctld."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from testbed.slurm_cluster import SlurmCluster

from hpcpredict.cli import main
from hpcpredict.sim.slurm_model.slurm_backfill import SlurmParams, SlurmParamsError
from hpcpredict.sim.slurm_model.slurm_conf import read_slurm_conf, read_slurm_conf_text

RECOMMENDED = Path(__file__).resolve().parents[1] / "deploy" / "slurm-scheduler.conf"


def test_the_model_reads_what_it_represents_and_lists_what_it_does_not(tmp_path: Path) -> None:
    (tmp_path / "sched.conf").write_text("SchedulerParameters=bf_interval=60,bf_resolution=300\n")
    conf_file = tmp_path / "slurm.conf"
    conf_file.write_text(
        "# a cluster\n"
        "ClusterName=test\n"
        "schedulertype=sched/backfill   # keys are case-insensitive\n"
        "SchedulerParameters=bf_window=99,bf_continue\n"
        "Include sched.conf\n"  # relative to the including file; the last value wins
        "PriorityType=priority/multifactor\n"
        "PriorityWeightJobSize=1000\n"
        "PriorityMaxAge=1-12\n"  # days-hours
        "PriorityFavorSmall=YES\n"
        "PriorityWeightQOS=500\n"
        "PriorityWeightPartition=0\n"
        "NodeName=n[1-4] CPUs=8 State=UNKNOWN\n"
        "PartitionName=debug Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP\n"
    )
    conf = read_slurm_conf(conf_file)
    assert conf.params == SlurmParams(
        bf_interval_s=60, bf_resolution_s=300, priority_weight_job_size=1000,
        priority_max_age_s=36 * 3600, priority_favor_small=True,
    )
    assert conf.not_modelled == ["PriorityWeightQOS=500"]


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90 * 60), ("90:30", 90 * 60 + 30), ("2:00:10", 7210), ("7-0", 7 * 86400),
    ("1-2:3", 86400 + 7200 + 180), ("1-2:3:4", 86400 + 7200 + 184),
])
def test_priority_max_age_reads_slurm_time_strings(text: str, seconds: int) -> None:
    conf = read_slurm_conf_text(f"PriorityType=priority/multifactor\nPriorityMaxAge={text}\n")
    assert conf.params.priority_max_age_s == seconds


def test_priority_basic_ignores_the_weights() -> None:
    conf = read_slurm_conf_text("PriorityWeightJobSize=1000\nPriorityWeightFairshare=9\n")
    assert conf.params == SlurmParams() and conf.not_modelled == []


@pytest.mark.parametrize(("text", "message"), [
    ("SchedulerType=sched/builtin\n", "slurm.conf>:1: SchedulerType=sched/builtin"),
    ("ClusterName=x\nnonsense\n", "slurm.conf>:2: expected Key=Value"),
    ("SchedulerParameters=bf_window=0\n", "bf_window must be a whole number"),
    ("PriorityType=priority/multifactor\nPriorityMaxAge=soon\n", ":2: PriorityMaxAge='soon'"),
    ("Include other.conf\n", "cannot follow Include"),
])
def test_bad_files_are_refused_with_file_and_line(text: str, message: str) -> None:
    with pytest.raises(SlurmParamsError, match=message.replace("(", r"\(")):
        read_slurm_conf_text(text)


def test_the_recommended_file_is_what_the_guide_says() -> None:
    conf = read_slurm_conf(RECOMMENDED)
    assert conf.params == SlurmParams(bf_window_min=1440, bf_max_job_test=500, bf_interval_s=30,
                                      bf_resolution_s=60)
    assert conf.not_modelled == []


def test_simulate_takes_a_slurm_conf_and_lets_slurm_params_override_it(
    sample_log: Path, tmp_path: Path
) -> None:
    conf_file = tmp_path / "slurm.conf"
    conf_file.write_text("SchedulerParameters=bf_window=2880,bf_interval=60,bf_continue\n")
    result = CliRunner().invoke(main, [
        "simulate", str(sample_log), "--scheduler", "slurm-backfill", "--predictor", "ave2",
        "--slurm-conf", str(conf_file), "--slurm-params", "bf_interval=120",
    ])
    assert result.exit_code == 0, result.output
    assert "slurm-backfill(bf_interval=120,bf_window=2880) + ave2" in result.output
    assert "not modelled: SchedulerParameters bf_continue" in result.stderr
    refused = CliRunner().invoke(main, ["simulate", str(sample_log), "--slurm-conf", str(conf_file)])
    assert refused.exit_code == 2 and "slurm-backfill" in refused.output


@pytest.mark.slurm
@pytest.mark.slow
def test_a_real_slurmctld_runs_with_the_recommended_file() -> None:
    slurm = SlurmCluster(extra_config=[f"Include {RECOMMENDED}"])
    slurm.start_or_skip()
    try:
        shown = {}
        for line in slurm.run(["scontrol", "show", "config"]).stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                shown[key.strip()] = value.strip()
        assert shown["SchedulerType"] == "sched/backfill"
        assert shown["SchedulerParameters"] == "bf_window=1440,bf_max_job_test=500,bf_interval=30,bf_resolution=60"
        # and a job runs under it
        job_id = slurm.sbatch("-n", "1", "-t", "1", "-o", "/dev/null", script="true")
        assert job_id > 0
    finally:
        slurm.cleanup()


def test_bf_job_part_count_reserve_is_read_from_the_scheduler_parameters() -> None:
    conf = read_slurm_conf_text("SchedulerParameters=bf_job_part_count_reserve=1,bf_continue\n")
    assert conf.params == SlurmParams(bf_job_part_count_reserve=1)
    assert conf.not_modelled == ["SchedulerParameters bf_continue"]
