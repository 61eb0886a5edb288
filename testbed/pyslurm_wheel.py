"""A wheel of the pyslurm release that matches the installed Slurm, built once and cached.

PyPI's pyslurm is 25.11 only, and pyslurm's releases track Slurm's: a pyslurm is built against,
and talks to, one Slurm major.minor. The sources of the releases matching the test suite's
Slurms are in ../shared/pyslurm (pyslurm-22.5.3.tar.gz for Debian 12's 22.05, pyslurm-24.11.0
for trixie's 24.11; there is none for 26.05). This builds the wheel of the one matching this
system's Slurm (``sinfo --version``, ``scontrol --version``, the daemons' ``-V``) with a given
Python, keeps it under `CACHE_DIR` keyed by pyslurm's version, the Python tag and the Slurm
version, and prints its path; a cached wheel is reused:

    python3 -m testbed.pyslurm_wheel                  # this system's Slurm, this python3
    python3 -m testbed.pyslurm_wheel --python /usr/bin/python3
    python3 -m testbed.pyslurm_wheel --system trixie  # the chroot's (24.11, its python3), inside it
    python3 -m testbed.pyslurm_wheel --all            # this system and every chroot with a pyslurm

Here, the build runs in a venv of that Python (setuptools, wheel, the Cython the release needs,
from the package index) against libslurm-dev, gcc and the Python's headers (testbed/
system_packages.py installs them on the host). For a chroot of testbed/slurm_chroot.py it runs
*inside* the chroot, with the chroot's python3 and libslurm, on a throw-away overlay of it, in new
mount and PID namespaces, where apt-get installs the build's packages (`CHROOT_BUILD_PACKAGES`):
the chroot itself is never changed, and everything but the wheel goes with the namespace. The
wheel is kept in this host's cache and copied to the chroot's own (its /var/cache/
hpcpredict-wheels), where a test running inside finds it; a test inside that finds none builds it
the same way, on an overlay of its own root. Builds take turns (a lock in the cache folder; a
chroot's build from here holds the chroot's too): one is mostly a single gcc of Cython's C, 6-8
min on the 2-core test machine (measured beside other tests: 22.5.3 with Python 3.11, 504 s, 7.5
min of CPU; 24.11.0 with trixie's 3.13, 409 s with its apt-get, 5 min of CPU).

The tests install the wheel into a folder of their own (``pip install --target``) and put it on
sys.path: nothing is installed into a venv (tests/test_pyslurm_backend.py).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parent.parent
SOURCES = Path(__file__).resolve().parents[2] / "shared" / "pyslurm"
CACHE_DIR = Path(os.environ.get("HPCPREDICT_WHEEL_CACHE", "/var/cache/hpcpredict-wheels"))
CACHE_INSIDE = "/var/cache/hpcpredict-wheels"  # a chroot's own cache, as seen inside it
BUILD_TIMEOUT_S = 3600  # ~6 min of CPU alone; a loaded 2-core machine takes several times that
# What building each release needs besides the C side, with --no-build-isolation (its own pins are
# for an isolated build: 22.5's setuptools==59.2.0 predates Python 3.12's distutils removal).
# 22.5.3 says Cython < 3.0 (its pyproject.toml); 24.11.0 any from 0.29.37, but Python 3.13
# (trixie) needs Cython 3.0.11 or later, and 3.1 changed what its .pyx files rely on.
BUILD_REQUIREMENTS = {
    (22, 5): ("setuptools>=65,<76", "wheel", "Cython>=0.29.30,<3.0"),
    (24, 11): ("setuptools>=65", "wheel", "packaging>=21.3", "Cython>=3.0.11,<3.1"),
}
DEFAULT_BUILD_REQUIREMENTS = ("setuptools>=65", "wheel", "packaging>=21.3", "Cython>=3.0.11,<3.1")
# Debian packages the build needs inside a chroot (installed on its throw-away overlay only)
CHROOT_BUILD_PACKAGES = ("libslurm-dev", "gcc", "libc6-dev", "python3-dev")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class WheelUnavailable(RuntimeError):
    """No pyslurm wheel can be had here (the message says why)."""


@dataclass(frozen=True)
class Target:
    """What a wheel is built for: a pyslurm source, a Python tag, a Slurm version."""

    source: Path
    pyslurm: str  # "22.5.3"
    python_tag: str  # "cp311"
    slurm: str  # "22.05.8"

    @property
    def key(self) -> str:
        return f"pyslurm-{self.pyslurm}-{self.python_tag}-slurm-{self.slurm}"

    @property
    def requirements(self) -> tuple[str, ...]:
        return BUILD_REQUIREMENTS.get(_major_minor(self.pyslurm), DEFAULT_BUILD_REQUIREMENTS)


# ---------------------------------------------------------------------------- what to build
def _major_minor(version: str) -> tuple[int, int]:
    """"22.05.8" and "22.5.3" -> (22, 5): pyslurm writes Slurm's minor without its zero."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise WheelUnavailable(f"not a version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def slurm_version(command_prefix: tuple[str, ...] = ()) -> str:
    """The installed Slurm's version ("22.05.8"). `command_prefix`: where to ask (``chroot R``).
    22.05's sinfo and scontrol cannot print their version without a slurm.conf they can read (they
    look for the controller first), so the daemons' ``-V`` are asked after them."""
    for command in (["sinfo", "--version"], ["scontrol", "--version"], ["slurmd", "-V"], ["slurmctld", "-V"]):
        try:
            done = subprocess.run([*command_prefix, *command], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        match = re.search(r"\b(\d+\.\d+\.\d+)\b", done.stdout)
        if done.returncode == 0 and match:
            return match.group(1)
    where = f" in {command_prefix[-1]}" if command_prefix else ""
    raise WheelUnavailable(f"no Slurm found{where} (sinfo, scontrol, slurmd: none printed a version)")


def python_tag(python: str, command_prefix: tuple[str, ...] = ()) -> str:
    """``cp311`` for a CPython 3.11 (the wheel's tag, the cache key's part)."""
    code = "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}', sys.implementation.name)"
    try:
        done = subprocess.run([*command_prefix, python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except OSError as error:
        raise WheelUnavailable(f"cannot run {python}: {error}") from error
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2:
        raise WheelUnavailable(f"cannot run {python}: {done.stderr.strip()[-500:]}")
    if words[1] != "cpython":
        raise WheelUnavailable(f"{python} is {words[1]}: pyslurm is a CPython extension")
    return words[0]


def source_for(slurm: str, sources: Path = SOURCES) -> tuple[Path, str]:
    """The pyslurm source tarball of `slurm`'s major.minor (the newest patch release there) and
    its version; `WheelUnavailable` when there is none."""
    wanted = _major_minor(slurm)
    found = []
    for path in sources.glob("pyslurm-*.tar.gz"):
        match = re.fullmatch(r"pyslurm-(\d+)\.(\d+)\.(\d+)\.tar\.gz", path.name)
        if match and (int(match.group(1)), int(match.group(2))) == wanted:
            found.append((tuple(int(part) for part in match.groups()), path))
    if not found:
        have = ", ".join(sorted(path.name for path in sources.glob("pyslurm-*.tar.gz"))) or "nothing"
        raise WheelUnavailable(f"no pyslurm release for Slurm {slurm} in {sources} (it has {have})")
    version, path = max(found)
    return path, ".".join(str(part) for part in version)


def target_here(python: str) -> Target:
    slurm = slurm_version()
    source, version = source_for(slurm)
    return Target(source, version, python_tag(python), slurm)


# ---------------------------------------------------------------------------- the cache
def cached(cache_dir: Path, target: Target) -> Path | None:
    folder = cache_dir / target.key
    wheels = sorted(folder.glob("pyslurm-*.whl")) if (folder / ".complete").exists() else []
    return wheels[0] if wheels else None


def _store(cache_dir: Path, target: Target, built: Path) -> Path:
    """`built` (a folder holding the wheel) made `cache_dir`'s entry for `target`, atomically."""
    wheels = sorted(built.glob("pyslurm-*.whl"))
    if len(wheels) != 1:
        raise WheelUnavailable(f"the build made {len(wheels)} wheels in {built}, not one")
    (built / ".complete").touch()
    built.chmod(0o755)
    folder = cache_dir / target.key
    shutil.rmtree(folder, ignore_errors=True)
    built.rename(folder)
    return folder / wheels[0].name


def _copy_entry(wheel: Path, cache_dir: Path, target: Target) -> Path:
    """A copy of the cached `wheel` as `cache_dir`'s entry for `target` (another system's cache)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"copying-{target.key}-", dir=cache_dir))
    shutil.copy2(wheel, building / wheel.name)
    return _store(cache_dir, target, building)


class _Lock:
    """One build at a time on this machine (a file lock in the cache folder)."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / ".lock"

    def __enter__(self) -> Self:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("w")
        except OSError as error:
            raise WheelUnavailable(f"cannot build into {self.path.parent} ({error}): as root, or with "
                                   "HPCPREDICT_WHEEL_CACHE naming a folder of yours") from error
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


# ---------------------------------------------------------------------------- building
def _build_script(target: Target, tarball: str, out: str, python: str, venv: str, workdir: str) -> str:
    """sh: a venv of `python` with the build requirements, the release unpacked, ``pip wheel``
    with Slurm's headers and libraries found where Debian puts them (the multiarch folder:
    libslurm.so for 22.5, slurm-wlm/libslurmfull.so for 24.11)."""
    requirements = " ".join(shlex.quote(requirement) for requirement in target.requirements)
    folder = f"{workdir}/pyslurm-{target.pyslurm}"
    return "\n".join([
        "set -e",
        f"{shlex.quote(python)} -m venv {venv}",
        f"{venv}/bin/pip install -q --disable-pip-version-check {requirements}",
        f"mkdir -p {workdir} && tar -C {workdir} -xzf {shlex.quote(tarball)}",
        'LIB="/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"',
        f"cd {folder}",
        (f'SLURM_LIB_DIR="$LIB" SLURM_INCLUDE_DIR=/usr/include {venv}/bin/pip wheel --disable-pip-version-check'
         f" --no-build-isolation --no-deps -w {shlex.quote(out)} ."),
    ])


def _check_here(python: str) -> None:
    """This system can build: Slurm's headers, a C compiler, the Python's headers."""
    missing = []
    if not Path("/usr/include/slurm/slurm.h").exists():
        missing.append("Slurm's headers (/usr/include/slurm/slurm.h: Debian's libslurm-dev)")
    if shutil.which("gcc") is None:
        missing.append("a C compiler (gcc)")
    probe = "import sysconfig, os; print(os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if done.stdout.strip() != "True":
        missing.append(f"{python}'s headers (Python.h: Debian's python3-dev for /usr/bin/python3)")
    if missing:
        raise WheelUnavailable("cannot build pyslurm here, missing " + "; ".join(missing)
                               + ": `python3 -m testbed.system_packages` as root installs them")


def _run_build(command: list[str], log_path: Path, what: str, **options) -> None:
    began = time.monotonic()
    with log_path.open("w") as log:
        try:
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False, **options)
        except subprocess.TimeoutExpired as error:
            raise WheelUnavailable(f"{what}: no wheel in {BUILD_TIMEOUT_S} s (log: {_failed_log(log_path.parent)})") from error
    if done.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise WheelUnavailable(f"{what} failed ({done.returncode}; log: {_failed_log(log_path.parent)}):\n{tail}")
    log_path.with_suffix(".seconds").write_text(f"{time.monotonic() - began:.0f}\n")


def _build_here(target: Target, python: str, building: Path) -> None:
    """Build with `python` on this system (its libslurm-dev) into `building`."""
    _check_here(python)
    scratch = Path(tempfile.mkdtemp(prefix="hppyslurm"))
    try:
        script = _build_script(target, str(target.source), str(building), python, f"{scratch}/venv", f"{scratch}/src")
        env = {**os.environ, "PATH": f"{SYSTEM_PATH}:{os.environ.get('PATH', '')}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        env.pop("PYTHONPATH", None)
        _run_build(["/bin/sh", "-ec", script], building / "build.log", f"building {target.key}", env=env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _build_in_overlay(target: Target, lower: Path, building: Path, apt_options: tuple[str, ...] = ()) -> None:
    """Build inside the Debian system at `lower` (a chroot, or "/" from inside one), with its
    /usr/bin/python3, on an overlay of it whose writes go to a tmpfs: apt-get installs the build's
    packages there, and all of it ends with the namespace (new mount and PID namespaces, as
    testbed/slurm_chroot.py enters a chroot). The wheel lands in `building`, bound in."""
    from testbed.slurm_chroot import _die_with_parent

    if os.geteuid() != 0:
        raise WheelUnavailable("building pyslurm inside a chroot needs root (mounts, apt-get on an overlay)")
    for tool in ("unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            raise WheelUnavailable(f"{tool} not found (util-linux, coreutils)")
    apt = " ".join(shlex.quote(option) for option in apt_options)
    inner = "\n".join([
        "set -e",
        f"apt-get {apt} update -qq",
        f"apt-get {apt} install -y -qq --no-install-recommends {' '.join(CHROOT_BUILD_PACKAGES)}",
        _build_script(target, f"/pyslurm-src/{target.source.name}", "/pyslurm-out", "/usr/bin/python3",
                      "/opt/pyslurm-build", "/tmp/pyslurm-src"),
    ])
    scratch = Path(tempfile.mkdtemp(prefix="hppyslurm"))
    inner_env = {"PATH": SYSTEM_PATH, "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive",
                 "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in inner_env.items())
    q = shlex.quote
    body = "\n".join([
        f"S={q(str(scratch))}",
        "mount -t tmpfs -o mode=755 hppyslurm $S",
        "mkdir $S/upper $S/work $S/root",
        f"mount -t overlay hppyslurm -o lowerdir={q(str(lower))},upperdir=$S/upper,workdir=$S/work $S/root",
        "R=$S/root",
        "mount -t proc proc $R/proc",
        "mount --rbind /dev $R/dev",
        "mount --rbind /sys $R/sys",
        "mount -t tmpfs -o mode=755 tmpfs $R/run",
        "mount -t tmpfs -o mode=1777 tmpfs $R/tmp",
        f"mkdir -p $R/pyslurm-src $R/pyslurm-out && mount --bind -o ro {q(str(target.source.parent))} $R/pyslurm-src",
        f"mount --bind {q(str(building))} $R/pyslurm-out",
        "cp /etc/resolv.conf $R/etc/resolv.conf 2>/dev/null || true",
        ("[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt"
         " $R/etc/ssl/certs/ca-certificates.crt || true"),
        "[ -f /etc/pip.conf ] && cp /etc/pip.conf $R/etc/pip.conf || true",
        f"exec chroot $R /usr/bin/env -i {exports} /bin/sh -ec {q(inner)}",
    ])
    command = ["unshare", "--kill-child", "--mount", "--pid", "--fork", "--propagation", "private", "/bin/sh", "-ec", body]
    try:
        _run_build(command, building / "build.log", f"building {target.key} inside {lower}",
                   preexec_fn=_die_with_parent, env={**os.environ, "PATH": SYSTEM_PATH})
    finally:
        try:
            scratch.rmdir()
        except OSError:
            pass


def _building_folder(cache_dir: Path, target: Target) -> Path:
    building = Path(tempfile.mkdtemp(prefix=f"building-{target.key}-", dir=cache_dir))
    building.chmod(0o755)
    return building


def _inside_a_chroot() -> bool:
    return bool(os.environ.get("HPCPREDICT_SLURM_SYSTEM_INSIDE"))


def wheel(python: str | None = None, *, log=print) -> Path:
    """The cached wheel for this system's Slurm and `python` (default: this interpreter), built
    now when there is none. Inside a chroot of testbed/slurm_chroot.py without the build's
    packages, it is built on an overlay of the chroot's root (module doc)."""
    python = python or sys.executable
    target = target_here(python)
    found = cached(CACHE_DIR, target)
    if found is not None:
        return found
    with _Lock(CACHE_DIR):
        found = cached(CACHE_DIR, target)
        if found is not None:
            return found
        building = _building_folder(CACHE_DIR, target)
        began = time.monotonic()
        try:
            try:
                _check_here(python)
            except WheelUnavailable:
                if not _inside_a_chroot():
                    raise
                if python_tag("/usr/bin/python3") != target.python_tag:
                    raise
                log(f"building {target.key} on an overlay of this chroot's root (apt-get: "
                    f"{' '.join(CHROOT_BUILD_PACKAGES)})")
                _build_in_overlay(target, Path("/"), building)
            else:
                log(f"building {target.key} with {python} ({target.source.name})")
                _build_here(target, python, building)
            stored = _store(CACHE_DIR, target, building)
        except BaseException:
            _keep_failed_log(building)
            raise
    log(f"{target.key}: built in {time.monotonic() - began:.0f} s")
    return stored


def chroot_wheel(name: str, *, log=print) -> Path:
    """The wheel for the chroot `name` (testbed/slurm_chroot.py: its Slurm, its /usr/bin/python3),
    built inside it when neither this host's cache nor the chroot's has it; the host's cached copy
    (the chroot's is at the same place inside it: `CACHE_INSIDE`)."""
    from testbed.slurm_chroot import ChrootUnavailable, build, system_named

    try:
        root = build(name, log=log)
        system = system_named(name)
    except ChrootUnavailable as error:
        raise WheelUnavailable(f"the {name} chroot: {error}") from error
    prefix = ("chroot", str(root))
    slurm = slurm_version(prefix)
    source, version = source_for(slurm)
    target = Target(source, version, python_tag("/usr/bin/python3", prefix), slurm)
    inside = root / CACHE_INSIDE.lstrip("/")
    with _Lock(CACHE_DIR), _Lock(inside):  # the chroot's too: a test inside builds under it
        found = cached(CACHE_DIR, target)
        if found is None and cached(inside, target) is not None:  # built inside by a test
            found = _copy_entry(cached(inside, target), CACHE_DIR, target)
        if found is None:
            building = _building_folder(CACHE_DIR, target)
            began = time.monotonic()
            log(f"building {target.key} inside the {system.suite} chroot (apt-get on an overlay: "
                f"{' '.join(CHROOT_BUILD_PACKAGES)})")
            try:
                _build_in_overlay(target, root, building, system.apt_options)
                found = _store(CACHE_DIR, target, building)
            except BaseException:
                _keep_failed_log(building)
                raise
            log(f"{target.key}: built in {time.monotonic() - began:.0f} s")
        if cached(inside, target) is None:
            _copy_entry(found, inside, target)
    return found


def _failed_log(building: Path) -> Path:
    return building.parent / f"failed-{building.name}.log"


def _keep_failed_log(building: Path) -> None:
    """A failed build's folder removed, its log kept beside the cache (the error names it)."""
    log = building / "build.log"
    if log.exists():
        shutil.copy(log, _failed_log(building))
    shutil.rmtree(building, ignore_errors=True)


def chroots_with_pyslurm() -> list[str]:
    """The chroots of testbed/slurm_chroot.py whose Slurm has a pyslurm source here."""
    from testbed.slurm_chroot import SYSTEMS

    names = []
    for name, system in SYSTEMS.items():
        try:
            source_for(system.slurm)
        except WheelUnavailable:
            continue
        names.append(name)
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", help="the Python the wheel is for (default: this one); this system only")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--system", help="a chroot of testbed/slurm_chroot.py (trixie, or 24.11): its wheel, built inside")
    where.add_argument("--all", action="store_true",
                       help="this system's wheel and every chroot's whose Slurm has a pyslurm release here")
    args = parser.parse_args()

    def say(line: str) -> None:
        print(f"pyslurm_wheel: {line}", file=sys.stderr, flush=True)

    try:
        if args.system:
            print(chroot_wheel(args.system, log=say))
            return
        print(wheel(args.python, log=say))
        if args.all:
            for name in chroots_with_pyslurm():
                print(chroot_wheel(name, log=say))
    except WheelUnavailable as error:
        sys.exit(f"pyslurm_wheel: {error}")


if __name__ == "__main__":
    main()
