"""Every command works as an unprivileged user with no home on a read-only, root-owned install
(issue 28, item 1), and `train` says how to make a folder that user may not create (item 2).

The install is a site's (testbed/site_install.py): a venv made by Debian's /usr/bin/python3 at
/opt/hpcpredict/venv, root-owned and mounted read-only, run by a system user made the way Debian
makes them (``useradd --system --no-create-home --home-dir /nonexistent``) through ``runuser``. On
195fcb0 every command stopped at import: ``RuntimeError: cannot cache function 'axpy': no locator
available``, since numba's ``cache=True`` found no writable folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from testbed.site_install import PREFIX, SiteNamespace

pytestmark = [pytest.mark.site]
USER = "hpq-nohome"
SAMPLE = f"{PREFIX}/src/swf/KTH-SP2-sample.swf"


@pytest.fixture(scope="module")
def site(site_prefix: Path) -> Iterator[SiteNamespace]:
    namespace = SiteNamespace(site_prefix).start_or_skip()
    try:
        namespace.install_checkout()
        namespace.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                       "--shell", "/usr/sbin/nologin", "--user-group", USER])
        # read-only, as ProtectSystem=strict and a root-owned install make it
        namespace.run(["mount", "-o", "remount,bind,ro", str(PREFIX)])
        namespace.shell(f"install -d -o {USER} -g {USER} -m 0700 {work(namespace)}")
        yield namespace
    finally:
        namespace.close()


def work(site: SiteNamespace) -> str:
    """The user's scratch folder, on the namespace's own tmpfs (gone with it)."""
    return f"{site.scratch}/work"


def as_user(site: SiteNamespace, *command: str, environment: str = "") -> tuple[int, str]:
    """`command` as USER (HOME=/nonexistent, as runuser sets it), with its exit status and output."""
    done = site.shell(f"cd {work(site)} && {environment} runuser -u {USER} -- {' '.join(command)} 2>&1", check=False, timeout=600)
    return done.returncode, done.stdout


def test_the_install_is_read_only_and_the_user_has_no_home(site: SiteNamespace) -> None:
    status, output = as_user(site, "sh", "-c", "'echo $HOME; touch /opt/hpcpredict/venv/x || echo read-only'")
    assert output.split() == ["/nonexistent", *output.split()[1:-1], "read-only"], output
    assert "numba" in site.run([f"{PREFIX}/venv/bin/pip", "list"]).stdout  # the dependencies are there


def test_learning_and_simulating_work_with_no_numba_cache_folder(site: SiteNamespace) -> None:
    """train (the NAG kernels) and simulate (the backfilling kernel): compiled in memory."""
    status, output = as_user(site, "hpcpredict", "train", SAMPLE, "--db", f"sqlite:///{work(site)}/h.db")
    assert status == 0 and "4,997 learning steps" in output, output
    assert "cannot cache" not in output and "Traceback" not in output
    status, output = as_user(site, "hpcpredict", "simulate", SAMPLE, "--format", "json")
    assert status == 0 and "cannot cache" not in output, output[-3000:]
    status, output = as_user(site, "hpcpredict", "errors")  # the views: finds nothing, says so in one line
    assert status == 1 and "Traceback" not in output and "no such database file" in output, output


def test_numba_caches_where_numba_cache_dir_says(site: SiteNamespace) -> None:
    """The unit's Environment=NUMBA_CACHE_DIR (its CacheDirectory=): the kernels are cached there."""
    site.shell(f"install -d -o {USER} -g {USER} -m 0750 /var/cache/{USER}")
    status, output = as_user(site, "hpcpredict", "train", SAMPLE, "--db", f"sqlite:///{work(site)}/c.db",
                             environment=f"NUMBA_CACHE_DIR=/var/cache/{USER}")
    assert status == 0, output
    cached = site.run(["find", f"/var/cache/{USER}", "-name", "*.nbi"]).stdout.split()
    assert any("nag_kernels" in name for name in cached), cached


def test_train_names_the_command_that_makes_its_folder(site: SiteNamespace) -> None:
    """The quick start's step 3 before step 2 made /var/lib/hpcpredict: one line, no traceback."""
    status, output = as_user(site, "hpcpredict", "train", SAMPLE, "--db", "sqlite:////var/lib/hpq-missing/h.db")
    assert status == 1 and "Traceback" not in output, output
    assert ("/var/lib/hpq-missing: cannot create the database's folder (Permission denied); as root, make it "
            f"this user's first: install -d -o {USER} -g {USER} -m 0750 /var/lib/hpq-missing") in output


def test_the_views_write_their_page_quietly_as_the_user(site: SiteNamespace) -> None:
    """`errors` and `report` on a trained store, as the user with no home: the page and its plots,
    and not a word from matplotlib or fontconfig about folders it cannot write (they used to print
    two warnings and four "Fontconfig error" lines on every report: hpcpredict/headless_plots.py);
    the temporary folder they get instead is gone after."""
    db = f"sqlite:///{work(site)}/views.db"
    status, output = as_user(site, "hpcpredict", "train", SAMPLE, "--db", db)
    assert status == 0, output
    status, output = as_user(site, "hpcpredict", "errors", "--db", db)
    assert status == 0 and "jobs judged: 4,997 history" in output, output
    left_before = site.shell("find /tmp -maxdepth 1 -name 'hpcpredict-matplotlib-*' | wc -l").stdout
    status, output = as_user(site, "hpcpredict", "report", "--db", db, "--out", f"{work(site)}/page")
    assert status == 0 and output.strip().splitlines() == [
        f"4,997 jobs reported: {work(site)}/page/index.html; jobs judged: 4,997 history + 0 live (--source both)"], output
    written = site.run(["ls", f"{work(site)}/page"]).stdout.split()
    assert "index.html" in written and sum(name.endswith(".png") for name in written) == 4, written
    assert site.shell("find /tmp -maxdepth 1 -name 'hpcpredict-matplotlib-*' | wc -l").stdout == left_before


def test_the_daemon_serves_the_sysadmin_page_as_the_user(site: SiteNamespace) -> None:
    """GET /report from `hpcpredict serve` run as the user with no home: the page, its four figures
    drawn in the daemon's read worker (matplotlib and fontconfig quiet there too), behind the token
    given as a browser gives it (Basic, any user name). The daemon picks its own free port and says
    which in its log."""
    import re

    w = work(site)
    db = f"sqlite:///{w}/live.db"
    status, output = as_user(site, "hpcpredict", "train", SAMPLE, "--db", db)
    assert status == 0, output
    site.shell(f"cd {w} && runuser -u {USER} -- sh -c 'umask 077; head -c 32 /dev/urandom | od -An -tx1 "
               f"| tr -d \" \\n\" > token'")
    site.shell(f"cd {w} && runuser -u {USER} -- sh -c 'nohup hpcpredict serve --db {db} --socket {w}/d.sock "
               f"--http 127.0.0.1:0 --http-token-file {w}/token --spool {w}/spool --log-level info "
               f"> serve.log 2>&1 & echo $! > serve.pid'")
    try:
        up = site.shell(f"for i in $(seq 480); do grep -q 'serving on .* and http://' {w}/serve.log && exit 0; "
                        f"sleep 0.5; done; exit 1", check=False)
        log = site.shell(f"cat {w}/serve.log").stdout
        assert up.returncode == 0, log
        port = int(re.search(r"serving on .* and http://127\.0\.0\.1:(\d+)", log).group(1))
        fetched = site.shell(f"cd {w} && curl -s -u admin:$(cat token) -o page.html -w '%{{http_code}}' "
                             f"http://127.0.0.1:{port}/report", timeout=300, check=False)
        assert fetched.stdout == "200", (fetched.returncode, fetched.stdout, site.shell(f"cat {w}/serve.log").stdout)
        page = site.shell(f"cat {w}/page.html").stdout
        assert page.count("src='data:image/png;base64,") == 4 and "id='daemon'" in page
        refused = site.shell(f"curl -s -o /dev/null -w '%{{http_code}}' -u admin:wrong http://127.0.0.1:{port}/report")
        assert refused.stdout == "401"
    finally:
        # this daemon only: the chroots' site tests run at once in one PID namespace, with users of
        # the same uid, and `pkill -u` killed the others' daemons mid-answer (curl: empty reply)
        site.shell(f"kill $(cat {w}/serve.pid) || true; sleep 1", check=False)
    log = site.shell(f"cat {w}/serve.log").stdout
    assert "Matplotlib" not in log and "Fontconfig" not in log, log
