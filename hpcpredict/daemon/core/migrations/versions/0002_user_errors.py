"""Users' running error totals (``user_errors``), updated at every job end; an index of each
user's jobs by end (for AVE2's last two runtimes at a submission), which replaces the index on
the user alone.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

Creates the table only: a store upgraded from 0001 gets its totals from the jobs already judged
when `PredictionService.open` finds the table empty (the computation lives in the package, which
a migration must not import).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "user_errors",
        sa.Column("user_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("jobs", sa.BigInteger(), nullable=False),
        sa.Column("abs_error_sum_s", sa.BigInteger(), nullable=False),
        sa.Column("under_jobs", sa.BigInteger(), nullable=False),
        sa.Column("ratio_sum", sa.Float(), nullable=False),
        sa.Column("corrections", sa.BigInteger(), nullable=False),
        sa.Column("requested_abs_error_sum_s", sa.BigInteger(), nullable=False),
        sa.Column("ave2_abs_error_sum_s", sa.BigInteger(), nullable=False),
        sa.Column("last_end_s", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_user_errors")),
    )
    op.create_index("ix_jobs_user_id_end_s", "jobs", ["user_id", "end_s"], unique=False)
    op.drop_index("ix_jobs_user_id", table_name="jobs")  # the new index's first column


def downgrade() -> None:
    op.create_index("ix_jobs_user_id", "jobs", ["user_id"], unique=False)
    op.drop_index("ix_jobs_user_id_end_s", table_name="jobs")
    op.drop_table("user_errors")
