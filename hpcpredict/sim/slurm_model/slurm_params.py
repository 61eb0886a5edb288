"""The slurm.conf settings the SLURM-like scheduler reads (`SlurmParams`) and its name.

Apart from the scheduler (`slurm_backfill`, which re-exports them) so that the command line and
`slurm_conf` read and check them without importing the simulator (`hpcpredict --help` stays
quick: start-up in docs/performance.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

NAME = "slurm-backfill"

# slurm.conf names -> field names; the defaults are Slurm 22.05's (slurm.conf(5), Debian 22.05.8).
_SLURM_NAMES = {
    "bf_interval": "bf_interval_s",
    "bf_max_job_test": "bf_max_job_test",
    "bf_window": "bf_window_min",
    "bf_resolution": "bf_resolution_s",
    "bf_job_part_count_reserve": "bf_job_part_count_reserve",
    "PriorityWeightAge": "priority_weight_age",
    "PriorityWeightJobSize": "priority_weight_job_size",
    "PriorityMaxAge": "priority_max_age_s",
    "PriorityFavorSmall": "priority_favor_small",
}
_LIMITS = {  # slurm.conf(5) minimum and maximum of each numeric setting
    "bf_interval_s": (1, 10800),
    "bf_max_job_test": (1, 1_000_000),
    "bf_window_min": (1, 43200),
    "bf_resolution_s": (1, 3600),
    "bf_job_part_count_reserve": (0, 100_000),
    "priority_weight_age": (0, 2**32 - 1),
    "priority_weight_job_size": (0, 2**32 - 1),
    "priority_max_age_s": (1, 10 * 365 * 86400),
}


class SlurmParamsError(ValueError):
    """A `--slurm-params` text that cannot be read (the message names the setting)."""


@dataclass(frozen=True)
class SlurmParams:
    """The slurm.conf settings the model reads, with Slurm 22.05's defaults."""

    bf_interval_s: int = 30  # SchedulerParameters=bf_interval (seconds)
    bf_max_job_test: int = 500  # SchedulerParameters=bf_max_job_test (jobs)
    bf_window_min: int = 1440  # SchedulerParameters=bf_window (minutes)
    bf_resolution_s: int = 60  # SchedulerParameters=bf_resolution (seconds)
    # SchedulerParameters=bf_job_part_count_reserve: reservations for the first N of the jobs
    # tested that cannot start (0: every one, SLURM's default); the later ones start if they fit
    # around those reservations, and hold nothing when they do not.
    bf_job_part_count_reserve: int = 0
    priority_weight_age: int = 0  # PriorityWeightAge (multifactor)
    priority_weight_job_size: int = 0  # PriorityWeightJobSize (multifactor)
    priority_max_age_s: int = 7 * 86400  # PriorityMaxAge (7-0, seconds here)
    priority_favor_small: bool = False  # PriorityFavorSmall

    def __post_init__(self) -> None:
        for name, (low, high) in _LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                slurm = next(key for key, field in _SLURM_NAMES.items() if field == name)
                raise SlurmParamsError(f"{slurm} must be a whole number in [{low}, {high}], got {value!r}")

    @property
    def bf_window_s(self) -> int:
        return self.bf_window_min * 60

    @property
    def multifactor(self) -> bool:
        """Does the order depend on more than arrival (a job size weight)?"""
        return self.priority_weight_job_size > 0

    @classmethod
    def parse(cls, text: str | None) -> SlurmParams:
        """Read ``bf_interval=30,bf_window=1440,PriorityWeightJobSize=1000`` (slurm.conf names;
        PriorityMaxAge in seconds; PriorityFavorSmall YES/NO). Empty or None: the defaults."""
        values: dict[str, object] = {}
        for item in (text or "").split(","):
            if not item.strip():
                continue
            key, sep, value = item.strip().partition("=")
            if not sep or key not in _SLURM_NAMES:
                raise SlurmParamsError(
                    f"unknown SLURM setting {item.strip()!r}; known: {', '.join(_SLURM_NAMES)} (name=value)"
                )
            field = _SLURM_NAMES[key]
            if field == "priority_favor_small":
                if value.upper() not in ("YES", "NO"):
                    raise SlurmParamsError(f"PriorityFavorSmall must be YES or NO, got {value!r}")
                values[field] = value.upper() == "YES"
            else:
                if not value.isdigit() or not value.isascii():
                    raise SlurmParamsError(f"{key} must be a whole number, got {value!r}")
                values[field] = int(value)
        return cls(**values)  # type: ignore[arg-type]

    def to_text(self) -> str:
        """The settings that differ from the defaults, in `parse`'s syntax ('' for none)."""
        default = SlurmParams()
        words = []
        for key, field in _SLURM_NAMES.items():
            value = getattr(self, field)
            if value != getattr(default, field):
                words.append(f"{key}={('YES' if value else 'NO') if isinstance(value, bool) else value}")
        return ",".join(words)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)
