"""A real SLURM (Debian's slurmctld + slurmd + munge) on loopback, for the end-to-end tests.

Everything lives in one temporary directory (config, state, spool, logs) and every command gets
``SLURM_CONF`` pointing there (the facts it follows were measured on Slurm 22.05 here). The node
advertises more CPUs than the machine has (``SlurmdParameters=config_overrides``) so that several
jobs run at once. The packages are installed, when missing, in the one set-up step at the start of
a run (testbed/system_packages.py), never from here; without them (or without ``runuser``) the tests
are skipped — or fail, when ``HPCPREDICT_REQUIRE_SERVERS=1`` (CI).
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "lua5.1", "lua-socket")
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")  # only for SlurmCluster(accounting=True)
NODE = "node1"
NODE_CPUS = 16


class ClusterUnavailable(RuntimeError):
    """SLURM cannot be installed or started here (the message says why)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _free_port_range(count: int) -> int:
    """First of `count` consecutive free ports (slurm.conf's ``Port=[a-b]`` for several slurmd)."""
    if count == 1:
        return _free_port()
    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        probes = []
        try:
            for port in range(base, base + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise ClusterUnavailable(f"no {count} consecutive free ports on loopback")


def ensure_packages(*, accounting: bool = False) -> None:
    """The SLURM, munge and (with `accounting`) MariaDB programs are there, and ``runuser`` (munge
    is started with it); else `ClusterUnavailable`, which skips the tests (or fails them in CI)."""
    tools = ["slurmctld", "slurmd", "munged", "sbatch", "runuser"]
    packages = list(PACKAGES)
    if accounting:
        tools += ["slurmdbd", "mariadbd", "mariadb-install-db"]
        packages += ACCOUNTING_PACKAGES
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        raise ClusterUnavailable(
            f"{' '.join(absent)} not found on PATH: install Debian's {' '.join(packages)} (and util-linux "
            "for runuser); `python3 -m testbed.system_packages` as root does, as the test run's set-up step does")


def slurm_release() -> tuple[int, int]:
    """The installed Slurm's (major, minor), from ``slurmd -V`` (which needs no slurm.conf)."""
    done = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, check=False)
    match = re.search(r"(\d+)\.(\d+)\.\d+", done.stdout + done.stderr)
    if match is None:
        raise ClusterUnavailable(f"cannot read the Slurm version from slurmd -V: {done.stdout + done.stderr!r}")
    return int(match.group(1)), int(match.group(2))


def wait_for(condition: Callable[[], object], timeout_s: float, what: str,
             cluster: SlurmCluster | None = None, poll_s: float = 0.5):
    """`condition()`'s first true value, polled every `poll_s` until `timeout_s`; else an
    AssertionError naming `what` (with the tail of `cluster`'s slurmctld.log when given)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll_s)
    log = f"\nslurmctld.log:\n{cluster.log_tail()}" if cluster is not None else ""
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}{log}")


def ensure_munge() -> None:
    """munged running, started once however many test processes start clusters at the same time
    (the suite runs in several pytest-xdist workers: the second munged would fail on the first's
    socket). Asked of munged itself (a credential made through its socket), not of the process
    list: the newer releases' chroots run their own munged, in PID namespaces the host's process
    list shows, and a host test taking one of those for its own started no munged and its slurmd
    failed to register."""
    with (Path(tempfile.gettempdir()) / "hpcpredict-munge.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if munge_answers():
            return
        for directory in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            os.makedirs(directory, exist_ok=True)
            shutil.chown(directory, "munge", "munge")
        if not os.path.exists("/etc/munge/munge.key"):
            subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/mungekey", "--create"], check=True)
        subprocess.run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], check=True)


def munge_answers() -> bool:
    """A munged serving this system's socket (/run/munge/munge.socket.2) answers."""
    return subprocess.run(["munge", "--no-input"], capture_output=True).returncode == 0


class SlurmCluster:
    """A cluster on loopback; `start()` returns once every node is idle, `stop()` reaps everything.

    One node of NODE_CPUS CPUs by default. ``nodes=N, node_cpus=1`` gives N one-CPU nodes, one
    slurmd each (node1..nodeN on consecutive ports): SLURM's backfill reserves whole nodes, so
    one-CPU nodes make its plan processor-granular, like the simulator's (the replay tests).
    """

    def __init__(self, *, job_submit_lua: Path | None = None, jobcomp_lua: Path | None = None,
                 extra_files: dict[str, str] | None = None, extra_config: list[str] | None = None,
                 accounting: bool = False, nodes: int = 1, node_cpus: int = NODE_CPUS,
                 min_job_age_s: int = 300, conf_dir: Path | None = None,
                 enter: Callable[[list[str]], list[str]] | None = None, conf_path_inside: str | None = None,
                 slurm_user: str = "root", over_time_limit_min: int | None = 0) -> None:
        """`conf_dir`: where slurm.conf and the scripts beside it are written (default: the
        cluster's folder). `enter`: wraps every command and daemon (e.g. into a mount namespace,
        testbed/site_install.py), where slurm.conf is at `conf_path_inside`. `slurm_user`:
        slurm.conf's SlurmUser, which slurmctld and slurmdbd run as (root by default; a real
        site's `slurm` where the test must see what that user may not do)."""
        self.dir = Path(tempfile.mkdtemp(prefix="hpslurm"))
        # jobs run as other users (replay-slurm's log users) read their batch script in the spool
        self.dir.chmod(0o755)
        self.conf_dir = conf_dir or self.dir
        self.conf = self.conf_dir / "slurm.conf"
        self.enter = enter or (lambda command: command)
        self.env = {**os.environ, "SLURM_CONF": conf_path_inside or str(self.conf)}
        self.slurm_user = slurm_user
        self.over_time_limit_min = over_time_limit_min  # None: no OverTimeLimit line (a site adds its own)
        self.controller: subprocess.Popen | None = None
        self.job_submit_lua = job_submit_lua
        self.jobcomp_lua = jobcomp_lua
        self.extra_files = extra_files or {}
        self.extra_config = extra_config or []
        # accounting: slurmdbd on a MariaDB of our own (data dir, socket and port in self.dir),
        # so that sacct works (measured on Slurm 22.05).
        self.accounting = accounting
        self.dbd_port = _free_port()
        self.processes: list[subprocess.Popen] = []
        self.node_count = nodes
        self.node_cpus = node_cpus
        self.min_job_age_s = min_job_age_s
        self.node_names = [NODE] if nodes == 1 else [f"node{k}" for k in range(1, nodes + 1)]

    # ------------------------------------------------------------------ life cycle
    def start(self) -> SlurmCluster:
        ensure_packages(accounting=self.accounting)
        ensure_munge()
        for sub in ("state", *(f"spool/{name}" for name in self.node_names)):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        if self.job_submit_lua is not None:
            shutil.copy(self.job_submit_lua, self.conf_dir / "job_submit.lua")
        if self.jobcomp_lua is not None:
            shutil.copy(self.jobcomp_lua, self.conf_dir / "jobcomp.lua")
        for script in (self.job_submit_lua, self.jobcomp_lua):  # both load it from their folder
            if script is not None:
                shutil.copy(script.parent / "hpcpredict_common.lua", self.conf_dir / "hpcpredict_common.lua")
        for name, text in self.extra_files.items():
            (self.conf_dir / name).write_text(text)
        if slurm_release() >= (23, 2) and "cgroup.conf" not in self.extra_files:
            # 24.11's slurmd will not start without a cgroup filesystem unless told not to use one;
            # 22.05 refuses the word ("cannot find cgroup plugin for disabled"): measured on both
            (self.conf_dir / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        self.conf.write_text(self._config())
        if self.slurm_user != "root":  # slurmctld and slurmdbd write their state and logs as it
            self.dir.chmod(0o755)
            for path in [self.dir, *self.dir.rglob("*")]:
                shutil.chown(path, self.slurm_user, self.slurm_user)
        if self.accounting:
            self._start_accounting()
        self.controller = self._spawn(["slurmctld", "-D", "-c", "-i"], "slurmctld.out")
        self.processes.append(self.controller)
        for name in self.node_names:
            self.processes.append(self._spawn(["slurmd", "-D", "-N", name], f"slurmd-{name}.out"))
        self._wait_until_idle()
        return self

    def restart_controller(self) -> None:
        """What `systemctl restart slurmctld` does: stop slurmctld, start it again on its saved
        state (jobs kept, slurm.conf and the plugins read anew), and wait until it answers."""
        assert self.controller is not None
        self.controller.terminate()
        self.controller.wait(30)
        index = self.processes.index(self.controller)
        self.controller = self._spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
        self.processes[index] = self.controller
        self._wait_until_idle()

    def _wait_until_idle(self) -> None:
        deadline = time.monotonic() + 60 + self.node_count
        while True:
            states = self.run(["sinfo", "-h", "-N", "-o", "%t"], check=False).stdout.split()
            state = ",".join(sorted(set(states)))
            if len(states) == self.node_count and set(states) <= {"idle", "mix", "alloc"}:
                return
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                self.stop()
                raise ClusterUnavailable(f"SLURM did not start (node state {state!r}); logs in {self.dir}:\n"
                                         + self.log_tail())
            time.sleep(0.2)

    def start_or_skip(self) -> SlurmCluster:
        """`start`, for a fixture: skip the tests when SLURM cannot be had here, or fail them with
        ``HPCPREDICT_REQUIRE_SERVERS=1`` (CI), so that a broken set-up never passes as skipped."""
        import pytest  # only the fixtures' path needs it

        try:
            return self.start()
        except ClusterUnavailable as error:
            self.cleanup()
            if os.environ.get("HPCPREDICT_REQUIRE_SERVERS") == "1":
                pytest.fail(f"a real SLURM is required here: {error}")
            pytest.skip(str(error))

    def stop(self) -> None:
        self._cancel_jobs()
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.processes.clear()

    def _start_accounting(self) -> None:
        """MariaDB (its own data dir, socket, loopback port), then slurmdbd, before slurmctld."""
        d = self.dir
        (d / "mysql").mkdir()
        done = subprocess.run(
            ["mariadb-install-db", f"--datadir={d}/mysql", "--user=root", "--skip-test-db",
             "--auth-root-authentication-method=normal"],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0:
            raise ClusterUnavailable(f"mariadb-install-db failed: {done.stderr[-500:]}")
        db_port = _free_port()
        socket_path = d / "mysql.sock"
        self.processes.append(self._spawn(
            ["mariadbd", "--no-defaults", f"--datadir={d}/mysql", "--user=root", "--bind-address=127.0.0.1",
             f"--port={db_port}", f"--socket={socket_path}", f"--pid-file={d}/mysql.pid", "--skip-name-resolve"],
            "mariadb.out",
        ))
        sql = ("CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';"
               " GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
        self._wait_for(lambda: subprocess.run(
            ["mariadb", "--no-defaults", "-S", str(socket_path), "-u", "root", "-e", sql],
            capture_output=True, check=False).returncode == 0, "MariaDB", d / "mariadb.out")
        dbd_conf = self.conf_dir / "slurmdbd.conf"  # read beside slurm.conf; slurmdbd wants it private
        dbd_conf.write_text("\n".join([
            "AuthType=auth/munge", "DbdAddr=127.0.0.1", f"DbdHost={socket.gethostname().split('.')[0]}",
            f"DbdPort={self.dbd_port}", f"SlurmUser={self.slurm_user}", f"PidFile={d}/slurmdbd.pid",
            f"LogFile={d}/slurmdbd.log",
            "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1", f"StoragePort={db_port}",
            "StorageUser=slurm", "StoragePass=slurm", "StorageLoc=slurm_acct_db", "",
        ]))
        dbd_conf.chmod(0o600)
        shutil.chown(dbd_conf, self.slurm_user, self.slurm_user)  # slurmdbd refuses one it does not own
        self.processes.append(self._spawn(["slurmdbd", "-D"], "slurmdbd.out"))
        self._wait_for(lambda: self.run(["sacctmgr", "-n", "list", "cluster"], check=False, timeout=10).returncode == 0,
                       "slurmdbd", d / "slurmdbd.log")

    def _wait_for(self, ready: Callable[[], bool], what: str, log: Path, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if any(p.poll() is not None for p in self.processes) or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                self.stop()
                raise ClusterUnavailable(f"{what} did not start; logs in {self.dir}:\n{tail}")
            time.sleep(0.2)

    def _cancel_jobs(self, timeout_s: float = 20) -> None:
        """Cancel what still runs and let slurmd reap it: a job step whose slurmd is gone keeps
        its slurmstepd alive for ever, retrying to report its end."""
        if not self.processes or any(p.poll() is not None for p in self.processes):
            return
        jobs = self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
        if not jobs:
            return
        self.run(["scancel", *jobs], check=False)
        deadline = time.monotonic() + timeout_s
        while self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip():
            if time.monotonic() > deadline:
                return
            time.sleep(0.2)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ using it
    def run(self, command: list[str], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        done = subprocess.run(self.enter(command), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def sbatch(self, *args: str, script: str = "sleep 1") -> int:
        done = self.run(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", script])
        return int(done.stdout.strip().split(";")[0])

    def job_fields(self, job_id: int) -> dict[str, str]:
        """``scontrol show job -o`` as a dict (values as SLURM prints them)."""
        line = self.run(["scontrol", "show", "job", "-o", str(job_id)]).stdout.strip()
        fields: dict[str, str] = {}
        for word in line.split(" "):
            key, sep, value = word.partition("=")
            if sep:
                fields[key] = value
        return fields

    def log_tail(self, lines: int = 30) -> str:
        path = self.dir / "slurmctld.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _spawn(self, command: list[str], output: str) -> subprocess.Popen:
        return subprocess.Popen(self.enter(command), env=self.env, stdout=(self.dir / output).open("wb"),
                                stderr=subprocess.STDOUT)

    def _node_list(self) -> str:
        return NODE if self.node_count == 1 else f"node[1-{self.node_count}]"

    def _node_line(self, host: str) -> str:
        base = _free_port_range(self.node_count)
        ports = str(base) if self.node_count == 1 else f"[{base}-{base + self.node_count - 1}]"
        return (f"NodeName={self._node_list()} NodeAddr=127.0.0.1 NodeHostname={host} "
                f"CPUs={self.node_cpus} Port={ports} State=UNKNOWN")

    def _config(self) -> str:
        d = self.dir
        plugins = []
        if self.job_submit_lua is not None:
            plugins.append("JobSubmitPlugins=lua")
        if self.jobcomp_lua is not None:
            plugins.append("JobCompType=jobcomp/lua")
        host = socket.gethostname().split(".")[0]
        return "\n".join([
            "ClusterName=hpctest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmUser={self.slurm_user}",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd-%n.log",
            "SlurmctldDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            *(["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
               f"AccountingStoragePort={self.dbd_port}"] if self.accounting
              else ["AccountingStorageType=accounting_storage/none"]),
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SlurmdParameters=config_overrides",
            "MailProg=/bin/true",
            "ReturnToService=2",
            f"MinJobAge={self.min_job_age_s}",
            "KillWait=5",
            *([f"OverTimeLimit={self.over_time_limit_min}"] if self.over_time_limit_min is not None else []),
            *plugins,
            *(line.format(dir=d) for line in self.extra_config),
            self._node_line(host),
            f"PartitionName=debug Nodes={self._node_list()} Default=YES MaxTime=INFINITE State=UP",
            "",
        ])
