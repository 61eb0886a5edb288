"""The prediction daemon's core: store, service, error statistics (issue 6).

* `store` — SQLAlchemy 2 models and `Store` (SQLite by default, PostgreSQL by URL), with the
  Alembic migrations of `migrations` run by `Store.upgrade`.
* `events` — what an event holds and its idempotency key.
* `learning` — how an event changes the learner, shared by live ingestion and replay, and the
  rule deciding whether an ended job is learned.
* `service` — `PredictionService`: one transaction per event, write-ahead, checkpoints, restart
  by checkpoint + replay.
* `errors` — per-user error statistics computed from the store.

The network front ends (Unix socket, HTTP) and the CLI sit on top of `PredictionService` and are
not here. Nothing in this package creates an engine, a session or a model at import.
"""
