"""trial indexes for a million rows: (campaign_id, id) and (kernel, problem, topology_hash, status)

ix_trials_campaign_id_id serves a campaign's trials in id order (the Trials page's keyset
paging, newest first): without it PostgreSQL walks the primary key for ORDER BY id LIMIT
with a campaign filter. ix_trials_kernel_problem_topology serves the dashboard's
per-kernel reads (problem_keys, trials_by_topology, failure groups) from the index alone.

Revision ID: 0003_trial_indexes
Revises: 0002_campaign_heartbeat
Create Date: 2026-12-01 10:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_trial_indexes"
down_revision: str | None = "0002_campaign_heartbeat"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.create_index("ix_trials_campaign_id_id", ["campaign_id", "id"], unique=False)
        batch_op.create_index(
            "ix_trials_kernel_problem_topology", ["kernel", "problem", "topology_hash", "status"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index("ix_trials_kernel_problem_topology")
        batch_op.drop_index("ix_trials_campaign_id_id")
