"""The watcher's heartbeat: a small file that says "as of T, every job I lowered had its margin".

In ``mode=lower`` a lowered limit is SLURM's kill time, and the watcher is what raises it before a
job reaches it. The failsafe (`failsafe.py`, its own process and systemd unit) must know when the
watcher stops doing that, whatever the cause: the daemon killed, crash-looping, stopped for
maintenance, its watcher thread stuck behind a slow SLURM command or a stuck store writer, or
``scontrol`` failing for it. So the watcher writes this file only after a look at SLURM in which
every limit change it owed succeeded (`SlurmWatcher.poll`), and the file's time is when that look
began: a heartbeat older than the bound means no one has vouched for the lowered jobs since.

The file is a line of JSON, replaced atomically (written beside it, then renamed), so a reader
never sees half of one. Nothing but its time matters to the reader; the rest (pid, polls) is for
the admin reading it by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

# A heartbeat from the future by more than this is a clock that moved back: judged stale, not
# fresh (a dead watcher must never look alive for as long as the clock jumped).
CLOCK_TOLERANCE_S = 5.0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    time_s: float  # when the look at SLURM began (Unix seconds)
    pid: int
    polls: int


def write_heartbeat(path: str | os.PathLike[str], beat: Heartbeat) -> None:
    """Replace `path` with `beat`, atomically (raises OSError when the folder is not writable)."""
    write_json_atomically(path, asdict(beat))


def write_json_atomically(path: str | os.PathLike[str], data: dict[str, object]) -> None:
    """`data` as one line of JSON in `path`, written beside it and renamed over it: a reader sees
    the old file or the new one, never half of one."""
    target = Path(path)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w") as stream:
            stream.write(json.dumps(data) + "\n")
        os.chmod(temporary, 0o640)  # the writer's user and group read it (mkstemp makes it 0600)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_heartbeat(path: str | os.PathLike[str]) -> Heartbeat | None:
    """The heartbeat in `path`, or None when it is missing, unreadable or not one (all mean
    the same to the failsafe: no one vouches for the lowered jobs)."""
    try:
        data = json.loads(Path(path).read_text())
        return Heartbeat(float(data["time_s"]), int(data["pid"]), int(data["polls"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def heartbeat_age_s(beat: Heartbeat | None, now_s: float) -> float | None:
    """How old `beat` is at `now_s`; None when there is none, or when it is from the future
    (beyond `CLOCK_TOLERANCE_S`): both are stale, whatever the bound."""
    if beat is None or beat.time_s > now_s + CLOCK_TOLERANCE_S:
        return None
    return max(0.0, now_s - beat.time_s)


def is_stale(age_s: float | None, stale_after_s: float) -> bool:
    return age_s is None or age_s > stale_after_s

