"""The job-completion spool: reports written to a file while the daemon could not be reached.

`slurm-plugin/jobcomp.lua` appends one protocol line (an END) per finished job to the spool file
when the daemon's socket does not answer; the daemon ingests the file when it starts and then
periodically. Ingestion first renames the file (appends that arrive meanwhile start a new one),
so no line is read twice or lost; a crash mid-ingestion leaves the renamed file, taken first at
the next start (every event is idempotent, so lines already applied are answered ``applied=0``).
Lines the daemon refuses are kept in ``<spool>.rejected`` with the reason, never dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SpoolIngestion:
    lines: int
    rejected: int


def ingest_spool(path: str | os.PathLike[str], handle_line: Callable[[bytes], bytes]) -> SpoolIngestion:
    """Apply every line of the spool at `path` through `handle_line` (the socket's handler)."""
    path = Path(path)
    taking = path.with_name(path.name + ".ingesting")
    lines = rejected = 0
    if not taking.exists():
        if path.exists() and not path.is_file():
            raise IsADirectoryError(f"{path} is not a file: not a spool of completion reports")
        try:
            os.rename(path, taking)
        except FileNotFoundError:
            return SpoolIngestion(0, 0)
    with taking.open("rb") as stream:
        for raw in stream:
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            lines += 1
            answer = handle_line(line)
            if answer.startswith(b"ERR"):
                rejected += 1
                with path.with_name(path.name + ".rejected").open("ab") as kept:
                    kept.write(line + b"\n# " + answer.rstrip(b"\n") + b"\n")
    taking.unlink()
    if lines:
        logger.info("ingested %d spooled reports from %s (%d rejected)", lines, path, rejected)
    return SpoolIngestion(lines, rejected)
