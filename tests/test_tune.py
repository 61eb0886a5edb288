"""`hpcpredict tune`: the choice rule, the split in time, and the command on the bundled sample."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOG
from hpcpredict.cli import main
from hpcpredict.daemon.core.config import load_config
from hpcpredict.experiments.campaign import Cell, LogEntry, run_cell
from hpcpredict.sim.guard_due import guard_due_share
from hpcpredict.corrections.starvation import GuardSettings
from hpcpredict.sim.runner import SEMANTICS_VERSION, RunSpec, run
from hpcpredict.experiments.tune import (
    Evidence,
    Goal,
    Choice,
    choose,
    daemon_fragment,
    goal_settings,
    grid,
    parse_guards,
    parse_slacks,
    parse_xfactors,
    period_shift,
    split_s,
    thresholds_s,
)
from hpcpredict.logs.workload import load_workload

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


def test_a_change_of_period_between_the_parts_is_said() -> None:
    earlier = evidence("plain", 24, 21.9, 90)
    assert period_shift(earlier, evidence("plain", 60, 26, 120)) is None  # +19%: alike
    busier = period_shift(earlier, evidence("plain", 60, 37.7, 120))
    assert busier is not None and "21.9 h" in busier and "37.7 h" in busier and "busier" in busier
    assert "calmer" in period_shift(earlier, evidence("plain", 10, 13.3, 30))


def test_the_split_is_by_submission_order_and_refuses_nonsense() -> None:
    workload = load_workload(SAMPLE_LOG)
    at_s = split_s(workload, 2 / 3)
    earlier = sum(job.submit_s < at_s for job in workload.jobs)
    # The sample's 4,997 kept jobs: the job at position round(4,997 x 2/3) = 3,331 opens the later
    # part, and the jobs submitted in the same second before it (ties) go with it.
    assert len(workload.jobs) == 4997 and at_s == workload.jobs[3331].submit_s
    assert earlier == 3331  # (no job of the earlier part submitted in the split's second)
    assert split_s(workload, 0.5) == workload.jobs[round(4997 * 0.5)].submit_s
    with pytest.raises(ValueError, match="share"):
        split_s(workload, 1.0)


def test_the_guards_tried_follow_the_sites_own_p99_wait() -> None:
    # KTH-SP2's earlier part: plain EASY's p99 wait 24.5 h -> 6, 12, 24 (24.5 rounds to even), 49 h
    assert thresholds_s(24.5 * HOUR) == (6 * 3600, 12 * 3600, 24 * 3600, 49 * 3600)
    # a scaled guard within a tenth of the default 24 h is its twin: 22 and 26 h go, 21 and 27 h stay
    assert thresholds_s(22 * HOUR) == (6 * 3600, 11 * 3600, 24 * 3600, 44 * 3600)
    assert 26 * 3600 not in thresholds_s(26 * HOUR) and 27 * 3600 in thresholds_s(27 * HOUR)
    assert 21 * 3600 in thresholds_s(21 * HOUR)
    # a calm site: the guards shrink with its tail, and the shipped 24 h is always among them
    assert thresholds_s(2 * HOUR) == (3600, 2 * 3600, 4 * 3600, 24 * 3600)
    # never under an hour, even with no waiting at all
    assert thresholds_s(0.0) == (3600, 24 * 3600)
    assert all(seconds % 3600 == 0 for seconds in thresholds_s(17.3 * HOUR))


def test_guards_given_by_the_admin_are_read_as_the_daemon_reads_durations() -> None:
    assert parse_guards("auto") is None
    assert parse_guards("24h, 6h,90m,6h") == (90 * 60, 6 * 3600, 24 * 3600)
    assert parse_guards("3600,2d") == (3600, 2 * 86_400)
    for bad in ("off", "0", "6x", ",", "24h,soon"):
        with pytest.raises(ValueError, match="24h"):
            parse_guards(bad)


def test_the_grid_is_the_bounds_the_daemon_applies_with_every_correction() -> None:
    settings = grid(RunSpec(), ["incremental", "survival"], (6 * 3600, 24 * 3600))
    assert [s.label for s in settings] == [
        "guard 6 h + incremental", "guard 24 h + incremental",
        "guard 6 h + survival(q=0.5)", "guard 24 h + survival(q=0.5)"]
    assert all(s.spec.guard.rule == "wait" and s.spec.predictor == "learned" for s in settings)


def test_the_grid_tries_the_xfactor_rule_under_the_default_cap_and_the_fragment_carries_it(
    tmp_path: Path,
) -> None:
    settings = grid(RunSpec(), ["incremental"], (24 * 3600,), (3.0, 5.0))
    assert [s.label for s in settings] == [
        "guard 24 h + incremental", "guard xfactor 3 or 24 h + incremental",
        "guard xfactor 5 or 24 h + incremental"]
    relative = settings[2]
    assert relative.spec.guard == GuardSettings(86_400, "xfactor", 5.0)
    unbounded, ave2 = goal_settings(relative)  # without a guard, no rule either
    assert unbounded.spec.guard is None
    assert ave2.label == "AVE2, guard xfactor 5 or 24 h + incremental"
    fragment = daemon_fragment(relative.spec, "site.swf", Choice(relative.label, "a rule"))
    assert 'starvation_guard = "24h"\nstarvation_guard_xfactor = 5\ncorrection = "incremental"' in fragment
    (tmp_path / "daemon.toml").write_text(fragment)  # the daemon reads it as written
    loaded = load_config(tmp_path / "daemon.toml")
    assert loaded.guard == relative.spec.guard  # what tune replayed is what the daemon runs
    assert "xfactor" not in daemon_fragment(settings[0].spec, "site.swf", Choice("x", "a rule"))
    assert parse_xfactors("5, 3,5") == (3.0, 5.0) and parse_xfactors("none") == ()
    for bad in ("1", "0.5,3", "three", ","):
        with pytest.raises(ValueError, match="above 1"):
            parse_xfactors(bad)


def test_the_slack_stage_is_in_the_grid_only_when_asked_and_its_fragment_is_the_daemons(tmp_path: Path) -> None:
    settings = grid(RunSpec(), ["incremental"], (24 * 3600,), slacks=((7_200, 14_400),))
    assert [s.label for s in settings] == [
        "guard 24 h + incremental", "guard 24 h, request - 2 h in front after 4 h + incremental"]
    slack = settings[1].spec
    assert slack.guard == GuardSettings(86_400, slack_s=7_200, slack_after_s=14_400)
    unbounded, ave2 = goal_settings(settings[1])  # without a guard, no stage either
    assert unbounded.spec.guard is None
    assert ave2.spec.guard == slack.guard
    fragment = daemon_fragment(slack, "site.swf", Choice(settings[1].label, "a rule"))
    assert ('starvation_guard = "24h"\nstarvation_guard_slack = "2h"\nstarvation_guard_slack_after = "4h"\n'
            'correction = "incremental"') in fragment
    (tmp_path / "daemon.toml").write_text(fragment)  # the daemon reads it as written
    loaded = load_config(tmp_path / "daemon.toml")
    assert loaded.guard == slack.guard  # what tune replayed is what the daemon runs
    assert parse_slacks("2h@4h, 1h@3h,2h@4h") == ((3_600, 10_800), (7_200, 14_400))
    assert parse_slacks("none") == () and parse_slacks("90m@240m") == ((5_400, 14_400),)
    for bad in ("2h", "2h@", "@4h", "30s@4h", "2h@25h", "0m@4h", "off@4h", ","):
        with pytest.raises(ValueError, match="SLACK@AFTER"):
            parse_slacks(bad)
    slurm = grid(RunSpec("slurm-backfill"), ["incremental"], slacks=((7_200, 14_400),))[1]
    assert slurm.spec.scheduler == "slurm-backfill" and slurm.spec.guard.slack_s == 7_200


def test_tune_tries_the_slack_stage_when_asked(tmp_path: Path) -> None:
    options = ["tune", str(SAMPLE_LOG), "--replicas", "2", "--corrections", "incremental", "--guards", "24h",
               "--slacks", "1h@2h", "--store", str(tmp_path / "t.sqlite"), "-j", "1"]
    result = CliRunner().invoke(main, [*options, "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["slacks_s"] == [[3_600, 7_200]]
    shown = CliRunner().invoke(main, options)  # (resumed from the store: nothing replayed again)
    assert "and the slack stage at request - 1 h from 2 h of waiting, before the 24 h guard" in shown.output
    assert set(payload["earlier"]) == {"plain", "guard 24 h + incremental",
                                       "guard 24 h, request - 1 h in front after 2 h + incremental"}
    refused = CliRunner().invoke(main, ["tune", str(SAMPLE_LOG), "--slacks", "1h@25h",
                                        "--store", str(tmp_path / "t.sqlite")])
    assert refused.exit_code == 2 and "SLACK@AFTER" in refused.output
    slurm = CliRunner().invoke(main, [
        "tune", str(SAMPLE_LOG), "--scheduler", "slurm-backfill", "--slurm-params", "bf_interval=60",
        "--replicas", "2", "--corrections", "incremental", "--guards", "24h", "--slacks", "1h@2h",
        "--store", str(tmp_path / "s.sqlite"), "-j", "1", "--format", "json"])
    assert slurm.exit_code == 0, slurm.output
    assert "guard 24 h, request - 1 h in front after 2 h + incremental" in json.loads(slurm.stdout)["earlier"]


def test_the_goal_sets_the_bound_beside_the_unbounded_learner_and_ave2() -> None:
    chosen = grid(RunSpec(), ["survival"], (12 * 3600,))[0]
    unbounded, ave2 = goal_settings(chosen)
    assert unbounded.spec.guard is None and unbounded.spec.correction == "survival"
    assert unbounded.label == "no guard + survival(q=0.5)"
    assert (ave2.spec.predictor, ave2.spec.correction, ave2.spec.guard) == (
        "ave2", "incremental", GuardSettings(12 * 3600))
    assert ave2.label == "AVE2, guard 12 h + incremental"
    plain = evidence("plain", 90, 20, 70)
    bounded = Evidence.of("guard", {"ave_bsld": [50.0, 52.0, 51.0], "p99_wait_s": [19 * HOUR] * 3,
                                    "max_wait_s": [80 * HOUR] * 3})
    free = evidence("no guard", 47, 25, 200)
    worse_ave2 = Evidence.of("ave2", {"ave_bsld": [60.0, 61.0, 63.0], "p99_wait_s": [19 * HOUR] * 3,
                                      "max_wait_s": [80 * HOUR] * 3})
    goal = Goal.of(bounded, plain, free, worse_ave2)
    assert goal.max_ratio == pytest.approx(80 / 70) and goal.p99_ratio == pytest.approx(19 / 20)
    assert goal.bsld_ratio == pytest.approx(51 / 47.5)
    assert goal.kept == (True, True, True, True)
    # AVE2 level with the learner under the same bound: the predictions add nothing established
    level = Evidence.of("ave2", {"ave_bsld": [49.0, 53.0, 51.5], "p99_wait_s": [19 * HOUR] * 3,
                                 "max_wait_s": [80 * HOUR] * 3})
    assert Goal.of(bounded, plain, free, level).kept[3] is False
    # a bound that costs more than a tenth, and a tail over plain's, fail their conditions
    costly = Goal.of(Evidence.of("guard", {"ave_bsld": [60.0] * 3, "p99_wait_s": [21 * HOUR] * 3,
                                           "max_wait_s": [90 * HOUR] * 3}), plain, free, worse_ave2)
    assert costly.kept[:3] == (False, False, False)


def test_a_part_of_a_log_is_replayed_and_judged_as_asked() -> None:
    workload = load_workload(SAMPLE_LOG)
    at_s = split_s(workload, 0.5)
    whole = LogEntry("sample", str(SAMPLE_LOG))
    spec = RunSpec("easy", "requested", "requested")
    # a whole log keeps the key it had before parts existed (with the semantics version since 2)
    old_identity = {"log": "sample", "procs": None, **spec.to_dict(), "semantics": SEMANTICS_VERSION}
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
    payload = json.loads(payload_run.stdout)
    # plain and every guard (no xfactor unless asked), with the one correction
    assert payload["xfactors"] == []
    tried = 1 + len(payload["guards_s"])
    assert f"choosing: {2 * tried} replays, {2 * tried} already stored" in payload_run.stderr
    checked = len(payload["later"])  # chosen, the default unless chosen, plain, unbounded, AVE2
    assert checked in (4, 5)
    assert f"checking: {2 * checked} replays, {2 * checked} already stored" in payload_run.stderr
    assert payload["guards_s"] == list(thresholds_s(payload["earlier"]["plain"]["p99_wait_s"]["mean"]))
    chosen = payload["chosen"]
    assert config.guard.to_keys() == RunSpec.from_keys(**chosen["settings"]).guard.to_keys()
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
    assert set(payload["later"]) >= {chosen["label"], "plain", payload["unbounded"],
                                     payload["ave2_same_bound"]}
    assert len(payload["later"]["plain"]["ave_bsld"]["replicas"]) == 2
    # the goal's figures are the later part's, as printed
    later, goal = payload["later"], payload["later_goal"]
    assert goal["max_wait_over_plain"] == pytest.approx(
        later[chosen["label"]]["max_wait_s"]["mean"] / later["plain"]["max_wait_s"]["mean"])
    assert goal["ave_bsld_over_unbounded"] == pytest.approx(
        later[chosen["label"]]["ave_bsld"]["mean"] / later[payload["unbounded"]]["ave_bsld"]["mean"])
    assert goal["kept"]["max_wait"] == (goal["max_wait_over_plain"] <= 1.25)
    assert "Goal (longest wait, p99 wait, the bound's cost, against AVE2):" in shown.output
    # how often the chosen guard was due in the later period, on the history as it is
    spec = RunSpec.from_keys(**{key: value for key, value in chosen["settings"].items() if key != "label"})
    due = guard_due_share(run(load_workload(SAMPLE_LOG), spec), spec, from_s=payload["split_s"])
    assert payload["later_guard_due_share"] == round(due, 4) and 0 < due < 1
    assert f"The chosen guard was due {due:.0%} of the later period" in shown.output


def test_tune_under_the_slurm_model_is_judged_against_plain_slurm(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, [
        "tune", str(SAMPLE_LOG), "--scheduler", "slurm-backfill", "--slurm-params", "bf_interval=60",
        "--replicas", "2", "--corrections", "incremental", "--store", str(tmp_path / "t.sqlite"),
        "--xfactors", "5", "-j", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["scheduler"] == "slurm-backfill"
    assert payload["chosen"]["settings"]["scheduler"] == "slurm-backfill"
    assert payload["chosen"]["settings"]["slurm_params"] == "bf_interval=60"
    assert set(payload["earlier"]) == {"plain", "guard xfactor 5 or 24 h + incremental"} | {
        f"guard {seconds / 3600:g} h + incremental" for seconds in payload["guards_s"]}
    assert all(payload["later"][label]["ave_bsld"]["replicas"] for label in payload["later"])


def test_tune_tries_the_guards_it_is_given_and_refuses_bad_ones(tmp_path: Path) -> None:
    options = ["tune", str(SAMPLE_LOG), "--replicas", "2", "--corrections", "survival",
               "--store", str(tmp_path / "t.sqlite"), "-j", "1"]
    given = CliRunner().invoke(main, [*options, "--guards", "2h,30h", "--xfactors", "none",
                                      "--format", "json"])
    assert given.exit_code == 0, given.output
    payload = json.loads(given.stdout)
    assert payload["guards_s"] == [7200, 108_000]
    assert set(payload["earlier"]) == {"plain", "guard 2 h + survival(q=0.5)",
                                       "guard 30 h + survival(q=0.5)"}
    refused = CliRunner().invoke(main, [*options, "--guards", "6h,off"])
    assert refused.exit_code == 2 and "durations above 0 s" in refused.output


def test_the_grid_tries_each_history_asked_and_the_fragment_carries_the_learners(tmp_path: Path) -> None:
    settings = grid(RunSpec(), ["incremental"], (24 * 3600,), histories=["user", "user+request"])
    assert [s.label for s in settings] == ["guard 24 h + incremental",
                                           "guard 24 h + incremental, history by user+request"]
    keyed = settings[1]
    assert keyed.spec.learner.history_by == "user+request" and settings[0].spec.learner.history_by == "user"
    unbounded, ave2 = goal_settings(keyed)  # the same learner unbounded; AVE2 keeps its own rule
    assert unbounded.spec.learner.history_by == "user+request" and ave2.label == "AVE2, guard 24 h + incremental"
    fragment = daemon_fragment(keyed.spec, "site.swf", Choice(keyed.label, "a rule"))
    (tmp_path / "daemon.toml").write_text(fragment)
    assert load_config(tmp_path / "daemon.toml").learner.history_by == "user+request"
    assert "[learner]" not in daemon_fragment(settings[0].spec, "site.swf", Choice("x", "a rule"))
    assert grid(RunSpec(), ["incremental"], (24 * 3600,)) == settings[:1]  # None: the base's own
