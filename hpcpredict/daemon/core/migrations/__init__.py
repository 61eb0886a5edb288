"""Alembic migrations of the daemon's store, shipped inside the package.

`hpcpredict.daemon.core.store.Store.upgrade` runs them with a `Config` built in code (no alembic.ini),
so a daemon upgrades its own database on start, wherever the package is installed. This file and
``versions/__init__.py`` only make setuptools ship the directory; Alembic skips ``__init__``
files when it looks for revisions.

A new revision, from a checkout::

    from alembic import command
    from hpcpredict.daemon.core.store import Store
    command.revision(Store("sqlite:///dev.db").alembic_config(), "what changed", autogenerate=True)

(after upgrading ``dev.db`` to head), then edit the generated file: give new constraints names,
check that batch mode suits the SQLite side.
"""
