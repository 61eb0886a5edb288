"""The JSON-lines campaign store: a committed text file a long campaign can resume from.

What it must keep of the SQL store's promise (a run stored whole or absent, never twice) when the
writer is killed mid-line, when the file is damaged, and when two campaigns open it at once; and
that a campaign run through the CLI into it reports exactly what the SQLite store reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.experiments.campaign import CampaignError, Cell, CellResult, load_campaign
from hpcpredict.experiments.campaign_store import JsonLinesStore, StoreError, open_store, store_file

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE = (REPO_ROOT / "swf" / "KTH-SP2-sample.swf").resolve()
SMOKE = REPO_ROOT / "sim" / "smoke.toml"


def result(cell: Cell, ave_bsld: float) -> CellResult:
    return CellResult(key=cell.key, metrics={"jobs": 10, "ave_bsld": ave_bsld}, wall_time_s=1.0,
                      host="h")


def test_a_line_torn_by_a_kill_is_a_run_in_flight_cut_off_at_the_next_write(tmp_path: Path) -> None:
    first, second, third = load_campaign(SMOKE).cells[:3]
    path = tmp_path / "runs.jsonl"
    store = JsonLinesStore(path)
    assert store.add("smoke", first, result(first, 1.5))
    store.close()
    whole = path.read_bytes()
    line = json.dumps({"key": second.key, "metrics": {"jobs": 10}}).encode()
    path.write_bytes(whole + line[: len(line) // 2])  # killed while writing the second run

    reopened = JsonLinesStore(path)
    assert reopened.done_keys() == {first.key}  # the torn run is to do again
    assert reopened.add("smoke", third, result(third, 3.0))
    reopened.close()
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines[0] == whole and len(lines) == 2 and lines[1].endswith(b"\n")
    assert [json.loads(line)["key"] for line in lines] == [first.key, third.key]
    assert JsonLinesStore(path).done_keys() == {first.key, third.key}


def test_a_damaged_line_is_reported_with_its_file_and_line_not_skipped(tmp_path: Path) -> None:
    first = load_campaign(SMOKE).cells[0]
    path = tmp_path / "runs.jsonl"
    store = JsonLinesStore(path)
    store.add("smoke", first, result(first, 1.5))
    store.close()
    with path.open("ab") as handle:
        handle.write(b'{"label": "no key"}\n')
    with pytest.raises(StoreError, match=r"runs\.jsonl:2: not a stored run"):
        JsonLinesStore(path)


def test_two_campaigns_cannot_write_one_store_at_once(tmp_path: Path) -> None:
    first, second = load_campaign(SMOKE).cells[:2]
    path = tmp_path / "runs.jsonl"
    writer = JsonLinesStore(path)
    writer.add("smoke", first, result(first, 1.5))
    other = JsonLinesStore(path)
    with pytest.raises(StoreError, match="another campaign is writing"):
        other.add("smoke", second, result(second, 2.5))
    writer.close()
    assert other.add("smoke", second, result(second, 2.5))  # the lock went with the writer
    assert not other.add("smoke", first, result(first, 9.0))  # ... and its runs count as done
    other.close()


def test_store_locations_name_their_kind(tmp_path: Path) -> None:
    assert isinstance(open_store(str(tmp_path / "r.jsonl")), JsonLinesStore)
    with pytest.raises(StoreError, match="not a store"):
        open_store(str(tmp_path / "r.sqlite"))  # a path without a scheme is not a URL
    assert store_file(f"sqlite:///{tmp_path}/r.sqlite") == tmp_path / "r.sqlite"
    assert store_file("postgresql+psycopg://host/db") is None


def campaign_file(tmp_path: Path, store: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        f'name = "c"\nstore = "{store}"\n[[logs]]\nname = "kth"\npath = "{SAMPLE}"\n'
        '[[baselines]]\nlabel = "EASY"\nscheduler = "easy"\npredictor = "requested"\n'
        'correction = "requested"\n[[baselines]]\nlabel = "EASY++"\nscheduler = "easy-sjbf"\n'
        'predictor = "ave2"\ncorrection = "incremental"\n',
        encoding="utf-8",
    )
    return path


def test_the_campaign_file_names_its_store_relative_to_itself(tmp_path: Path) -> None:
    definition = load_campaign(campaign_file(tmp_path, "results/c/runs.jsonl"))
    assert definition.default_database_url == str(tmp_path / "results" / "c" / "runs.jsonl")
    with pytest.raises(CampaignError, match="store must be a .jsonl file or a SQLAlchemy URL"):
        load_campaign(campaign_file(tmp_path, "runs.csv"))


def test_a_campaign_into_jsonl_reports_what_the_sqlite_store_reports(tmp_path: Path) -> None:
    path = campaign_file(tmp_path, "results/c/runs.jsonl")
    runner = CliRunner()
    report = runner.invoke(main, ["campaign-report", str(path)])
    assert report.exit_code != 0 and "never run" in report.output
    ran = runner.invoke(main, ["campaign", str(path), "-j", "1"])
    assert ran.exit_code == 0, ran.output
    assert len((tmp_path / "results" / "c" / "runs.jsonl").read_text().splitlines()) == 2
    again = runner.invoke(main, ["campaign", str(path), "-j", "1", "--dry-run"])
    assert "2 already stored, 0 to run" in again.output
    sqlite = f"sqlite:///{tmp_path / 'c.sqlite'}"
    assert runner.invoke(main, ["campaign", str(path), "-j", "1", "--store", sqlite]).exit_code == 0

    volatile = ["finished_at", "wall_time_s", "host"]
    frames = []
    for location in (str(tmp_path / "results" / "c" / "runs.jsonl"), sqlite):
        store = open_store(location)
        frames.append(store.frame().drop(columns=volatile).set_index("key").sort_index())
        store.close()
    assert frames[0].columns.tolist() == frames[1].columns.tolist()
    assert frames[0].astype(str).equals(frames[1].astype(str))

    reported = runner.invoke(main, ["campaign-report", str(path), "--out", str(tmp_path / "r")])
    assert reported.exit_code == 0, reported.output
    assert "2 of 2 runs reported" in reported.output
