"""The job-completion spool: reports written to a file while the daemon could not be reached.

`slurm-plugin/jobcomp.lua` appends one protocol line (an END) per finished job to the spool file
when the daemon's socket does not answer (or answers ``ERR busy``); the daemon ingests the file
when it starts and then periodically. Ingestion first renames the file (appends that arrive
meanwhile start a new one), so no line is read twice or lost; a crash mid-ingestion leaves the
renamed file, taken first at the next start (every event is idempotent, so lines already applied
are answered ``applied=0``). Lines the daemon refuses are kept in ``<spool>.rejected`` with the
reason, never dropped.

`SpoolIngestion` reads the file in chunks of a bounded number of lines: the daemon runs
one chunk at a time on its store writer, so that 8,000 spooled reports after an outage are
seconds of writing between which live events and every PREDICT are still served, instead of one
block that stalled the plugin (which made jobcomp spool more, and the next stall longer).
`ingest_spool` reads the whole file at once, for callers without a loop to yield to.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger(__name__)

SPOOL_CHUNK_LINES = 100  # lines per chunk: ~0.1-0.3 s of store writes, what a live event may wait


@dataclass(frozen=True, slots=True)
class SpoolCount:
    lines: int
    rejected: int


class SpoolIngestion:
    """One ingestion of the spool at `path`: `take`, `ingest_chunk` until it says done.

    Not thread-safe: one thread at a time (the daemon's store writer) calls its methods.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.taking = self.path.with_name(self.path.name + ".ingesting")
        self.lines = 0
        self.rejected = 0
        self._stream: BinaryIO | None = None

    def take(self) -> bool:
        """Rename the spool aside (or resume an interrupted ingestion's file) and open it; False
        when there is nothing to ingest."""
        if not self.taking.exists():
            if self.path.exists() and not self.path.is_file():
                raise IsADirectoryError(f"{self.path} is not a file: not a spool of completion reports")
            try:
                os.rename(self.path, self.taking)
            except FileNotFoundError:
                return False
        self._stream = self.taking.open("rb")
        return True

    def ingest_chunk(self, handle_line: Callable[[bytes], bytes], max_lines: int = SPOOL_CHUNK_LINES) -> bool:
        """Apply up to `max_lines` more lines through `handle_line`; True once the file is done
        (then removed: every line of it has been answered)."""
        assert self._stream is not None, "take() first"
        for _ in range(max_lines):
            raw = self._stream.readline()
            if not raw:
                self._finish()
                return True
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            self.lines += 1
            answer = handle_line(line)
            if answer.startswith(b"ERR"):
                self.rejected += 1
                with self.path.with_name(self.path.name + ".rejected").open("ab") as kept:
                    kept.write(line + b"\n# " + answer.rstrip(b"\n") + b"\n")
        return False

    def close(self) -> None:
        """Stop here (the daemon is stopping): the file stays, the next start finishes it."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def _finish(self) -> None:
        self.close()
        self.taking.unlink()
        if self.lines:
            logger.info("ingested %d spooled reports from %s (%d rejected)", self.lines, self.path,
                        self.rejected)


def ingest_spool(path: str | os.PathLike[str], handle_line: Callable[[bytes], bytes]) -> SpoolCount:
    """Apply every line of the spool at `path` through `handle_line` (the socket's handler)."""
    ingestion = SpoolIngestion(path)
    if ingestion.take():
        while not ingestion.ingest_chunk(handle_line):
            pass
    return SpoolCount(ingestion.lines, ingestion.rejected)
