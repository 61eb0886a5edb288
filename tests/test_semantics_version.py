"""The simulator's semantics version: a stored run is reused only by the code that computed it.

Campaign and `hpcpredict tune` stores keep runs under a key of their settings, and a store lives
longer than the code that filled it. `runner.SEMANTICS_VERSION` joins the key once it is bumped;
these tests pin one replay per simulator option so that a change which moves any of them cannot
land without the bump (and new pins), and check that a bump makes a campaign run its runs again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import hpcpredict.experiments.campaign as campaign_module
from hpcpredict.cli import main
from hpcpredict.experiments.campaign import load_campaign
from hpcpredict.sim.metrics import compute_metrics
from hpcpredict.sim.runner import SEMANTICS_VERSION, RunSpec, run
from hpcpredict.logs.workload import load_workload
from test_campaign_replicas import CAMPAIGN as REPLICATED

SAMPLE = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
DAY_S = 86_400

# One replay per path of the simulator and the learner a campaign can ask for, on the sample log.
SPECS = {
    "fcfs, requests": RunSpec("fcfs", "requested", "requested"),
    "easy, requests": RunSpec("easy", "requested", "requested"),
    "easy-sjbf, clairvoyant": RunSpec("easy-sjbf", "clairvoyant", "requested"),
    "easy, ave2, doubling": RunSpec("easy", "ave2", "doubling"),
    "learned, no guard": RunSpec(),
    "learned, square loss": RunSpec.from_keys(loss="over=square,under=square,weight=constant"),
    "learned, guard 24 h": RunSpec.from_keys(starvation_guard_s=DAY_S),
    "learned, guard 6 h, decide on corrections": RunSpec.from_keys(starvation_guard_s=21_600,
                                                         decide_on_correction=True),
    "learned, promise rule": RunSpec.from_keys(starvation_guard_s=DAY_S, guard_rule="promise"),
    "learned, xfactor rule": RunSpec.from_keys(starvation_guard_s=DAY_S, guard_rule="xfactor",
                                     guard_xfactor=3.0),
    "learned, slack stage": RunSpec.from_keys(starvation_guard_s=DAY_S, guard_estimate_slack_s=3_600,
                                    guard_estimate_after_s=1_800),
    "learned, survival": RunSpec(correction="survival", survival_quantile=0.9),
    "learned, censored, robust": RunSpec.from_keys(censor_at_limit=True, feature_scaling="robust"),
    "learned, calibrated": RunSpec.from_keys(calibration_alpha=0.5),
    "slurm-backfill, requests": RunSpec("slurm-backfill", "requested", "requested"),
    "slurm-backfill, learned, guard 24 h": RunSpec.from_keys("slurm-backfill", starvation_guard_s=DAY_S),
    "slurm-backfill, learned, slack stage": RunSpec.from_keys(
        "slurm-backfill", starvation_guard_s=DAY_S, guard_estimate_slack_s=3_600,
        guard_estimate_after_s=1_800),
    "learned, history by user+request": RunSpec.from_keys(history_by="user+request"),
}

# What each version's code computes for SPECS: the schedule's digest, then the metrics'. A change
# that moves one of them bumps SEMANTICS_VERSION and adds the new version's pins here (the old
# ones stay, as the record of what the earlier keys meant). The pins of the options retired since
# (hpcpredict.retired: the recent rule, the head scope, aged first, the estimate multiple, the
# evidence option, per-user experts) are at the git tag experiments-2026-11; the 17 kept here are
# unchanged from it.
PINS: dict[int, dict[str, str]] = {
    1: {
        "fcfs, requests": "3597732caa2ee07b-78e8a418",
        "easy, requests": "436864510a74d665-5717666e",
        "easy-sjbf, clairvoyant": "1c5714821f472b62-a1ec4d7b",
        "easy, ave2, doubling": "73cbe3c82a8ff997-2796941f",
        "learned, no guard": "c59b6249bd286de1-7369863b",
        "learned, square loss": "344d4ba637b43cce-d83278b0",
        "learned, guard 24 h": "e6c1f3e1940fd18d-13f7e16a",
        "learned, guard 6 h, decide on corrections": "98e8bbbf35954a4c-a79d86f2",
        "learned, promise rule": "bfea296966e78f9d-a3d7123c",
        "learned, xfactor rule": "007c67844b649333-e3bdc09d",
        "learned, slack stage": "fefcbdecb5212cfe-0a0ef06c",
        "learned, survival": "0010c53112dab725-b077b05b",
        "learned, censored, robust": "8d93070950c14d65-ec20e7bd",
        "learned, calibrated": "f95b5c1205c92b20-7e779eeb",
        "slurm-backfill, requests": "5023f4363f66b6ec-08ff36c2",
        "slurm-backfill, learned, guard 24 h": "7682114e9236e092-0876dd41",
        "slurm-backfill, learned, slack stage": "d8afc3d2eb176014-961f9ee8",
    },
    # the same schedules (the digests before the "-"); the metrics gained median_over_prediction_s
    2: {
        "fcfs, requests": "3597732caa2ee07b-97804ac8",
        "easy, requests": "436864510a74d665-871a30f2",
        "easy-sjbf, clairvoyant": "1c5714821f472b62-798a24bb",
        "easy, ave2, doubling": "73cbe3c82a8ff997-88d57f8a",
        "learned, no guard": "c59b6249bd286de1-c56d452e",
        "learned, square loss": "344d4ba637b43cce-7f0109a7",
        "learned, guard 24 h": "e6c1f3e1940fd18d-2da15ae2",
        "learned, guard 6 h, decide on corrections": "98e8bbbf35954a4c-bbcd7173",
        "learned, promise rule": "bfea296966e78f9d-ea4b9d4d",
        "learned, xfactor rule": "007c67844b649333-496c7c7f",
        "learned, slack stage": "fefcbdecb5212cfe-acee22dd",
        "learned, survival": "0010c53112dab725-80b8524f",
        "learned, censored, robust": "8d93070950c14d65-932e3a0e",
        "learned, calibrated": "f95b5c1205c92b20-1d157c16",
        "slurm-backfill, requests": "5023f4363f66b6ec-ead0ef85",
        "slurm-backfill, learned, guard 24 h": "7682114e9236e092-52e70e68",
        "slurm-backfill, learned, slack stage": "d8afc3d2eb176014-c457ce18",
        "learned, history by user+request": "2aafa7b94e334e85-feafd774",
    },
}


def fingerprint(spec: RunSpec) -> str:
    """What a store would keep of this replay: every job's schedule and the run's metrics."""
    result = run(load_workload(SAMPLE), spec)
    metrics = json.dumps(compute_metrics(result).to_dict(), sort_keys=True)
    return f"{result.schedule_digest()}-{hashlib.sha256(metrics.encode()).hexdigest()[:8]}"


def test_every_option_replays_as_the_semantics_version_pinned() -> None:
    assert SEMANTICS_VERSION in PINS, (
        f"SEMANTICS_VERSION {SEMANTICS_VERSION} has no pins: add PINS[{SEMANTICS_VERSION}]")
    pinned = PINS[SEMANTICS_VERSION]
    assert pinned.keys() == SPECS.keys()
    live = {name: fingerprint(spec) for name, spec in SPECS.items()}
    moved = {name: now for name, now in live.items() if now != pinned[name]}
    assert not moved, (
        f"these replays changed under SEMANTICS_VERSION {SEMANTICS_VERSION}: {moved}. Runs stored "
        "by the earlier code would be read as this code's: bump hpcpredict.sim.runner."
        "SEMANTICS_VERSION and add the new fingerprints as its PINS entry")
    # Each option takes its own path on the sample, as the code replays it now (not as the table
    # says): an option whose replay equals another's would not notice a change to its own code.
    same = {}
    for name, now in live.items():
        same.setdefault(now, []).append(name)
    assert all(len(names) == 1 for names in same.values()), [names for names in same.values() if len(names) > 1]
    # A bump without a change would rerun every stored run for nothing (the table's own integrity).
    versions = sorted(PINS)
    assert versions == list(range(1, len(versions) + 1))
    assert all(PINS[earlier] != PINS[later] for earlier, later in zip(versions, versions[1:]))


# A small replicated campaign on the sample (EASY, EASY++ and the learned default), 2 replicas.
CAMPAIGN = REPLICATED.replace("replicas = 3", "replicas = 2")


def test_a_bumped_version_runs_again_what_the_earlier_code_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "replicated.toml"
    path.write_text(CAMPAIGN, encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    runner = CliRunner()
    first = runner.invoke(main, ["campaign", str(path), "--store", store, "-j", "1"])
    assert first.exit_code == 0, first.output
    again = runner.invoke(main, ["campaign", str(path), "--store", store, "-j", "1"])
    assert "6 already stored, 0 to run" in again.output
    version_1_keys = {cell.key for cell in load_campaign(path).cells}

    monkeypatch.setattr(campaign_module, "SEMANTICS_VERSION", SEMANTICS_VERSION + 1)
    bumped_keys = {cell.key for cell in load_campaign(path).cells}
    assert bumped_keys.isdisjoint(version_1_keys)
    bumped = runner.invoke(main, ["campaign", str(path), "--store", store, "-j", "1"])
    assert bumped.exit_code == 0, bumped.output
    assert "0 already stored, 6 to run" in bumped.output


# Campaign and tune stores key each run by its settings (`RunSpec.to_dict`); these keys were
# computed by the code before the guard's settings became one `GuardSettings` (44967d1): a store
# filled then is read by this code as the same runs.
STORED_KEYS = {
    "default": (RunSpec(), "c6d7d3b1ebac7179"),
    "guard 24h": (RunSpec.from_keys(starvation_guard_s=86400), "99ac1c5c574bcee7"),
    "xfactor": (RunSpec.from_keys(starvation_guard_s=86400, guard_rule="xfactor", guard_xfactor=5),
                "7777d1dd8b026faa"),
    "promise": (RunSpec.from_keys(starvation_guard_s=3600, guard_rule="promise"), "9c523450a6e2d3a8"),
    "slack": (RunSpec.from_keys(starvation_guard_s=86400, guard_estimate_slack_s=7200,
                                guard_estimate_after_s=14400), "9136bda736778164"),
    "slurm slack xfactor": (RunSpec.from_keys(
        "slurm-backfill", starvation_guard_s=86400, guard_rule="xfactor", guard_xfactor=3.0,
        guard_estimate_slack_s=3600, guard_estimate_after_s=1800), "5b0359a7f99a804b"),
    "ave2 survival": (RunSpec("easy", "ave2", "survival", survival_quantile=0.9), "a34b253843a8380d"),
    "learner options": (RunSpec.from_keys(eta=1.0, l2=0.0, censor_at_limit=True, feature_scaling="robust",
                                calibration_alpha=0.5, loss_unit_s=1.0, negative="clip"),
                        "489e6061708bf315"),
}


@pytest.mark.parametrize("name", sorted(STORED_KEYS))
def test_a_runs_settings_keep_the_key_stores_have_for_it(name: str) -> None:
    spec, stored = STORED_KEYS[name]
    assert hashlib.sha256(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()[:16] == stored
    assert RunSpec.from_keys(**spec.to_dict()) == spec  # and the keys read back as the same run
