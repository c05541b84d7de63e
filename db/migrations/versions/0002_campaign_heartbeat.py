"""campaign heartbeat: campaigns.heartbeat_at, the driver's last sign of life

A running campaign whose heartbeat is older than farm.store.repo.STALE_AFTER_S is shown
as interrupted (its driver was killed). Rows from before this revision keep NULL, and
readers fall back to started_at for them.

Revision ID: 0002_campaign_heartbeat
Revises: 0001_initial
Create Date: 2026-12-04 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_campaign_heartbeat"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # Statuses are kept as they are ("interrupted" included: 0001 has no constraint on them).
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_column("heartbeat_at")
