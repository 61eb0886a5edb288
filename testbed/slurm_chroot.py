"""Debian's newer Slurm releases for the real-SLURM tests: a chroot of trixie (24.11) or sid (26.05).

The host runs Debian 12's Slurm 22.05. Sites run newer releases, and a 22.05 client cannot talk
to a 24.11 controller, so the whole SLURM side of a test — slurmctld, slurmd, munge, the Slurm
commands, the daemon and the test process itself — runs inside a Debian system of that release,
with that system's Python:

    python -m testbed.slurm_chroot build trixie          # debootstrap + packages + venv (cached)
    python -m testbed.slurm_chroot run trixie -- -m slurm tests/test_slurm_e2e.py
    python -m pytest --slurm-system trixie -m slurm     # the same, from pytest (tests/conftest.py)
    python -m testbed.slurm_chroot exec sid benchmarks/slurm_version_facts.py   # a script, inside

``build`` makes ``CACHE_DIR/<suite>`` (``/var/cache/hpcpredict-chroots`` unless
``HPCPREDICT_CHROOT_CACHE`` says otherwise) with ``debootstrap --variant=minbase``, installs
`SYSTEM_PACKAGES` with apt inside, and a venv at `VENV` with the project's dependencies from
PyPI (the checkout itself is imported from `MOUNT_POINT`, where every run mounts it), then the
site tests' venv of the system's own python3 (testbed/site_install.py).
It is kept between runs and rebuilt when its package list changes (a stamp file holds a digest
of what it was built from); the venv is refreshed when the project's dependencies change.

``run`` enters the chroot in new mount and PID namespaces (``unshare --mount --pid --fork``):
the root bound on itself (a mount, as a system's / is), /proc, /dev, /sys, a fresh /run and /tmp,
the checkout at `MOUNT_POINT` and ../shared (read-only) are mounted there only, so nothing stays
mounted on the host whatever happens, and every process started inside — munged with the
chroot's own key, slurmctld, slurmd, the daemon — ends with the namespace when the run ends.
The network is the host's: the test clusters listen on loopback ports picked free, as on the
host. Needs root, debootstrap and unshare (util-linux).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR = Path(os.environ.get("HPCPREDICT_CHROOT_CACHE", "/var/cache/hpcpredict-chroots"))
MIRROR = os.environ.get("HPCPREDICT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
MOUNT_POINT = "/hpcpredict"  # the checkout, inside
SHARED_MOUNT = "/shared"  # ../shared (the real logs), read-only: tests look for it beside the checkout
VENV = "/opt/hpcpredict-venv"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# What the real-SLURM tests need inside (testbed/slurm_cluster.py's packages, slurmdbd and MariaDB
# for slurm-convert --sacct, Python with venv, procps, passwd for the replays' users), and the
# site tests (testbed/site_install.py, the quick start: git lists the checkout's files, curl is
# the page's health check, iproute2 the namespace's loopback).
SYSTEM_PACKAGES = (
    "slurmctld", "slurmd", "slurm-client", "munge", "lua5.1", "lua-socket", "slurmdbd",
    "mariadb-server", "python3", "python3-venv", "procps", "passwd", "ca-certificates",
    "git", "curl", "iproute2",
)


@dataclass(frozen=True)
class System:
    suite: str
    slurm: str  # the Slurm major.minor the suite ships (checked after the build)
    apt_options: tuple[str, ...] = ()


SYSTEMS = {
    "trixie": System("trixie", "24.11"),
    # the mirror's sid Release file is past its Valid-Until date (measured 2026-11-26)
    "sid": System("sid", "26.05", ("-o", "Acquire::Check-Valid-Until=false")),
}
SLURM_SYSTEMS = {system.slurm: name for name, system in SYSTEMS.items()}  # "24.11" -> "trixie"


class ChrootUnavailable(RuntimeError):
    """The chroot cannot be built or entered here (the message says why)."""


def system_named(name: str) -> System:
    """A suite ("trixie") or the Slurm release it ships ("24.11")."""
    key = SLURM_SYSTEMS.get(name, name)
    if key not in SYSTEMS:
        choices = ", ".join(f"{suite} ({system.slurm})" for suite, system in SYSTEMS.items())
        raise ChrootUnavailable(f"unknown SLURM system {name!r}: choose one of {choices}")
    return SYSTEMS[key]


def root_of(system: System) -> Path:
    return CACHE_DIR / system.suite


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _system_stamp(system: System) -> str:
    return _digest(system.suite, MIRROR, *system.apt_options, *SYSTEM_PACKAGES)


def _test_requirements() -> list[str]:
    """The test extras the SLURM tests need (pytest, hypothesis), as pyproject.toml pins them; not
    dask or psycopg, which only other tests use and which would double the venv's download."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return [requirement for requirement in extras if requirement.split(">")[0].split("=")[0] in ("pytest", "hypothesis")]


def _requirements() -> list[str]:
    """What the venv holds: the project's dependencies and the test requirements. Not the project:
    every run imports it from the mounted checkout (PYTHONPATH), so an install never writes into
    the checkout (CI builds the chroots while it installs the project on the host)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *_test_requirements()]


def _python_stamp() -> str:
    return _digest(*_requirements())


def _site_stamp() -> str:
    from testbed.site_install import prefix_inputs

    return _digest("site", *prefix_inputs())


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


def _check_can_build() -> None:
    if os.geteuid() != 0:
        raise ChrootUnavailable("building or entering a chroot needs root")
    for tool in ("unshare", "chroot"):
        if shutil.which(tool) is None:
            raise ChrootUnavailable(f"{tool} not found (util-linux, coreutils)")
    if shutil.which("debootstrap") is None:  # installed on the host by the run's set-up step only
        raise ChrootUnavailable("debootstrap not found: install Debian's debootstrap (`python3 "
                                "testbed/system_packages.py` as root does, as the test run's set-up step does)")


def _run(command: list[str], what: str, **options) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", **options.pop("env", {})}
    done = subprocess.run(command, env=env, capture_output=True, text=True, **options)
    if done.returncode != 0:
        raise ChrootUnavailable(f"{what} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")


def build(name: str, *, log=print) -> Path:
    """The chroot of `name`, built or refreshed as needed (module doc); its root. Builds of one
    suite take turns (a lock file beside it): .ci/run starts them in the background before the
    test suite, and the tests wait for them here."""
    import fcntl

    system = system_named(name)
    _check_can_build()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / f"{system.suite}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(system, log)


def _build_locked(system: System, log) -> Path:
    root = root_of(system)
    stamp = root / ".hpcpredict-system"
    if _read(stamp) != _system_stamp(system):
        began = time.monotonic()
        fresh = root.with_name(root.name + ".new")  # a killed build leaves only this behind
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.parent.mkdir(parents=True, exist_ok=True)
        log(f"debootstrap --variant=minbase {system.suite} {fresh} {MIRROR}")
        _run(["debootstrap", "--variant=minbase", system.suite, str(fresh), MIRROR], "debootstrap")
        # no daemon may start from a package's postinst (the tests start their own)
        (fresh / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
        (fresh / "usr/sbin/policy-rc.d").chmod(0o755)
        apt = " ".join(shlex.quote(option) for option in system.apt_options)
        log(f"apt-get install {' '.join(SYSTEM_PACKAGES)} (inside)")
        _enter(fresh, "\n".join([
            f"apt-get {apt} update -qq",
            f"DEBIAN_FRONTEND=noninteractive apt-get {apt} install -y -qq --no-install-recommends "
            + " ".join(SYSTEM_PACKAGES),
            "apt-get clean",
        ]), what="apt-get inside the chroot")
        shutil.rmtree(root, ignore_errors=True)
        fresh.rename(root)
        stamp.write_text(_system_stamp(system) + "\n")
        log(f"{system.suite}: system built in {time.monotonic() - began:.0f} s")
    venv_stamp = root / ".hpcpredict-python"
    if _read(venv_stamp) != _python_stamp():
        began = time.monotonic()
        log(f"python3 -m venv {VENV}; pip install the project's dependencies, pytest, hypothesis (inside)")
        _enter(root, "\n".join([
            f"rm -rf {VENV}",
            f"python3 -m venv {VENV}",
            f"{VENV}/bin/pip install -q " + " ".join(shlex.quote(r) for r in _requirements()),
        ]), what="pip install inside the chroot")
        venv_stamp.write_text(_python_stamp() + "\n")
        log(f"{system.suite}: venv built in {time.monotonic() - began:.0f} s")
    # the site tests' venv of Debian's own python3 (testbed/site_install.py keeps it, keyed by the
    # dependencies, in the chroot's /var/cache): built here, where a build is expected, not in
    # the first test that needs it
    site_stamp = root / ".hpcpredict-site"
    if _read(site_stamp) != _site_stamp():
        began = time.monotonic()
        log("/usr/bin/python3 -m testbed.site_install: the site tests' venv (inside)")
        _enter(root, f"cd {MOUNT_POINT}\nexec /usr/bin/python3 -m testbed.site_install", what="the site tests' venv")
        site_stamp.write_text(_site_stamp() + "\n")
        log(f"{system.suite}: the site tests' venv built in {time.monotonic() - began:.0f} s")
    return root


def _enter(root: Path, script: str, *, what: str, capture: bool = True, env: dict[str, str] | None = None) -> int:
    """Run `script` (sh) inside `root`, in new mount and PID namespaces (module doc)."""
    mounts = [
        f"R={shlex.quote(str(root))}",
        # the root a mount of its own, as a system's / is: a mount namespace made inside (the
        # site tests' `unshare --propagation private`) must be able to change its propagation
        "mount --bind $R $R",
        "mount -t proc proc $R/proc",
        "mount --rbind /dev $R/dev",
        "mount --rbind /sys $R/sys",
        "mount -t tmpfs -o mode=755 tmpfs $R/run",
        "mount -t tmpfs -o mode=1777 tmpfs $R/tmp",
        f"mkdir -p $R{MOUNT_POINT} && mount --bind {shlex.quote(str(REPO))} $R{MOUNT_POINT}",
        "cp /etc/resolv.conf $R/etc/resolv.conf 2>/dev/null || true",
        # the host's CA bundle and pip settings, so that pip (the venv's, and the site tests'
        # inside: testbed/site_install.py) reaches the same index the same way: the chroot's system
        # trusts what the host's does (a copy, not a mount: a site test's overlay of /etc would
        # not show a mount under it)
        "[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt"
        " $R/etc/ssl/certs/ca-certificates.crt || true",
        "[ -f /etc/pip.conf ] && cp /etc/pip.conf $R/etc/pip.conf || true",
    ]
    shared = REPO.parent / "shared"
    if shared.is_dir():
        mounts.append(f"mkdir -p $R{SHARED_MOUNT} && mount --bind -o ro {shlex.quote(str(shared))} $R{SHARED_MOUNT}")
    inner = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1", **(env or {}),
    }
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in inner.items())
    body = "\n".join([*mounts, f"exec chroot $R /usr/bin/env -i {exports} /bin/sh -ec {shlex.quote(script)}"])
    # sh is PID 1 of the namespace until it execs chroot; the test's processes end with it. Each
    # link of the chain dies with the one before it: unshare when this process dies (killed, as CI
    # stops a run), PID 1 when unshare does (--kill-child), and the namespace with its PID 1.
    command = ["unshare", "--kill-child", "--mount", "--pid", "--fork", "--propagation", "private",
               "/bin/sh", "-ec", body]
    if not capture:
        return subprocess.run(command, preexec_fn=_die_with_parent).returncode
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=_die_with_parent)
    if done.returncode != 0:
        raise ChrootUnavailable(f"{what} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return 0


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL it when its parent dies (Linux's PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def run_pytest(name: str, pytest_args: list[str], *, log=print) -> int:
    """pytest with `pytest_args`, inside the chroot of `name` (built first when needed); its exit
    code. The environment's HPCPREDICT_* and CI settings go in with it."""
    root = build(name, log=log)
    system = system_named(name)
    passed = {key: value for key, value in os.environ.items()
              if key.startswith("HPCPREDICT_") or key in ("CI", "PYTEST_ADDOPTS")}
    # the chroot was built with what its tests need: no apt-get at the inner run's start (sid's
    # archive is past its Valid-Until date, and nothing more is wanted there)
    passed.update(PYTHONPATH=MOUNT_POINT, HPCPREDICT_SLURM_SYSTEM_INSIDE=system.suite, HPCPREDICT_NO_INSTALL="1")
    script = f"cd {MOUNT_POINT}\nexec {VENV}/bin/python -m pytest -p no:cacheprovider " + " ".join(
        shlex.quote(arg) for arg in pytest_args)
    log(f"inside {system.suite} (Slurm {system.slurm}): python -m pytest {' '.join(pytest_args)}")
    return _enter(root, script, what="pytest", capture=False, env=passed)


def run_script(name: str, script: str, arguments: list[str], *, log=print) -> int:
    """A Python script of the checkout (path relative to it), run inside with the chroot's venv."""
    root = build(name, log=log)
    system = system_named(name)
    command = " ".join(shlex.quote(arg) for arg in [f"{VENV}/bin/python", script, *arguments])
    return _enter(root, f"cd {MOUNT_POINT}\nexec {command}", what=script, capture=False,
                  env={"PYTHONPATH": MOUNT_POINT, "HPCPREDICT_SLURM_SYSTEM_INSIDE": system.suite})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["build", "run", "exec"],
                        help="build the chroot; run pytest inside; exec a script of the checkout inside")
    parser.add_argument("system", help="trixie (Slurm 24.11) or sid (26.05); or the Slurm release")
    parser.add_argument("arguments", nargs=argparse.REMAINDER,
                        help="run: pytest's arguments (after --); exec: the script and its arguments")
    args = parser.parse_args()
    arguments = args.arguments[1:] if args.arguments[:1] == ["--"] else args.arguments
    try:
        if args.action == "build":
            print(build(args.system))
            return
        if args.action == "exec":
            if not arguments:
                parser.error("exec needs a script (relative to the checkout)")
            sys.exit(run_script(args.system, arguments[0], arguments[1:]))
        sys.exit(run_pytest(args.system, arguments))
    except ChrootUnavailable as error:
        sys.exit(f"slurm_chroot: {error}")


if __name__ == "__main__":
    main()
