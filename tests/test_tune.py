"""`hpcpredict tune`: the choice rule, the split in time, and the command on the bundled sample."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOG
from hpcpredict.cli import main
from hpcpredict.daemon.config import load_config
from hpcpredict.sim.campaign import Cell, LogEntry, run_cell
from hpcpredict.sim.runner import RunSpec
from hpcpredict.sim.tune import Evidence, choose, grid, split_s
from hpcpredict.workload import load_workload

HOUR = 3600.0


def evidence(label: str, bsld: float, p99_h: float, max_h: float) -> Evidence:
    return Evidence.of(label, {"ave_bsld": [bsld, bsld + 1], "p99_wait_s": [p99_h * HOUR] * 2,
                               "max_wait_s": [max_h * HOUR] * 2})


def test_the_choice_keeps_the_bounds_and_says_what_it_relaxed() -> None:
    plain = evidence("plain", 90, 20, 70)
    fast_but_starving = evidence("guard 48 h", 40, 19, 90)  # max 1.29x: out
    tail_heavy = evidence("guard 24 h", 50, 25, 80)  # p99 worse than plain's
    safe = evidence("guard 12 h", 60, 19, 75)
    choice = choose([fast_but_starving, tail_heavy, safe], plain)
    assert choice.label == "guard 12 h" and "p99 wait <= plain's" in choice.rule
    relaxed = choose([fast_but_starving, tail_heavy], plain)
    assert relaxed.label == "guard 24 h" and relaxed.rule.startswith("no setting kept p99")
    none = choose([fast_but_starving, evidence("off", 30, 30, 200)], plain)
    assert none.label == "guard 48 h" and "lowest max wait" in none.rule
    # a mean under the bound is not enough: the upper end of its 95% interval must be
    wobbly = Evidence.of("guard 36 h", {"ave_bsld": [45.0, 46.0], "p99_wait_s": [19 * HOUR] * 2,
                                        "max_wait_s": [70 * HOUR, 104 * HOUR]})  # mean 1.24x
    assert wobbly.mean("max_wait_s") <= 1.25 * 70 * HOUR < wobbly.upper("max_wait_s")
    assert choose([wobbly, safe], plain).label == "guard 12 h"


def test_the_split_is_by_submission_order_and_refuses_nonsense() -> None:
    workload = load_workload(SAMPLE_LOG)
    at_s = split_s(workload, 2 / 3)
    earlier = sum(job.submit_s < at_s for job in workload.jobs)
    assert abs(earlier - len(workload.jobs) * 2 / 3) < 50  # ties at the split instant aside
    with pytest.raises(ValueError, match="share"):
        split_s(workload, 1.0)


def test_the_grid_is_the_bounds_the_daemon_applies_with_every_correction() -> None:
    settings = grid(RunSpec(), ["incremental", "survival"])
    assert [s.label for s in settings][:3] == [
        "guard 12 h + incremental", "guard 24 h + incremental", "guard 48 h + incremental"]
    assert len(settings) == 6 and all(s.spec.guard_rule == "wait" for s in settings)


def test_a_part_of_a_log_is_replayed_and_judged_as_asked() -> None:
    workload = load_workload(SAMPLE_LOG)
    at_s = split_s(workload, 0.5)
    whole = LogEntry("sample", str(SAMPLE_LOG))
    spec = RunSpec("easy", "requested", "requested")
    # a whole log keeps the key it had before parts existed: stored runs stay valid
    old_identity = {"log": "sample", "procs": None, **spec.to_dict()}
    assert Cell(whole, "x", spec).key == hashlib.sha256(
        json.dumps(old_identity, sort_keys=True).encode()).hexdigest()[:32]
    earlier = run_cell(Cell(LogEntry("sample", str(SAMPLE_LOG), submit_until_s=at_s), "x", spec))
    later = run_cell(Cell(LogEntry("sample", str(SAMPLE_LOG), measure_from_s=at_s), "x", spec))
    counted = sum(job.submit_s < at_s for job in workload.jobs)
    assert earlier.metrics["jobs"] == counted
    assert later.metrics["jobs"] == len(workload.jobs) - counted
    assert earlier.key != later.key != Cell(whole, "x", spec).key


def test_tune_chooses_on_the_earlier_part_checks_on_the_later_and_resumes(tmp_path: Path) -> None:
    store = tmp_path / "tune.sqlite"
    fragment = tmp_path / "tune.toml"
    options = ["tune", str(SAMPLE_LOG), "--replicas", "2", "--corrections", "incremental",
               "--store", str(store), "-j", "1"]
    runner = CliRunner()
    shown = runner.invoke(main, [*options, "--write", str(fragment)])
    assert shown.exit_code == 0, shown.output
    assert "Earlier part, every setting tried" in shown.output
    assert "Later part, out of sample" in shown.output and "chosen: guard " in shown.output
    # the fragment is a daemon.toml the daemon reads, carrying the chosen guard
    config = load_config(fragment)
    payload_run = runner.invoke(main, [*options, "--format", "json"])
    assert payload_run.exit_code == 0, payload_run.output
    assert "choosing: 8 replays, 8 already stored" in payload_run.stderr  # resumed: 4 settings x 2
    assert "checking: 4 replays, 4 already stored" in payload_run.stderr  # nothing replayed
    payload = json.loads(payload_run.stdout)
    chosen = payload["chosen"]
    assert config.starvation_guard_s == chosen["settings"]["starvation_guard_s"]
    assert config.correction == chosen["settings"]["correction"]
    # the rule, checked from the evidence printed: the lowest AVEbsld among those kept
    earlier = payload["earlier"]
    plain = earlier.pop("plain")
    upper = lambda e, metric: e[metric]["ci_high"] if e[metric]["ci_high"] is not None else e[metric]["mean"]  # noqa: E731
    kept = [label for label, e in earlier.items()
            if upper(e, "max_wait_s") <= 1.25 * plain["max_wait_s"]["mean"]
            and upper(e, "p99_wait_s") <= plain["p99_wait_s"]["mean"]]
    if not kept:
        kept = [label for label, e in earlier.items()
                if upper(e, "max_wait_s") <= 1.25 * plain["max_wait_s"]["mean"]]
    if kept:
        assert chosen["label"] == min(kept, key=lambda label: earlier[label]["ave_bsld"]["mean"])
    assert set(payload["later"]) >= {chosen["label"], "plain"}
    assert len(payload["later"]["plain"]["ave_bsld"]["replicas"]) == 2


def test_tune_under_the_slurm_model_is_judged_against_plain_slurm(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "tune", str(SAMPLE_LOG), "--scheduler", "slurm-backfill", "--slurm-params", "bf_interval=60",
        "--replicas", "2", "--corrections", "incremental", "--store", str(tmp_path / "t.sqlite"),
        "-j", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["scheduler"] == "slurm-backfill"
    assert payload["chosen"]["settings"]["scheduler"] == "slurm-backfill"
    assert payload["chosen"]["settings"]["slurm_params"] == "bf_interval=60"
    assert set(payload["earlier"]) == {"plain", "guard 12 h + incremental", "guard 24 h + incremental",
                                       "guard 48 h + incremental"}
