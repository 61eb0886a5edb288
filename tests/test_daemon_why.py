"""The sysadmin views lead with what matters to a site and say why (issue 28, item 8).

Real stores: `hpcpredict train` on the first 4,000 jobs of the bundled KTH-SP2 sample, then the
next 300 jobs through the daemon's service as SLURM would report them (live), with a checkpoint
every 250 events so that explanations start from a checkpoint and replay events after it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcpredict.cli import main
from hpcpredict.daemon.core.judged_errors import judged_jobs
from hpcpredict.daemon.views.explain import ExplainError, explain_job, explain_user, restore_model
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.views.site_summary import (
    MAX_CORRECTIONS_PER_LOWERED_JOB,
    corrections_needed,
    site_summary,
)
from hpcpredict.daemon.core.store import Store
from hpcpredict.learn.history import history_events
from hpcpredict.logs.workload import load_workload
from test_daemon_views import report_to_service

HISTORY_JOBS = 4000
LIVE_JOBS = 300


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("why")
    sample = Path(__file__).resolve().parent.parent / "swf" / "KTH-SP2-sample.swf"
    lines = sample.read_text().splitlines()
    header = [line for line in lines if line.startswith(";")]
    records = [line for line in lines if line.strip() and not line.startswith(";")]
    history = folder / "history.swf"
    history.write_text("\n".join(header + records[:HISTORY_JOBS]) + "\n")
    url = f"sqlite:///{folder}/hpcpredict.db"
    trained = CliRunner().invoke(main, ["train", str(history), "--db", url])
    assert trained.exit_code == 0, trained.output

    workload = load_workload(sample)
    live = [job for job in workload.jobs if job.job_id > HISTORY_JOBS][:LIVE_JOBS]
    events, _ = history_events(live, offset_s=workload.header.unix_start_time or 0)
    store = Store(url)
    try:
        report_to_service(PredictionService.open(store, checkpoint_every=250), events)
    finally:
        store.close()
    return url


def judged_of(url: str, source: str):  # -> pd.DataFrame
    store = Store(url)
    try:
        return judged_jobs(store, source=source)
    finally:
        store.close()


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_every_live_job_is_explained_by_the_model_that_predicted_it(store_url: str) -> None:
    """The learner rebuilt from the store just before each submission gives the very prediction
    the daemon recorded, and its terms sum to the model's f (one learner, two drivers)."""
    store = Store(store_url)
    try:
        live = judged_jobs(store, source="live")
        assert len(live) > 200
        for job in live.itertuples(index=False):
            why = explain_job(store, int(job.job_id))
            assert why.recorded_s == int(job.predicted_s) == why.explanation.published_s
            parts = why.explanation.contributions_s
            assert abs(math.fsum(parts) - why.explanation.raw_s) <= 1e-9 * (math.fsum(abs(p) for p in parts) + 1)
            assert all(recent["end_s"] <= why.at_s for recent in why.recent)  # what the model knew
    finally:
        store.close()


def test_restore_model_matches_the_daemons_own_restore(store_url: str) -> None:
    store = Store(store_url)
    try:
        stored = restore_model(store)
        service = PredictionService(store)
        assert stored.checkpoint_seq is not None and stored.through_seq > stored.checkpoint_seq
        mine, theirs = stored.predictor.state_dict(), service.state_dict()
        for key, value in mine.items():
            assert (value == theirs[key]).all(), key
    finally:
        store.close()


def test_a_history_job_and_an_unknown_user_say_what_to_ask(store_url: str) -> None:
    store = Store(store_url)
    try:
        history_job = judged_jobs(store, source="history").iloc[-1]
        with pytest.raises(ExplainError, match=f"--user {int(history_job.user_id)}"):
            explain_job(store, int(history_job.job_id))
        with pytest.raises(ExplainError, match="no such job"):
            explain_job(store, 10**9)
        with pytest.raises(ExplainError, match="no job of this user"):
            explain_user(store, 99999)
        why = explain_user(store, int(history_job.user_id))  # known from the history only, or live too
        assert why.explanation.published_s >= 1 and why.history["completed_jobs"] > 0
    finally:
        store.close()


def test_errors_leads_with_what_matters_and_explains_mae(store_url: str) -> None:
    text = run("errors", "--db", store_url)
    lines = text.splitlines()
    assert lines[0].startswith("What lowering limits does (4,")
    head = "\n".join(lines[:12])
    for words in ("of jobs get a limit below their request", "finished within the lowered limit, no correction",
                  "per lowered job", "planned earlier", "hpcpredict simulate HISTORY.swf --replicas 10",
                  f"slurm-convert --db {store_url}", f"(at most {MAX_CORRECTIONS_PER_LOWERED_JOB:g})",
                  "MAE is the mean distance", "can be worse than the users' requests by design",
                  "Under-predicted is the share", "corrector extends the limit"):
        assert words in head, words
    assert text.index("What lowering limits does") < text.index("MAE s")


def test_summary_numbers_are_the_judged_jobs(store_url: str) -> None:
    judged = judged_of(store_url, "both")
    summary = site_summary(judged)
    lowered = judged[judged["predicted_s"] < judged["requested_s"]]
    assert summary.lowered_jobs == len(lowered)
    assert summary.within_lowered_share == pytest.approx((lowered["run_s"] <= lowered["predicted_s"]).mean())
    assert summary.first_limit_earlier_median_s == pytest.approx(
        (lowered["requested_s"] - lowered["predicted_s"]).median())
    assert 0 <= summary.final_limit_earlier_mean_s <= summary.first_limit_earlier_mean_s
    assert summary.live_judged_jobs == int((judged["source"] == "live").sum()) > 0


def test_corrections_are_counted_as_the_simulator_counts_them() -> None:
    # INCREMENTAL: 1 s, then 1 + 60, 1 + 300, 1 + 900, 1 + 1800 >= 1,000 s run: four corrections
    assert corrections_needed(1, 1000, 3600) == (4, 1801)
    assert corrections_needed(1000, 1000, 3600) == (0, 1000)  # ended at its limit: none
    assert corrections_needed(100, 5000, 3600) == (5, 3600)  # capped at the request


def test_corrections_needed_agrees_with_the_simulator_on_every_job(sample_log: Path) -> None:
    """The summary's count is the simulator's: the same policy, asked by the same rule."""
    import numpy as np

    from hpcpredict.sim.metrics import job_arrays
    from hpcpredict.sim.runner import RunSpec, run as simulate

    jobs = job_arrays(simulate(load_workload(sample_log), RunSpec()))
    counted = [corrections_needed(int(p), int(r), int(q))
               for p, r, q in zip(jobs["initial_prediction_s"], jobs["run_s"], jobs["requested_s"])]
    assert jobs["corrections"].sum() > 1000
    assert np.array_equal([count for count, _ in counted], jobs["corrections"])
    assert np.array_equal([limit for _, limit in counted], jobs["final_prediction_s"])


def test_errors_user_says_why_and_job_gives_json(store_url: str) -> None:
    live = judged_of(store_url, "live")
    job = live.iloc[len(live) // 2]
    text = run("errors", "--db", store_url, "--user", str(int(job.user_id)))
    assert f"Why user {int(job.user_id)}'s next job is predicted" in text
    assert "largest terms of f = sum of w_i * phi_i" in text and "the user's runtimes the model knows" in text
    answer = json.loads(run("errors", "--db", store_url, "--job", str(int(job.job_id)), "--format", "json"))
    assert answer["recorded_prediction_s"] == answer["prediction_s"] == int(job.predicted_s)
    assert len(answer["top_terms"]) == 5 and answer["top_terms"][0]["share"] > 0
    assert set(answer["user_history"]) >= {"completed_jobs", "last_run_s", "mean_run_s"}
    text = run("errors", "--db", store_url, "--job", str(int(job.job_id)))
    assert text.startswith(f"Why job {int(job.job_id)} is predicted") and "(the same)" in text


def test_admin_api_summary_and_explanations_need_the_token(store_url: str, short_dir: Path) -> None:
    import shutil
    import urllib.error
    import urllib.request

    from testbed.daemon_thread import Running, write_token_file
    from hpcpredict.daemon.core.config import DaemonConfig

    source = Path(store_url.removeprefix("sqlite:///"))
    for path in source.parent.glob(source.name + "*"):
        shutil.copy(path, short_dir / path.name)
    config = DaemonConfig(db=f"sqlite:///{short_dir / source.name}", socket=str(short_dir / "d.sock"),
                          http="127.0.0.1:0", http_token_file=write_token_file(short_dir),
                          spool=str(short_dir / "jobcomp.spool"))
    job = judged_of(store_url, "live").iloc[-1]
    judged = len(judged_of(store_url, "both"))
    running = Running(config)
    try:
        def get(path: str, token: bool = True) -> tuple[int, dict]:
            headers = {"Authorization": f"Bearer {running.token}"} if token else {}
            try:
                with urllib.request.urlopen(urllib.request.Request(running.url + path, headers=headers),
                                            timeout=60) as answer:
                    return answer.status, json.load(answer)
            except urllib.error.HTTPError as error:
                return error.code, json.load(error)

        for path in ("/summary", f"/users/{int(job.user_id)}/explain", f"/jobs/{int(job.job_id)}/explain"):
            assert get(path, token=False)[0] == 401, path
        status, summary = get("/summary")
        assert status == 200 and summary["judged_jobs"] == judged
        assert {"lowered_share", "within_lowered_share", "corrections_per_lowered_job", "gate", "gate_text",
                "scheduling_effect", "mae", "under_predicted"} <= set(summary)
        status, row = get(f"/users/{int(job.user_id)}/errors")  # led by what lowering does for them
        assert status == 200 and list(row)[0] == "summary" and row["summary"]["lowered_jobs"] <= row["count"]
        assert row["summary"]["live_judged_jobs"] == row["count"] and "corrector extends" in row["summary"]["under_predicted"]
        status, why = get(f"/jobs/{int(job.job_id)}/explain")
        assert status == 200 and why["recorded_prediction_s"] == why["prediction_s"] == int(job.predicted_s)
        status, why = get(f"/users/{int(job.user_id)}/explain")
        assert status == 200 and why["top_terms"] and why["recent_jobs"]
        assert get("/users/99999/explain") == (404, {"error": get("/users/99999/explain")[1]["error"],
                                                     "code": "unknown_user"})
        assert get("/jobs/1/explain")[0] == 404  # a history job: its user says why
        assert get("/jobs/x/explain")[0] == 400
    finally:
        running.stop()


def test_report_leads_with_the_summary_and_says_why(store_url: str, tmp_path: Path) -> None:
    run("report", "--db", store_url, "--out", str(tmp_path / "report"))
    page = (tmp_path / "report" / "index.html").read_text()
    assert page.index("id='verdict'") < page.index("id='headline'") < page.index("id='main-figure'") \
        < page.index("id='look'") < page.index("id='users'") < page.index("id='why'") < page.index("id='glossary'")
    assert "Go/no-go for mode=lower" in page and "MAE is the mean distance" in page
    assert page.count("<article class='why'") == 5 and page.count("<article class='why' data-job=") >= 1
