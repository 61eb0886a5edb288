"""The daemon's commands: ``serve``, ``train``, ``errors``, ``report`` and ``slurm-convert`` (thin).

Both read the same configuration (`hpcpredict.daemon.core.config`): `train` must build the model with
the learner constants `serve` will run it with, or the daemon refuses the checkpoint.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from hpcpredict.cli.common import check_file, load_log, progress_bar
from hpcpredict.cli.options import deprecated_alias, format_option, lenient_option, log_argument, procs_option
from hpcpredict.daemon.core.config import ConfigError, DaemonConfig, load_config, parse_host_port, parse_mode

def _config_file_option(help_text: str):  # -> click decorator
    return click.option("--config", "config_path", default=None, help=help_text,
                        type=click.Path(exists=True, dir_okay=False, path_type=Path))


_config_option = _config_file_option(
    "TOML configuration ([daemon] and [learner] sections; see docs/daemon.md). "
    "Command-line options override it.")
# The read-only views find the installed daemon's configuration by themselves (find_config).
_view_config_option = _config_file_option(
    "The daemon's TOML configuration, whose database to read. Default: $HPCPREDICT_CONFIG, "
    "else /etc/hpcpredict/daemon.toml when it exists and is readable, else the per-user state "
    "directory ($HPCPREDICT_STATE_DIR or ~/.local/state/hpcpredict). --db overrides it.")
_db_option = click.option(
    "--db",
    "db_url",
    default=None,
    help="Database URL: sqlite:///path/file.db (default: hpcpredict.db under "
    "$HPCPREDICT_STATE_DIR or ~/.local/state/hpcpredict) or postgresql+psycopg://user@host/db.",
)


def _config(config_path: Path | None, **overrides: object) -> DaemonConfig:
    try:
        return load_config(config_path).with_overrides(**overrides)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


def _private_files(command: Callable[..., None]) -> Callable[..., None]:
    """While `command` runs, the files and folders it creates are its user's alone (0600 / 0700):
    the database holds every user's jobs, and SQLite gives its -wal and -shm files the database
    file's mode. A stricter umask set by the caller (or systemd's UMask=) is kept, and the previous
    one is restored on return; the socket's own mode and group are set explicitly (socket_mode,
    socket_group)."""

    @functools.wraps(command)
    def private(*args: object, **kwargs: object) -> None:
        previous = os.umask(0o077)
        os.umask(previous | 0o077)
        try:
            command(*args, **kwargs)
        finally:
            os.umask(previous)

    return private


def _open_service(config: DaemonConfig, store=None):  # -> PredictionService (SQLAlchemy lazily)
    """The service on `config.db`, or on `store` when the caller already opened (and locked) it."""
    from sqlalchemy.exc import SQLAlchemyError

    from hpcpredict.daemon.core.service import PredictionService, ReplayError
    from hpcpredict.daemon.core.store import Store

    if config.db.startswith("sqlite:///"):
        _make_database_folder(Path(config.db.removeprefix("sqlite:///")))
    try:
        store = Store(config.db) if store is None else store
        return PredictionService.open(
            store,
            config.predictor_factory,
            checkpoint_every=config.checkpoint_every,
            min_trained_jobs=config.min_trained_jobs,
            correction=config.correction_policy(),
        )
    except SQLAlchemyError as error:
        raise click.ClickException(_database_error(config.db, error)) from None
    except (ValueError, ReplayError) as error:
        raise click.ClickException(f"{_shown_url(config.db)}: {error}") from None


def _make_database_folder(database: Path) -> None:
    """The SQLite file's folder, made if missing; one line saying how to make it when this user
    may not (the quick start's `train` as SlurmUser, before systemd's StateDirectory= exists)."""
    import grp
    import pwd

    folder = database.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        account = pwd.getpwuid(os.geteuid())
        group = grp.getgrgid(account.pw_gid).gr_name
        raise click.ClickException(
            f"{folder}: cannot create the database's folder ({error.strerror}); as root, make it "
            f"this user's first: install -d -o {account.pw_name} -g {group} -m 0750 {folder}"
        ) from None


def _database_error(url: str, error: Exception) -> str:
    """One line for a database that cannot be opened or written: the driver's own words without
    SQLAlchemy's wrapping and link, and what to check."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    reason = error.orig if isinstance(error, DBAPIError) else error
    parsed = make_url(url)
    shown = _shown_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        folder = Path(parsed.database).parent
        hint = f"check that {folder} is a folder this user ({_user_name()}) can write in, or give another --db"
    else:
        hint = "check the URL, that the server runs and that this user may connect"
    return f"{shown}: cannot open the database ({reason}): {hint}"


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


_INTERVAL_TYPE = click.FloatRange(min=0, min_open=True)
_MARGIN_TYPE = click.IntRange(min=0)


@click.command()
@_config_option
@_db_option
@click.option("--socket", "socket_path", default=None, help="Unix socket for the SLURM plugin "
              "(default: hpcpredict.sock in the state directory).")
@click.option("--socket-mode", default=None, help="Octal permissions of the socket (default 0600: "
              "only this user, i.e. slurmctld's SlurmUser, may ask).")
@click.option("--socket-group", default=None, help="Group given to the socket (with --socket-mode 0660).")
@click.option("--http", default=None, help="HOST:PORT of the admin JSON API (default "
              "127.0.0.1:8765; '' disables it). An address other than loopback needs "
              "--http-token-file.")
@click.option("--http-token-file", default=None, type=click.Path(dir_okay=False),
              help="File holding the bearer token the admin API's per-user endpoints (/summary, /errors, "
              "/users, /predictions, POST /predict) require; not readable by other users (mode "
              "0600 or 0640). Without it those endpoints are off.")
@click.option("--spool", default=None, help="Completion reports jobcomp.lua wrote while the daemon "
              "was unreachable; ingested at start and every 30 s (default: jobcomp.spool in the "
              "state directory).")
@click.option("--time-zone", default=None, help="The site's IANA time zone (time-of-day features).")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=None,
              help="Events between model checkpoints (a restart replays at most this many).")
@click.option("--min-trained-jobs", type=click.IntRange(min=0), default=None,
              help="Until the model has learned this many jobs, PREDICT answers every job with "
              "its own request and says it is not ready (default 231, one per weight of the "
              "model; 0 acts on an untrained model). `train` on a history gets past it at once.")
@click.option("--slurm/--no-slurm", default=None, help="Watch SLURM: report submitted, started "
              "and ended jobs to the model and raise lowered time limits before they expire "
              "(see docs/admin-guide.md). Off by default.")
@click.option("--slurm-backend", type=click.Choice(["auto", "cli", "pyslurm"]), default=None,
              help="How to talk to SLURM: its commands (cli), pyslurm when it matches the "
              "installed Slurm, or auto (pyslurm if it matches, else cli).")
@click.option("--slurm-interval-s", "slurm_interval_s", type=_INTERVAL_TYPE,
              default=None, help="Seconds between looks at SLURM (default 10).")
@deprecated_alias("--slurm-interval", "--slurm-interval-s", "slurm_interval_s", type=_INTERVAL_TYPE)
@click.option("--correction-margin-s", "correction_margin_s", type=_MARGIN_TYPE, default=None,
              help="Raise a lowered limit this many seconds before it expires (default 120; must "
              "exceed two intervals + SLURM's 30 s limit check).")
@deprecated_alias("--correction-margin", "--correction-margin-s", "correction_margin_s", type=_MARGIN_TYPE)
@click.option("--starvation-guard", "starvation_guard", default=None, metavar="DURATION|off",
              help="With --slurm: while a job pending for processors has waited this long (24h, "
              "90m, seconds), lowered limits go back to the requests and new jobs are not lowered, "
              "so it cannot starve behind jobs that outlive their predictions (default 24h; off "
              "disables it).")
@click.option("--starvation-guard-xfactor", "starvation_guard_xfactor", type=float, default=None,
              metavar="X", help="With --starvation-guard: turn the guard on sooner, once the "
              "longest-waiting job's (wait + request) / request reaches X (> 1), the guard's "
              "duration staying the cap (default: off, the duration alone).")
@click.option("--starvation-guard-slack", "starvation_guard_slack", default=None, metavar="DURATION",
              help="With --starvation-guard and --starvation-guard-slack-after: a softer stage "
              "before the guard, while the longest-waiting job has waited that long: lowered "
              "limits are at least the request less this slack (e.g. 2h), so each job started in "
              "front of it can delay it by at most the slack (default: no stage; docs/method.md §7).")
@click.option("--starvation-guard-slack-after", "starvation_guard_slack_after", default=None,
              metavar="DURATION", help="The wait from which the slack's stage applies (e.g. 4h; "
              "at most the guard's).")
@click.option("--create-db", is_flag=True, help="Create the SQLite database if it does not exist "
              "(needed outside the default state directory: a missing file elsewhere is refused as a "
              "mistyped --db; `hpcpredict train` creates one with a warmed model).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@_private_files
def serve(
    config_path: Path | None,
    db_url: str | None,
    socket_path: str | None,
    socket_mode: str | None,
    socket_group: str | None,
    http: str | None,
    http_token_file: str | None,
    spool: str | None,
    time_zone: str | None,
    checkpoint_every: int | None,
    min_trained_jobs: int | None,
    slurm: bool | None,
    slurm_backend: str | None,
    slurm_interval_s: float | None,
    correction_margin_s: int | None,
    starvation_guard: str | None,
    starvation_guard_xfactor: float | None,
    starvation_guard_slack: str | None,
    starvation_guard_slack_after: str | None,
    create_db: bool,
    log_level: str,
) -> None:
    """Run the prediction daemon until SIGTERM or Ctrl-C.

    It answers the SLURM plugin on a Unix socket (line protocol, docs/protocol.md), learns from
    every job reported to it, records jobs, predictions and corrections in the database, and
    serves an admin JSON API (/health and /metrics open; /summary, /errors, /users, /users/UID/errors,
    /users/UID/explain, /jobs/ID/explain,
    /predictions and POST /predict only with the token of --http-token-file). On start it restores
    the last checkpoint and replays the events logged after it, so a restart — even after kill -9
    — loses nothing learned.

    \b
    Examples:
      hpcpredict serve                                   # state directory, socket, API on 127.0.0.1:8765
      hpcpredict serve --db sqlite:////tmp/hpcpredict-try.db --create-db --http ''   # a throw-away store
      hpcpredict serve --config deploy/daemon.toml --slurm --slurm-interval-s 10 --correction-margin-s 120
    """
    from hpcpredict.daemon.fronts.server import Daemon, DaemonError

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(max(logging.WARNING, logging.getLogger().level))
    # `kill -USR1 <pid>`: every thread's stack to the log (stderr), the daemon going on: what a
    # daemon that seems stuck is doing, without stopping it (docs/admin-guide.md, troubleshooting).
    # The process's own stderr (fd 2: the journal under systemd), where the log goes too; none
    # (stderr closed), no dump: never a reason not to serve.
    if sys.__stderr__ is not None:
        with contextlib.suppress(OSError, ValueError):
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        mode = None if socket_mode is None else parse_mode(socket_mode, where="--socket-mode")
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    config = _config(
        config_path,
        db=db_url,
        socket=socket_path,
        socket_mode=mode,
        socket_group=socket_group,
        http=http,
        http_token_file=http_token_file,
        spool=spool,
        time_zone=time_zone,
        checkpoint_every=checkpoint_every,
        min_trained_jobs=min_trained_jobs,
        slurm=slurm,
        slurm_backend=slurm_backend,
        slurm_interval_s=slurm_interval_s,
        correction_margin_s=correction_margin_s,
        starvation_guard=starvation_guard,
        starvation_guard_xfactor=starvation_guard_xfactor,
        starvation_guard_slack=starvation_guard_slack,
        starvation_guard_slack_after=starvation_guard_slack_after,
    )
    _check_http_auth(config)
    store, lock = _locked_store(config, create=create_db)
    try:
        service = _open_service(config, store)
        if service.replayed_events:
            click.echo(f"replayed {service.replayed_events:,} events after the last checkpoint", err=True)
        Daemon(config, service, lock=lock).run()
    except DaemonError as error:
        raise click.ClickException(str(error)) from None
    finally:
        store.close()  # first: releasing the lock closes a descriptor of the file (lock.py)
        lock.release()


def _check_http_auth(config: DaemonConfig) -> None:
    """Refuse an unprotected non-loopback bind or an unsafe token file now, in one line, rather
    than after the store is opened and replayed (the daemon checks again as it starts the API)."""
    from hpcpredict.daemon.fronts.http_auth import TokenFileError, load_token, require_token_off_loopback

    if not config.http:
        return
    try:
        require_token_off_loopback(parse_host_port(config.http)[0], config.http_token_file)
        if config.http_token_file:
            load_token(config.http_token_file)
    except TokenFileError as error:
        raise click.ClickException(str(error)) from None


def _tighten_modes(database: Path) -> None:
    """The store's files closed to other users (file_modes.py), saying what changed."""
    from hpcpredict.daemon.core.file_modes import LooseModeError, tighten_store_modes

    try:
        for line in tighten_store_modes(database):
            click.echo(line, err=True)
    except LooseModeError as error:
        raise click.ClickException(str(error)) from None


def _check_sqlite_file(database: Path, *, create: bool) -> None:
    """Refuse, in one line, a --db file hpcpredict must not serve from or write into.

    * Missing: created only under the default state directory (the quick start) or with
      ``--create-db``; elsewhere a missing file is most likely a mistyped path, and a new empty
      store there would serve from an untrained model while the real one sits unused. `train`
      creates a store on purpose (with a model warmed on the site's history).
    * Empty (zero bytes): SQLite would happily turn a truncated copy into a new store.
    * Not SQLite, or SQLite holding none of hpcpredict's tables but others (some other
      application's database): the migrations would add hpcpredict's tables to it. Read here
      read-only, before `Store` connects, whose connections switch the file to WAL mode, and
      before its mode is tightened (file_modes.py: never someone else's file).
    """
    import sqlite3

    from hpcpredict.paths import DB_FILE_NAME, state_dir
    from hpcpredict.daemon.core.store import Base

    try:
        with database.open("rb") as stream:
            header = stream.read(16)
    except (FileNotFoundError, NotADirectoryError):  # no such file (a missing folder is said later)
        if create or database.resolve() == (state_dir() / DB_FILE_NAME).resolve():
            return  # a new store: created by the migrations
        raise click.ClickException(
            f"{database}: no such database. `hpcpredict train HISTORY.swf --db sqlite:///{database}` "
            "creates it with a model warmed on your history (`hpcpredict slurm-convert --sacct` "
            "writes one); `hpcpredict serve --create-db` starts it from an untrained model; or "
            "check --db"
        ) from None
    except OSError as error:
        raise click.ClickException(f"{database}: cannot read the database ({error.strerror})") from None
    if not header:
        raise click.ClickException(
            f"{database}: the database file is empty (zero bytes): not an hpcpredict store; "
            "remove it to start a new one, or give the right --db"
        )
    if header != b"SQLite format 3\x00":
        raise click.ClickException(f"{database}: not an SQLite database, so not an hpcpredict store; check --db")
    try:
        # immutable: no lock, no -wal or -shm made beside the file (of its mode, and under the
        # name given: a hard link's), only its pages read; tables still in a -wal are not seen,
        # which can only make a store look empty, never someone else's.
        connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise click.ClickException(
            f"{database}: cannot read the database ({error}): damaged? restore it from a backup, "
            "or move it aside to start a new store"
        ) from None
    ours = set(Base.metadata.tables)
    if tables and not tables & ours:
        shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
        raise click.ClickException(
            f"{database}: an SQLite database of something else (tables {shown}; none of "
            "hpcpredict's): refusing to add hpcpredict's tables to it; check --db"
        )


def _check_integrity(store, database: Path) -> None:  # store: Store on the SQLite file `database`
    """SQLite's quick_check at start: a damaged file is refused here, in one line, rather than
    failing every event later (PostgreSQL checks its own pages)."""
    from sqlalchemy.exc import DBAPIError

    try:
        problems = store.integrity_problems()
    except DBAPIError as error:
        problems = [str(error.orig)]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise click.ClickException(
            f"{database}: the database is damaged (SQLite quick_check: {problems[0]}{more}); the daemon "
            "will not serve from it: restore it from a backup, or move it aside to start a new store"
        )


def _locked_store(config: DaemonConfig, *, create: bool = False):  # -> (Store, StoreLock)
    """The store, locked before anything reads it: a second ``serve`` stops here, before
    replaying or checkpointing a log another daemon is writing; then checked for damage."""
    from sqlalchemy.exc import SQLAlchemyError

    from hpcpredict.daemon.core.lock import StoreLockedError, lock_sqlite_file, lock_store
    from hpcpredict.daemon.core.store import Store

    database = None
    lock = None
    try:
        if config.db.startswith("sqlite:///"):
            database = Path(config.db.removeprefix("sqlite:///"))
            if database.is_file():  # locked before SQLite opens it, even read-only (lock.py)
                lock = lock_sqlite_file(database)
            _check_sqlite_file(database, create=create)
            _tighten_modes(database)  # hpcpredict's: before SQLite makes a -wal of its mode
            _make_database_folder(database)
    except StoreLockedError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        raise click.ClickException(f"{config.db}: cannot lock the store: {error}") from None
    except click.ClickException:
        if lock is not None:
            lock.release()
        raise
    store = Store(config.db)
    try:
        if lock is None:
            lock = lock_store(store.engine)
    except StoreLockedError as error:
        store.close()
        raise click.ClickException(str(error)) from None
    except SQLAlchemyError as error:  # the database cannot be opened at all (train into /proc, ...)
        store.close()
        raise click.ClickException(_database_error(config.db, error)) from None
    except OSError as error:
        store.close()
        raise click.ClickException(f"{config.db}: cannot lock the store: {error}") from None
    try:
        if database is not None:
            _check_integrity(store, database)
    except click.ClickException:
        store.close()
        lock.release()
        raise
    return store, lock


@click.command()
@log_argument
@_config_option
@_db_option
@procs_option()
@lenient_option
@click.option("--replace", is_flag=True, help="Replace the model a `train` stored earlier, with its "
              "checkpoints and history judgements (refused once the daemon has learned a live job). "
              "Without it, a store that already has a model is left alone.")
@click.option("--time-zone", default=None, help="The site's IANA time zone (as for serve).")
@_private_files
def train(
    log: Path,
    config_path: Path | None,
    db_url: str | None,
    procs: int | None,
    lenient: bool,
    replace: bool,
    time_zone: str | None,
) -> None:
    """Warm the daemon's model and user histories on an SWF history before going live.

    The log is replayed as it happened (each job starts at submission + its SWF wait) through
    the same learner the daemon runs, and the result is stored as the daemon's starting
    checkpoint. Times are shifted by the log's UnixStartTime, so user ids must be the site's
    Unix uids (what `hpcpredict slurm-convert` writes) for the histories to meet the live jobs.

    \b
    Examples:
      hpcpredict train swf/KTH-SP2-sample.swf --db sqlite:////tmp/hpcpredict-try.db   # a throw-away store
      hpcpredict train swf/KTH-SP2-sample.swf --db sqlite:////tmp/hpcpredict-try.db --replace  # re-train it
      hpcpredict train swf/KTH-SP2-sample.swf --config deploy/daemon.toml   # the site's store, before serve
    """
    from hpcpredict.daemon.core.history_judgements import JudgingPredictor
    from hpcpredict.daemon.core.staleness import history_age
    from hpcpredict.learn.history import replay_history

    config = _config(config_path, db=db_url, time_zone=time_zone)
    workload = load_log(log, procs, lenient)
    offset_s = workload.header.unix_start_time or 0
    if not offset_s:
        click.echo(f"{log}: no UnixStartTime in the header: times are taken as Unix seconds", err=True)
    # The daemon's lock, as serve takes it: a train beside a serving daemon would checkpoint a
    # model under it that its next restart then mixes with the events it logged meanwhile.
    store, lock = _locked_store(config, create=True)
    try:
        service = _open_service(config, store)
        predictor = config.predictor_factory()
        started = time.perf_counter()
        with progress_bar(len(workload.jobs), "job", f"training on {log.name}") as update:
            done = 0

            def progress(count: int) -> None:
                nonlocal done
                done += count
                update(done)

            judge = JudgingPredictor(predictor)  # keeps each job's prediction before it is learned
            replay = replay_history(workload.jobs, judge, offset_s=offset_s, progress=progress)
        try:
            service.bootstrap(predictor, replace=replace)
        except ValueError as error:
            raise click.ClickException(f"{config.db}: {error}") from None
        judge.save(service.store)
    finally:
        store.close()  # first: releasing the lock closes a descriptor of the file (lock.py)
        lock.release()
    click.echo(
        f"trained on {replay.jobs:,} jobs of {len(predictor.features.users):,} users in "
        f"{time.perf_counter() - started:.1f} s: {predictor.nag.state.t:,} learning steps"
    )
    if replay.unknown_wait:
        click.echo(f"{replay.unknown_wait:,} jobs had no wait time and were started at submission", err=True)
    click.echo(f"model stored in {config.db}")
    warning = history_age(predictor.features, time.time(),
                          extrapolates=predictor.feature_scaling == "raw").warning()
    if warning:
        click.echo(f"warning: {warning}", err=True)


def _read_store(config_path: Path | None, db_url: str | None):  # -> Store, read-only use
    """The daemon's store for a read-only view: `--db`, else the database of the configuration
    `find_config` chooses (--config, $HPCPREDICT_CONFIG, /etc/hpcpredict/daemon.toml, defaults)."""
    from hpcpredict.daemon.core.config import find_config
    from hpcpredict.daemon.views.pages import ViewError, open_existing_store

    try:
        found = find_config(config_path)
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    config = _config(found.path, db=db_url)
    try:
        return open_existing_store(config.db, missing_hint=_missing_store_hint(found, db_url))
    except ViewError as error:
        raise click.ClickException(str(error)) from None


def _missing_store_hint(found, db_url: str | None) -> str:  # found: FoundConfig
    """What to do about a database file that does not exist, given where its name came from. Never
    "start hpcpredict serve" alone: on a controller the daemon usually runs, with a configuration
    this view did not read."""
    from hpcpredict.daemon.core import config as daemon_config

    system_config, variable = daemon_config.SYSTEM_CONFIG, daemon_config.CONFIG_VARIABLE
    if db_url is not None:
        return "check --db"
    if found.path is not None:
        return (f"the database named by {found.origin} {found.path}: `hpcpredict train HISTORY.swf "
                f"--config {found.path}` creates it, or check `db` there")
    if found.unreadable_system_config:
        return (f"{system_config} exists but this user cannot read it: run as root or as the "
                "daemon's user, or give --config / --db")
    return (f"no daemon has used this user's default state directory and there is no "
            f"{system_config}: give the daemon's configuration with --config or ${variable}, or --db")


def _since_s(since: str | None) -> int | None:
    from hpcpredict.daemon.views.pages import ViewError, parse_since

    try:
        return None if since is None else parse_since(since)
    except ViewError as error:
        raise click.ClickException(str(error)) from None


_since_option = click.option(
    "--since", default=None,
    help="Only jobs that ended at or after this: a date (2026-11-01) or datetime "
    "(2026-11-01T08:00) in local time, or Unix seconds.",
)


_source_option = click.option(
    "--source", type=click.Choice(["both", "history", "live"]), default="both", show_default=True,
    help="Which judged jobs: 'history' (predicted by `hpcpredict train` while replaying the log, "
    "before learning each job), 'live' (predicted by the running daemon), or both.")


def _source_label(judged, source: str) -> str:  # judged: pd.DataFrame with a "source" column
    """Says which judgements a view holds, so history replay is never mistaken for live errors."""
    counts = judged["source"].value_counts() if len(judged) else {}
    return _source_label_counts(counts.get("history", 0), counts.get("live", 0), source)


def _source_label_counts(history: int, live: int, source: str) -> str:
    parts = [f"{count:,} {name}" for name, count in (("history", history), ("live", live))
             if source in (name, "both")]
    return f"jobs judged: {' + '.join(parts)} (--source {source})"


@click.command()
@_view_config_option
@_db_option
@click.option("--user", "users", type=int, multiple=True, help="Only this user id (repeatable); the "
              "table is followed by why the model predicts what it does for the user's jobs.")
@click.option("--job", "job_id", type=int, default=None, help="Why this live job got its prediction: "
              "the model's largest terms at its submission, and the user's runtimes before it.")
@_since_option
@_source_option
@format_option("csv")
def errors(config_path: Path | None, db_url: str | None, users: tuple[int, ...], job_id: int | None,
           since: str | None, source: str, output_format: str) -> None:
    """Per-user prediction errors, from the daemon's database (running or not).

    First what lowering limits does for the site: the share of jobs lowered, of those that
    finished within their lowered limit, corrections per job, how much earlier the scheduler
    can plan their ends, and the go/no-go gate for mode=lower (docs/admin-guide.md). Then, for
    each user: jobs judged, mean and median absolute error of the prediction given at
    submission, share under-predicted, mean predicted/actual ratio, corrections, and what the
    user's own requests and AVE2 would have scored (MAE). The last row is over all users.
    JSON and CSV hold the table only. Never creates or changes the database.

    \b
    Examples:
      hpcpredict errors                                    # the daemon's store (see --db)
      hpcpredict errors --user 1001 --since 2026-11-01 --format csv
      hpcpredict errors --job 123456                       # why it got its limit
      hpcpredict errors --db sqlite:////tmp/hpcpredict-try.db
      hpcpredict errors --config deploy/daemon.toml --source live --format json
    """
    import json

    import pandas as pd

    from hpcpredict.daemon.core.judged_errors import judged_jobs
    from hpcpredict.daemon.views.pages import error_table, format_table, to_csv

    config = _config(config_path, db=db_url)
    store = _read_store(config_path, db_url)
    try:
        if job_id is not None:
            _explain_job(store, config, job_id, output_format)
            return
        since_s = _since_s(since)
        unique_users = dict.fromkeys(users)  # `--user 5 --user 5` counts user 5's jobs once
        frames = [judged_jobs(store, user_id=user, since_s=since_s, source=source)
                  for user in unique_users] or [judged_jobs(store, since_s=since_s, source=source)]
        judged = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        table = error_table(judged)
        if output_format == "json":
            click.echo(json.dumps(json.loads(table.to_json(orient="records", double_precision=15)), indent=2))
        elif output_format == "csv":
            click.echo(to_csv(table), nl=False)
        elif table.empty:
            click.echo(_nothing_judged(users, since, source))
        else:
            from hpcpredict.daemon.views.site_summary import format_summary, killed_at_lowered_limit_count, site_summary

            killed = killed_at_lowered_limit_count(store, since_s, list(unique_users))
            click.echo(format_summary(site_summary(judged, killed), _shown_url(config.db)))
            click.echo()
            click.echo(format_table(table))
        if output_format == "table":  # after the table: which judgements it holds, then why
            click.echo(_source_label(judged, source))
            if unique_users:
                _explain_users(store, config, list(unique_users))
    finally:
        store.close()


def _shown_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _explain_job(store, config: DaemonConfig, job_id: int, output_format: str) -> None:
    import json

    from hpcpredict.daemon.views.explain import ExplainError, explain_job, format_why

    try:
        why = explain_job(store, job_id, config.predictor_factory)
    except ExplainError as error:
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(why.to_dict(), indent=2) if output_format == "json" else format_why(why))


def _explain_users(store, config: DaemonConfig, user_ids: list[int]) -> None:
    from hpcpredict.daemon.views.explain import ExplainError, explain_users, format_why

    for why in explain_users(store, user_ids, config.predictor_factory).values():
        click.echo()
        click.echo(str(why) if isinstance(why, ExplainError) else format_why(why))


def _nothing_judged(users: tuple[int, ...], since: str | None, source: str) -> str:
    """Why the table is empty: a filter that matched nothing is not a store with nothing in it."""
    filters = ([f"user {', '.join(str(user) for user in dict.fromkeys(users))}"] if users else []) + \
        ([f"ended since {since}"] if since else [])
    among = "" if source == "both" else f" (--source {source})"
    if filters:
        return (f"no judged job matches {', '.join(filters)}{among}; `hpcpredict errors` without the "
                f"filter lists the users and jobs there are")
    return f"no judged job yet{among} (jobs count once they have ended after a prediction)"


@click.command()
@_view_config_option
@_db_option
@_since_option
@_source_option
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for index.html and its PNG plots (created if needed).")
def report(config_path: Path | None, db_url: str | None, since: str | None, source: str,
           out_dir: Path) -> None:
    """The sysadmin's page (index.html and its PNG figures in --out): whether lowering limits helps
    and is safe (the verdict, the headline numbers, the gate), the users who need a look, every
    user sortable, why the model predicted what it did for a few jobs (terms named in words, and
    a glossary of the 20 features). Reads the database only; the daemon serves the same page live
    at GET /report.

    \b
    Examples:
      hpcpredict report --out /tmp/hpcpredict-report
      hpcpredict report --config deploy/daemon.toml --since 2026-11-01 --source live --out /var/www/hpcpredict
    """
    from hpcpredict.daemon.views.report_page import collect_page, write_report
    from hpcpredict.outputs import OutputPathError, check_output_dir

    config = _config(config_path, db=db_url)
    store = _read_store(config_path, db_url)  # first: a refused store leaves no folder behind
    try:
        check_output_dir(out_dir, what="--out")  # before the reading, which can be long
    except OutputPathError as error:
        store.close()
        raise click.ClickException(str(error)) from None
    try:
        page = collect_page(store, config.predictor_factory, since_s=_since_s(since), source=source,
                            db_url=_shown_url(config.db))
    finally:
        store.close()
    written = write_report(page, out_dir)
    click.echo(f"{page.judged_jobs:,} jobs reported: {written.index}; "
               f"{_source_label_counts(page.history_jobs, page.live_jobs, source)}")


@click.command("slurm-convert")
@click.option("--sacct", "use_sacct", is_flag=True,
              help="SLURM accounting (sacct, through slurmdbd): jobs that ended between --starttime and "
              "--endtime; the original request is taken from hpcpredict's AdminComment mark where the plugin "
              "lowered the limit.")
@click.option("--starttime", default="1970-01-01", show_default=True,
              help="With --sacct: from this time (sacct's syntax: 2026-01-01, 2026-01-01T08:00, now-30days). "
              "The default is the whole history; sacct's own default would be today only.")
@click.option("--endtime", default="now", show_default=True, help="With --sacct: up to this time.")
@click.option("--jobcomp", "jobcomp_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Records of JobCompType=jobcomp/filetxt (JobCompLoc).")
@click.option("--db", "db_url", default=None, help="The hpcpredict daemon's database: every job "
              "it recorded, with the users' original requests (use this where the plugin lowers limits).")
@procs_option("The machine's processors (the SWF MaxProcs). Default: the largest job's.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="SWF file to write (.gz compresses).")
def slurm_convert(use_sacct: bool, starttime: str, endtime: str, jobcomp_file: Path | None,
                  db_url: str | None, procs: int | None, output: Path) -> None:
    """Export SLURM history to SWF, to run `hpcpredict simulate` or `hpcpredict train` on it.

    One source: --sacct (accounting), --jobcomp FILE, or --db URL. User ids are Unix uids, so a
    model trained on the output meets the live users.

    \b
    Examples:
      hpcpredict slurm-convert --sacct --starttime 2026-01-01 -o /tmp/history.swf
      hpcpredict slurm-convert --db sqlite:////var/lib/hpcpredict/hpcpredict.db --procs 128 -o /tmp/history.swf.gz
    """
    from hpcpredict.daemon.views.pages import ViewError, read_store
    from hpcpredict.slurm.convert import (
        ConvertError,
        read_jobcomp_filetxt,
        read_sacct,
        to_swf,
    )
    from hpcpredict.logs.swf import write_swf

    if use_sacct + (jobcomp_file is not None) + (db_url is not None) != 1:
        raise click.UsageError("give exactly one source: --sacct, --jobcomp FILE or --db URL")
    check_file(output, "-o/--output")
    try:
        if jobcomp_file is not None:
            source, jobs = jobcomp_file.name, list(read_jobcomp_filetxt(jobcomp_file))
        elif db_url is not None:
            source, jobs = "hpcpredict database", list(read_store(db_url))
        else:
            source, jobs = "sacct", list(read_sacct(starttime, endtime))
        header, records = to_swf(jobs, max_procs=procs, source=f"SLURM ({source})")
    except (ConvertError, ViewError) as error:
        raise click.ClickException(str(error)) from None
    written = write_swf(output, header, records)
    click.echo(f"wrote {written:,} jobs to {output}")
