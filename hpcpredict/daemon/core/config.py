"""The daemon's configuration: one TOML file, every key optional, command-line flags on top.

    # /etc/hpcpredict/daemon.toml
    [daemon]
    db = "sqlite:////var/lib/hpcpredict/hpcpredict.db"   # or postgresql+psycopg://...
    socket = "/run/hpcpredict/hpcpredict.sock"
    socket_mode = "0600"          # who may ask: the daemon's user (slurmctld's SlurmUser) only
    socket_group = ""             # with socket_mode "0660": a group allowed to ask as well
    http = "127.0.0.1:8765"       # "" disables the admin API
    http_token_file = "/etc/hpcpredict/http-token"  # bearer token for per-user endpoints (mode 0600/0640)
    spool = "/var/lib/hpcpredict/jobcomp.spool"  # where jobcomp.lua spools when we are down
    checkpoint_every = 1000       # events between model checkpoints
    min_trained_jobs = 231        # until the model has learned this many, PREDICT answers requests
    time_zone = "Europe/Paris"    # the site's; time-of-day features follow it (default: UTC)
    slurm = true                  # watch SLURM (hpcpredict/slurm/watcher.py)
    slurm_backend = "auto"        # cli (Slurm commands) | pyslurm (matching Slurm only) | auto
    slurm_interval_s = 10.0       # seconds between looks at SLURM
    # slurm_full_listing_s = 60   # list the whole queue this often (omitted: every look below
    #                             # 5,000 jobs, every 60 s above; watcher.py says what looks between)
    correction_margin_s = 120     # raise a lowered limit this long before it expires
    starvation_guard = "24h"      # a job pending this long: limits back to requests ("off": never)
    # starvation_guard_xfactor = 5  # or sooner: once its (wait + request) / request reaches 5 (omitted: off)
    # starvation_guard_slack = "2h"        # a softer stage before it: pending limits at request - 2 h
    # starvation_guard_slack_after = "4h"  #   while a job has waited 4 h (both or neither; omitted: off)
    correction = "incremental"    # how the corrector raises limits: incremental | survival (§8)
    survival_quantile = 0.5       # with "survival": the user's runtime quantile given the elapsed time

    [failsafe]                    # read by `hpcpredict failsafe` too (hpcpredict/slurm/failsafe.py)
    heartbeat = "/var/lib/hpcpredict/watcher.heartbeat"  # the watcher writes it after each vouched look
    status = "/var/lib/hpcpredict/failsafe.status"       # the failsafe writes it at each look
    stale_after_s = 40            # no vouched look for this long: limits back to requests, no lowering
    interval_s = 5                # the failsafe's looks at the heartbeat

    [learner]                     # must be the same for `train` and `serve`
    loss = "eloss"
    eta = 5000.0
    l2 = 4e9
    negative = "abs"
    loss_unit_s = 3600.0
    censor_at_limit = false       # learn TIMEOUT jobs as lower bounds (docs/method.md §4)
    feature_scaling = "raw"       # "robust": log break time, no extrapolation (§2)
    # calibration_alpha = 0.5     # publish so that this share of jobs outlive it (§6; omitted: off)
    # history_by = "user+partition"  # histories by user and partition (or group, executable = job
    #                              # name, request); default "user" (docs/results.md)

The learner section matters beyond start-up: a checkpoint records the hyperparameters it was made
with and a daemon started with others refuses it (`LearnedPredictor.load_state_dict`), rather
than continue a model under constants it was not trained with.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcpredict.paths import default_db_url, state_dir
from hpcpredict.daemon.core.readiness import DEFAULT_MIN_TRAINED_JOBS
from hpcpredict.corrections import CORRECTION_NAMES, make_correction
from hpcpredict.corrections.policies import CorrectionPolicy
from hpcpredict.corrections.starvation import (
    DAEMON_NAMES, DEFAULT_STARVATION_GUARD_S, GuardSettings, guard_from, parse_starvation_guard,
)
from hpcpredict.corrections.survival import DEFAULT_SURVIVAL_QUANTILE
from hpcpredict.retired import RetiredSettingError, drop_retired
from hpcpredict.slurm.failsafe import FailsafeConfig, FailsafeConfigError
from hpcpredict.learn.settings import LEARNER_KEYS, LearnerSettings

if TYPE_CHECKING:
    from hpcpredict.learn.predictor import LearnedPredictor

DEFAULT_HTTP = "127.0.0.1:8765"


class ConfigError(ValueError):
    """A configuration file or value that cannot be used; the message names the key."""


class DaemonError(RuntimeError):
    """The daemon cannot start as configured (socket in use, bad path...)."""


@dataclass(frozen=True)
class DaemonConfig:
    db: str = field(default_factory=default_db_url)
    socket: str = field(default_factory=lambda: str(state_dir() / "hpcpredict.sock"))
    socket_mode: int = 0o600
    socket_group: str = ""
    http: str = DEFAULT_HTTP
    # The admin API's bearer token, for its per-user endpoints (hpcpredict/daemon/fronts/http_auth.py);
    # "" turns those endpoints off and keeps the API on loopback addresses.
    http_token_file: str = ""
    spool: str = field(default_factory=lambda: str(state_dir() / "jobcomp.spool"))
    checkpoint_every: int = 1000
    min_trained_jobs: int = DEFAULT_MIN_TRAINED_JOBS  # readiness.py says why 231
    time_zone: str | None = None
    slurm: bool = False  # watch SLURM: report jobs' lives, raise lowered limits in time
    slurm_backend: str = "auto"  # auto | cli | pyslurm (hpcpredict.slurm.adapter)
    slurm_interval_s: float = 10.0
    # The watcher's full listings of the queue: every this many seconds (None: every look while
    # the queue holds fewer than watcher.LARGE_QUEUE_JOBS, every 60 s above; SlurmWatcher's doc).
    slurm_full_listing_s: float | None = None
    correction_margin_s: int = 120
    # While a job pending for the machine has waited this long, the watcher puts lowered limits
    # back to the requests (hpcpredict/slurm/guard.py): "24h", "90m", seconds, or "off".
    starvation_guard: str | int = DEFAULT_STARVATION_GUARD_S
    # The guard's "xfactor" rule (docs/method.md §7, hpcpredict/slurm/guard.py): the longest-waiting
    # job turns it on once (wait + request) / request reaches this, if before starvation_guard (the
    # cap). None: the wait rule alone. `hpcpredict tune` may propose it.
    starvation_guard_xfactor: float | None = None
    # The guard's slack stage (docs/method.md §7, hpcpredict/slurm/guard.py): while the
    # longest-waiting job has waited starvation_guard_slack_after, before the guard itself, lowered
    # limits are at least the request less starvation_guard_slack. Durations as the guard's; both
    # or neither (None: no stage). `hpcpredict tune` may propose them.
    starvation_guard_slack: str | int | None = None
    starvation_guard_slack_after: str | int | None = None
    # The SLURM corrector's policy (docs/method.md §8); "survival" keeps each user's recent
    # runtimes from the events the service logs, in its checkpoint (hpcpredict/corrections/survival.py).
    correction: str = "incremental"
    survival_quantile: float = DEFAULT_SURVIVAL_QUANTILE
    learner: LearnerSettings = field(default_factory=LearnerSettings)
    failsafe: FailsafeConfig = field(default_factory=FailsafeConfig)

    def predictor_factory(self) -> LearnedPredictor:
        """An untrained learner whose clock is Unix seconds read in the site's time zone."""
        from hpcpredict.learn.features import FeatureContext  # numpy, and numba's kernels: not for --help
        from hpcpredict.learn.predictor import LearnedPredictor

        return LearnedPredictor.from_settings(self.learner, FeatureContext(0, self.time_zone))

    def correction_policy(self) -> CorrectionPolicy:
        """A fresh correction policy for the service (which feeds it) and the SLURM corrector."""
        return make_correction(self.correction, survival_quantile=self.survival_quantile)

    @property
    def guard(self) -> GuardSettings | None:
        """The starvation guard these keys describe (None: off), read as the simulator reads a
        run's (`GuardSettings`, one validation): durations in seconds, the xfactor rule when a
        factor is given; and what SLURM adds, whose limits are whole minutes: a guard of at least
        one, a slack stage in whole minutes. Raises ConfigError naming this file's keys."""
        seconds = {}
        for setting in ("wait_s", "slack_s", "slack_after_s"):
            key = DAEMON_NAMES[setting]
            value = getattr(self, key)
            try:
                seconds[setting] = None if value is None else parse_starvation_guard(value)
            except ValueError as error:
                raise ConfigError(f"{key}: {error}".replace("a starvation guard is", "expected")) from None
            parsed = seconds[setting]
            if setting == "wait_s" and parsed is not None and parsed < 60:
                raise ConfigError(f"{key} must be off or at least 60 s, got {value!r}")
            if setting != "wait_s" and value is not None and (
                    parsed is None or parsed % 60 or (setting == "slack_s" and parsed < 60)):
                raise ConfigError(f"{key}: expected a whole number of minutes, at least 1 minute for "
                                  f"the slack, such as \"2h\" or \"90m\" (SLURM's limits are whole "
                                  f"minutes), got {value!r}")
        xfactor = self.starvation_guard_xfactor
        try:
            return guard_from(seconds["wait_s"], rule="wait" if xfactor is None else "xfactor",
                              xfactor=xfactor, slack_s=seconds["slack_s"],
                              slack_after_s=seconds["slack_after_s"], names=DAEMON_NAMES)
        except ValueError as error:
            raise ConfigError(str(error)) from None

    def with_overrides(self, **overrides: Any) -> DaemonConfig:
        """A copy with the given keys replaced; None means "not given" and keeps the value."""
        given = {key: value for key, value in overrides.items() if value is not None}
        return _checked(dataclasses.replace(self, **given))


_DAEMON_KEYS = {
    "db", "socket", "socket_mode", "socket_group", "http", "http_token_file", "spool", "checkpoint_every",
    "min_trained_jobs", "time_zone",
    "slurm", "slurm_backend", "slurm_interval_s", "slurm_full_listing_s", "correction_margin_s",
    "starvation_guard",
    "starvation_guard_xfactor", "starvation_guard_slack", "starvation_guard_slack_after", "correction",
    "survival_quantile",
}


CONFIG_VARIABLE = "HPCPREDICT_CONFIG"
SYSTEM_CONFIG = Path("/etc/hpcpredict/daemon.toml")  # docs/quickstart-cluster.md installs it there


@dataclass(frozen=True)
class FoundConfig:
    """The configuration file a read-only view uses, and why that one (for its messages)."""

    path: Path | None  # None: the built-in defaults (the per-user state directory)
    origin: str  # "--config", "$HPCPREDICT_CONFIG", "the system configuration", "the defaults"
    unreadable_system_config: bool = False  # /etc/hpcpredict/daemon.toml there, not readable


def find_config(explicit: Path | None, *, system_config: Path | None = None,
                environ: dict[str, str] | None = None) -> FoundConfig:
    """Which configuration `hpcpredict errors` and `report` read when none is given, so that on a
    controller they find the installed daemon's database by themselves, in this order:

    1. ``--config FILE``;
    2. ``$HPCPREDICT_CONFIG`` (a file that must exist: a typo is an error, never a silent
       fallback to another database);
    3. ``/etc/hpcpredict/daemon.toml`` when it exists and this user can read it;
    4. the defaults: the per-user state directory (``$HPCPREDICT_STATE_DIR``, ``~/.local/state``).

    Only the read-only views search: `serve` and `train` write, and a command that writes the
    production store must be pointed at it on purpose (``--config``).
    """
    environ = os.environ if environ is None else environ
    system_config = SYSTEM_CONFIG if system_config is None else system_config
    if explicit is not None:
        return FoundConfig(explicit, "--config")
    from_environment = environ.get(CONFIG_VARIABLE)
    if from_environment:
        path = Path(from_environment)
        if not path.is_file():
            raise ConfigError(f"{CONFIG_VARIABLE}={from_environment}: no such configuration file")
        return FoundConfig(path, f"${CONFIG_VARIABLE}")
    if system_config.is_file():
        if os.access(system_config, os.R_OK):
            return FoundConfig(system_config, "the system configuration")
        return FoundConfig(None, "the defaults", unreadable_system_config=True)
    return FoundConfig(None, "the defaults")


def load_config(path: str | os.PathLike[str] | None) -> DaemonConfig:
    """The configuration in `path` (TOML), or the defaults when `path` is None."""
    if path is None:
        return DaemonConfig()
    path = Path(path)
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the configuration ({error.strerror})") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from error
    unknown_sections = set(data) - {"daemon", "learner", "failsafe"}
    if unknown_sections:
        raise ConfigError(f"{path}: unknown section(s) {sorted(unknown_sections)}; expected [daemon], "
                          "[learner], [failsafe]")
    try:
        failsafe = FailsafeConfig.from_section(dict(data.get("failsafe", {})), str(path))
    except FailsafeConfigError as error:
        raise ConfigError(str(error)) from None
    daemon = dict(data.get("daemon", {}))
    learner = dict(data.get("learner", {}))
    try:
        for warning in drop_retired(learner, f"{path}: [learner]"):
            print(f"warning: {warning}", file=sys.stderr)
    except RetiredSettingError as error:
        raise ConfigError(str(error)) from None
    for section, keys, allowed in (("daemon", daemon, _DAEMON_KEYS), ("learner", learner, LEARNER_KEYS)):
        unknown = set(keys) - allowed
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {sorted(unknown)} in [{section}]; known: {sorted(allowed)}")
    if "socket_mode" in daemon:
        daemon["socket_mode"] = parse_mode(daemon["socket_mode"], where=f"{path}: [daemon] socket_mode")
    try:
        config = DaemonConfig(**daemon, learner=LearnerSettings(**learner), failsafe=failsafe)
    except TypeError as error:
        raise ConfigError(f"{path}: {error}") from error
    except ValueError as error:  # the learner's settings (`LearnerSettings`' one validation)
        raise ConfigError(f"{path}: learner: {error}") from error
    try:
        return _checked(config)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def parse_mode(value: object, *, where: str = "socket mode") -> int:
    """An octal file mode given as "0660" / "660" (TOML has no octal strings users remember)."""
    try:
        mode = int(str(value), 8)
    except ValueError:
        raise ConfigError(f"{where}: expected an octal mode such as \"0600\", got {value!r}") from None
    if not 0 <= mode <= 0o777:
        raise ConfigError(f"{where}: {value!r} is not a file mode")
    return mode


def parse_host_port(value: str) -> tuple[str, int]:
    """ "HOST:PORT" (IPv6 in brackets) -> (host, port)."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"http: expected HOST:PORT such as {DEFAULT_HTTP}, got {value!r}")
    return host.strip("[]"), int(port)


# Keys whose value is text (a URL, a path, a name): a TOML number or table there would otherwise
# fail far from the file, in words that name neither the file nor the key.
_TEXT_KEYS: dict[str, str] = {
    "db": "a database URL such as \"sqlite:////var/lib/hpcpredict/hpcpredict.db\"",
    "socket": "a socket path such as \"/run/hpcpredict/hpcpredict.sock\"",
    "socket_group": "a group name such as \"slurm\"",
    "http": f"HOST:PORT such as \"{DEFAULT_HTTP}\" (\"\" turns the API off)",
    "http_token_file": "a file path such as \"/etc/hpcpredict/http-token\"",
    "spool": "a file path such as \"/var/lib/hpcpredict/jobcomp.spool\"",
    "slurm_backend": "\"auto\", \"cli\" or \"pyslurm\"",
    "correction": "a policy name such as \"incremental\"",
}


def _check_time_zone(time_zone: str | None) -> None:
    """An IANA name zoneinfo knows: said as the key's fault, not the learner's."""
    if time_zone is None:
        return
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(time_zone, str):
        raise ConfigError(f"time_zone: expected an IANA time zone name such as \"Europe/Paris\", "
                          f"got {time_zone!r}")
    try:
        ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"time_zone {time_zone!r}: no such IANA time zone (expected a name such as "
            f"\"Europe/Paris\" or \"UTC\"; `timedatectl list-timezones` lists them; leave it "
            f"unset for UTC)"
        ) from None


def _checked(config: DaemonConfig) -> DaemonConfig:
    for key, expected in _TEXT_KEYS.items():
        value = getattr(config, key)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected {expected}, got {value!r}")
    _check_time_zone(config.time_zone)
    if config.checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1, got {config.checkpoint_every}")
    if isinstance(config.min_trained_jobs, bool) or not isinstance(config.min_trained_jobs, int) \
            or config.min_trained_jobs < 0:
        raise ConfigError(f"min_trained_jobs must be an integer >= 0, got {config.min_trained_jobs!r}")
    if config.http:
        parse_host_port(config.http)
    if config.slurm_backend not in ("auto", "cli", "pyslurm"):
        raise ConfigError(f"slurm_backend must be auto, cli or pyslurm, got {config.slurm_backend!r}")
    if config.slurm_interval_s <= 0 or config.correction_margin_s < 0:
        raise ConfigError("slurm_interval_s must be > 0 and correction_margin_s >= 0")
    full_s = config.slurm_full_listing_s
    if full_s is not None and (isinstance(full_s, bool) or not isinstance(full_s, (int, float))
                               or full_s < config.slurm_interval_s):
        raise ConfigError(f"slurm_full_listing_s must be a number of seconds >= slurm_interval_s "
                          f"({config.slurm_interval_s:g}), or omitted, got {full_s!r}")
    if config.slurm and config.correction_margin_s < 2 * config.slurm_interval_s + 30:
        raise ConfigError(
            f"correction_margin_s ({config.correction_margin_s}) must cover two looks at SLURM "
            f"({config.slurm_interval_s:g} s each) and SLURM's 30 s limit check"
        )
    if config.slurm and config.failsafe.stale_after_s < 2 * config.slurm_interval_s + 10:
        raise ConfigError(
            f"[failsafe] stale_after_s ({config.failsafe.stale_after_s:g}) must cover two looks at "
            f"SLURM ({config.slurm_interval_s:g} s each) and 10 s for a look itself: a healthy "
            "watcher's heartbeat would otherwise read as stale")
    config.guard  # (its checks: `DaemonConfig.guard`)
    if config.correction not in CORRECTION_NAMES:
        raise ConfigError(f"correction must be one of {', '.join(CORRECTION_NAMES)}, got {config.correction!r}")
    if isinstance(config.survival_quantile, bool) or not isinstance(config.survival_quantile, (int, float)) \
            or not 0.0 < config.survival_quantile < 1.0:
        raise ConfigError(f"survival_quantile must be in (0, 1), got {config.survival_quantile!r}")
    try:
        config.predictor_factory()
    except (ValueError, TypeError, KeyError) as error:  # bad loss name, negative rule, zone
        raise ConfigError(f"learner: {error}") from error
    except Exception as error:  # zoneinfo raises its own error types for unknown zones
        raise ConfigError(f"time_zone {config.time_zone!r}: {error}") from error
    return config
