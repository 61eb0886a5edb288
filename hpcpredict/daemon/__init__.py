"""The prediction daemon's core: store, service, error statistics.

* `store` — SQLAlchemy 2 models and `Store` (SQLite by default, PostgreSQL by URL), with the
  Alembic migrations of `migrations` run by `Store.upgrade`.
* `events` — what an event holds and its idempotency key.
* `learning` — how an event changes the learner, shared by live ingestion and replay, and the
  rule deciding whether an ended job is learned.
* `service` — `PredictionService`: one transaction per event, write-ahead, checkpoints, restart
  by checkpoint + replay.
* `errors` — per-user error statistics computed from the store.

On top of `PredictionService`, the running daemon:

* `server` — `Daemon`: the life cycle (lock, spool, watcher, start and stop of both fronts).
* `socket_server` — the plugin's Unix socket, a line per request (`handlers`, `protocol`).
* `http_api` — the admin HTTP API (aiohttp on the daemon's loop), `http_auth` its bearer token,
  `queries` its reads of the store (run in worker processes), `metrics` the Prometheus counters.

Nothing in this package creates an engine, a session or a model at import.
"""
