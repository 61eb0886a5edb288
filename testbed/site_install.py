"""hpcpredict installed as a site installs it, for the tests that run it as a site runs it.

A site's install: root makes a venv with Debian's own ``/usr/bin/python3`` at ``/opt/hpcpredict/venv``
(docs/quickstart-cluster.md, step 1), outside any home, owned by root, read-only to everyone else;
the daemon and the views then run as slurmctld's ``SlurmUser``, whose home is ``/nonexistent``.
Tests run as root in a checkout saw none of what that breaks.

Two pieces:

* `dependencies_prefix`: a folder holding ``venv/``, a venv made by ``/usr/bin/python3`` *as if at*
  ``/opt/hpcpredict/venv`` (a venv's scripts name their absolute path), with hpcpredict's
  dependencies installed and not hpcpredict itself, and the wheels that building hpcpredict
  needs (pyproject.toml's build-system requires) in ``build-wheels/``, which the venv's pip.conf
  names: the quick start's ``pip install`` runs in a namespace with no network (the admin API's
  fixed port), and finds them there on any machine. Built once per set of dependencies (keyed by
  their hash) under ``/var/cache/hpcpredict-tests`` and reused: a first build downloads ~150 MB
  and takes a minute or two, a reuse nothing; a build first removes the prefixes no test has
  used for a week (`prune_stale_prefixes`). `.ci/run` installs python3-venv and python3-pip.
* `SiteNamespace`: a private mount namespace, held open by a sleeping process and entered with
  ``nsenter``, in which ``/etc``, ``/var`` and ``/opt`` are overlays of the host's whose writes
  go to a tmpfs and vanish with it, ``/run`` is a fresh tmpfs (as on a booted host) with the host's
  munge socket bound in, and ``/opt/hpcpredict`` is an overlay of that dependency prefix. So a
  test can create users, copy files to /etc, ``pip install`` into /opt/hpcpredict and make
  /var/lib/hpcpredict exactly where the quick start says, as root, without touching the host or
  another test running beside it.

Both need root, ``unshare``/``nsenter`` (util-linux) and overlayfs; else `SiteUnavailable`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PREFIX = Path("/opt/hpcpredict")
CACHE_ROOT = Path("/var/cache/hpcpredict-tests")
DEBIAN_PYTHON = Path("/usr/bin/python3")
BUILD_TIMEOUT_S = 1800
LAST_USED = ".last-used"  # touched each time a test takes the prefix
STALE_AFTER_S = 7 * 24 * 3600  # a prefix unused this long is removed before the next build
# Loopback up, plus an address of global scope on it (still nowhere but this namespace): getaddrinfo
# with AI_ADDRCONFIG, as slurmdbd calls it, finds no name at all on a host with loopback only.
NETWORK_SETUP = 'ip link set lo up && ip addr add 10.254.254.1/32 dev lo && echo "127.0.0.1 $(hostname)" >> /etc/hosts'
HOST_TMP = "/run/hpsite-host-tmp"  # the host's /tmp, inside a namespace with a /tmp of its own
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class SiteUnavailable(RuntimeError):
    """A site's install cannot be made here (the message says why)."""


def dependencies() -> list[str]:
    """hpcpredict's runtime requirements, from pyproject.toml."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def build_requirements() -> list[str]:
    """What pip installs to build hpcpredict (pyproject.toml's build-system requires)."""
    return list(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]["requires"])


def _check_tools() -> None:
    if os.geteuid() != 0:
        raise SiteUnavailable("a site's install needs root (it mounts, creates users, installs in /opt)")
    for tool in ("unshare", "nsenter", "mount", "setpriv", "runuser", "prlimit"):
        if shutil.which(tool) is None:
            raise SiteUnavailable(f"{tool} not found (Debian's util-linux)")
    probe = subprocess.run([str(DEBIAN_PYTHON), "-c", "import venv, ensurepip"], capture_output=True, text=True) \
        if DEBIAN_PYTHON.exists() else None
    if probe is None or probe.returncode != 0:
        raise SiteUnavailable(f"{DEBIAN_PYTHON} with venv and ensurepip is needed: apt-get install python3-venv python3-pip")


def prefix_inputs() -> list[str]:
    """What the prefix is built from, besides the Python that builds it (a change rebuilds it)."""
    return [*dependencies(), *build_requirements(), "v2"]


def dependencies_prefix() -> Path:
    """The cached prefix (module doc), built now if it is not there yet; one build at a time."""
    _check_tools()
    version = subprocess.run([str(DEBIAN_PYTHON), "-VV"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha256("\n".join([version, *prefix_inputs()]).encode()).hexdigest()[:16]
    prefix = CACHE_ROOT / f"prefix-{key}"
    if (prefix / ".complete").exists():
        (prefix / LAST_USED).touch()
        return prefix
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with (CACHE_ROOT / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building the same prefix
        if (prefix / ".complete").exists():
            (prefix / LAST_USED).touch()
            return prefix
        prune_stale_prefixes(CACHE_ROOT)
        building = Path(tempfile.mkdtemp(prefix=f"building-{key}-", dir=CACHE_ROOT))
        building.chmod(0o755)
        scratch = Path(tempfile.mkdtemp(prefix="hpbuild"))
        requirements = " ".join(f"'{requirement}'" for requirement in dependencies())
        build_requires = " ".join(f"'{requirement}'" for requirement in build_requirements())
        # umask 022 as a root shell has it: pytest's own umask (conftest's private_umask) would make
        # the venv unreadable to the unprivileged user the tests run it as.
        script = f"""set -eu
umask 022
mount -t tmpfs -o mode=0755 hpbuild {scratch}
mkdir {scratch}/u {scratch}/w
mount -t overlay hpbuild -o lowerdir=/opt,upperdir={scratch}/u,workdir={scratch}/w /opt
mkdir -p {PREFIX}
mount --bind {building} {PREFIX}
{DEBIAN_PYTHON} -m venv {PREFIX}/venv
{PREFIX}/venv/bin/pip install --quiet --disable-pip-version-check {requirements}
{PREFIX}/venv/bin/pip download --quiet --disable-pip-version-check --only-binary=:all: --dest {PREFIX}/build-wheels {build_requires}
printf '[global]\\nfind-links = {PREFIX}/build-wheels\\n' > {PREFIX}/venv/pip.conf
"""
        try:
            done = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                  env={**os.environ, "PATH": SYSTEM_PATH})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if done.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            raise SiteUnavailable(f"building the dependency venv failed: {done.stderr[-2000:]}")
        (building / ".complete").touch()
        (building / LAST_USED).touch()
        building.rename(prefix)
    return prefix


def prune_stale_prefixes(cache_root: Path, *, now: float | None = None) -> list[Path]:
    """Remove the prefixes (and killed builds' leftovers) of `cache_root` that no test has used
    for `STALE_AFTER_S`: each is ~700 MB, and every change of the dependencies makes a new one.
    Called before a build, under the build lock; a prefix another checkout still uses is touched
    at each use, so it stays. What was removed."""
    now = time.time() if now is None else now
    removed = []
    for folder in sorted([*cache_root.glob("prefix-*"), *cache_root.glob("building-*")]):
        stamp = folder / LAST_USED
        last = (stamp if stamp.exists() else folder).stat().st_mtime
        if now - last > STALE_AFTER_S:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class SiteNamespace:
    """A private mount namespace laid out as a fresh controller (module doc); `run` enters it."""

    def __init__(self, prefix: Path, *, private_tmp: bool = False, private_network: bool = False) -> None:
        """`private_tmp`: a fresh /tmp (host folders are bound in with `bind`), so that paths such as
        the quick start's /tmp/history.swf are this test's alone. `private_network`: a network
        namespace of its own with only loopback up, so that servers on fixed ports (the admin API
        on 127.0.0.1:8765) never meet another test's."""
        self.prefix = prefix
        self.scratch = Path(tempfile.mkdtemp(prefix="hpsite"))
        self.holder: subprocess.Popen | None = None
        self.private_tmp = private_tmp
        self.private_network = private_network

    def start(self) -> SiteNamespace:
        _check_tools()
        s = self.scratch
        script = f"""set -eu
mount -t tmpfs -o mode=0755 hpsite {s}
mkdir {s}/opt.u {s}/opt.w {s}/prefix.u {s}/prefix.w {s}/munge
mount -t overlay hpsite-opt -o lowerdir=/opt,upperdir={s}/opt.u,workdir={s}/opt.w /opt
mkdir -p {PREFIX}
mount -t overlay hpsite-prefix -o lowerdir={self.prefix},upperdir={s}/prefix.u,workdir={s}/prefix.w {PREFIX}
for d in etc var usr; do
  mkdir {s}/$d.u {s}/$d.w
  mount -t overlay hpsite-$d -o lowerdir=/$d,upperdir={s}/$d.u,workdir={s}/$d.w /$d
done
mkdir -p /run/munge  # the system's, whose munged may start after this (slurm_cluster.ensure_munge)
mount --bind /run/munge {s}/munge
mount -t tmpfs -o mode=0755 hpsite-run /run
mkdir -p /run/munge /run/lock
mount --bind {s}/munge /run/munge
{f"mkdir {HOST_TMP} && mount --bind /tmp {HOST_TMP} && mount -t tmpfs -o mode=1777 hpsite-tmp /tmp" if self.private_tmp else ""}
{NETWORK_SETUP if self.private_network else ""}
echo ready
exec sleep infinity
"""
        if self.private_network and shutil.which("ip") is None:
            raise SiteUnavailable("ip not found (Debian's iproute2): needed to bring up a private loopback")
        namespaces = ["--mount", "--net"] if self.private_network else ["--mount"]
        self.holder = subprocess.Popen(["unshare", *namespaces, "--propagation", "private", "bash", "-c", script],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.holder.stdout.readline().strip()
        if line != "ready":
            self.holder.kill()
            error = self.holder.stderr.read()
            self.holder.wait()
            raise SiteUnavailable(f"cannot lay out the site's mount namespace: {error[-1000:]}")
        return self

    def start_or_skip(self) -> SiteNamespace:
        """`start`, for a fixture: skip where a site's install cannot be laid out here, or fail
        with ``HPCPREDICT_REQUIRE_SERVERS=1`` (CI)."""
        import pytest  # only the fixtures' path needs it

        try:
            return self.start()
        except SiteUnavailable as error:
            self.close()
            if os.environ.get("HPCPREDICT_REQUIRE_SERVERS") == "1":
                pytest.fail(f"a site's install is required here: {error}")
            pytest.skip(str(error))

    def enter(self, command: list[str]) -> list[str]:
        """`command` run inside the namespace (as root, with the caller's environment)."""
        assert self.holder is not None
        namespaces = ["--mount", "--net"] if self.private_network else ["--mount"]
        # --root: the holder's root, not the mount namespace's (entering a mount namespace resets
        # the root to the namespace's own, which inside a chroot — testbed/slurm_chroot.py — is the
        # host's); --wd=/ inside it
        return ["nsenter", f"--target={self.holder.pid}", *namespaces, "--root", "--wd=/", "--", *command]

    def seen_inside(self, host_path: Path) -> Path:
        """Where the host's `host_path` is in the namespace: the same path, except under the host's
        /tmp when the namespace has a /tmp of its own (a checkout cloned into /tmp, say)."""
        source = Path(host_path)
        if self.private_tmp and source.is_relative_to("/tmp"):  # the host's /tmp, hidden by ours
            return Path(HOST_TMP) / source.relative_to("/tmp")
        return source

    def bind(self, host_path: Path, inside: str | None = None) -> None:
        """The host's folder `host_path` at `inside` (default: the same path) in the namespace."""
        target = inside or str(host_path)
        source = self.seen_inside(host_path)
        self.run(["mkdir", "-p", target])
        self.run(["mount", "--bind", str(source), target])

    def run(self, command: list[str], *, check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        done = subprocess.run(self.enter(command), capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else root_environment(), input=input, cwd="/")
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def shell(self, script: str, **options: object) -> subprocess.CompletedProcess:
        """A bash script run as root in the namespace, stopping at its first failing command."""
        return self.run(["bash", "-e", "-o", "pipefail", "-c", script], **options)  # type: ignore[arg-type]

    def install_checkout(self) -> None:
        """docs/quickstart-cluster.md's step 1 with this checkout as "the repository": its files
        (as `git clone` gives them, uncommitted changes included) copied to /opt/hpcpredict/src, then
        `pip install` into the venv. Used by tests that need the install but not the page's words."""
        self.shell(f"mkdir -p {PREFIX}/src && tar -C {self.seen_inside(REPO_ROOT)} -cf - {' '.join(checkout_files())} "
                   f"| tar -C {PREFIX}/src -xf -")
        self.run([f"{PREFIX}/venv/bin/pip", "install", "--quiet", "--disable-pip-version-check",
                  "--no-deps", f"{PREFIX}/src"], timeout=600)
        self.run(["ln", "-sf", f"{PREFIX}/venv/bin/hpcpredict", "/usr/local/bin/hpcpredict"])

    def close(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)
        for _ in range(50):  # the tmpfs goes with the namespace's last process
            try:
                self.scratch.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def checkout_files() -> list[str]:
    """The files `git clone` of this checkout would give, with their working-tree content."""
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                           "--exclude-standard"], capture_output=True, text=True, check=True)
    return [shlex_quote(name) for name in done.stdout.split("\0") if name and (REPO_ROOT / name).exists()]


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def root_environment() -> dict[str, str]:
    """What a root shell on the controller has: the system PATH (not this test's venv or pyenv)."""
    return {"PATH": SYSTEM_PATH, "HOME": "/root", "LANG": "C.UTF-8", "TERM": "dumb", "CI": "true"}


if __name__ == "__main__":  # build the cached prefix by hand (as .ci/run may, before the run)
    print(dependencies_prefix())
    sys.exit(0)
