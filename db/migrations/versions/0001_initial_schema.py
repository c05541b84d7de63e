"""initial schema

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-30 07:09:40.880897
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "campaigns",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("strategy", sa.String(length=32), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=True),
        sa.Column("reps", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_campaigns")),
    )
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_campaigns_status"), ["status"], unique=False)

    op.create_table(
        "topologies",
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("device_name", sa.String(length=256), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("adapter_type", sa.String(length=32), nullable=False),
        sa.Column("vendor_id", sa.BigInteger(), nullable=False),
        sa.Column("device_id", sa.BigInteger(), nullable=False),
        sa.Column("driver_description", sa.Text(), nullable=False),
        sa.Column("profile_json", sa.JSON(), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("hash", name=op.f("pk_topologies")),
    )
    op.create_table(
        "sweep_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("adapter", sa.String(length=512), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("memory_before_in_use", sa.BigInteger(), nullable=True),
        sa.Column("memory_before_reserved", sa.BigInteger(), nullable=True),
        sa.Column("memory_after_in_use", sa.BigInteger(), nullable=True),
        sa.Column("memory_after_reserved", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["topology_hash"], ["topologies.hash"], name=op.f("fk_sweep_runs_topology_hash_topologies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_runs")),
    )
    with op.batch_alter_table("sweep_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sweep_runs_topology_hash"), ["topology_hash"], unique=False)

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("problem", sa.String(length=256), nullable=False),
        sa.Column("schedule", sa.String(length=512), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("median_ns", sa.Float(), nullable=True),
        sa.Column("p20_ns", sa.Float(), nullable=True),
        sa.Column("p80_ns", sa.Float(), nullable=True),
        sa.Column("min_ns", sa.Float(), nullable=True),
        sa.Column("reps", sa.Integer(), nullable=True),
        sa.Column("timing_method", sa.String(length=16), nullable=True),
        sa.Column("max_abs", sa.Float(), nullable=True),
        sa.Column("mean_abs", sa.Float(), nullable=True),
        sa.Column("rmse", sa.Float(), nullable=True),
        sa.Column("max_rel", sa.Float(), nullable=True),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("worker_id", sa.String(length=128), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"], ["campaigns.id"], name=op.f("fk_trials_campaign_id_campaigns"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["topology_hash"], ["topologies.hash"], name=op.f("fk_trials_topology_hash_topologies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trials")),
        sa.UniqueConstraint(
            "topology_hash",
            "kernel",
            "source_hash",
            "problem",
            "schedule",
            name=op.f("uq_trials_topology_hash_kernel_source_hash_problem_schedule"),
        ),
    )
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.create_index("ix_trials_campaign_status", ["campaign_id", "status"], unique=False)
        batch_op.create_index("ix_trials_kernel_status", ["kernel", "status"], unique=False)
        batch_op.create_index(batch_op.f("ix_trials_status"), ["status"], unique=False)

    op.create_table(
        "winners",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("topology_hash", sa.String(length=64), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("problem", sa.String(length=256), nullable=False),
        sa.Column("schedule", sa.String(length=512), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("median_ns", sa.Float(), nullable=False),
        sa.Column("default_median_ns", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("campaign_id", sa.Integer(), nullable=True),
        sa.Column("device_name", sa.String(length=256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["campaign_id"], ["campaigns.id"], name=op.f("fk_winners_campaign_id_campaigns"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["topology_hash"], ["topologies.hash"], name=op.f("fk_winners_topology_hash_topologies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_winners")),
        sa.UniqueConstraint("topology_hash", "kernel", "problem", name=op.f("uq_winners_topology_hash_kernel_problem")),
    )
    with op.batch_alter_table("winners", schema=None) as batch_op:
        batch_op.create_index("ix_winners_kernel", ["kernel"], unique=False)

    op.create_table(
        "sweep_cases",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("B", sa.Integer(), nullable=False),
        sa.Column("H", sa.Integer(), nullable=False),
        sa.Column("VH", sa.Integer(), nullable=False),
        sa.Column("T", sa.Integer(), nullable=False),
        sa.Column("L", sa.Integer(), nullable=False),
        sa.Column("E", sa.Integer(), nullable=False),
        sa.Column("baseline_ms", sa.Float(), nullable=True),
        sa.Column("fused_ms", sa.Float(), nullable=True),
        sa.Column("runtime_ms", sa.Float(), nullable=True),
        sa.Column("speedup", sa.Float(), nullable=True),
        sa.Column("runtime_speedup", sa.Float(), nullable=True),
        sa.Column("context_max_abs", sa.Float(), nullable=True),
        sa.Column("context_mean_abs", sa.Float(), nullable=True),
        sa.Column("context_rmse", sa.Float(), nullable=True),
        sa.Column("context_max_rel", sa.Float(), nullable=True),
        sa.Column("rho_max_abs", sa.Float(), nullable=True),
        sa.Column("rho_mean_abs", sa.Float(), nullable=True),
        sa.Column("rho_rmse", sa.Float(), nullable=True),
        sa.Column("rho_max_rel", sa.Float(), nullable=True),
        sa.Column("step_context_max_abs", sa.Float(), nullable=True),
        sa.Column("step_context_mean_abs", sa.Float(), nullable=True),
        sa.Column("step_context_rmse", sa.Float(), nullable=True),
        sa.Column("step_context_max_rel", sa.Float(), nullable=True),
        sa.Column("step_rho_max_abs", sa.Float(), nullable=True),
        sa.Column("step_rho_mean_abs", sa.Float(), nullable=True),
        sa.Column("step_rho_rmse", sa.Float(), nullable=True),
        sa.Column("step_rho_max_rel", sa.Float(), nullable=True),
        sa.Column("strict_pass", sa.Boolean(), nullable=False),
        sa.Column("reps", sa.Integer(), nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["sweep_runs.id"], name=op.f("fk_sweep_cases_run_id_sweep_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_cases")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_sweep_cases_run_id_name")),
    )
    op.create_table(
        "sweep_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("case", sa.String(length=128), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("context_max_abs", sa.Float(), nullable=True),
        sa.Column("context_mean_abs", sa.Float(), nullable=True),
        sa.Column("context_rmse", sa.Float(), nullable=True),
        sa.Column("context_max_rel", sa.Float(), nullable=True),
        sa.Column("rho_max_abs", sa.Float(), nullable=True),
        sa.Column("rho_mean_abs", sa.Float(), nullable=True),
        sa.Column("rho_rmse", sa.Float(), nullable=True),
        sa.Column("rho_max_rel", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["sweep_runs.id"], name=op.f("fk_sweep_steps_run_id_sweep_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep_steps")),
        sa.UniqueConstraint("run_id", "case", "step", name=op.f("uq_sweep_steps_run_id_case_step")),
    )


def downgrade() -> None:

    op.drop_table("sweep_steps")
    op.drop_table("sweep_cases")
    with op.batch_alter_table("winners", schema=None) as batch_op:
        batch_op.drop_index("ix_winners_kernel")

    op.drop_table("winners")
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trials_status"))
        batch_op.drop_index("ix_trials_kernel_status")
        batch_op.drop_index("ix_trials_campaign_status")

    op.drop_table("trials")
    with op.batch_alter_table("sweep_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweep_runs_topology_hash"))

    op.drop_table("sweep_runs")
    op.drop_table("topologies")
    with op.batch_alter_table("campaigns", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_campaigns_status"))

    op.drop_table("campaigns")
