"""deploy/hpcpredict.service's directives applied without systemd as PID 1.

The test machines have no systemd to start the unit, so `EmulatedUnit` reads the unit file itself
and does what each directive does, by other means, inside a `SiteNamespace` (testbed/site_install.py):

| directive | emulated by |
|---|---|
| ``User=``, ``Group=`` | ``setpriv --reuid --regid --init-groups`` |
| ``Environment=`` | the clean environment systemd gives (PATH, HOME from passwd, USER, LOGNAME, SHELL, the ``*_DIRECTORY`` variables) plus these |
| ``UMask=`` | ``umask`` before the exec |
| ``LimitNOFILE=`` | ``prlimit --nofile`` (soft and hard; capped at the machine's hard limit where even root may not raise it, as in a sandboxed CI host) |
| ``RuntimeDirectory=``, ``StateDirectory=``, ``CacheDirectory=`` and their ``...Mode=`` | made (a tmpfs for /run's, as /run is one) and chowned to User:Group with the mode, as systemd does at each start; the runtime one emptied at stop |
| ``ProtectSystem=strict``, ``ReadWritePaths=`` | a mount namespace of the daemon's own where every mount is remounted read-only except the directories above and ReadWritePaths |
| ``PrivateTmp=yes`` | fresh tmpfs on /tmp and /var/tmp in that namespace |
| ``ProtectHome=yes`` | /home, /root and /run/user made empty and inaccessible (tmpfs, mode 000) |
| ``NoNewPrivileges=yes`` | ``setpriv --no-new-privs`` |
| ``CapabilityBoundingSet=`` (empty) | ``setpriv --bounding-set -all --inh-caps -all`` |
| ``ExecStart=``, ``KillSignal=``, ``TimeoutStopSec=`` | the command, started as above; stopped with that signal, waited that long |
| ``Type=notify``, ``NotifyAccess=main``, ``TimeoutStartSec=`` | ``$NOTIFY_SOCKET`` names an abstract datagram socket a listener holds in the namespace, and `start` returns once READY=1 arrives, as ``systemctl start`` does (failing if the command exits first or TimeoutStartSec= passes); what the daemon said is kept (`notifications`, one assignment each) |

Not emulated, and why (`NOT_EMULATED`): supervision and ordering (``Restart=``,
``RestartSec=``, ``Before=``...), and the kernel-level sandboxing (seccomp, namespaces, device and
kernel protections), which only forbid what the daemon never does; ``systemd-analyze verify``
checks their syntax (tests/test_deploy.py). A directive in neither list stops the test: a change
to the unit must be reflected here.
"""

from __future__ import annotations

import os
import pwd
import queue
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from testbed.site_install import SiteNamespace

NOT_EMULATED = {
    "Restart": "supervision: a failure fails the test instead",
    "RestartSec": "supervision",
    "PrivateDevices": "kernel sandboxing: the daemon opens no device",
    "ProtectKernelTunables": "kernel sandboxing", "ProtectKernelModules": "kernel sandboxing",
    "ProtectKernelLogs": "kernel sandboxing", "ProtectControlGroups": "kernel sandboxing",
    "ProtectClock": "kernel sandboxing", "ProtectHostname": "kernel sandboxing",
    "RestrictAddressFamilies": "seccomp: the daemon uses AF_UNIX and AF_INET only",
    "RestrictNamespaces": "seccomp", "RestrictRealtime": "seccomp", "RestrictSUIDSGID": "seccomp",
    "LockPersonality": "seccomp", "SystemCallArchitectures": "seccomp",
}
EMULATED = {
    "User", "Group", "Environment", "UMask", "LimitNOFILE", "RuntimeDirectory", "RuntimeDirectoryMode",
    "StateDirectory", "StateDirectoryMode", "CacheDirectory", "CacheDirectoryMode", "ProtectSystem",
    "ReadWritePaths", "PrivateTmp", "ProtectHome", "NoNewPrivileges", "CapabilityBoundingSet",
    "ExecStart", "KillSignal", "TimeoutStopSec", "Type", "NotifyAccess", "TimeoutStartSec",
}
# Holds the notify socket in the namespace and prints each assignment a datagram carries on a line.
NOTIFY_LISTENER = (
    "import socket, sys\n"
    "channel = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "channel.bind('\\0' + sys.argv[1])\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    print(channel.recv(65536).decode(errors='replace'), flush=True)\n"
)
DIRECTORY_ROOTS = {"RuntimeDirectory": "/run", "StateDirectory": "/var/lib", "CacheDirectory": "/var/cache"}
DIRECTORY_VARIABLES = {"RuntimeDirectory": "RUNTIME_DIRECTORY", "StateDirectory": "STATE_DIRECTORY",
                       "CacheDirectory": "CACHE_DIRECTORY"}


class UnknownDirective(AssertionError):
    """The unit has a [Service] directive this emulation neither applies nor names as skipped."""


@dataclass
class Unit:
    """A unit file's [Service] directives, in order (a key may repeat)."""

    service: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Unit:
        unit = cls()
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
            elif section == "[Service]":
                key, _, value = line.partition("=")
                unit.service.setdefault(key.strip(), []).append(value.strip())
        unknown = set(unit.service) - EMULATED - set(NOT_EMULATED)
        if unknown:
            raise UnknownDirective(f"deploy/hpcpredict.service has {sorted(unknown)}: emulate them in "
                                   "testbed/unit_emulation.py, or say there why not")
        return unit

    def one(self, key: str, default: str | None = None) -> str:
        values = self.service.get(key)
        if not values:
            if default is None:
                raise KeyError(key)
            return default
        return values[-1]

    def words(self, key: str) -> list[str]:
        return [word for value in self.service.get(key, []) for word in value.split()]


class EmulatedUnit:
    """The unit started, checked and stopped as systemctl would, in `site` (module doc)."""

    def __init__(self, site: SiteNamespace, unit_path: str) -> None:
        self.site = site
        self.unit_path = unit_path
        self.process: subprocess.Popen | None = None
        self.log_path = site.scratch.parent / f"{site.scratch.name}-{unit_path.rsplit('/', 1)[-1]}.log"
        self.unit: Unit | None = None
        self.nofile: int | None = None
        self.listener: subprocess.Popen | None = None
        self.notifications: list[str] = []  # what the daemon told systemd, one assignment each

    def read(self) -> Unit:
        """The unit file as installed in the namespace (the quick start copies deploy/'s)."""
        return Unit.parse(self.site.run(["cat", self.unit_path]).stdout)

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        unit = self.unit = self.read()
        user, group = unit.one("User"), unit.one("Group")
        account = pwd.getpwnam(user)
        directories = self._make_directories(unit, user, group)
        optional = [path[1:] for path in unit.words("ReadWritePaths") if path.startswith("-")]
        required = [path for path in unit.words("ReadWritePaths") if not path.startswith("-")]
        present = [path for path in optional if self.site.run(["test", "-e", path], check=False).returncode == 0]
        writable = [*directories.values(), *required, *present]  # "-": ignored when missing
        environment = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": account.pw_dir, "USER": user, "LOGNAME": user, "SHELL": account.pw_shell, "LANG": "C.UTF-8",
            **{DIRECTORY_VARIABLES[key]: path for key, path in directories.items()},
        }
        service_type = unit.one("Type", "simple")
        if service_type not in ("notify", "exec", "simple"):
            raise UnknownDirective(f"Type={service_type}: only notify, exec and simple are emulated")
        if service_type == "notify":
            if unit.one("NotifyAccess", "main") != "main":
                raise UnknownDirective(f"NotifyAccess={unit.one('NotifyAccess')}: only main is emulated")
            environment["NOTIFY_SOCKET"] = "@" + self._listen()
        for value in unit.service.get("Environment", []):
            for assignment in shlex.split(value):
                name, _, setting = assignment.partition("=")
                environment[name] = setting
        setpriv = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups"]
        if unit.one("NoNewPrivileges", "no") == "yes":
            setpriv.append("--no-new-privs")
        if unit.service.get("CapabilityBoundingSet") == [""]:
            setpriv += ["--bounding-set=-all", "--inh-caps=-all"]
        self.nofile = self._nofile(unit.one("LimitNOFILE", ""))
        limit = ["prlimit", f"--nofile={self.nofile}:{self.nofile}"] if self.nofile else []
        command = ["env", "-i", *(f"{k}={v}" for k, v in environment.items()), *shlex.split(unit.one("ExecStart"))]
        inner = (f"umask {unit.one('UMask', '0022')} && exec {' '.join(shlex.quote(w) for w in [*limit, *setpriv, *command])}")
        script = "set -eu\n" + self._sandbox(unit, writable) + inner
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.site.enter(["unshare", "--mount", "--propagation", "private", "sh", "-c", script]),
            stdout=log, stderr=subprocess.STDOUT, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        if service_type == "notify" and not self._wait_for("READY=1", float(unit.one("TimeoutStartSec", "90"))):
            raise AssertionError(f"the daemon exited ({self.process.poll()}) or stayed silent for "
                                 f"TimeoutStartSec= without READY=1:\n{self.log()}")

    def _listen(self) -> str:
        """A listener on a fresh abstract socket in the namespace (the daemon's network namespace:
        abstract sockets are per network namespace, not per mount namespace); its name."""
        name = f"hpcpredict-notify-{os.getpid()}-{id(self)}"
        self.notifications = []
        self.listener = subprocess.Popen(self.site.enter(["/usr/bin/python3", "-c", NOTIFY_LISTENER, name]),
                                         stdout=subprocess.PIPE, text=True)
        assert self.listener.stdout.readline().strip() == "listening"
        self._received: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            for line in self.listener.stdout:
                self._received.put(line.rstrip("\n"))

        threading.Thread(target=pump, daemon=True).start()
        return name

    def _wait_for(self, assignment: str, timeout_s: float, *, give_up_at_exit: bool = True) -> bool:
        """Collect what the daemon says until `assignment` (True), or `timeout_s` or, with
        `give_up_at_exit`, the command's exit without it (False): `systemctl start` waits so for
        READY=1."""
        deadline = time.monotonic() + timeout_s
        while assignment not in self.notifications:
            if time.monotonic() > deadline:
                return False
            try:
                self.notifications.append(self._received.get(timeout=0.2))
            except queue.Empty:
                if give_up_at_exit and self.process.poll() is not None and self._received.empty():
                    return False
        return True

    def _nofile(self, asked: str) -> int | None:
        """LimitNOFILE=, or this machine's hard cap where even root may not go above it (a
        sandboxed CI host: 20,000 here); systemd as PID 1 would set the asked value."""
        import resource

        if not asked:
            return None
        wanted = int(asked)
        if self.site.run(["prlimit", f"--nofile={wanted}:{wanted}", "true"], check=False).returncode == 0:
            return wanted
        return min(wanted, resource.getrlimit(resource.RLIMIT_NOFILE)[1])

    def _make_directories(self, unit: Unit, user: str, group: str) -> dict[str, str]:
        made = {}
        for key, root in DIRECTORY_ROOTS.items():
            for name in unit.words(key):
                path = f"{root}/{name}"
                mode = unit.one(f"{key}Mode", "0755")
                script = f"mkdir -p {path}"
                if key == "RuntimeDirectory":  # /run is a tmpfs on a booted host
                    script += f" && (mountpoint -q {path} || mount -t tmpfs -o mode={mode} hpsite-runtime {path})"
                self.site.shell(f"{script} && chown {user}:{group} {path} && chmod {mode} {path}")
                made[key] = path
        return made

    @staticmethod
    def _sandbox(unit: Unit, writable: list[str]) -> str:
        """The shell lines that make the daemon's own mount namespace what the unit asks for."""
        lines = []
        if unit.one("ProtectSystem", "no") == "strict":
            lines += [f"mount --bind {path} {path}" for path in writable]
            lines.append("for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do "
                         "case $m in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac; "
                         "mount -o remount,bind,ro \"$m\" 2>/dev/null || true; done")
            lines += [f"mount -o remount,bind,rw {path}" for path in writable]
        elif unit.one("ProtectSystem", "no") != "no":
            raise UnknownDirective(f"ProtectSystem={unit.one('ProtectSystem')}: only strict is emulated")
        if unit.one("PrivateTmp", "no") == "yes":
            lines += ["mount -t tmpfs -o mode=1777 private-tmp /tmp", "mount -t tmpfs -o mode=1777 private-vartmp /var/tmp"]
        if unit.one("ProtectHome", "no") == "yes":
            lines += [f"if [ -d {home} ]; then mount -t tmpfs -o mode=000 protect-home {home}; fi"
                      for home in ("/home", "/root", "/run/user")]
        return "\n".join(lines) + "\n"

    def is_active(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """KillSignal=, wait TimeoutStopSec=, then empty RuntimeDirectory= (systemd removes it)."""
        if self.process is None:
            return None
        unit = self.unit or self.read()
        if self.process.poll() is None:
            self.process.send_signal(getattr(signal, unit.one("KillSignal", "SIGTERM")))
            try:
                self.process.wait(float(unit.one("TimeoutStopSec", "90")))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for name in unit.words("RuntimeDirectory"):
            self.site.shell(f"umount /run/{name} 2>/dev/null || true; rm -rf /run/{name}")
        if self.listener is not None:
            self._wait_for("STOPPING=1", 2, give_up_at_exit=False)  # the last one may be in the pipe
            self.listener.kill()
            self.listener.wait(10)
            self.listener = None
        status, self.process = self.process.returncode, None
        return status

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""
