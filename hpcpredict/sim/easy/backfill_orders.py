"""The EASY family's schedulers by name, each with its backfilling order (docs/method.md §7).

`schedulers.SCHEDULERS` is built from this table; it stands apart so that the command line and
`RunSpec` know the names and which of them backfill without importing the compiled backfilling
pass (`hpcpredict --help` stays quick: start-up in docs/performance.md).
"""

from __future__ import annotations

#: name -> backfilling order: None (no backfilling), "fcfs" or "shortest_prediction".
BACKFILL_ORDERS: dict[str, str | None] = {
    "fcfs": None,
    "easy": "fcfs",
    "easy-sjbf": "shortest_prediction",
}
