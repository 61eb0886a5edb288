"""hpcpredict's test bed: the real servers and systems its tests and benchmarks run against.

Not part of the installed package (pyproject's packages are ``hpcpredict*``); imported by
``tests/`` (pytest puts the repository's root on ``sys.path``: ``pythonpath`` in pyproject.toml)
and by ``benchmarks/`` alike, and run by hand as modules from the repository's root:

    system_packages   the Debian packages the servers need, installed in one apt-get (the one list)
    slurm_cluster     a real slurmctld + slurmd (+ slurmdbd on MariaDB) on loopback
    slurm_chroot      Debian's newer Slurm releases (24.11, 26.05) in debootstrap chroots
    site_install      a site's root-owned install made with Debian's python3, in a mount namespace
    unit_emulation    deploy/'s systemd units applied without systemd as PID 1
    pg_server         a throw-away PostgreSQL cluster
    daemon_thread     a daemon serving in a thread of the test process, and the wait for one

    python3 -m testbed.system_packages          # as root: install what is missing
    python3 -m testbed.slurm_chroot build sid   # a chroot, built once and cached
"""
