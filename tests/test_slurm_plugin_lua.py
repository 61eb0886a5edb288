"""slurm-plugin/*.lua run by the real Lua 5.1 and luasocket, with only slurmctld's host table
(`slurm.*`) provided by the driver; tests/test_slurm_e2e.py runs them inside a real slurmctld.

Not every test talks to a real daemon. Most run the scripts against one (`daemon_thread.Running`,
the `daemon` fixture, or a daemon of their own). Nine (five tests, some parametrized) feed the
plugin answers a healthy daemon does not give, or not on demand: keys in another order, ready=0,
a held job, malformed tokens, garbage. They use a one-shot fake daemon that answers one
scripted line (`answering`, `submit_answered`): fault injection, not a check of the daemon.
Three have no daemon at all: one down (no socket), one hung (a socket that accepts and never
answers), and jobcomp.lua's spool.

Skipped where lua5.1 or luasocket is missing (CI installs both; failed there instead)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.daemon_thread import Running
from sqlalchemy import select

from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.jobs import JobRequest
from hpcpredict.slurm.adapter import SlurmJob
from hpcpredict.slurm.requests import job_request
from hpcpredict.slurm.tag import BACKFILL_NO_LIMIT_S
from hpcpredict.slurm.tag import parse_tag

PLUGIN_DIR = Path(__file__).resolve().parent.parent / "slurm-plugin"
NO_VAL = 0xFFFFFFFE
INFINITE = 0xFFFFFFFF

DRIVER = r"""
local script, call, args_json = arg[1], arg[2], arg[3]
local logs = {}
slurm = {
  SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, INFINITE = 4294967295,
  log_info = function(fmt, ...) table.insert(logs, "info: " .. string.format(fmt, ...)) end,
  log_error = function(fmt, ...) table.insert(logs, "error: " .. string.format(fmt, ...)) end,
}
-- the arguments: "key=value;key=value" (numbers where they parse)
local t = {}
for key, value in string.gmatch(args_json, "([%w_]+)=([^;]*)") do
  t[key] = tonumber(value) or value
end
dofile(script)
local socket = require("socket")
local began = socket.gettime()
local rc
if call == "submit" then
  rc = slurm_job_submit(t, {}, t.submit_uid)
else
  rc = slurm_jobcomp_log_record(t)
end
local elapsed_ms = (socket.gettime() - began) * 1000
print("rc=" .. tostring(rc))
print("elapsed_ms=" .. string.format("%.3f", elapsed_ms))
print("time_limit=" .. tostring(t.time_limit))
print("admin_comment=" .. tostring(t.admin_comment))
for _, line in ipairs(logs) do print("log=" .. line) end
"""


def lua_available() -> bool:
    if shutil.which("lua5.1") is None:
        return False
    probe = subprocess.run(["lua5.1", "-e", 'require("socket"); require("socket.unix")'], capture_output=True)
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not lua_available() and os.environ.get("HPCPREDICT_REQUIRE_SERVERS") != "1",
    reason="lua5.1 with luasocket not installed (apt-get install lua5.1 lua-socket)",
)


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A copy of slurm-plugin/ (the scripts read their settings file beside themselves)."""
    path = Path(tempfile.mkdtemp(prefix="hpl"))
    for name in ("job_submit.lua", "jobcomp.lua", "hpcpredict_common.lua"):
        shutil.copy(PLUGIN_DIR / name, path / name)
    (path / "driver.lua").write_text(DRIVER)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def settings(plugin_dir: Path, **values: object) -> None:
    (plugin_dir / "hpcpredict_slurm.conf").write_text("".join(f"{k}={v}\n" for k, v in values.items()))


def run_lua(plugin_dir: Path, script: str, call: str, **fields: object) -> dict[str, object]:
    args = ";".join(f"{key}={value}" for key, value in fields.items())
    done = subprocess.run(
        ["lua5.1", str(plugin_dir / "driver.lua"), str(plugin_dir / script), call, args],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = {"logs": []}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key == "log":
            result["logs"].append(value)  # type: ignore[union-attr]
        else:
            result[key] = value
    return result


def submit(plugin_dir: Path, **fields: object) -> dict[str, object]:
    job = {"submit_uid": 1000, "user_id": 1000, "min_cpus": 4, "num_tasks": 4, "partition": "debug",
           "name": "my job", "time_limit": 60}
    job.update(fields)
    return run_lua(plugin_dir, "job_submit.lua", "submit", **job)


@pytest.fixture
def daemon(plugin_dir: Path) -> Iterator[Running]:
    config = DaemonConfig(
        db=f"sqlite:///{plugin_dir / 'state.db'}", socket=str(plugin_dir / "d.sock"), http="",
        spool=str(plugin_dir / "jobcomp.spool"),
        min_trained_jobs=0,  # an untrained model, acted on: it lowers every limit (1 s predicted)
    )
    running = Running(config)
    settings(plugin_dir, socket=config.socket, timeout_ms=300, spool=config.spool)
    yield running
    running.stop()


# ---------------------------------------------------------------------------- job_submit.lua
def test_the_limit_is_lowered_to_the_prediction_and_the_request_kept(plugin_dir: Path, daemon: Running) -> None:
    with daemon.client() as client:
        expected = int(client.request("PREDICT", uid=1000, procs=4, time_limit=3600)["prediction"])
    result = submit(plugin_dir)
    assert result["rc"] == "0"
    minutes = max(1, min(60, -(-expected // 60)))
    assert expected == 1 and result["time_limit"] == str(minutes) == "1"  # untrained: w = 0
    assert re.fullmatch(rf"hpcpredict:request_s=3600,prediction_s={expected},mode=lower,procs=4,token=[0-9a-f]+-[0-9a-f]+",
                        str(result["admin_comment"]))
    assert any("time limit 60 -> 1 min" in log for log in result["logs"])


def test_the_mark_carries_a_token_that_gives_the_submission_its_predicted_features(
    plugin_dir: Path, daemon: Running
) -> None:
    """The token in the mark is the daemon's key to the features PREDICT used: a SUBMIT carrying
    it logs exactly those, even after other jobs changed the user's state in between."""
    tag = parse_tag(str(submit(plugin_dir)["admin_comment"]))
    assert tag is not None and tag.token is not None
    served = daemon.service.feature_tokens.features_for(tag.token, JobRequest(0, 0, 4, 3600, 1000))
    assert served is not None
    with daemon.client() as client:  # the same user's job runs and ends in between
        client.request("END", job=7, uid=1000, procs=2, time_limit=600, submit=900, start=900, end=990)
        client.request("SUBMIT", job=8, uid=1000, procs=4, time_limit=3600, predicted=tag.prediction_s,
                       token=tag.token)
    with daemon.service.store.session() as session:
        from hpcpredict.daemon.core.store import EventRow

        payload = json.loads(session.scalars(select(EventRow.payload_json).where(EventRow.job_id == 8)).one())
    assert payload["features"] == [float(value) for value in served]
    recomputed = daemon.service._predictor.features.compute(JobRequest(9, 1_000, 4, 3600, 1000), 1_000)
    assert payload["features"][1] == 0.0 != recomputed[1]  # the last runtime, unknown when predicted


def test_a_job_root_submits_for_a_user_is_predicted_for_that_user(plugin_dir: Path, daemon: Running) -> None:
    """``sbatch --uid=1234`` as root (replay-slurm's log users): submit_uid is root's, the job's
    user_id the user's; the prediction is asked for the user, whose job it is and who learns it."""
    tag = parse_tag(str(submit(plugin_dir, submit_uid=0, user_id=1234)["admin_comment"]))
    assert tag is not None and tag.token is not None
    tokens = daemon.service.feature_tokens
    assert tokens.features_for(tag.token, JobRequest(0, 0, 4, 3600, 1234)) is not None
    assert tokens.features_for(tag.token, JobRequest(0, 0, 4, 3600, 0)) is None


def test_a_job_first_reported_by_jobcomp_learns_from_its_prediction_s_features(
    plugin_dir: Path, daemon: Running
) -> None:
    """A job whose whole life fell between two looks of the watcher is first reported by
    jobcomp.lua: its END carries the mark's prediction and token, and the daemon records the
    submission from them before the end: the features PREDICT used (not ones recomputed at the
    end, after the user's other job changed them) and the prediction SLURM acted on."""
    mark = str(submit(plugin_dir)["admin_comment"])
    tag = parse_tag(mark)
    assert tag is not None and tag.token is not None
    served = daemon.service.feature_tokens.features_for(tag.token, JobRequest(0, 0, 4, 3600, 1000))
    assert served is not None
    with daemon.client() as client:  # the same user's job runs and ends in between
        client.request("END", job=7, uid=1000, procs=2, time_limit=600, submit=900, start=900, end=990)
    run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=60, admin_comment=mark))
    assert daemon.service.job_status(60) == "ended"
    with daemon.service.store.session() as session:
        from hpcpredict.daemon.core.store import EventRow, PredictionRow

        events = session.execute(select(EventRow.kind, EventRow.payload_json)
                                 .where(EventRow.job_id == 60).order_by(EventRow.seq)).all()
        predicted = session.scalars(select(PredictionRow.predicted_s).where(PredictionRow.job_id == 60)).all()
    assert [kind for kind, _ in events] == ["submitted", "ended"]
    assert json.loads(events[0].payload_json)["features"] == [float(value) for value in served]
    assert predicted == [tag.prediction_s]


def test_jobcomp_leaves_out_a_token_or_prediction_the_daemon_would_refuse(plugin_dir: Path) -> None:
    """The END line must never be refused for its mark (a refused report is dropped, not
    spooled): a token not shaped as PREDICT gives them, or a prediction above the request,
    is left out."""
    settings(plugin_dir, socket=plugin_dir / "none.sock", spool=plugin_dir / "jobcomp.spool")
    marks = {
        61: "hpcpredict:request_s=3600,prediction_s=540,mode=lower,procs=4,token=0123abcd-1f",
        62: "hpcpredict:request_s=3600,prediction_s=9000,mode=lower,procs=4,token=0123abcd-1f-2",
        63: "hpcpredict:request_s=3600,prediction_s=540,mode=lower,procs=4,token=" + "a" * 17 + "-1",
    }
    for job_id, mark in marks.items():
        run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=job_id, admin_comment=mark))
    lines = (plugin_dir / "jobcomp.spool").read_text().splitlines()
    assert " predicted=540 token=0123abcd-1f " in lines[0] + " "
    assert "predicted=" not in lines[1] and "token=" not in lines[1]
    assert " predicted=540" in lines[2] and "token=" not in lines[2]


def test_both_scripts_and_the_watcher_count_the_processors_the_prediction_was_made_for(
    plugin_dir: Path, daemon: Running
) -> None:
    """docs/protocol.md, "Processors": the plugin predicts for min_cpus (else tasks x cpus per
    task, else 1) and marks it; jobcomp.lua and the watcher report the mark's count even when
    SLURM allocated more (whole nodes), and SLURM's own count for a job without a mark."""
    mark = str(submit(plugin_dir, min_cpus=8, num_tasks=8)["admin_comment"])
    assert parse_tag(mark).procs == 8
    assert parse_tag(str(submit(plugin_dir, min_cpus=NO_VAL, num_tasks=3, cpus_per_task=2)["admin_comment"])).procs == 6
    run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=50, total_cpus=16, admin_comment=mark))
    run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=51, total_cpus=16, admin_comment="none"))
    with daemon.service.store.session() as session:
        from hpcpredict.daemon.core.store import JobRow

        assert (session.get(JobRow, 50).procs, session.get(JobRow, 51).procs) == (8, 16)
    slurm_job = SlurmJob(job_id=50, user_name="u", uid=1000, gid=1000, state="COMPLETED", partition="debug",
                         name="job", cpus=16, nodes=1, submit_s=1_000, start_s=1_010, end_s=1_310,
                         time_limit_s=600, admin_comment=mark)
    assert job_request(slurm_job, parse_tag(mark)).procs == 8
    assert job_request(slurm_job, None).procs == 16


def test_a_daemon_not_ready_keeps_the_limit_and_the_log_says_why(plugin_dir: Path) -> None:
    """The daemon's default floor (min_trained_jobs): its untrained model is never acted on."""
    config = DaemonConfig(db=f"sqlite:///{plugin_dir / 'fresh.db'}", socket=str(plugin_dir / "f.sock"),
                          http="", spool=str(plugin_dir / "jobcomp.spool"))
    running = Running(config)
    try:
        settings(plugin_dir, socket=config.socket, mode="lower")
        result = submit(plugin_dir)
    finally:
        running.stop()
    assert result["rc"] == "0" and result["time_limit"] == "60"
    assert str(result["admin_comment"]).startswith("hpcpredict:request_s=3600,prediction_s=3600,mode=lower,procs=4,token=")
    assert any("limit 60 min kept (daemon not ready: untrained)" in log for log in result["logs"])


def test_record_mode_keeps_the_limit(plugin_dir: Path, daemon: Running) -> None:
    settings(plugin_dir, socket=daemon.config.socket, mode="record")
    result = submit(plugin_dir, time_limit=600)
    assert result["time_limit"] == "600"
    assert str(result["admin_comment"]).startswith("hpcpredict:request_s=36000,prediction_s=")
    assert ",mode=record,procs=4,token=" in str(result["admin_comment"])


def test_an_existing_admin_comment_is_kept(plugin_dir: Path, daemon: Running) -> None:
    result = submit(plugin_dir, admin_comment="site-note")
    assert str(result["admin_comment"]).endswith(" site-note")


@pytest.mark.parametrize("limit", [NO_VAL, INFINITE, 0])
def test_jobs_without_a_time_limit_pass_untouched(plugin_dir: Path, daemon: Running, limit: int) -> None:
    result = submit(plugin_dir, time_limit=limit)
    assert result["time_limit"] == str(limit) and result["admin_comment"] == "nil"
    assert any("no time limit" in log for log in result["logs"])


def test_daemon_down_passes_untouched_at_once(plugin_dir: Path) -> None:
    """Timed (docs/testing.md): with no daemon the plugin does not wait for its timeout. The
    timeout is set to 5 s here and the call must take under half of it: a plugin that waited
    would take 5 s, a refused connect takes a few ms, and 2.5 s covers any loaded machine."""
    settings(plugin_dir, socket=plugin_dir / "nobody.sock", timeout_ms=5000)
    result = submit(plugin_dir)
    assert result["rc"] == "0" and result["time_limit"] == "60" and result["admin_comment"] == "nil"
    assert float(result["elapsed_ms"]) < 2500
    assert any("daemon unreachable" in log for log in result["logs"])


def test_a_hung_daemon_costs_at_most_the_timeout(plugin_dir: Path) -> None:
    """Timed (docs/testing.md): the plugin waits for its timeout (200 ms here; 180 ms allows
    for the clock's granularity), not less (a lower bound no load can break), and gives up: well under the 30 s the driver allows, which
    a plugin blocked on the socket would reach. The upper bound leaves 1.8 s for a loaded
    machine: the Lua process measures only its own call."""
    path = str(plugin_dir / "hung.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)  # accepts (the kernel does) and never answers
    try:
        settings(plugin_dir, socket=path, timeout_ms=200)
        result = submit(plugin_dir)
    finally:
        server.close()
    assert result["time_limit"] == "60" and result["admin_comment"] == "nil"
    assert 180 <= float(result["elapsed_ms"]) < 2000
    assert any("no answer" in log for log in result["logs"])


def answering(plugin_dir: Path, line: bytes) -> tuple[str, Callable[[], None]]:
    """A one-shot fake daemon on a socket in `plugin_dir` answering `line`; returns its path
    and a function that stops it."""
    path = str(plugin_dir / "fake.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        connection.recv(4096)
        connection.sendall(line)
        connection.close()

    thread = threading.Thread(target=answer)
    thread.start()

    def stop() -> None:
        thread.join(5)
        server.close()

    return path, stop


def submit_answered(plugin_dir: Path, line: bytes, **values: object) -> dict[str, object]:
    """job_submit.lua's outcome for a job when a fake daemon answers `line` (further settings:
    `values`)."""
    path, stop = answering(plugin_dir, line)
    try:
        settings(plugin_dir, socket=path, **values)
        return submit(plugin_dir)
    finally:
        stop()


def test_the_answer_is_read_by_key_whatever_the_order(plugin_dir: Path) -> None:
    result = submit_answered(plugin_dir, b"OK model=trained users=3 prediction=600 source=learned\n")
    assert result["time_limit"] == "10"  # 600 s
    assert "prediction_s=600" in str(result["admin_comment"])


def test_an_answer_saying_ready_0_is_never_lowered(plugin_dir: Path) -> None:
    result = submit_answered(plugin_dir, b"OK prediction=600 time_limit=3600 ready=0 reason=stale\n", mode="lower")
    assert result["time_limit"] == "60"
    assert any("daemon not ready: stale" in log for log in result["logs"])


def test_a_held_answer_keeps_the_request_and_marks_the_job_for_lowering_later(plugin_dir: Path) -> None:
    """lower=0: the daemon's starvation guard is on; its watcher lowers the job once it is off."""
    result = submit_answered(plugin_dir, b"OK prediction=600 time_limit=3600 lower=0 hold=starvation_guard\n")
    assert result["time_limit"] == "60"
    # an answer without a token (an older daemon): the mark has none
    assert result["admin_comment"] == "hpcpredict:request_s=3600,prediction_s=600,mode=lower,procs=4"
    assert any("limit 60 min kept (daemon: starvation_guard)" in log for log in result["logs"])


@pytest.mark.parametrize("token", ["0123abcd-1f-2", "0123abcd", "0123ABCD-1f", "a" * 17 + "-1", "1-" + "f" * 17])
def test_a_token_not_shaped_as_predict_gives_them_stays_out_of_the_mark(plugin_dir: Path, token: str) -> None:
    """job_submit.lua checks the daemon's token as jobcomp.lua checks the mark's (one rule,
    `common.token`): a mark never carries what jobcomp.lua would then drop."""
    result = submit_answered(plugin_dir, f"OK prediction=600 time_limit=3600 ready=1 token={token}\n".encode())
    assert result["time_limit"] == "10"
    assert result["admin_comment"] == "hpcpredict:request_s=3600,prediction_s=600,mode=lower,procs=4"


def test_without_the_common_file_every_job_passes_untouched(plugin_dir: Path, daemon: Running) -> None:
    (plugin_dir / "hpcpredict_common.lua").unlink()
    settings(plugin_dir, socket=daemon.config.socket)
    result = submit(plugin_dir)
    assert result["rc"] == "0" and result["time_limit"] == "60" and result["admin_comment"] == "nil"
    assert any("hpcpredict_common.lua" in log for log in result["logs"])
    finished_job = run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=77))
    assert finished_job["rc"] == "0"
    assert any("hpcpredict_common.lua" in log for log in finished_job["logs"])


def test_a_garbage_answer_passes_untouched(plugin_dir: Path) -> None:
    result = submit_answered(plugin_dir, b"OK prediction=-5 or maybe not\n")
    assert result["time_limit"] == "60" and result["admin_comment"] == "nil"
    assert any("unexpected answer" in log for log in result["logs"])


def test_disabled_passes_everything(plugin_dir: Path, daemon: Running) -> None:
    settings(plugin_dir, socket=daemon.config.socket, enabled=0)
    result = submit(plugin_dir)
    assert result["time_limit"] == "60" and result["admin_comment"] == "nil"
    # the load line says it is off, never "loaded (mode lower ...)" (issue 28, item 7)
    loaded = [log for log in result["logs"] if "job_submit.lua loaded" in log]
    assert loaded == ["info: hpcpredict: job_submit.lua loaded, disabled (enabled=0): every job passes untouched"]


def test_a_lua_error_passes_untouched(plugin_dir: Path, daemon: Running) -> None:
    result = submit(plugin_dir, submit_uid="not-a-number", user_id="nil")  # string.format %d fails inside
    assert result["rc"] == "0" and result["time_limit"] == "60"
    assert any(log.startswith("error: hpcpredict") for log in result["logs"])


# ---------------------------------------------------------------------------- jobcomp.lua
def finished(**fields: object) -> dict[str, object]:
    job = {"job_id": 42, "user_id": 1000, "group_id": 1000, "job_state": 3, "total_cpus": 4,
           "submit_time": 1_000, "start_time": 1_010, "end_time": 1_310, "time_limit": 10,
           "partition": "debug", "admin_comment": "hpcpredict:request_s=3600,prediction_s=540"}
    job.update(fields)
    return job


def test_a_finished_job_is_learned_by_the_daemon(plugin_dir: Path, daemon: Running) -> None:
    result = run_lua(plugin_dir, "jobcomp.lua", "comp", **finished())
    assert result["rc"] == "0"
    assert daemon.service.job_status(42) == "ended" and daemon.service.model_updates == 1
    with daemon.service.store.session() as session:
        from hpcpredict.daemon.core.store import JobRow

        row = session.get(JobRow, 42)
        assert (row.run_s, row.requested_s, row.procs, row.final_state) == (300, 3600, 4, "COMPLETED")
        assert row.killed_at_lowered_limit is False


@pytest.mark.parametrize("limit", [NO_VAL, INFINITE, BACKFILL_NO_LIMIT_S // 60])
def test_a_job_without_a_time_limit_is_acknowledged_and_not_recorded(
    plugin_dir: Path, daemon: Running, limit: int
) -> None:
    """No --time (SLURM holds no limit: INFINITE, or NO_VAL, or the year its backfill scheduler
    gives such a job when it starts it): jobcomp.lua sends no time_limit, and
    the daemon acknowledges the END without recording the job (docs/protocol.md), so the report
    is neither spooled nor logged as refused, and nothing is learned."""
    result = run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=70, time_limit=limit, admin_comment="none"))
    assert result["logs"] == [] and not (plugin_dir / "jobcomp.spool").exists()
    assert daemon.service.job_status(70) is None and daemon.service.model_updates == 0
    with daemon.client() as client:  # the answer it got, and a known job's END without the field
        answer = client.request("END", job=71, uid=1000, procs=2, submit=900, start=900, end=990)
        assert answer["applied"] == "0" and "no time limit" in answer["note"]
        client.request("SUBMIT", job=72, uid=1000, procs=2, time_limit=600, submit=900)
        assert client.request("END", job=72, uid=1000, procs=2, run=90, end=990)["applied"] == "1"
    assert daemon.service.job_status(72) == "ended"


def test_a_year_asked_for_is_a_request_when_the_plugin_marked_it(plugin_dir: Path) -> None:
    """The backfill's year is no request only without the plugin's mark: a user who asked for a
    year (--time=365-0) was marked with it, and jobcomp.lua reports it."""
    settings(plugin_dir, socket=plugin_dir / "none.sock", spool=plugin_dir / "jobcomp.spool")
    mark = f"hpcpredict:request_s={BACKFILL_NO_LIMIT_S},prediction_s=540,mode=lower,procs=4"
    run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=73, time_limit=BACKFILL_NO_LIMIT_S // 60,
                                                          admin_comment=mark))
    assert f" time_limit={BACKFILL_NO_LIMIT_S}" in (plugin_dir / "jobcomp.spool").read_text()


def test_a_timeout_below_the_request_is_a_lowered_kill(plugin_dir: Path, daemon: Running) -> None:
    run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=43, job_state=6, end_time=1_610))
    with daemon.service.store.session() as session:
        from hpcpredict.daemon.core.store import JobRow

        row = session.get(JobRow, 43)
        assert row.final_state == "TIMEOUT" and row.killed_at_lowered_limit is True


def test_reports_are_spooled_when_the_daemon_is_down_and_ingested_at_start(plugin_dir: Path) -> None:
    spool = plugin_dir / "jobcomp.spool"
    settings(plugin_dir, socket=plugin_dir / "d.sock", spool=spool)
    for job_id in (50, 51):
        result = run_lua(plugin_dir, "jobcomp.lua", "comp", **finished(job_id=job_id))
        assert any("spooled" in log for log in result["logs"])
    assert spool.read_text().count("END job=") == 2
    config = DaemonConfig(db=f"sqlite:///{plugin_dir / 'state.db'}", socket=str(plugin_dir / "d.sock"),
                          http="", spool=str(spool))
    running = Running(config)
    try:
        assert running.service.job_status(50) == running.service.job_status(51) == "ended"
        assert not spool.exists()
    finally:
        running.stop()
