"""Options renamed to their TOML keys keep their old names as hidden aliases: the old name gives
what the new one gives, says on stderr what to write instead, and is refused beside the new one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.cli.options import LearnerSettings, format_option, learning_options

REPO_ROOT = Path(__file__).resolve().parent.parent
RECORDED = REPO_ROOT / "docs" / "slurm-replay" / "KTH-SP2-5780-120-k60-lower.swf"


@click.command()
@learning_options
@format_option()
def echo_settings(learning: LearnerSettings, output_format: str) -> None:
    """What the shared options hand a command (the real decorators, without a simulation)."""
    click.echo(json.dumps({**dataclasses.asdict(learning), "format": output_format}))


def test_the_learners_old_names_give_what_the_new_ones_give() -> None:
    runner = CliRunner()
    new = runner.invoke(echo_settings, ["--l2", "0", "--loss-unit-s", "1", "--feature-scaling", "robust",
                                        "--format", "json"])
    old = runner.invoke(echo_settings, ["--lambda", "0", "--loss-unit", "1", "--features", "robust", "--json"])
    assert new.exit_code == old.exit_code == 0, old.output
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert json.loads(new.stdout) | {"l2": 0.0, "loss_unit_s": 1.0, "feature_scaling": "robust",
                                     "format": "json"} == json.loads(new.stdout)
    assert new.stderr == ""
    for old_name, new_name in (("--lambda", "--l2"), ("--loss-unit", "--loss-unit-s"),
                               ("--features", "--feature-scaling"), ("--json", "--format json")):
        assert f"{old_name} is deprecated, write {new_name}" in old.stderr


def test_an_old_name_beside_its_new_name_is_refused() -> None:
    result = CliRunner().invoke(echo_settings, ["--l2", "1", "--lambda", "0"])
    assert result.exit_code == 2
    assert "--lambda is the old name of --l2: give only --l2" in result.output


def test_an_old_name_still_validates_its_value() -> None:
    result = CliRunner().invoke(echo_settings, ["--loss-unit", "0"])
    assert result.exit_code == 2 and "--loss-unit" in result.output


def test_an_old_name_is_hidden_from_help() -> None:
    text = CliRunner().invoke(main, ["simulate", "--help"]).output
    assert "--l2" in text and "--loss-unit-s" in text and "--feature-scaling" in text
    for old in ("--lambda", "--loss-unit ", "--features", "--json"):
        assert old not in text


def test_serves_old_names_reach_its_configuration() -> None:
    """The daemon checks the margin against the interval before it opens anything."""
    runner = CliRunner()
    outputs = []
    for interval, margin in (("--slurm-interval-s", "--correction-margin-s"),
                             ("--slurm-interval", "--correction-margin")):
        result = runner.invoke(main, ["serve", "--slurm", interval, "50", margin, "60",
                                      "--db", "sqlite:///no-such-folder/x.db"])
        assert result.exit_code == 1
        outputs.append(result.stderr.splitlines()[-1])
    assert outputs[0] == outputs[1]
    assert "correction_margin_s (60) must cover two looks at SLURM (50 s each)" in outputs[0]


def test_replay_compares_correction_lead_and_json_old_names() -> None:
    csv = RECORDED.with_suffix(".csv")
    common = ["replay-compare", str(RECORDED), "--predictor", "plugin", "--plugin-csv", str(csv)]
    runner = CliRunner()
    new = runner.invoke(main, [*common, "--correction-lead-s", "45", "--format", "json"])
    old = runner.invoke(main, [*common, "--correction-lead", "45", "--json"])
    assert new.exit_code == old.exit_code == 0, old.output
    assert json.loads(old.stdout) == json.loads(new.stdout)
    assert "45 s ahead" in json.loads(new.stdout)["model"]


@pytest.mark.parametrize("command", ["campaign", "campaign-report"])
def test_a_campaigns_store_was_called_db(command: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    smoke = str(REPO_ROOT / "sim" / "smoke.toml")
    extra = ["--dry-run"] if command == "campaign" else ["--out", str(tmp_path / "report")]
    runner = CliRunner()
    new = runner.invoke(main, [command, smoke, "--store", store, *extra])
    old = runner.invoke(main, [command, smoke, "--db", store, *extra])
    assert "--db is deprecated, write --store" in old.stderr
    assert new.exit_code == old.exit_code
    assert new.stdout == old.stdout
    # campaign names the store it opens; campaign-report, the one it found never run
    assert store.removeprefix("sqlite:///") in new.stderr
    assert store.removeprefix("sqlite:///") in old.stderr
    assert new.exit_code == (0 if command == "campaign" else 1)


def test_replay_slurms_poll_is_now_poll_s(tmp_path: Path) -> None:
    """Refused beside its new name and range-checked under its old one, both before any SLURM
    command runs; hidden from --help."""
    runner = CliRunner()
    log = REPO_ROOT / "swf" / "KTH-SP2-sample.swf"
    both = runner.invoke(main, ["replay-slurm", str(log), "--poll-s", "2", "--poll", "3", "-o", str(tmp_path / "o.swf")])
    assert both.exit_code == 2 and "--poll is the old name of --poll-s: give only --poll-s" in both.output
    too_fast = runner.invoke(main, ["replay-slurm", str(log), "--poll", "0.1", "-o", str(tmp_path / "o.swf")])
    assert too_fast.exit_code == 2 and "--poll" in too_fast.output
    text = runner.invoke(main, ["replay-slurm", "--help"]).output
    assert "--poll-s" in text and "--poll " not in text
