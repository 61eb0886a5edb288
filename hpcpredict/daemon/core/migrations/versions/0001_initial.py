"""Initial schema: jobs, predictions, corrections, events, checkpoints.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written out in full rather than imported from the models: a migration is a snapshot of the schema
at its revision and must not change when the models do.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# SQLite auto-increments only an INTEGER PRIMARY KEY; PostgreSQL gets a BIGINT identity.
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("procs", sa.Integer(), nullable=False),
        sa.Column("requested_s", sa.BigInteger(), nullable=False),
        sa.Column("executable_id", sa.Integer(), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("partition_id", sa.Integer(), nullable=False),
        sa.Column("submit_s", sa.BigInteger(), nullable=False),
        sa.Column("start_s", sa.BigInteger(), nullable=True),
        sa.Column("end_s", sa.BigInteger(), nullable=True),
        sa.Column("run_s", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("final_state", sa.String(length=32), nullable=True),
        sa.Column("limit_s", sa.BigInteger(), nullable=True),
        sa.Column("observed", sa.Boolean(), nullable=False),
        sa.Column("killed_at_lowered_limit", sa.Boolean(), nullable=True),
        sa.Column("learned", sa.Boolean(), nullable=True),
        sa.Column("learn_rule", sa.String(length=32), nullable=True),
        sa.CheckConstraint(
            "status IN ('submitted', 'running', 'ended')", name=op.f("ck_jobs_status")
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_user_id"), "jobs", ["user_id"])
    op.create_index(op.f("ix_jobs_end_s"), "jobs", ["end_s"])

    op.create_table(
        "predictions",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("predicted_s", sa.BigInteger(), nullable=False),
        sa.Column("predicted_at_s", sa.BigInteger(), nullable=False),
        sa.Column("model_t", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_predictions_job_id_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_predictions")),
    )
    op.create_index(op.f("ix_predictions_job_id"), "predictions", ["job_id"])

    op.create_table(
        "corrections",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("old_limit_s", sa.BigInteger(), nullable=False),
        sa.Column("new_limit_s", sa.BigInteger(), nullable=False),
        sa.Column("changed_at_s", sa.BigInteger(), nullable=False),
        sa.Column("event_seq", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.job_id"], name=op.f("fk_corrections_job_id_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_corrections")),
    )
    op.create_index(op.f("ix_corrections_job_id"), "corrections", ["job_id"])

    op.create_table(
        "events",
        sa.Column("seq", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("occurred_at_s", sa.BigInteger(), nullable=False),
        sa.Column("recorded_at_s", sa.Float(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=False),
        sa.CheckConstraint(
            "kind IN ('submitted', 'started', 'ended', 'limit_changed')",
            name=op.f("ck_events_kind"),
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_events")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_events_idempotency_key")),
    )
    op.create_index(op.f("ix_events_job_id"), "events", ["job_id"])

    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("created_at_s", sa.Float(), nullable=False),
        sa.Column("last_event_seq", sa.BigInteger(), nullable=False),
        sa.Column("state_npz", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint("last_event_seq", name=op.f("uq_checkpoints_last_event_seq")),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_index(op.f("ix_events_job_id"), table_name="events")
    op.drop_table("events")
    op.drop_index(op.f("ix_corrections_job_id"), table_name="corrections")
    op.drop_table("corrections")
    op.drop_index(op.f("ix_predictions_job_id"), table_name="predictions")
    op.drop_table("predictions")
    op.drop_index(op.f("ix_jobs_end_s"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_user_id"), table_name="jobs")
    op.drop_table("jobs")
