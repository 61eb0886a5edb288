"""What a missing numba cache costs a command's start.

Run on demand, as root (it lays out a site's install: testbed/site_install.py), and copy the lines
into docs/performance.md:

    python benchmarks/bench_numba_cache.py --runs 3

In a private mount namespace, hpcpredict installed as a site installs it (a venv of Debian's
/usr/bin/python3 at /opt/hpcpredict, root-owned, read-only), then, as user `nobody` (home
/nonexistent), a fresh process imports the learner and makes its first learning step (predict,
start, end: every NAG kernel runs once), `--runs` times: without any writable numba cache folder
(the kernels compiled in memory, `hpcpredict/compiled.py`), then with NUMBA_CACHE_DIR on a
writable folder (the unit's CacheDirectory=; its first run fills the cache).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testbed/
from testbed.site_install import PREFIX, SiteNamespace, dependencies_prefix  # noqa: E402

PROBE = ("import time; t0=time.perf_counter(); from hpcpredict.daemon.core.config import DaemonConfig; "
         "from hpcpredict.jobs import JobRequest; p=DaemonConfig().predictor_factory(); t1=time.perf_counter(); "
         "j=JobRequest(job_id=1, submit_s=0, procs=1, requested_s=3600, user_id=0); p.predict(j, 0); "
         "p.job_started(j, 1); p.job_ended(j, 600, 601, killed_at_limit=False); t2=time.perf_counter(); "
         "print(f'import {t1-t0:.2f} s, first learning step {t2-t1:.2f} s')")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    site = SiteNamespace(dependencies_prefix()).start()
    try:
        site.install_checkout()
        site.run(["mount", "-o", "remount,bind,ro", str(PREFIX)])
        site.shell("install -d -o nobody -g nogroup -m 0750 /var/cache/hpcpredict-bench")
        for label, environment in (("no cache folder", ""),
                                   ("NUMBA_CACHE_DIR", "NUMBA_CACHE_DIR=/var/cache/hpcpredict-bench")):
            for run in range(runs):
                done = site.shell(f'cd / && {environment} runuser -u nobody -- {PREFIX}/venv/bin/python -c "{PROBE}"')
                print(f"{label}, run {run + 1}: {done.stdout.strip()}", flush=True)
    finally:
        site.close()


if __name__ == "__main__":
    main()
