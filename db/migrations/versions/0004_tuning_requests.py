"""tuning queue: tuning_requests, what users (`farm request`) and runtime misses asked to tune

`farm serve` drains it (farm.store.queue, farm.tuning.serve). The partial unique index
uq_tuning_requests_open keeps one open (queued or claimed) request per (topology, kernel,
problem, source hash): a second enqueue of the same thing finds the first.

Revision ID: 0004_tuning_requests
Revises: 0003_trial_indexes
Create Date: 2026-12-05 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_tuning_requests"
down_revision: str | None = "0003_trial_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN = "status IN ('queued', 'claimed')"


def upgrade() -> None:
    op.create_table(
        "tuning_requests",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("problem", sa.String(length=256), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("requested_by", sa.String(length=256), nullable=False),
        sa.Column("claimed_by", sa.String(length=256), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["campaigns.id"],
            name=op.f("fk_tuning_requests_campaign_id_campaigns"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_requests")),
    )
    with op.batch_alter_table("tuning_requests", schema=None) as batch_op:
        batch_op.create_index(
            "uq_tuning_requests_open",
            ["topology_hash", "kernel", "problem", "source_hash"],
            unique=True,
            sqlite_where=sa.text(OPEN),
            postgresql_where=sa.text(OPEN),
        )
        batch_op.create_index("ix_tuning_requests_status_priority", ["status", "priority", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tuning_requests", schema=None) as batch_op:
        batch_op.drop_index("ix_tuning_requests_status_priority")
        batch_op.drop_index("uq_tuning_requests_open")
    op.drop_table("tuning_requests")
