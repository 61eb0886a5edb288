"""Campaigns with shaken replicas, --logs, and Dask on a real multi-process cluster."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.experiments.campaign import CampaignError, load_campaign
from hpcpredict.experiments.campaign_store import CampaignStore

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = (REPO_ROOT / "swf" / "KTH-SP2-sample.swf").resolve()
CAMPAIGN = f"""\
name = "replicated"
replicas = 3
shake = 30
seed = 2

[[logs]]
name = "kth"
path = "{SAMPLE}"

[[baselines]]
label = "EASY"
scheduler = "easy"
predictor = "requested"
correction = "requested"

[[baselines]]
label = "EASY++"
scheduler = "easy-sjbf"
predictor = "ave2"
correction = "incremental"

[learned]
losses = ["eloss"]
corrections = ["incremental"]
"""


def write(tmp_path: Path, text: str, name: str = "campaign.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_replicas_multiply_cells_and_replica_zero_keeps_the_unshaken_key(tmp_path: Path) -> None:
    replicated = load_campaign(write(tmp_path, CAMPAIGN))
    single = load_campaign(write(tmp_path, CAMPAIGN.replace("replicas = 3\n", ""), "one.toml"))
    assert (replicated.replicas, replicated.shake_s, replicated.seed) == (3, 30, 2)
    assert len(replicated.cells) == 3 * len(single.cells) == 9
    assert [cell.replica for cell in replicated.cells] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    zero = {cell.label: cell.key for cell in replicated.cells if cell.replica == 0}
    assert zero == {cell.label: cell.key for cell in single.cells}
    assert len({cell.key for cell in replicated.cells}) == 9
    reseeded = load_campaign(write(tmp_path, CAMPAIGN.replace("seed = 2", "seed = 3"), "s.toml"))
    assert {c.key for c in reseeded.cells if c.replica} .isdisjoint(
        {c.key for c in replicated.cells if c.replica})


@pytest.mark.parametrize(
    "line, message",
    [("replicas = 0", "replicas must be an integer >= 1"), ('shake = "1m"', "shake must be"),
     ("seed = -1", "seed must be"), ("replica = 3", "unknown keys")],
)
def test_bad_replica_settings_name_the_file_and_key(tmp_path: Path, line: str, message: str) -> None:
    text = CAMPAIGN.replace("replicas = 3\nshake = 30\nseed = 2\n", line + "\n")
    with pytest.raises(CampaignError, match=message):
        load_campaign(write(tmp_path, text))


def test_replicated_campaign_runs_resumes_and_reports_paired_wins(tmp_path: Path) -> None:
    runner = CliRunner()
    path = write(tmp_path, CAMPAIGN.replace("replicas = 3", "replicas = 2"))
    db = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    first = runner.invoke(main, ["campaign", str(path), "--store", db, "-j", "2"])
    assert first.exit_code == 0, first.output
    path.write_text(CAMPAIGN)  # grow to 3 replicas: only replica 2 is new
    grown = runner.invoke(main, ["campaign", str(path), "--store", db, "-j", "2"])
    assert "6 already stored, 3 to run" in grown.output
    store = CampaignStore(db)
    runs = store.frame()
    store.close()
    assert sorted(runs["replica"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    easy = runs[runs["label"] == "EASY"].sort_values("replica")["ave_bsld"].tolist()
    assert len(set(easy)) == 3  # the replicas differ
    out = tmp_path / "report"
    report = runner.invoke(main, ["campaign-report", str(path), "--store", db, "--out", str(out)])
    assert report.exit_code == 0, report.output
    summary = pd.read_csv(out / "replicas.csv").set_index(["configuration", "log"])
    assert summary.loc[("EASY", "kth"), "replicas"] == 3
    assert summary.loc[("EASY", "kth"), "AVEbsld"] == pytest.approx(sum(easy) / 3)
    assert summary.loc[("EASY", "kth"), "CI low"] < summary.loc[("EASY", "kth"), "AVEbsld"]
    easy_pp = runs[runs["label"] == "EASY++"].sort_values("replica")["ave_bsld"].tolist()
    wins = sum(a < b for a, b in zip(easy, easy_pp))
    assert summary.loc[("EASY", "kth"), "wins vs EASY++"] == f"{wins}/3"
    assert "max wait h" in summary.columns and "p99 wait h" in summary.columns
    assert "paired against EASY++" in (out / "report.md").read_text()


def test_logs_folder_finds_logs_by_file_name(tmp_path: Path) -> None:
    folder = tmp_path / "archive"
    folder.mkdir()
    shutil.copy(SAMPLE, folder / SAMPLE.name)
    text = CAMPAIGN.replace(str(SAMPLE), f"../elsewhere/{SAMPLE.name}")
    path = write(tmp_path, text)
    runner = CliRunner()
    missing = runner.invoke(main, ["campaign", str(path), "--dry-run"])
    assert missing.exit_code != 0 and "--logs DIR" in missing.output
    found = runner.invoke(main, ["campaign", str(path), "--logs", str(folder), "--dry-run",
                                 "--store", f"sqlite:///{tmp_path / 'x.sqlite'}"])
    assert found.exit_code == 0, found.output
    assert "9 runs" in found.output


def test_readme_campaign_examples_work_in_a_fresh_clone_layout(tmp_path: Path) -> None:
    """A clone with no ../shared beside it: smoke runs as it is, paper with --logs."""
    clone = tmp_path / "clone"
    (clone / "sim").mkdir(parents=True)
    (clone / "swf").mkdir()
    shutil.copy(REPO_ROOT / "sim" / "smoke.toml", clone / "sim")
    shutil.copy(REPO_ROOT / "sim" / "paper.toml", clone / "sim")
    shutil.copy(SAMPLE, clone / "swf")
    environment = {**os.environ, "CI": "true"}
    smoke = subprocess.run([sys.executable, "-m", "hpcpredict.cli", "campaign", "sim/smoke.toml",
                            "-j", "2"], cwd=clone, capture_output=True, text=True, env=environment)
    assert smoke.returncode == 0, smoke.stderr
    paper = subprocess.run([sys.executable, "-m", "hpcpredict.cli", "campaign", "sim/paper.toml",
                            "--dry-run"], cwd=clone, capture_output=True, text=True, env=environment)
    assert paper.returncode != 0 and "--logs DIR" in paper.stderr
    logs = tmp_path / "logs"
    logs.mkdir()
    for entry in load_campaign(REPO_ROOT / "sim" / "paper.toml").logs:
        (logs / Path(entry.path).name).write_bytes(b"")  # --dry-run only checks they exist
    planned = subprocess.run([sys.executable, "-m", "hpcpredict.cli", "campaign", "sim/paper.toml",
                              "--logs", str(logs), "--dry-run"], cwd=clone, capture_output=True,
                             text=True, env=environment)
    assert planned.returncode == 0, planned.stderr
    assert "to run" in planned.stderr


def test_report_of_a_campaign_never_run_leaves_no_database(tmp_path: Path) -> None:
    path = write(tmp_path, CAMPAIGN)
    result = CliRunner().invoke(main, ["campaign-report", str(path)])
    assert result.exit_code != 0 and "never run" in result.output
    assert not path.with_suffix(".sqlite").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_campaign_on_a_real_dask_scheduler_with_two_worker_processes(tmp_path: Path) -> None:
    """`dask scheduler` and two `dask worker` processes on loopback, as on a real cluster."""
    dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    assert dask, "the dask command comes with the test extra (dask[distributed])"
    address = f"tcp://127.0.0.1:{_free_port()}"
    started = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port",
                                 address.rsplit(":", 1)[1], "--no-dashboard"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(2):
            started.append(subprocess.Popen(
                [dask, "worker", address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                 "--host", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            assert len(client.nthreads()) == 2
        path = write(tmp_path, CAMPAIGN)
        db = f"sqlite:///{tmp_path / 'dask.sqlite'}"
        result = CliRunner().invoke(main, ["campaign", str(path), "--store", db, "--executor", "dask",
                                           "--scheduler-address", address])
        assert result.exit_code == 0, result.output
        local_db = f"sqlite:///{tmp_path / 'local.sqlite'}"
        local = CliRunner().invoke(main, ["campaign", str(path), "--store", local_db, "-j", "2"])
        assert local.exit_code == 0, local.output
        frames = []
        for url in (db, local_db):
            store = CampaignStore(url)
            frames.append(store.frame().set_index("key")["ave_bsld"])
            store.close()
        assert len(frames[0]) == 9
        assert frames[0].sort_index().equals(frames[1].sort_index())  # same numbers as local
    finally:
        for process in reversed(started):
            process.terminate()
        deadline = time.monotonic() + 20
        for process in started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
