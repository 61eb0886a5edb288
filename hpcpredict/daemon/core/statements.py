"""The SQL of the event write path: SQLAlchemy Core statements, built once, run with parameters.

Every event is one transaction of a handful of statements (service.py). Through the ORM each cost
a unit of work, identity-map bookkeeping and a fresh statement whose cache key SQLAlchemy had to
compute: about 1 ms of Python per event, three quarters of the daemon's CPU while events flow
(docs/performance.md, "Events: the store's cost per job event"). These statements are built
once: executed with a dict of parameters, each is compiled once per engine (SQLAlchemy's
compiled cache) and costs a few tens of microseconds. They write exactly the rows the ORM models
describe (`hpcpredict.daemon.core.store`), on the same tables, in the same transactions:
benchmarks/event_store_digest.py compares every table before and after.

Module-level constants are statements only (immutable SQL expressions): no engine, no
connection, nothing that runs at import.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, func, insert, select, update

from hpcpredict.daemon.core.store import CheckpointRow, CorrectionRow, EventRow, JobRow, PredictionRow, UserErrorRow

JOBS = JobRow.__table__
EVENTS = EventRow.__table__
PREDICTIONS = PredictionRow.__table__
CORRECTIONS = CorrectionRow.__table__
CHECKPOINTS = CheckpointRow.__table__
USER_ERRORS = UserErrorRow.__table__

# Inserts take a dict of column values (a list of dicts: executemany).
INSERT_EVENT = insert(EVENTS)
INSERT_JOB = insert(JOBS)
INSERT_PREDICTION = insert(PREDICTIONS)
INSERT_CORRECTION = insert(CORRECTIONS)
INSERT_CHECKPOINT = insert(CHECKPOINTS)
INSERT_USER_ERRORS = insert(USER_ERRORS)

# Updates take the row's key under ``key`` (a column's own name would be taken for a SET value)
# and the columns to set under their names.
UPDATE_JOB = update(JOBS).where(JOBS.c.job_id == bindparam("key"))
UPDATE_USER_ERRORS = update(USER_ERRORS).where(USER_ERRORS.c.user_id == bindparam("key"))

SELECT_JOB = select(JOBS).where(JOBS.c.job_id == bindparam("job_id"))
SELECT_USER_ERRORS = select(USER_ERRORS).where(USER_ERRORS.c.user_id == bindparam("user_id"))
# The prediction given at submission (what the scheduler acted on): a job's first.
FIRST_PREDICTION = (
    select(PREDICTIONS.c.predicted_s)
    .where(PREDICTIONS.c.job_id == bindparam("job_id"))
    .order_by(PREDICTIONS.c.id)
    .limit(1)
)
COUNT_CORRECTIONS = (
    select(func.count()).select_from(CORRECTIONS).where(CORRECTIONS.c.job_id == bindparam("job_id"))
)
# A job ending: its row, its first prediction and how many times its limit changed, in one
# statement instead of three (user_errors.count_ended_job reads the last two).
ENDING_JOB = select(
    JOBS,
    select(PREDICTIONS.c.predicted_s)
    .where(PREDICTIONS.c.job_id == JOBS.c.job_id)
    .order_by(PREDICTIONS.c.id)
    .limit(1)
    .scalar_subquery()
    .label("first_prediction_s"),
    select(func.count())
    .select_from(CORRECTIONS)
    .where(CORRECTIONS.c.job_id == JOBS.c.job_id)
    .scalar_subquery()
    .label("corrections"),
).where(JOBS.c.job_id == bindparam("job_id"))
# A user's last two runtimes ended before a submission (user_errors.py, AVE2 at submission),
# through the index (user_id, end_s).
LAST_TWO_RUNS_BEFORE = (
    select(JOBS.c.run_s, JOBS.c.end_s)
    .where(
        JOBS.c.user_id == bindparam("user_id"),
        JOBS.c.end_s < bindparam("submit_s"),
        JOBS.c.run_s > 0,
        JOBS.c.job_id != bindparam("job_id"),
    )
    .order_by(JOBS.c.end_s.desc(), JOBS.c.job_id.desc())
    .limit(2)
)
# Checkpoints beyond the newest `keep` ones, the bootstrap checkpoint (event 0) excepted.
STALE_CHECKPOINTS = (
    select(CHECKPOINTS.c.id)
    .where(CHECKPOINTS.c.last_event_seq > 0)
    .order_by(CHECKPOINTS.c.last_event_seq.desc())
    .offset(bindparam("keep"))
)
DELETE_CHECKPOINTS = delete(CHECKPOINTS).where(CHECKPOINTS.c.id.in_(bindparam("ids", expanding=True)))
