"""winner decision: how each winner was chosen, and farm bench's ratio to the vendor library

Adds winners.p20_ns/p80_ns (quantiles over the re-measurement's rounds), rounds, the
runner-up (schedule key and median) and margin (runner_up / winner - 1, with its sign-test
interval margin_low/margin_high), tie (chosen among finalists within the noise), and
vendor_ratio (vendor kernel-only time / tuned time, from `farm bench`) with vendor_method
and vendor_measured_at. All nullable: rows from before this revision keep NULL, and
readers show them as unknown.

Revision ID: 0005_winner_decision
Revises: 0004_tuning_requests
Create Date: 2026-12-06 10:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_winner_decision"
down_revision: str | None = "0004_tuning_requests"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("p20_ns", sa.Float()),
    ("p80_ns", sa.Float()),
    ("rounds", sa.Integer()),
    ("runner_up", sa.String(length=512)),
    ("runner_up_ns", sa.Float()),
    ("margin", sa.Float()),
    ("margin_low", sa.Float()),
    ("margin_high", sa.Float()),
    ("tie", sa.Boolean()),
    ("vendor_ratio", sa.Float()),
    ("vendor_method", sa.String(length=64)),
    ("vendor_measured_at", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("winners", schema=None) as batch_op:
        for name, type_ in COLUMNS:
            batch_op.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    # On SQLite the batch rebuilds the table without these columns, keeping every winner.
    with op.batch_alter_table("winners", schema=None) as batch_op:
        for name, _ in reversed(COLUMNS):
            batch_op.drop_column(name)
