"""A daemon serving in a thread of the test process (shared by the daemon and plugin tests), and
the wait for one started as a process (`hpcpredict serve`)."""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hpcpredict.daemon.fronts.client import DaemonClient
from hpcpredict.daemon.core.config import DaemonConfig
from hpcpredict.daemon.fronts.server import Daemon
from hpcpredict.daemon.core.service import PredictionService
from hpcpredict.daemon.core.store import Store


class Running:
    """A daemon serving in a thread of this process."""

    def __init__(self, config: DaemonConfig, *, wait_for_spool: bool = True, **daemon_options: object) -> None:
        """`daemon_options`: passed to `Daemon` (``http_limits``, ``max_backlog``). Without
        ``http_limits``, the admin API answers within 300 s instead of its 30: the first read
        starts the read workers, which on a machine busy with the rest of the suite can take
        longer than 30 s (a test of the timeout itself gives its own limits)."""
        if "http_limits" not in daemon_options:
            from hpcpredict.daemon.fronts.http_api import HttpLimits

            daemon_options["http_limits"] = HttpLimits(request_timeout_s=300.0)
        self.config = config
        self.store = Store(config.db)
        self.service = PredictionService.open(
            self.store, config.predictor_factory, checkpoint_every=20,
            min_trained_jobs=config.min_trained_jobs,
        )
        self.daemon = Daemon(config, self.service, **daemon_options)  # type: ignore[arg-type]
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        # A deadline, not a speed check: the warm-up loads the numba kernels, seconds on a quiet
        # machine, and far more while the rest of the suite compiles or replays beside it.
        if not self.daemon.ready.wait(120):
            self.stop()
            raise RuntimeError(f"daemon did not start: {self.error!r}")
        # The spool found at start is ingested in the background: tests start from
        # a daemon that has done it, as the old synchronous start had.
        if wait_for_spool and not self.daemon.spool_ingested.wait(60):
            self.stop()
            raise RuntimeError(f"daemon did not ingest its spool: {self.error!r}")

    def _run(self) -> None:
        try:
            self.daemon.run(install_signal_handlers=False)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    @property
    def url(self) -> str:
        host, port = self.daemon.http_address
        return f"http://{host}:{port}"

    @property
    def token(self) -> str | None:
        """The admin API's bearer token, when the config names a token file."""
        if not self.config.http_token_file:
            return None
        return Path(self.config.http_token_file).read_text().strip()

    def client(self) -> DaemonClient:
        return DaemonClient(self.config.socket)

    def stop(self) -> None:
        self.daemon.stop()
        self.thread.join(15)
        self.store.close()


def metric_sample(text: str, name: str, **labels: str) -> float:
    """The value of sample `name` with exactly `labels` in Prometheus exposition `text` (parsed,
    so that label order and number formatting are the renderer's business)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise KeyError(f"no sample {name}{labels} in the metrics")


def write_token_file(directory: Path) -> str:
    """A fresh admin API token in `directory`/http-token, private (0600) as the daemon requires."""
    path = directory / "http-token"
    path.write_text(secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    return str(path)


def wait_until_answering(
    socket_path: str, process: subprocess.Popen, describe: Callable[[], str], timeout_s: float = 240
) -> None:
    """Return once the daemon `process` answers PING on `socket_path`; raise, with `describe()`
    (its log, say), if it exits or stays silent for `timeout_s` (a first start compiles the numba
    kernels: 20-30 s on a busy 2-core machine, or in a fresh chroot whose numba cache is empty)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with DaemonClient(socket_path, timeout_s=2) as client:
                client.request("PING")
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"hpcpredict serve did not start (exit {process.poll()}):\n{describe()}") from None
            time.sleep(0.05)
