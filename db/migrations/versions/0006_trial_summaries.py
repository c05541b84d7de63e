"""trial summaries: counts per (campaign, topology, kernel, problem, status) and failure groups

Adds trial_counts and trial_failures (farm.store.summaries keeps them in the trial insert's
transaction) and fills them from the trials already stored, so the dashboard's counts read
a table that grows with campaigns and problems instead of counting every trial. Offline
(`--sql`) output fills trial_counts only: the failure patterns are computed in Python; run
`farm db upgrade` online, or rebuild with farm.store.summaries.rebuild_summaries.

Replaces ix_trials_kernel_status with (kernel, status, id) and adds (kernel, source_hash,
status, id): PostgreSQL reads the newest trials of a kernel and status (a Trials page) or of
a kernel's source (the knob chart) in id order and stops at the limit instead of sorting
them all (SQLite's indexes end in the rowid already).

Revision ID: 0006_trial_summaries
Revises: 0005_winner_decision
Create Date: 2026-12-05 13:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from farm.store.summaries import rebuild_summaries

revision: str = "0006_trial_summaries"
down_revision: str | None = "0005_winner_decision"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trial_counts",
        sa.Column("campaign_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("problem", sa.String(length=256), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("trials", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "campaign_id", "topology_hash", "kernel", "problem", "status", name=op.f("pk_trial_counts")
        ),
    )
    op.create_table(
        "trial_failures",
        sa.Column("campaign_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("pattern_hash", sa.String(length=40), nullable=False),
        sa.Column("pattern", sa.Text(), nullable=False),
        sa.Column("example", sa.Text(), nullable=False),
        sa.Column("trials", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "campaign_id", "topology_hash", "kernel", "status", "pattern_hash", name=op.f("pk_trial_failures")
        ),
    )
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_kernel_status")
        batch_op.create_index("ix_trials_kernel_status_id", ["kernel", "status", "id"], unique=False)
        batch_op.create_index(
            "ix_trials_kernel_source_status_id", ["kernel", "source_hash", "status", "id"], unique=False
        )
    if context.is_offline_mode():
        op.execute(
            "INSERT INTO trial_counts (campaign_id, topology_hash, kernel, problem, status, trials)"
            " SELECT coalesce(campaign_id, 0), topology_hash, kernel, problem, status, count(*) FROM trials"
            " GROUP BY coalesce(campaign_id, 0), topology_hash, kernel, problem, status"
        )
    else:
        rebuild_summaries(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_kernel_source_status_id")
        batch_op.drop_index("ix_trials_kernel_status_id")
        batch_op.create_index("ix_trials_kernel_status", ["kernel", "status"], unique=False)
    op.drop_table("trial_failures")
    op.drop_table("trial_counts")
