"""The sysadmin's page (issue 53): `hpcpredict report --out` and the daemon's GET /report, one
template, loaded in headless Chromium (Debian's, driven by playwright: testbed/browser.py) at
1280 px and at 390 px.

The store is real: `hpcpredict train` on the first 4,000 jobs of the bundled KTH-SP2 sample,
then the next 300 through the daemon's service as SLURM would report them (live jobs, whose
"why" the page shows and `hpcpredict errors --job ID` explains).
"""

from __future__ import annotations

import json
import math
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import skip_or_fail
from hpcpredict.cli import main
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.core.judged_errors import judged_jobs
from hpcpredict.daemon.core.store import Store
from hpcpredict.daemon.views import queries
from hpcpredict.daemon.views.explain import _duration
from hpcpredict.daemon.views.report_page import (
    HEADLINES,
    LOOK_MIN_JOBS,
    LOOK_RATIO_OFF,
    collect_page,
)
from hpcpredict.daemon.views.site_summary import MAX_CORRECTIONS_PER_LOWERED_JOB, site_summary
from hpcpredict.learn.feature_words import FEATURE_WORDS, glossary, term_in_words
from hpcpredict.learn.features import FEATURE_NAMES
from hpcpredict.learn.polynomial import term_names
from testbed.browser import NARROW, WIDE, browser, chromium_path, open_page
from testbed.daemon_thread import Running, write_token_file
from test_daemon_why import store_url  # noqa: F401 - the fixture: 4,000 history + 300 live jobs


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def chromium():  # -> playwright Browser
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        skip_or_fail("playwright is not installed (pip install -e '.[test]')")
    if chromium_path() is None:
        skip_or_fail("no Chromium (apt-get install chromium; testbed/system_packages.py)")
    with browser() as launched:
        yield launched


@pytest.fixture(scope="module")
def static_page(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("page")
    run("report", "--db", store_url, "--out", str(out))
    return out / "index.html"


@pytest.fixture(scope="module")
def live(store_url: str, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """A daemon on a copy of the store, with a token: (Running, its /summary JSON)."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="hprep"))  # short: the socket's path
    source = Path(store_url.removeprefix("sqlite:///"))
    for path in source.parent.glob(source.name + "*"):
        shutil.copy(path, folder / path.name)
    config = DaemonConfig(db=f"sqlite:///{folder / source.name}", socket=str(folder / "d.sock"), http="127.0.0.1:0",
                          http_token_file=write_token_file(folder), spool=str(folder / "jobcomp.spool"))
    running = Running(config)
    try:
        yield running
    finally:
        running.stop()
        shutil.rmtree(folder, ignore_errors=True)


def get(running: Running, path: str, authorization: str | None = "bearer") -> tuple[int, dict[str, str], bytes]:
    headers = {}
    if authorization == "bearer":
        headers["Authorization"] = f"Bearer {running.token}"
    elif authorization:
        headers["Authorization"] = authorization
    try:
        with urllib.request.urlopen(urllib.request.Request(running.url + path, headers=headers), timeout=120) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def live_job_with_a_why(url: str) -> int:
    store = Store(url)
    try:
        return int(judged_jobs(store, source="live").iloc[-1].job_id)
    finally:
        store.close()


# ---------------------------------------------------------------------------- no browser needed
def test_every_feature_and_every_term_has_words() -> None:
    assert set(FEATURE_WORDS) == set(FEATURE_NAMES) and [name for name, _, _ in glossary()] == list(FEATURE_NAMES)
    words = [term_in_words(term) for term in term_names(FEATURE_NAMES)]
    assert len(words) == 231 and len(set(words)) == 231  # no two terms read the same
    assert term_in_words("break_time_s^2") == "(time since the user's last job ended)²"
    assert term_in_words("procs_mean_submitted x break_time_s") == (
        "the user's mean processors × time since the user's last job ended")
    assert all(sentence.split(".")[0] == str(number) for number, (_, _, sentence) in enumerate(glossary(), start=1))


def test_the_users_flagged_are_those_the_stated_rule_picks(store_url: str) -> None:  # noqa: F811
    """Recomputed here from the judged jobs, by the rule as the page states it."""
    store = Store(store_url)
    try:
        page = collect_page(store, DaemonConfig().predictor_factory, since_s=None, source="both", db_url=store_url)
        judged = judged_jobs(store, source="both")
    finally:
        store.close()
    expected = set()
    for user, jobs in judged.groupby("user_id"):
        if len(jobs) < LOOK_MIN_JOBS:
            continue
        corrections = site_summary(jobs).corrections_per_lowered_job
        median_ratio = float((jobs["predicted_s"] / jobs["run_s"].clip(lower=1)).median())
        if corrections > MAX_CORRECTIONS_PER_LOWERED_JOB or median_ratio > LOOK_RATIO_OFF:
            expected.add(int(user))
    flagged = page.flagged
    assert {user.user_id for user in flagged} == expected and 0 < len(expected) < len(page.users)
    severities = [user.severity for user in flagged]
    assert severities == sorted(severities, reverse=True)  # worst first


def test_the_live_page_needs_the_token_and_a_browser_can_send_it(live: Running) -> None:
    import base64

    status, headers, _ = get(live, "/report", authorization=None)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic ")
    wrong = "Basic " + base64.b64encode(b"admin:not-the-token-at-all").decode()
    assert get(live, "/report", authorization=wrong)[0] == 401
    assert get(live, "/report", authorization="Basic !!!")[0] == 401
    right = "Basic " + base64.b64encode(f"anyone:{live.token}".encode()).decode()
    status, headers, body = get(live, "/report", authorization=right)
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"<h1>" in body
    # Basic is for the page a browser opens; the JSON endpoints take the bearer token only
    assert get(live, "/summary", authorization=right)[0] == 401
    # one drawing serves the fetches within REPORT_MAX_AGE_S: the same page, to the byte
    assert get(live, "/report")[2] == body
    assert get(live, "/report?job=x")[0] == 400


# ---------------------------------------------------------------------------- in Chromium
def check_loaded(loaded, width: int) -> None:
    assert loaded.console_errors == [] and loaded.failed_requests == []
    assert loaded.broken_images() == []
    assert loaded.page.locator("img").count() == 4
    assert loaded.overflow_px() <= 0, f"the page runs {loaded.overflow_px()} px past the right edge at {width} px"


def headline_values(loaded) -> dict[str, tuple[float, str]]:
    cards = loaded.page.locator("#headline .card")
    return {cards.nth(i).get_attribute("data-key"): (float(cards.nth(i).get_attribute("data-value")),
                                                      cards.nth(i).locator(".number").inner_text())
            for i in range(cards.count())}


def check_headlines(loaded, summary: dict[str, object], health: dict[str, object] | None = None) -> None:
    """The cards' numbers are /summary's; the verdict is the gate's (and, live, the daemon's
    readiness: a daemon answering the users' requests makes it "wait" at best)."""
    shown = headline_values(loaded)
    assert set(shown) == {key for key, _, _ in HEADLINES}
    for key, format_value, _ in HEADLINES:
        value, text = shown[key]
        assert math.isclose(value, float(summary[key]), rel_tol=1e-12, abs_tol=1e-12), key
        assert text == format_value(summary[key]), key
    verdict = loaded.page.locator("#verdict").get_attribute("data-verdict")
    gate = {check["verdict"] for check in summary["gate"]}
    if health is not None and not health["ready"]:
        gate.add("wait")
    assert verdict == ("no" if "NO" in gate else "wait" if "wait" in gate else "go")


def check_sorting(loaded) -> None:
    def column(index: int) -> list[float]:
        return [float(value) for value in loaded.page.locator(f"#user-table tbody tr td:nth-child({index})")
                .evaluate_all("cells => cells.map(c => c.dataset.v)")]

    heading = loaded.page.locator("#user-table thead th").nth(1)  # jobs
    heading.click()
    jobs = column(2)
    assert jobs == sorted(jobs, reverse=True) and len(set(jobs)) > 1 and heading.get_attribute("aria-sort") == "descending"
    heading.click()
    assert column(2) == sorted(jobs)
    mae = loaded.page.locator("#user-table thead th").nth(2)
    mae.press("Enter")  # from the keyboard too
    assert column(3) == sorted(column(3), reverse=True)
    assert loaded.page.locator("#user-table tfoot td").first.inner_text() == "all"  # the total stays last


def check_why_of(loaded, job_id: int, store_url: str) -> None:  # noqa: F811
    answer = json.loads(run("errors", "--db", store_url, "--job", str(job_id), "--format", "json"))
    article = loaded.page.locator(f"article.why[data-job='{job_id}']").first
    rows = article.locator("tr.term")
    shown = [(rows.nth(i).get_attribute("data-term"), float(rows.nth(i).get_attribute("data-contribution")))
             for i in range(rows.count())]
    assert shown == [(term["term"], term["contribution_s"]) for term in answer["top_terms"]]
    words = article.locator("tr.term td:first-child").all_inner_texts()
    assert all(term_in_words(term) in text for (term, _), text in zip(shown, words))
    heading = article.locator("h3").inner_text()
    assert f"predicted {_duration(answer['prediction_s'])}, asked {_duration(answer['requested_s'])}" in heading


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_the_static_page_in_chromium(chromium, static_page: Path, store_url: str, width: int) -> None:  # noqa: F811
    store = Store(store_url)
    try:
        summary = queries.summary(store, None, store_url)  # what GET /summary answers
    finally:
        store.close()
    with open_page(chromium, static_page.as_uri(), width) as loaded:
        check_loaded(loaded, width)
        check_headlines(loaded, summary)
        check_sorting(loaded)
        jobs = [int(job) for job in loaded.page.locator("article.why[data-job]").evaluate_all(
            "articles => articles.map(a => a.dataset.job)")]
        assert jobs, "the page explains no live job"
        for job in jobs:
            check_why_of(loaded, job, store_url)
        assert loaded.page.locator("#glossary dt").count() == 20
        assert loaded.page.locator("#daemon").count() == 0  # the static page has no daemon to show


@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_the_live_page_in_chromium(chromium, live: Running, store_url: str, width: int) -> None:  # noqa: F811
    summary = json.loads(get(live, "/summary")[2])
    job = live_job_with_a_why(store_url)
    with open_page(chromium, live.url + "/report", width, credentials=("admin", live.token)) as loaded:
        health = json.loads(get(live, "/health")[2])
        check_loaded(loaded, width)
        check_headlines(loaded, summary, health)
        check_sorting(loaded)
        assert health["status"] in loaded.page.locator("#daemon").inner_text()
        # why did my job get its limit: asked in the page's form
        loaded.page.fill("#ask input[name=job]", str(job))
        loaded.page.click("#ask button")
        loaded.page.wait_for_load_state("load")
        assert loaded.page.url.endswith(f"/report?job={job}")
        check_why_of(loaded, job, store_url)
        check_loaded(loaded, width)
