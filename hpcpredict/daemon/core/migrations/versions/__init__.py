"""Alembic revisions of the daemon's store (see the parent package)."""
