"""The sysadmin's page: one template for `hpcpredict report --out` and the daemon's ``GET /report``.

An admin who opens it must know within seconds whether lowering limits helps their site, whether
it is safe to keep on, and whom to look at; and must be able to answer "why did my job get 4
minutes?" without reading code. So the first screen is the verdict (from the gate, and on the live
page the daemon's own state: its readiness, the watcher's heartbeat, the failsafe), five headline
numbers with their plain meaning, and the main figure; then the users who need a look, flagged by
a rule the page states (`LOOK_RULE`), worst first; the whole per-user table, sortable; why the
model predicted what it did for a few jobs, each term named in words (`feature_words`); the other
figures; the glossary of the 20 features.

`collect_page` reads everything from a store (the same reads as ``hpcpredict errors`` and
``GET /summary``: the numbers are theirs, `site_summary`'s); `render_page` turns it into HTML,
given where the figures are (files beside the page, or embedded ``data:`` addresses for the
live page, which is one answer of the daemon). No JavaScript but a few lines that sort tables
(`SORT_SCRIPT`); nothing is fetched from elsewhere: the page works offline.
"""

from __future__ import annotations

import base64
import html
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from hpcpredict.daemon.views.explain import ExplainError, Why, _duration
from hpcpredict.daemon.views.report_figures import FIGURE_NAMES, MAIN_FIGURE, draw_figures
from hpcpredict.daemon.views.site_summary import (
    GATE_TEXT,
    MAE_SENTENCE,
    MAX_CORRECTIONS_PER_LOWERED_JOB,
    UNDER_SENTENCE,
    SiteSummary,
    gate_checks,
    simulate_hint,
    site_summary,
)
from hpcpredict.learn.feature_words import glossary, term_in_words

# Who needs a look (`LOOK_RULE` says it on the page): users with enough judged jobs whose
# predictions cost them, or the scheduler, something an admin can act on.
LOOK_MIN_JOBS = 5
# The median of prediction / runtime above this: the predictions are an order of magnitude above the
# runtimes, lowering gains the scheduler little. Not the mean, which a job that ran for a second
# makes 500; and no lower bound: the E-Loss predicts short on purpose (a median of 0.1 is common),
# and what that costs is counted by the corrections.
LOOK_RATIO_OFF = 10.0
LOOK_RULE = (
    f"A user needs a look when, over at least {LOOK_MIN_JOBS} judged jobs, any of these holds: a live job "
    f"was killed at a lowered limit (must never happen); more than {MAX_CORRECTIONS_PER_LOWERED_JOB:g} "
    f"corrections per lowered job, counted as the simulator counts them (the gate's limit: beyond it the "
    f"corrections, not the model, set the user's limits, and each is a change the user sees); or a median "
    f"predicted/actual above {LOOK_RATIO_OFF:g} (predictions an order of magnitude above the runtimes: "
    f"lowering gains the scheduler little). A median below 1 is not flagged: the model predicts short on "
    f"purpose, and the corrections count what that costs. Worst first: killed jobs, then the larger of "
    f"corrections per lowered job / {MAX_CORRECTIONS_PER_LOWERED_JOB:g} and log10(median ratio).")
LOOK_SHOWN = 10  # flagged users listed at the top; all are marked in the table
WHY_JOBS = 5  # jobs explained on the page: the flagged users' newest first, then the busiest users'
LIVE_REFRESH_S = 60  # the live page reloads itself this often


@dataclass(frozen=True)
class UserLine:
    """One row of the per-user table, and why the user needs a look (empty: they do not)."""

    user_id: int
    jobs: int
    mae_s: float
    median_ae_s: float
    under_rate: float
    mean_ratio: float
    median_ratio: float  # median of prediction / runtime (runtime at least 1 s)
    corrections_per_lowered_job: float  # INCREMENTAL, counted as the simulator counts them (nan: none lowered)
    live_corrections: int  # the corrector's own, recorded
    requested_mae_s: float
    ave2_mae_s: float
    killed: int
    look: tuple[str, ...] = ()
    severity: float = 0.0


@dataclass(frozen=True)
class PageData:
    """Everything the page shows, read once (`collect_page`)."""

    title: str
    generated_s: float
    db_url: str
    judged_jobs: int
    history_jobs: int
    live_jobs: int
    first_end_s: int | None
    last_end_s: int | None
    summary: SiteSummary | None
    users: list[UserLine]
    total: UserLine | None
    whys: list[Why | ExplainError]
    asked_why: Why | ExplainError | None = None  # the job an admin asked about (live page)
    daemon: dict[str, object] | None = None  # /health as the daemon answered it (live page); None: static
    figures: dict[str, bytes] = field(default_factory=dict)

    @property
    def flagged(self) -> list[UserLine]:
        return worst_first(self.users)


def worst_first(users: Sequence[UserLine]) -> list[UserLine]:
    """The users who need a look (`LOOK_RULE`), worst first (ties by user id)."""
    return sorted((user for user in users if user.look), key=lambda user: (-user.severity, user.user_id))


def collect_page(store, factory: Callable[[], object], *, since_s: int | None, source: str, db_url: str,
                 daemon: dict[str, object] | None = None, asked_job: int | None = None,
                 title: str = "hpcpredict: what lowering limits does here") -> PageData:
    """The page's data from `store` (a `Store`): the judged jobs of `source` ended since
    `since_s`, their figures, the whys; `daemon` is the live daemon's /health."""
    from hpcpredict.daemon.core.judged_errors import judged_jobs
    from hpcpredict.daemon.views.explain import explain_job, explain_users
    from hpcpredict.daemon.views.pages import error_table

    judged = judged_jobs(store, since_s=since_s, source=source)
    killed_by_user = _killed_by_user(store, since_s)
    summary = site_summary(judged, sum(killed_by_user.values())) if len(judged) else None
    table = error_table(judged)
    users, total = _user_lines(judged, table, killed_by_user, summary)
    chosen = _why_users(users)
    whys: list[Why | ExplainError] = []
    if chosen:
        newest_live = _newest_live_jobs(store, chosen)
        by_user = explain_users(store, [user for user in chosen if user not in newest_live], factory)
        for user in chosen:
            if user in newest_live:
                try:
                    whys.append(explain_job(store, newest_live[user], factory))
                except ExplainError as error:
                    whys.append(error)
            else:
                whys.append(by_user[user])
    asked = None
    if asked_job is not None:
        try:
            asked = explain_job(store, asked_job, factory)
        except ExplainError as error:
            asked = error
    sources = judged["source"].value_counts() if len(judged) else pd.Series(dtype=int)
    return PageData(
        title=title, generated_s=time.time(), db_url=db_url, judged_jobs=len(judged),
        history_jobs=int(sources.get("history", 0)), live_jobs=int(sources.get("live", 0)),
        first_end_s=int(judged["end_s"].min()) if len(judged) else None,
        last_end_s=int(judged["end_s"].max()) if len(judged) else None,
        summary=summary, users=users, total=total, whys=whys, asked_why=asked, daemon=daemon,
        figures=draw_figures(judged, table),
    )


def _killed_by_user(store, since_s: int | None) -> dict[int, int]:
    """Live jobs killed at a lowered limit, per user (`killed_at_lowered_limit_count`'s rows)."""
    from sqlalchemy import func, select

    from hpcpredict.daemon.core.store import JobRow

    statement = (select(JobRow.user_id, func.count()).where(JobRow.killed_at_lowered_limit.is_(True))
                 .group_by(JobRow.user_id))
    if since_s is not None:
        statement = statement.where(JobRow.end_s >= since_s)
    with store.session() as session:
        return {int(user): int(count) for user, count in session.execute(statement)}


def _user_lines(judged: pd.DataFrame, table: pd.DataFrame, killed_by_user: Mapping[int, int],
                summary: SiteSummary | None) -> tuple[list[UserLine], UserLine | None]:
    """The table's rows, and its total (`summary`'s corrections: the site's, counted once)."""
    if table.empty:
        return [], None
    corrections = {int(user): site_summary(jobs).corrections_per_lowered_job
                   for user, jobs in judged.groupby("user_id", sort=False)}
    ratios = judged["predicted_s"] / judged["run_s"].clip(lower=1)
    median_ratio = ratios.groupby(judged["user_id"]).median()
    lines, total = [], None
    for row in table.itertuples(index=False):
        everyone = not isinstance(row.user_id, (int, np.integer))
        killed = sum(killed_by_user.values()) if everyone else killed_by_user.get(int(row.user_id), 0)
        per_lowered = summary.corrections_per_lowered_job if everyone else corrections[int(row.user_id)]  # type: ignore[union-attr]
        median = float(ratios.median() if everyone else median_ratio[row.user_id])
        look, severity = ((), 0.0) if everyone else _needs_a_look(int(row.count), killed, per_lowered, median)
        line = UserLine(
            user_id=-1 if everyone else int(row.user_id), jobs=int(row.count), mae_s=float(row.mae_s),
            median_ae_s=float(row.median_ae_s), under_rate=float(row.under_rate), mean_ratio=float(row.mean_ratio),
            median_ratio=median,
            corrections_per_lowered_job=float(per_lowered), live_corrections=int(row.corrections),
            requested_mae_s=float(row.requested_mae_s), ave2_mae_s=float(row.ave2_mae_s), killed=killed,
            look=look, severity=severity)
        if everyone:
            total = line
        else:
            lines.append(line)
    return lines, total


def _needs_a_look(jobs: int, killed: int, corrections_per_lowered: float,
                  median_ratio: float) -> tuple[tuple[str, ...], float]:
    """(reasons, severity) by `LOOK_RULE`."""
    if jobs < LOOK_MIN_JOBS:
        return (), 0.0
    corrections = 0.0 if corrections_per_lowered != corrections_per_lowered else corrections_per_lowered
    reasons = []
    if killed:
        reasons.append(f"{killed:,} live jobs killed at a lowered limit")
    if corrections > MAX_CORRECTIONS_PER_LOWERED_JOB:
        reasons.append(f"{corrections:.1f} corrections per lowered job")
    if median_ratio > LOOK_RATIO_OFF:
        reasons.append(f"predictions {median_ratio:,.0f}x the runtimes (median)")
    if not reasons:
        return (), 0.0
    spread = math.log10(median_ratio) if median_ratio > 0 else 0.0
    return tuple(reasons), 1000.0 * killed + max(spread, corrections / MAX_CORRECTIONS_PER_LOWERED_JOB)


def _why_users(users: Sequence[UserLine]) -> list[int]:
    """The users whose jobs the page explains: the flagged ones, worst first, then the busiest."""
    flagged = [user.user_id for user in worst_first(users)]
    busiest = [user.user_id for user in sorted(users, key=lambda u: (-u.jobs, u.user_id))]
    return list(dict.fromkeys(flagged + busiest))[:WHY_JOBS]


def _newest_live_jobs(store, user_ids: Sequence[int]) -> dict[int, int]:
    """Each user's newest ended live job that has a logged submission (what `explain_job` needs)."""
    from sqlalchemy import func, select

    from hpcpredict.daemon.core.events import EventKind
    from hpcpredict.daemon.core.store import EventRow, JobRow

    statement = (select(JobRow.user_id, func.max(JobRow.job_id))
                 .join(EventRow, (EventRow.job_id == JobRow.job_id) & (EventRow.kind == EventKind.SUBMITTED.value))
                 .where(JobRow.user_id.in_(list(user_ids)), JobRow.status == "ended")
                 .group_by(JobRow.user_id))
    with store.session() as session:
        return {int(user): int(job) for user, job in session.execute(statement)}


# ---------------------------------------------------------------------------- the verdict
@dataclass(frozen=True)
class Verdict:
    kind: str  # "go", "wait" or "no"
    headline: str
    meaning: str


def verdict(page: PageData) -> Verdict:
    """The page's first line, from the gate's checks and, live, the daemon's own state."""
    if page.summary is None:
        return Verdict("wait", "Not yet: no judged job",
                       "Nothing has been judged: train the model on your history (`hpcpredict train`) or run "
                       "the daemon in mode=record until jobs end.")
    checks = gate_checks(page.summary)
    unsafe, not_yet = _daemon_problems(page.daemon)
    refused = [what for kind, what in checks if kind == "NO"] + unsafe
    waiting = [what for kind, what in checks if kind == "wait"] + not_yet
    if refused:
        return Verdict("no", "No: do not lower limits now",
                       "Keep (or put back) mode=record until this is understood: " + "; ".join(refused) + ".")
    if waiting:
        return Verdict("wait", "Not yet: keep mode=record",
                       "The store cannot vouch for lowering yet: " + "; ".join(waiting) + ".")
    return Verdict("go", "Yes, as far as the store can tell",
                   "Every check the store can make passes. Before mode=lower, check gate 1 with the simulator: "
                   + simulate_hint(page.db_url) + ".")


def _daemon_problems(daemon: Mapping[str, object] | None) -> tuple[list[str], list[str]]:
    """(what makes lowering unsafe now, what makes it premature) in the live daemon's /health."""
    if daemon is None:
        return [], []
    unsafe, premature = [], []
    if daemon.get("status") == "unhealthy":
        unsafe.append("the daemon is unhealthy (its events fail or its store is damaged)")
    elif not daemon.get("ready"):
        premature.append(f"the daemon is not ready ({', '.join(map(str, daemon.get('reasons') or ())) or 'see /health'}): "
                         f"PREDICT answers the users' requests")
    watcher = daemon.get("watcher")
    if isinstance(watcher, Mapping) and watcher.get("stale"):
        unsafe.append(f"the watcher's heartbeat is {float(watcher['heartbeat_age_s']):,.0f} s old: "
                      f"nobody extends lowered limits")
    failsafe = daemon.get("failsafe")
    if isinstance(failsafe, Mapping) and failsafe.get("state") == "restoring":
        unsafe.append("the failsafe is putting lowered limits back (the watcher stopped)")
    return unsafe, premature


# ---------------------------------------------------------------------------- the HTML
def render_page(page: PageData, image_src: Mapping[str, str]) -> str:
    """The page; `image_src` maps each of `FIGURE_NAMES` to where the browser finds it."""
    e = html.escape
    live = page.daemon is not None
    refresh = f'<meta http-equiv="refresh" content="{LIVE_REFRESH_S}">' if live else ""
    sections = [
        _header(page, live),
        _verdict_html(page),
        "<div class='first'>" + _headline_html(page.summary)
        + _figure_html(MAIN_FIGURE, image_src, "How far from its real end the scheduler plans each job, with the "
                       "users' requests and with hpcpredict's limits (the first, and after the corrections): the "
                       "closer to 0, the better backfilling can fill the machine", main=True) + "</div>",
        _gate_html(page),
        _daemon_html(page.daemon) if live else "",
        _asked_html(page, live),
        _look_html(page),
        _users_html(page),
        _whys_html(page.whys),
        "<section id='figures'><h2>The errors in detail</h2>"
        + "".join(_figure_html(name, image_src, caption) for name, caption in (
            ("error_ecdf.png", "Prediction - runtime for every judged job: hpcpredict against the users' requests "
             "and AVE2 (the mean of the user's last two runtimes)"),
            ("users_mae.png", "Mean absolute error of the users with most jobs"),
            ("error_over_time.png", "Median error and the share under-predicted, by day or week of the jobs' ends")))
        + "</section>",
        _glossary_html(),
    ]
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>{refresh}"
            # no icon: else the browser asks the daemon for /favicon.ico, a 404 in its console
            f"<link rel='icon' href='data:,'>"
            f"<title>{e(page.title)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(part for part in sections if part)
            + f"\n<script>{SORT_SCRIPT}</script>\n</body></html>\n")


def _header(page: PageData, live: bool) -> str:
    e = html.escape
    if page.judged_jobs:
        span = (f"{page.judged_jobs:,} judged jobs ({page.history_jobs:,} from the history replay of "
                f"<code>hpcpredict train</code>, {page.live_jobs:,} live) that ended between "
                f"{_when(page.first_end_s)} and {_when(page.last_end_s)} (local time).")
    else:
        span = "No judged job yet."
    source = (f"Live from the daemon, as of {_when(page.generated_s, seconds=True)}; the page reloads every "
              f"{LIVE_REFRESH_S} s." if live else
              f"Written by <code>hpcpredict report</code> at {_when(page.generated_s, seconds=True)} from the store "
              f"alone; the daemon serves the same page live, with its own state, at <code>GET /report</code>.")
    return (f"<header><h1>{e(page.title)}</h1><p class='span'>{span} {source} Each job is judged on the "
            f"prediction given at its submission, against its runtime.</p></header>")


def _verdict_html(page: PageData) -> str:
    said = verdict(page)
    return (f"<section id='verdict' class='verdict {said.kind}' data-verdict='{said.kind}'>"
            f"<h2>Does lowering help, and is it safe? {html.escape(said.headline)}</h2>"
            f"<p>{_prose(said.meaning)}</p></section>")


# (key of /summary, how it is shown, what it means)
HEADLINES: tuple[tuple[str, Callable[[float], str], str], ...] = (
    ("lowered_share", lambda v: f"{100 * v:.1f}%", "of jobs get a limit below their request"),
    ("within_lowered_share", lambda v: f"{100 * v:.1f}%",
     "of the lowered jobs finish within the first limit (the others are extended, never beyond the request)"),
    ("corrections_per_lowered_job", lambda v: f"{v:.1f}",
     f"corrections per lowered job (the gate allows {MAX_CORRECTIONS_PER_LOWERED_JOB:g})"),
    ("final_limit_earlier_median_s", lambda v: _duration(v),
     "sooner than the request the scheduler plans a lowered job's end, after corrections (median)"),
    ("killed_at_lowered_limit", lambda v: f"{v:,.0f}", "live jobs killed at a lowered limit (must stay 0)"),
)


def _headline_html(summary: SiteSummary | None) -> str:
    if summary is None:
        return ""
    values = summary.to_dict()
    cards = []
    for key, shown, meaning in HEADLINES:
        value = values[key]
        text = "n/a" if value != value else shown(value)
        alarm = " alarm" if key == "killed_at_lowered_limit" and value else ""
        cards.append(f"<div class='card{alarm}' data-key='{key}' data-value='{_number(value)}'>"
                     f"<span class='number'>{html.escape(text)}</span>"
                     f"<span class='meaning'>{html.escape(meaning)}</span></div>")
    return f"<section id='headline' class='cards'>{''.join(cards)}</section>"


def _figure_html(name: str, image_src: Mapping[str, str], caption: str, main: bool = False) -> str:
    identity = " id='main-figure'" if main else ""
    return (f"<figure{identity}><img src='{html.escape(image_src[name])}' "
            f"alt='{html.escape(caption)}' width='900' height='540'><figcaption>{html.escape(caption)}</figcaption>"
            f"</figure>")


def _gate_html(page: PageData) -> str:
    if page.summary is None:
        return ""
    items = "".join(
        f"<li class='check {kind.lower()}'><span class='badge'>{html.escape(kind)}</span> {html.escape(what)}</li>"
        for kind, what in gate_checks(page.summary))
    return (f"<section id='gate'><h2>The go/no-go gate</h2><ul class='checks'>{items}"
            f"<li class='check'><span class='badge'>sim</span> the scheduling effect needs a replay: "
            f"{_prose(simulate_hint(page.db_url))}</li></ul>"
            f"<details><summary>The whole gate, and how to read MAE</summary><p>{html.escape(GATE_TEXT)}</p>"
            f"<p>{html.escape(MAE_SENTENCE)}</p><p>{html.escape(UNDER_SENTENCE)}</p></details></section>")


def _daemon_html(daemon: Mapping[str, object]) -> str:
    """The daemon's state (its /health) in plain words."""
    e = html.escape
    rows = [("daemon", f"{daemon.get('status')}: {daemon.get('readiness')}")]
    watcher = daemon.get("watcher")
    if isinstance(watcher, Mapping):
        rows.append(("watcher (extends lowered limits)",
                     f"{'STALE' if watcher.get('stale') else 'running'}: last look "
                     f"{float(watcher.get('heartbeat_age_s') or 0):,.0f} s ago (stale after "
                     f"{float(watcher.get('stale_after_s') or 0):,.0f} s)"))
        slurm = daemon.get("slurm")
        if isinstance(slurm, Mapping):
            rows.append(("corrections made", f"{int(slurm.get('corrections', 0)):,} since the daemon started; "
                         f"{int(slurm.get('read_failures', 0)):,} looks could not read SLURM"))
    else:
        rows.append(("watcher (extends lowered limits)", "not running in this daemon (no SLURM to watch)"))
    failsafe = daemon.get("failsafe")
    if isinstance(failsafe, Mapping):
        rows.append(("failsafe (puts limits back if the watcher stops)",
                     f"{failsafe.get('state')}: last look {float(failsafe.get('age_s') or 0):,.0f} s ago, "
                     f"{int(failsafe.get('restored_total', 0)):,} limits put back"))
    else:
        rows.append(("failsafe (puts limits back if the watcher stops)", "no status written (not installed?)"))
    guard = daemon.get("starvation_guard")
    if isinstance(guard, Mapping):
        rows.append(("starvation guard", ("ACTIVE: pending limits at the requests" if guard.get("active")
                                          else "quiet") + f" (after {_duration(float(guard.get('after_s') or 0))} of wait)"))
    body = "".join(f"<tr><th scope='row'>{e(what)}</th><td>{e(state)}</td></tr>" for what, state in rows)
    return f"<section id='daemon'><h2>The daemon now</h2><table class='state'>{body}</table></section>"


def _asked_html(page: PageData, live: bool) -> str:
    if not live:
        return ""
    form = ("<form method='get' action='report'><label>Why did job <input name='job' inputmode='numeric' "
            "pattern='[0-9]+' size='10'> get its limit? <button>Explain</button></label></form>")
    answer = "" if page.asked_why is None else _why_html(page.asked_why)
    return f"<section id='ask'><h2>Why did my job get that limit?</h2>{form}{answer}</section>"


def _look_html(page: PageData) -> str:
    flagged = page.flagged
    if not page.users:
        return ""
    if not flagged:
        body = "<p>Nobody, by the rule below.</p>"
    else:
        rows = "".join(
            f"<tr class='look'><td data-v='{user.user_id}'>{user.user_id}</td><td data-v='{user.jobs}'>{user.jobs:,}</td>"
            f"<td data-v='{_number(user.severity)}'>{html.escape('; '.join(user.look))}</td></tr>"
            for user in flagged[:LOOK_SHOWN])
        more = (f"<p>{len(flagged) - LOOK_SHOWN:,} more are marked in the table below.</p>"
                if len(flagged) > LOOK_SHOWN else "")
        body = (f"<div class='scroll'><table class='sortable' id='look-table'><thead><tr><th>user</th><th>jobs</th>"
                f"<th>why</th></tr></thead><tbody>{rows}</tbody></table></div>{more}")
    return (f"<section id='look'><h2>Users who need a look ({len(flagged):,})</h2>{body}"
            f"<p class='rule'>{html.escape(LOOK_RULE)}</p></section>")


USER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("user", "user id (the mark: needs a look)"),
    ("jobs", "jobs judged"),
    ("MAE", "mean |prediction - runtime|"),
    ("median AE", "median |prediction - runtime|"),
    ("under-predicted", "share of jobs that outlived their prediction"),
    ("predicted / actual", "median of prediction / runtime (flagged above 10)"),
    ("mean predicted / actual", "mean of prediction / runtime: a job that ran a second makes it large"),
    ("corrections per lowered job", "INCREMENTAL, counted as the simulator counts them"),
    ("live corrections", "limit changes the corrector made"),
    ("request MAE", "mean |request - runtime|"),
    ("AVE2 MAE", "mean |mean of the last two runtimes - runtime|"),
)


def _user_cells(user: UserLine) -> str:
    cells = (
        (_number(user.user_id), ("all" if user.user_id < 0 else str(user.user_id)) + (" ⚑" if user.look else ""), ""),
        (_number(user.jobs), f"{user.jobs:,}", ""),
        (_number(user.mae_s), _duration(user.mae_s), ""),
        (_number(user.median_ae_s), _duration(user.median_ae_s), ""),
        (_number(user.under_rate), f"{100 * user.under_rate:.1f}%", ""),
        (_number(user.median_ratio), f"{user.median_ratio:,.2f}", " off" if user.median_ratio > LOOK_RATIO_OFF else ""),
        (_number(user.mean_ratio), f"{user.mean_ratio:,.2f}", ""),
        (_number(user.corrections_per_lowered_job), "n/a" if user.corrections_per_lowered_job != user.corrections_per_lowered_job
         else f"{user.corrections_per_lowered_job:.1f}",
         " off" if user.corrections_per_lowered_job > MAX_CORRECTIONS_PER_LOWERED_JOB else ""),
        (_number(user.live_corrections), f"{user.live_corrections:,}", ""),
        (_number(user.requested_mae_s), _duration(user.requested_mae_s), ""),
        (_number(user.ave2_mae_s), _duration(user.ave2_mae_s), ""),
    )
    return "".join(f"<td data-v='{value}' class='{kind.strip()}'>{html.escape(text)}</td>" for value, text, kind in cells)


def _users_html(page: PageData) -> str:
    if not page.users:
        return ""
    headers = "".join(f"<th title='{html.escape(tip)}'>{html.escape(name)}</th>" for name, tip in USER_COLUMNS)
    rows = "".join(f"<tr data-user='{user.user_id}'{' class=look' if user.look else ''}>{_user_cells(user)}</tr>"
                   for user in sorted(page.users, key=lambda user: (-user.severity, -user.jobs, user.user_id)))
    total = f"<tfoot><tr data-user='all'>{_user_cells(page.total)}</tr></tfoot>" if page.total else ""
    return (f"<section id='users'><h2>Every user ({len(page.users):,})</h2><p>Click a column's heading to sort "
            f"by it. Durations are in s, min or h; ⚑ marks the users who need a look.</p>"
            f"<div class='scroll'><table class='sortable' id='user-table'><thead><tr>{headers}</tr></thead>"
            f"<tbody>{rows}</tbody>{total}</table></div></section>")


def _whys_html(whys: Sequence[Why | ExplainError]) -> str:
    if not whys:
        return ""
    return ("<section id='why'><h2>Why these limits</h2><p>What the model predicted for the newest job of the users "
            "who need a look, then of the busiest users (or, for a user known only from the history, a job like "
            "their last one), and the terms that make up most of the prediction: the model is a sum of 231 terms, "
            "each a weight times a feature or a product of two (the glossary below says what each measures). "
            "<code>hpcpredict errors --job ID</code> explains any live job.</p>"
            + "".join(_why_html(why) for why in whys) + "</section>")


def _why_html(why: Why | ExplainError) -> str:
    e = html.escape
    if isinstance(why, Exception):
        return f"<article class='why'><p>{e(str(why))}</p></article>"
    explanation, request = why.explanation, why.request
    job = request.job_id if why.recorded_s is not None else None
    terms = explanation.top_terms(5)
    largest = max((abs(term.contribution_s) for term in terms), default=0.0) or 1.0
    rows = "".join(
        f"<tr class='term' data-term='{e(term.term)}' data-contribution='{term.contribution_s!r}'>"
        f"<td>{e(term_in_words(term.term))}<br><code>{e(term.term)}</code></td>"
        f"<td class='num'>{e(_signed_duration(term.contribution_s))}</td><td class='num'>{100 * term.share:.0f}%</td>"
        f"<td class='barcell'><span class='bar {'plus' if term.contribution_s >= 0 else 'minus'}' "
        f"style='width:{100 * abs(term.contribution_s) / largest:.0f}%'></span></td></tr>"
        for term in terms)
    gave = ""
    if why.recorded_s is not None:
        same = "the same" if why.recorded_s == explanation.published_s else "DIFFERENT from the rebuilt model"
        gave = f" The daemon gave {e(_duration(why.recorded_s))} at submission ({same})."
    history = why.history
    known = (f"The user's runtimes the model knew: last {_duration(history['last_run_s'])}, "
             f"{_duration(history['second_last_run_s'])}, {_duration(history['third_last_run_s'])}; mean "
             f"{_duration(history['mean_run_s'])} over {int(history['completed_jobs']):,} jobs."
             if history.get("completed_jobs") else "The model knew no completed job of this user.")
    heading = (f"Job {job} (user {request.user_id})" if job is not None else f"User {request.user_id}'s next job")
    return (f"<article class='why'{f' data-job={job}' if job is not None else ''} data-user='{request.user_id}'>"
            f"<h3>{e(heading)}: predicted {e(_duration(explanation.published_s))}, asked "
            f"{e(_duration(request.requested_s))} on {request.procs:,} processors</h3>"
            f"<p>{e(why.model)}.{gave} {e(explanation.transform)}.</p>"
            f"<div class='scroll'><table class='terms'><thead><tr><th>term (what it measures)</th><th>adds</th>"
            f"<th>share</th><th>size</th></tr></thead><tbody>{rows}</tbody></table></div>"
            f"<p>{e(known)}</p></article>")


def _glossary_html() -> str:
    items = "".join(f"<dt id='feature-{name}'>{html.escape(words)} <code>{html.escape(name)}</code></dt>"
                    f"<dd>{html.escape(sentence)}</dd>" for name, words, sentence in glossary())
    return (f"<section id='glossary'><h2>Glossary: the 20 features</h2><p>The model sees these 20 numbers for each "
            f"job at its submission, from what is known then, and combines them: each feature alone "
            f"(<code>name</code>), squared (<code>name^2</code>, shown (…)²) and the product of every pair "
            f"(<code>a x b</code>, shown a × b), each with a learned weight; a constant makes 231 terms.</p>"
            f"<dl>{items}</dl></section>")


def _when(moment_s: float | None, *, seconds: bool = False) -> str:
    """Unix seconds as local time, to the minute (or the second)."""
    if moment_s is None:
        return "n/a"
    return datetime.fromtimestamp(moment_s).isoformat(sep=" ", timespec="seconds" if seconds else "minutes")


def _prose(text: str) -> str:
    """Escaped text whose `backquoted` commands are shown as code."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{part}</code>" if index % 2 else part for index, part in enumerate(parts))


def _number(value: float) -> str:
    """A cell's sort key: plain digits, "nan" for a missing value (sorted last by the script)."""
    value = float(value)
    return "nan" if value != value else repr(value)


def _signed_duration(seconds: float) -> str:
    return ("+" if seconds >= 0 else "-") + _duration(abs(seconds))


STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em;max-width:72em;line-height:1.4;color:#222}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em}h3{font-size:1em}
code{font-size:.85em;overflow-wrap:anywhere;color:#555}
.span{color:#444}
.verdict{padding:.6em 1em;border-radius:.4em;border-left:.5em solid}
.verdict h2{margin:.2em 0}
.verdict.go{background:#e8f5e9;border-color:#2e7d32}.verdict.wait{background:#fff8e1;border-color:#f9a825}
.verdict.no{background:#ffebee;border-color:#c62828}
.first{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1.5fr);gap:1em;align-items:start;margin-top:1em}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(10em,1fr));gap:.6em}
.card{border:1px solid #ddd;border-radius:.4em;padding:.5em .7em}
.card.alarm{background:#ffebee;border-color:#c62828}
.number{display:block;font-size:1.9em;font-weight:600}.meaning{display:block;font-size:.85em;color:#444}
figure{margin:1em 0}.first figure{margin:0}img{max-width:100%;height:auto;display:block}figcaption{font-size:.85em;color:#444}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:.2em .5em;text-align:right}
th{background:#f5f5f5;vertical-align:bottom}
table.sortable th{cursor:pointer}table.sortable th[aria-sort=ascending]::after{content:" ▲"}
table.sortable th[aria-sort=descending]::after{content:" ▼"}
tr.look td:first-child{font-weight:600;color:#c62828}td.off{background:#ffebee}
tfoot td{font-weight:600}
#look-table td:last-child,#look-table th:last-child,table.terms td:first-child,table.terms th:first-child,table.state td{text-align:left}
table.state th{text-align:left}
.checks{list-style:none;padding:0}.check{margin:.2em 0}
.badge{display:inline-block;min-width:3em;text-align:center;border-radius:.3em;padding:0 .3em;background:#eee;font-weight:600}
.check.ok .badge{background:#c8e6c9}.check.no .badge{background:#ffcdd2}.check.wait .badge{background:#ffecb3}
.barcell{width:8em}.bar{display:inline-block;height:.8em}.bar.plus{background:#1976d2}.bar.minus{background:#e64a19}
.why{border-top:1px solid #eee;margin-top:1em}
dl{display:grid;grid-template-columns:minmax(10em,18em) 1fr;gap:.2em 1em}dt{font-weight:600}dd{margin:0}
@media (max-width:60em){.first{grid-template-columns:1fr}}
@media (max-width:40em){dl{grid-template-columns:1fr}.number{font-size:1.5em}}
"""

# Sorts a table by the clicked heading's column, on each cell's data-v (numbers as numbers,
# "nan" last), descending first; the tfoot's total row stays where it is.
SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  var headings = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(headings, function (heading, column) {
    heading.tabIndex = 0;
    function sort() {
      var descending = heading.getAttribute('aria-sort') !== 'descending';
      Array.prototype.forEach.call(headings, function (other) { other.removeAttribute('aria-sort'); });
      heading.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.v, y = b.cells[column].dataset.v;
        var nx = parseFloat(x), ny = parseFloat(y);
        if (isNaN(nx) || isNaN(ny)) {
          if (isNaN(nx) !== isNaN(ny)) { return isNaN(nx) ? 1 : -1; }
          return descending ? y.localeCompare(x) : x.localeCompare(y);
        }
        return descending ? ny - nx : nx - ny;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    }
    heading.addEventListener('click', sort);
    heading.addEventListener('keydown', function (event) {
      if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); sort(); }
    });
  });
});
"""


# ---------------------------------------------------------------------------- the two ways out
@dataclass(frozen=True)
class Report:
    index: Path
    images: list[Path]


def write_report(page: PageData, out_dir: Path) -> Report:
    """The static page: index.html and its PNG figures beside it, in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for name in FIGURE_NAMES:
        path = out_dir / name
        path.write_bytes(page.figures[name])
        images.append(path)
    index = out_dir / "index.html"
    index.write_text(render_page(page, {name: name for name in FIGURE_NAMES}), encoding="utf-8")
    return Report(index, images)


def live_html(page: PageData) -> bytes:
    """The live page as one answer: the figures embedded as data: addresses."""
    sources = {name: "data:image/png;base64," + base64.b64encode(page.figures[name]).decode("ascii")
               for name in FIGURE_NAMES}
    return render_page(page, sources).encode("utf-8")
