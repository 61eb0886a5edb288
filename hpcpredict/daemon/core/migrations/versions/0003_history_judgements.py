"""The jobs `hpcpredict train` judged while replaying a history (``history_judgements``), kept
apart from the live judgements so that `errors` and `report` can show either or both.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "history_judgements",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("end_s", sa.BigInteger(), nullable=False),
        sa.Column("predicted_s", sa.BigInteger(), nullable=False),
        sa.Column("run_s", sa.BigInteger(), nullable=False),
        sa.Column("requested_s", sa.BigInteger(), nullable=False),
        sa.Column("ave2_s", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_history_judgements")),
    )


def downgrade() -> None:
    op.drop_table("history_judgements")
