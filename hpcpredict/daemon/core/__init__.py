"""The daemon's event-sourced core: the store (`store`, its Alembic `migrations`), events and their
idempotency (`events`), how an event changes the learner (`learning`), `PredictionService` (one
transaction per event, write-ahead, checkpoints, restart by checkpoint + replay), the writer
thread, the spool, the projections (`user_errors`) and the error statistics read from the store
(`judged_errors`), the configuration (`config`). No socket and no HTTP here."""
