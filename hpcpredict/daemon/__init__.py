"""The prediction daemon, in three layers (tests/test_import_layers.py holds them apart):

* `core` — the store, the event-sourced `PredictionService`, the writer, the spool, the
  configuration: everything that changes what the daemon knows;
* `views` — read-only views of the store: pages, reports, explanations, the HTTP API's reads;
* `fronts` — the running `Daemon`: the plugin's socket and the admin HTTP API.

Nothing in this package creates an engine, a session or a model at import.
"""
