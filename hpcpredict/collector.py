"""`collector_paused`: Python's cycle collector off for a stretch of work that makes many objects
and no reference cycle, then as it was.

Why: the collector runs after every 700 new container objects, and each third-generation pass
walks every object alive. Building a log's 300,000 `JobRequest`s triggered ~800 collections,
40% of the build's CPU on CEA-Curie; a replay, which keeps those objects alive and makes
tuples at every event, spent 1-2% of its CPU in ~230 collections that found nothing to free
(docs/journal/performance-2026-11.md, "Issue 31, round 2"). Reference counting still frees
every object that is no longer used; only cycles (none are made in these stretches) wait for
the collector's next run after the stretch. The switch is the interpreter's, for all threads:
keep the stretches to bulk work, never around code that waits.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off inside the block (module doc), then enabled again if it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
