"""The deployment pieces in deploy/ are real: the config loads, the unit file verifies (issue 16, item 6)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import skip_or_fail
from hpcpredict.daemon.core.config import ConfigError, load_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_example_config_loads_with_the_documented_paths() -> None:
    config = load_config(DEPLOY / "daemon.toml")
    assert config.db == "sqlite:////var/lib/hpcpredict/hpcpredict.db"
    assert config.socket == "/run/hpcpredict/hpcpredict.sock"
    assert config.socket_mode == 0o600
    assert config.http == "127.0.0.1:8765" and config.http_token_file == "/etc/hpcpredict/http-token"
    assert config.slurm is False  # record mode first
    assert config.learner.loss == "eloss"
    assert config.guard is not None and config.guard.wait_s == 86_400


@pytest.mark.parametrize(("value", "seconds"), [('"off"', None), ('"12h"', 43_200), ("7200", 7200)])
def test_the_starvation_guard_is_configurable(tmp_path: Path, value: str, seconds: int | None) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\nstarvation_guard = {value}\n")
    guard = load_config(path).guard
    assert (None if guard is None else guard.wait_s) == seconds


@pytest.mark.parametrize("value", ['"soon"', "30", "true"])
def test_a_bad_starvation_guard_names_the_key(tmp_path: Path, value: str) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\nstarvation_guard = {value}\n")
    with pytest.raises(ConfigError, match="starvation_guard"):
        load_config(path)


@pytest.mark.parametrize(("value", "xfactor"), [(None, None), ("5", 5), ("1.5", 1.5)])
def test_the_starvation_guards_xfactor_is_configurable_and_off_by_default(
    tmp_path: Path, value: str | None, xfactor: float | None
) -> None:
    path = tmp_path / "daemon.toml"
    line = "" if value is None else f"starvation_guard_xfactor = {value}\n"
    path.write_text(f"[daemon]\nstarvation_guard = \"24h\"\n{line}")
    config = load_config(path)
    assert config.guard.xfactor == xfactor and config.guard.wait_s == 86_400
    assert config.guard.rule == ("wait" if xfactor is None else "xfactor")


@pytest.mark.parametrize(("value", "expected"), [
    ("true", "a number above 1"), ('"5"', "a number above 1"), ("1", "a number above 1"),
    ("0.5", "a number above 1"), ("nan", "a number above 1"), ("inf", "a number above 1"),
    ("[2]", "a number above 1"),
])
def test_a_bad_starvation_guard_xfactor_names_the_key_and_what_was_expected(
    tmp_path: Path, value: str, expected: str
) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\nstarvation_guard_xfactor = {value}\n")
    with pytest.raises(ConfigError, match=f"starvation_guard_xfactor: expected {expected}"):
        load_config(path)


def test_the_xfactor_needs_a_guard_whose_duration_caps_it(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text('[daemon]\nstarvation_guard = "off"\nstarvation_guard_xfactor = 2\n')
    with pytest.raises(ConfigError, match="starvation_guard_xfactor needs a starvation guard"):
        load_config(path)
    # the same refusal when the command line turns the guard off under a file that sets X
    path.write_text("[daemon]\nstarvation_guard_xfactor = 2\n")
    with pytest.raises(ConfigError, match="starvation_guard_xfactor needs a starvation guard"):
        load_config(path).with_overrides(starvation_guard="off")


def serve_refuses(tmp_path: Path, *options: str) -> str:
    """`hpcpredict serve` with `options` fails before it opens anything: its output."""
    from click.testing import CliRunner

    from hpcpredict.cli import main

    done = CliRunner().invoke(main, ["serve", "--db", f"sqlite:///{tmp_path / 'x.db'}", *options])
    assert done.exit_code != 0 and not (tmp_path / "x.db").exists()
    return done.output


def test_serve_takes_the_xfactor_on_its_command_line(tmp_path: Path) -> None:
    """`--starvation-guard-xfactor` reaches the configuration's checks (refused before anything
    is opened) and its value overrides the file's."""
    from hpcpredict.cli.daemon import _config

    assert "starvation_guard_xfactor: expected a number above 1" in serve_refuses(
        tmp_path, "--starvation-guard-xfactor", "1")
    path = tmp_path / "daemon.toml"
    path.write_text("[daemon]\nstarvation_guard_xfactor = 5\n")
    assert _config(path, starvation_guard_xfactor=2.0).starvation_guard_xfactor == 2.0
    assert _config(path, starvation_guard_xfactor=None).starvation_guard_xfactor == 5


def test_the_guards_slack_stage_is_configurable_and_off_by_default(tmp_path: Path) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text('[daemon]\nstarvation_guard = "24h"\n')
    config = load_config(path)
    assert (config.guard.slack_s, config.guard.slack_after_s) == (None, None)
    path.write_text('[daemon]\nstarvation_guard_slack = "2h"\nstarvation_guard_slack_after = 14400\n')
    config = load_config(path)
    assert (config.guard.slack_s, config.guard.slack_after_s) == (7_200, 14_400)


@pytest.mark.parametrize(("lines", "expected"), [
    ('starvation_guard_slack = "2h"', "go together"),
    ('starvation_guard_slack_after = "4h"', "go together"),
    ('starvation_guard_slack = "90s"\nstarvation_guard_slack_after = "4h"',
     "starvation_guard_slack: expected a whole number of minutes"),
    ('starvation_guard_slack = "off"\nstarvation_guard_slack_after = "4h"',
     "starvation_guard_slack: expected a whole number of minutes"),
    ('starvation_guard_slack = "2h"\nstarvation_guard_slack_after = "soon"',
     "starvation_guard_slack_after: expected a duration"),
    ('starvation_guard_slack = "0m"\nstarvation_guard_slack_after = "4h"', "at least 1 minute"),
    ('starvation_guard_slack = "2h"\nstarvation_guard_slack_after = "25h"',
     "starvation_guard_slack_after: expected a whole number of seconds within the guard's wait"),
    ('starvation_guard = "off"\nstarvation_guard_slack = "2h"\nstarvation_guard_slack_after = "4h"',
     "needs a starvation guard"),
])
def test_a_bad_slack_stage_names_the_key_and_what_was_expected(tmp_path: Path, lines: str, expected: str) -> None:
    path = tmp_path / "daemon.toml"
    path.write_text(f"[daemon]\n{lines}\n")
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_serve_takes_the_slack_stage_on_its_command_line(tmp_path: Path) -> None:
    from hpcpredict.cli.daemon import _config

    assert "go together" in serve_refuses(tmp_path, "--starvation-guard-slack", "2h")
    path = tmp_path / "daemon.toml"
    path.write_text('[daemon]\nstarvation_guard_slack = "1h"\nstarvation_guard_slack_after = "3h"\n')
    config = _config(path, starvation_guard_slack="2h", starvation_guard_slack_after="4h")
    assert (config.guard.slack_s, config.guard.slack_after_s) == (7_200, 14_400)


def test_unit_paths_match_the_example_config() -> None:
    unit = (DEPLOY / "hpcpredict.service").read_text()
    assert "RuntimeDirectory=hpcpredict\n" in unit  # /run/hpcpredict: the socket's folder
    assert "StateDirectory=hpcpredict\n" in unit  # /var/lib/hpcpredict: the database
    assert "--config /etc/hpcpredict/daemon.toml" in unit
    for option in ("User=", "Restart=on-failure", "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes"):
        assert option in unit


@pytest.mark.parametrize("name", ["hpcpredict.service", "hpcpredict-failsafe.service"])
def test_unit_file_verifies(tmp_path: Path, name: str) -> None:
    """systemd-analyze verify: unknown keys, bad values and a missing ExecStart binary all show.

    The binary is pointed at this test's interpreter's hpcpredict (the unit's /opt path does not
    exist here); verify prints problems as warnings with exit 0, so stderr must be clean too.
    """
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        skip_or_fail("systemd-analyze not installed (apt-get install systemd; .ci/run does)")
    hpcpredict = Path(sys.executable).parent / "hpcpredict"
    if not hpcpredict.exists():
        skip_or_fail(f"no hpcpredict entry point beside {sys.executable}")
    unit = tmp_path / name
    unit.write_text((DEPLOY / name).read_text().replace(
        "/opt/hpcpredict/venv/bin/hpcpredict", str(hpcpredict)))
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    problems = [line for line in done.stderr.splitlines() if name in line]
    assert done.returncode == 0 and not problems, done.stderr


def test_quickstart_names_only_files_the_repository_has() -> None:
    """Every `src/...` file docs/quickstart-cluster.md copies exists in the repository."""
    import re

    root = DEPLOY.parent
    text = (root / "docs" / "quickstart-cluster.md").read_text()
    copied = set(re.findall(r"/opt/hpcpredict/src/([\w./-]+\.(?:toml|service|lua))", text))
    # all three Lua files: both scripts load hpcpredict_common.lua, and without it every job passes
    # untouched (issue 28, item 3)
    assert {"deploy/daemon.toml", "deploy/hpcpredict.service", "slurm-plugin/job_submit.lua",
            "slurm-plugin/jobcomp.lua", "slurm-plugin/hpcpredict_common.lua"} <= copied
    for relative in copied:
        assert (root / relative).is_file(), relative


def unit_settings(name: str = "hpcpredict.service", section_name: str = "[Service]") -> dict[str, list[str]]:
    """The unit's keys of `section_name` and their values, in order (a key may repeat)."""
    settings: dict[str, list[str]] = {}
    section = ""
    for line in (DEPLOY / name).read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == section_name and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_unit_names_slurmuser_only_in_user_and_group() -> None:
    """A site whose SlurmUser is not `slurm` changes User= and Group=, nothing else: the folders are
    systemd's (StateDirectory=, RuntimeDirectory=, CacheDirectory=), made for User=, so no command
    of the unit chowns to a hard-coded user (issue 28, item 7)."""
    settings = unit_settings()
    assert settings["User"] == ["slurm"] and settings["Group"] == ["slurm"]
    for key, values in settings.items():
        if key not in ("User", "Group"):
            assert all("slurm:" not in value and "-o slurm" not in value for value in values), (key, values)
    assert "ExecStartPre" not in settings
    config = load_config(DEPLOY / "daemon.toml")
    state = Path("/var/lib") / settings["StateDirectory"][0]
    assert Path(config.db.removeprefix("sqlite:///")).parent == state
    assert Path(config.spool).parent == state  # jobcomp.lua (as SlurmUser) writes it there
    assert Path(config.socket).parent == Path("/run") / settings["RuntimeDirectory"][0]


def test_the_unit_gives_numba_a_cache_and_enough_open_files() -> None:
    """NUMBA_CACHE_DIR is the unit's own CacheDirectory= (item 1), and LimitNOFILE lifts the 1,024
    default at which the socket stopped accepting (item 7)."""
    settings = unit_settings()
    assert f"NUMBA_CACHE_DIR=/var/cache/{settings['CacheDirectory'][0]}" in settings["Environment"]
    assert int(settings["LimitNOFILE"][0]) >= 65536


def test_one_token_instruction_everywhere() -> None:
    """daemon.toml, docs/daemon.md and the quick start make the token the same way: umask 027,
    then the group of the daemon's user, so the daemon reads it and other users cannot."""
    root = DEPLOY.parent
    texts = {name: (root / name).read_text() for name in
             ("deploy/daemon.toml", "docs/daemon.md", "docs/quickstart-cluster.md")}
    for name, text in texts.items():
        assert "umask 027" in text and "chgrp slurm /etc/hpcpredict/http-token" in text, name
        assert "umask 077" not in text and "chown slurm: /etc/hpcpredict/http-token" not in text, name


def test_the_quick_start_never_uses_sudo_nor_reconfigure_for_jobcomp() -> None:
    """`sudo` is not on a minimal Debian (runuser is, util-linux); `scontrol reconfigure` does not
    switch JobCompType on Slurm 22.05 (measured: tests/test_quickstart_cluster.py): restart."""
    text = (DEPLOY.parent / "docs" / "quickstart-cluster.md").read_text()
    assert "sudo -u" not in text and "runuser -u slurm -- hpcpredict train" in text
    step5 = text.split("## 5.", 1)[1].split("## 6.", 1)[0]
    assert "systemctl restart slurmctld" in step5


def test_the_quick_start_makes_the_state_folder_before_training() -> None:
    """Step 3's `train` as SlurmUser writes in /var/lib/hpcpredict, which systemd makes only in
    step 4: step 2 makes it for SlurmUser (issue 28, item 2)."""
    text = (DEPLOY.parent / "docs" / "quickstart-cluster.md").read_text()
    made = text.index("install -d -o slurm -g slurm -m 0750 /var/lib/hpcpredict")
    assert made < text.index("hpcpredict train /tmp/history.swf")


def test_the_failsafe_unit_does_not_share_the_daemons_fate() -> None:
    """Its own unit (issue 50): not bound to the daemon's (a stopped or given-up daemon leaves it
    running), never given up itself, as the daemon's user, reading the heartbeat where the
    daemon's watcher writes it (deploy/daemon.toml's [failsafe], in the shared state directory)."""
    service, unit = unit_settings("hpcpredict-failsafe.service"), unit_settings("hpcpredict-failsafe.service", "[Unit]")
    daemon = unit_settings()
    assert service["User"] == daemon["User"] and service["Group"] == daemon["Group"]
    assert service["Restart"] == ["always"] and unit["StartLimitIntervalSec"] == ["0"]
    assert not {"BindsTo", "PartOf", "Requires", "Requisite"} & set(unit), unit
    assert service["StateDirectory"] == daemon["StateDirectory"]
    assert service["ExecStart"] == ["/opt/hpcpredict/venv/bin/hpcpredict failsafe --config /etc/hpcpredict/daemon.toml"]
    failsafe = load_config(DEPLOY / "daemon.toml").failsafe
    state = Path("/var/lib") / service["StateDirectory"][0]
    assert Path(failsafe.heartbeat).parent == state and Path(failsafe.status).parent == state
    assert service["Environment"] == [f"HPCPREDICT_STATE_DIR={state}"]  # its defaults, if the file fails


SERIES = {  # 15 s apart: a healthy minute, then the failure
    "up": "1x8 0x8",
    "hpcpredict_watcher_stale": "0x2 1x6",
    "hpcpredict_failsafe_restoring": "0x3 1x5",
    "hpcpredict_failsafe_lowered_left": "0x3 3x5",
    "hpcpredict_failsafe_status_age_seconds": "2x4 45x4",
}
# (alert, when, fires): each rule quiet before its failure, firing after its `for:`
EXPECTED = [
    ("HpcpredictWatcherStale", "15s", False), ("HpcpredictWatcherStale", "90s", True),
    ("HpcpredictFailsafeRestoring", "30s", False), ("HpcpredictFailsafeRestoring", "60s", True),
    ("HpcpredictFailsafeCannotRestore", "105s", True),
    ("HpcpredictFailsafeDown", "60s", False), ("HpcpredictFailsafeDown", "150s", True),
    ("HpcpredictDaemonDown", "120s", False), ("HpcpredictDaemonDown", "240s", True),
]


def test_the_alert_rules_load_and_fire_as_documented(tmp_path: Path) -> None:
    """deploy/hpcpredict-alerts.yml with Debian's promtool: the rules parse (`check rules`), and
    each fires on the metrics the daemon exports when it should (`test rules`: a watcher stale for
    30 s, a failsafe restoring or unable to, a failsafe gone quiet or never run, a daemon down)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        skip_or_fail("promtool not installed (apt-get install prometheus; .ci/run does)")
    rules = DEPLOY / "hpcpredict-alerts.yml"
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS: 5 rules found" in done.stdout, done.stdout + done.stderr
    import yaml

    rules_by_name = {rule["alert"]: rule for group in yaml.safe_load(rules.read_text())["groups"]
                     for rule in group["rules"]}
    target = {"job": "hpcpredict", "instance": "ctl:8765"}

    def fired(name: str) -> list[dict[str, object]]:
        rule = rules_by_name[name]
        return [{"exp_labels": {**target, **rule["labels"]}, "exp_annotations": rule["annotations"]}]

    labels = ",".join(f'{key}="{value}"' for key, value in target.items())
    scenario = {"rule_files": [str(rules)], "evaluation_interval": "15s", "tests": [
        {"interval": "15s",
         "input_series": [{"series": f"{name}{{{labels}}}", "values": values} for name, values in SERIES.items()],
         "alert_rule_test": [{"eval_time": when, "alertname": name, "exp_alerts": fired(name) if fires else []}
                             for name, when, fires in EXPECTED]},
        # a daemon up whose failsafe never ran: no status, no metric
        {"interval": "15s", "input_series": [{"series": f"up{{{labels}}}", "values": "1x8"}],
         "alert_rule_test": [{"eval_time": "90s", "alertname": "HpcpredictFailsafeDown",
                              "exp_alerts": fired("HpcpredictFailsafeDown")}]},
    ]}
    assert set(rules_by_name) == {name for name, _, _ in EXPECTED}
    path = tmp_path / "alerts_test.yml"
    path.write_text(json.dumps(scenario))  # JSON is YAML
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_daemon_exports_every_metric_the_alert_rules_read() -> None:
    import re

    rules = (DEPLOY / "hpcpredict-alerts.yml").read_text()
    expressions = " ".join(line for line in rules.splitlines() if line.strip().startswith("expr:"))
    read = set(re.findall(r"\b(hpcpredict_[a-z_]+)\b", expressions))
    server = (Path(__file__).resolve().parent.parent / "hpcpredict" / "daemon" / "fronts" / "server.py").read_text()
    assert read and all(f'"{name}"' in server for name in read), read
