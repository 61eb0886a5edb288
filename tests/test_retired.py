"""Retired options (hpcpredict.retired): a file that names one at its old default still reads,
with a warning; one that asks for it is refused at every door, naming the tag where it runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.core.config import ConfigError, load_config
from hpcpredict.learn.predictor import HyperparameterMismatchError, LearnedPredictor
from hpcpredict.retired import RETIRED_SETTINGS, RetiredSettingError, drop_retired
from hpcpredict.experiments.campaign import CampaignError, load_campaign

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"


@pytest.mark.parametrize("key", sorted(RETIRED_SETTINGS))
def test_a_retired_key_at_its_old_default_is_dropped_with_a_warning(key: str) -> None:
    default = RETIRED_SETTINGS[key][0]
    settings = {key: default, "eta": 1.0}
    warnings = drop_retired(settings, "here")
    assert settings == {"eta": 1.0}
    assert len(warnings) == 1 and warnings[0].startswith(f"here: {key} is ignored")
    assert "experiments-2026-11" in warnings[0]


@pytest.mark.parametrize(("key", "value"), [
    ("per_user_experts", True), ("guard_scope", "head"), ("guard_recent_multiple", 2.0),
    ("guard_estimate_multiple", 4.0), ("guard_evidence_s", 900), ("guard_evidence_cap_s", 86_400),
    ("aged_first_s", 3_600), ("per_user_experts", [False, True]),
])
def test_a_retired_key_that_asks_for_its_option_is_an_error(key: str, value: object) -> None:
    with pytest.raises(RetiredSettingError, match=f"here: {key} = .*retired.*experiments-2026-11"):
        drop_retired({key: value}, "here")


def test_the_retired_guard_rule_is_an_error() -> None:
    with pytest.raises(RetiredSettingError, match="\"recent\" rule"):
        drop_retired({"guard_rule": "recent"}, "here")
    assert drop_retired({"guard_rule": "xfactor"}, "here") == []


def _campaign(tmp_path: Path, learned: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'name = "c"\n[[logs]]\nname = "s"\npath = "{SAMPLE}"\n[learned]\n{learned}\n')
    return path


def test_a_campaign_naming_a_retired_option_reads_or_says_why(tmp_path: Path, capsys) -> None:
    campaign = load_campaign(_campaign(tmp_path, "per_user_experts = [false]"))
    assert len(campaign.cells) == 1
    assert "per_user_experts is ignored" in capsys.readouterr().err
    with pytest.raises(CampaignError, match="per_user_experts = \\[False, True\\]: per-user expert"):
        load_campaign(_campaign(tmp_path, "per_user_experts = [false, true]"))
    path = tmp_path / "b.toml"
    path.write_text(f'name = "b"\n[[logs]]\nname = "s"\npath = "{SAMPLE}"\n[[baselines]]\n'
                    'scheduler = "easy-sjbf"\npredictor = "ave2"\nguard_scope = "head"\n'
                    'starvation_guard_s = 3600\n')
    with pytest.raises(CampaignError, match="\\[\\[baselines\\]\\] entry 1: guard_scope = 'head'"):
        load_campaign(path)


def test_a_daemon_config_naming_the_retired_experts_reads_or_says_why(tmp_path: Path, capsys) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text("[learner]\nper_user_experts = false\n")
    assert load_config(path).learner.eta > 0
    assert "[learner]: per_user_experts is ignored" in capsys.readouterr().err
    path.write_text("[learner]\nper_user_experts = true\n")
    with pytest.raises(ConfigError, match="per_user_experts = True: per-user expert choice was measured and retired"):
        load_config(path)


def test_the_retired_flag_on_the_command_line_reads_or_says_why() -> None:
    runner = CliRunner()
    refused = runner.invoke(main, ["simulate", str(SAMPLE), "--per-user-experts"])
    assert refused.exit_code == 2 and "retired" in refused.output
    kept = runner.invoke(main, ["simulate", str(SAMPLE), "--no-per-user-experts", "--format", "json"])
    assert kept.exit_code == 0, kept.output
    assert "--no-per-user-experts is ignored" in kept.stderr


def test_a_checkpoint_made_with_per_user_experts_is_refused() -> None:
    state = LearnedPredictor().state_dict()
    LearnedPredictor.from_state(state)  # without the flag: read as before
    state["hyper/per_user_experts"] = np.array(True)
    with pytest.raises(HyperparameterMismatchError, match="per-user experts, an option retired"):
        LearnedPredictor.from_state(state)
