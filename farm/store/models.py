"""SQLAlchemy 2 typed models: topologies, campaigns, trials, winners, the recurrent sweep tables
and the tuning queue (tuning_requests).

Each class is a row of its table and named so (`CampaignRow` is a row of `campaigns`); the
domain's objects, such as farm.tuning.campaign.Campaign and farm.store.WinnerRecord, are
other classes. Queries live in `farm.store.repo` and beside it, not here. Constraint names
come from the naming convention so they are the same on SQLite and PostgreSQL (Alembic
relies on that).
Every timestamp is a timezone-aware UTC datetime on both dialects (`UtcDateTime`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# "interrupted": the driver stopped (Ctrl-C, or killed: its heartbeat went stale, see
# farm.store.repo.STALE_AFTER_S); a re-run of the same command resumes its trials.
CAMPAIGN_STATUSES = ("running", "done", "failed", "interrupted")


class UtcDateTime(TypeDecorator):
    """A DateTime that is always timezone-aware UTC in Python, also on SQLite (which drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware (UTC) datetime")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class TopologyRow(Base):
    """One adapter identity; winners and trials are keyed by its hash."""

    __tablename__ = "topologies"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    device_name: Mapped[str] = mapped_column(String(256))
    backend: Mapped[str] = mapped_column(String(32))
    adapter_type: Mapped[str] = mapped_column(String(32))
    vendor_id: Mapped[int] = mapped_column(BigInteger)
    device_id: Mapped[int] = mapped_column(BigInteger)
    driver_description: Mapped[str] = mapped_column(Text)
    profile_json: Mapped[dict] = mapped_column(JSON)
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class CampaignRow(Base):
    """One `farm tune` run: its command, strategy, progress and heartbeat."""

    __tablename__ = "campaigns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    command: Mapped[str] = mapped_column(Text)
    strategy: Mapped[str] = mapped_column(String(32))
    budget: Mapped[int | None] = mapped_column(Integer)
    reps: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(256))
    total: Mapped[int] = mapped_column(Integer, default=0)
    done: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    # The driver's last sign of life (start, each progress write, at least every
    # farm.tuning.campaign.HEARTBEAT_S); NULL on rows from before revision 0002.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class TrialRow(Base):
    """One measured and certified (topology, kernel, source, problem, schedule); failures included."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("topology_hash", "kernel", "source_hash", "problem", "schedule"),
        Index("ix_trials_campaign_status", "campaign_id", "status"),
        # Revision 0003: a campaign's trials by id (keyset paging) and per-kernel dashboard reads.
        Index("ix_trials_campaign_id_id", "campaign_id", "id"),
        Index("ix_trials_kernel_problem_topology", "kernel", "problem", "topology_hash", "status"),
        # Revision 0006: newest first without a sort, stopping at the page's or the chart's
        # limit (the Trials page by kernel and status; the knob chart of one source hash).
        Index("ix_trials_kernel_status_id", "kernel", "status", "id"),
        Index("ix_trials_kernel_source_status_id", "kernel", "source_hash", "status", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id", ondelete="SET NULL"))
    topology_hash: Mapped[str] = mapped_column(ForeignKey("topologies.hash"))
    kernel: Mapped[str] = mapped_column(String(64))
    source_hash: Mapped[str] = mapped_column(String(64))
    problem: Mapped[str] = mapped_column(String(256))
    schedule: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(32), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    median_ns: Mapped[float | None] = mapped_column(Float)
    p20_ns: Mapped[float | None] = mapped_column(Float)
    p80_ns: Mapped[float | None] = mapped_column(Float)
    min_ns: Mapped[float | None] = mapped_column(Float)
    reps: Mapped[int | None] = mapped_column(Integer)
    timing_method: Mapped[str | None] = mapped_column(String(16))
    max_abs: Mapped[float | None] = mapped_column(Float)
    mean_abs: Mapped[float | None] = mapped_column(Float)
    rmse: Mapped[float | None] = mapped_column(Float)
    max_rel: Mapped[float | None] = mapped_column(Float)
    host: Mapped[str] = mapped_column(String(256), default="")
    worker_id: Mapped[str] = mapped_column(String(128), default="")
    finished_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


# Summary rows of trials without a campaign carry this campaign_id: a key column can't be NULL.
NO_CAMPAIGN = 0


class TrialCountRow(Base):
    """Trials per (campaign, topology, kernel, problem, status), kept by
    farm.store.summaries.record_summaries in the trial insert's transaction (revision 0006).
    The dashboard counts from here: its size grows with campaigns and problems, not trials."""

    __tablename__ = "trial_counts"

    campaign_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    topology_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kernel: Mapped[str] = mapped_column(String(64), primary_key=True)
    problem: Mapped[str] = mapped_column(String(256), primary_key=True)
    status: Mapped[str] = mapped_column(String(32), primary_key=True)
    trials: Mapped[int] = mapped_column(BigInteger)


class TrialFailureRow(Base):
    """Failed trials per (campaign, topology, kernel, status, message pattern): the pattern is
    the message with its values stripped (farm.store.summaries.normalize_message), keyed by
    its hash (a long message can't be an index key); `example` is the smallest message."""

    __tablename__ = "trial_failures"

    campaign_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    topology_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kernel: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(32), primary_key=True)
    pattern_hash: Mapped[str] = mapped_column(String(40), primary_key=True)
    pattern: Mapped[str] = mapped_column(Text)
    example: Mapped[str] = mapped_column(Text)
    trials: Mapped[int] = mapped_column(BigInteger)


class WinnerRow(Base):
    """The best certified schedule per (topology, kernel, problem); stale when source_hash changed.

    Revision 0005 adds how it was decided (NULL on older rows): quantiles over the
    re-measurement's rounds, the rounds, the runner-up and the margin with its interval, the
    tie flag; and `farm bench`'s vendor_ratio (vendor time / tuned time, kernel-only) with
    its method and when it was measured (see farm.store.records.WinnerRecord)."""

    __tablename__ = "winners"
    __table_args__ = (UniqueConstraint("topology_hash", "kernel", "problem"), Index("ix_winners_kernel", "kernel"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topology_hash: Mapped[str] = mapped_column(ForeignKey("topologies.hash"))
    kernel: Mapped[str] = mapped_column(String(64))
    problem: Mapped[str] = mapped_column(String(256))
    schedule: Mapped[str] = mapped_column(String(512))
    source_hash: Mapped[str] = mapped_column(String(64))
    median_ns: Mapped[float] = mapped_column(Float)
    default_median_ns: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id", ondelete="SET NULL"))
    device_name: Mapped[str] = mapped_column(String(256), default="")
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    p20_ns: Mapped[float | None] = mapped_column(Float)
    p80_ns: Mapped[float | None] = mapped_column(Float)
    rounds: Mapped[int | None] = mapped_column(Integer)
    runner_up: Mapped[str | None] = mapped_column(String(512))  # a schedule key, as `schedule`
    runner_up_ns: Mapped[float | None] = mapped_column(Float)
    margin: Mapped[float | None] = mapped_column(Float)  # runner_up / winner - 1
    margin_low: Mapped[float | None] = mapped_column(Float)
    margin_high: Mapped[float | None] = mapped_column(Float)
    tie: Mapped[bool | None] = mapped_column(Boolean)
    vendor_ratio: Mapped[float | None] = mapped_column(Float)
    vendor_method: Mapped[str | None] = mapped_column(String(64))
    vendor_measured_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


class SweepRunRow(Base):
    """One `farm sweep recurrent` run on one topology."""

    __tablename__ = "sweep_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topology_hash: Mapped[str] = mapped_column(ForeignKey("topologies.hash"), index=True)
    adapter: Mapped[str] = mapped_column(String(512), default="")
    started_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    memory_before_in_use: Mapped[int | None] = mapped_column(BigInteger)
    memory_before_reserved: Mapped[int | None] = mapped_column(BigInteger)
    memory_after_in_use: Mapped[int | None] = mapped_column(BigInteger)
    memory_after_reserved: Mapped[int | None] = mapped_column(BigInteger)


# Error metrics of the full-sequence comparison and the stepwise maxima, per tensor.
METRICS = ("max_abs", "mean_abs", "rmse", "max_rel")
CASE_METRIC_COLUMNS = tuple(f"{t}_{m}" for t in ("context", "rho") for m in METRICS)
STEP_MAX_COLUMNS = tuple(f"step_{t}_{m}" for t in ("context", "rho") for m in METRICS)
STEP_METRIC_COLUMNS = CASE_METRIC_COLUMNS


class SweepCaseRow(Base):
    """One sweep case's timings, errors vs the baseline, stepwise-consistency maxima and strict pass."""

    __tablename__ = "sweep_cases"
    __table_args__ = (UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(128))
    B: Mapped[int] = mapped_column(Integer)
    H: Mapped[int] = mapped_column(Integer)
    VH: Mapped[int] = mapped_column(Integer)
    T: Mapped[int] = mapped_column(Integer)
    L: Mapped[int] = mapped_column(Integer)
    E: Mapped[int] = mapped_column(Integer)
    baseline_ms: Mapped[float | None] = mapped_column(Float)
    fused_ms: Mapped[float | None] = mapped_column(Float)
    runtime_ms: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    runtime_speedup: Mapped[float | None] = mapped_column(Float)
    context_max_abs: Mapped[float | None] = mapped_column(Float)
    context_mean_abs: Mapped[float | None] = mapped_column(Float)
    context_rmse: Mapped[float | None] = mapped_column(Float)
    context_max_rel: Mapped[float | None] = mapped_column(Float)
    rho_max_abs: Mapped[float | None] = mapped_column(Float)
    rho_mean_abs: Mapped[float | None] = mapped_column(Float)
    rho_rmse: Mapped[float | None] = mapped_column(Float)
    rho_max_rel: Mapped[float | None] = mapped_column(Float)
    step_context_max_abs: Mapped[float | None] = mapped_column(Float)
    step_context_mean_abs: Mapped[float | None] = mapped_column(Float)
    step_context_rmse: Mapped[float | None] = mapped_column(Float)
    step_context_max_rel: Mapped[float | None] = mapped_column(Float)
    step_rho_max_abs: Mapped[float | None] = mapped_column(Float)
    step_rho_mean_abs: Mapped[float | None] = mapped_column(Float)
    step_rho_rmse: Mapped[float | None] = mapped_column(Float)
    step_rho_max_rel: Mapped[float | None] = mapped_column(Float)
    strict_pass: Mapped[bool] = mapped_column(Boolean)
    reps: Mapped[int | None] = mapped_column(Integer)
    gpu_util: Mapped[float | None] = mapped_column(Float)


class SweepStepRow(Base):
    """Stepwise consistency of one case at one step: the 8 error metrics of context and rho."""

    __tablename__ = "sweep_steps"
    __table_args__ = (UniqueConstraint("run_id", "case", "step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("sweep_runs.id", ondelete="CASCADE"))
    case: Mapped[str] = mapped_column(String(128))
    step: Mapped[int] = mapped_column(Integer)
    context_max_abs: Mapped[float | None] = mapped_column(Float)
    context_mean_abs: Mapped[float | None] = mapped_column(Float)
    context_rmse: Mapped[float | None] = mapped_column(Float)
    context_max_rel: Mapped[float | None] = mapped_column(Float)
    rho_max_abs: Mapped[float | None] = mapped_column(Float)
    rho_mean_abs: Mapped[float | None] = mapped_column(Float)
    rho_rmse: Mapped[float | None] = mapped_column(Float)
    rho_max_rel: Mapped[float | None] = mapped_column(Float)


# A tuning request's life: queued -> claimed (a drainer holds its lease) -> done, or back to
# queued (the lease expired: its drainer was killed; or an attempt failed), or failed after
# farm.store.queue's max attempts. "any" as the topology: whichever topology a drainer has.
REQUEST_STATUSES = ("queued", "claimed", "done", "failed")
ANY_TOPOLOGY = "any"
_OPEN_REQUEST = "status IN ('queued', 'claimed')"


class TuningRequestRow(Base):
    """One wanted (topology, kernel, problem, source): from `farm request` or a runtime miss,
    drained by `farm serve` (farm.store.queue holds the queries). At most one open (queued or
    claimed) request per key: a partial unique index, so a second enqueue finds the first."""

    __tablename__ = "tuning_requests"
    __table_args__ = (
        Index(
            "uq_tuning_requests_open",
            "topology_hash",
            "kernel",
            "problem",
            "source_hash",
            unique=True,
            sqlite_where=text(_OPEN_REQUEST),
            postgresql_where=text(_OPEN_REQUEST),
        ),
        Index("ix_tuning_requests_status_priority", "status", "priority", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topology_hash: Mapped[str] = mapped_column(String(64))  # a topology hash, or ANY_TOPOLOGY
    kernel: Mapped[str] = mapped_column(String(64))
    problem: Mapped[str] = mapped_column(String(256))
    source_hash: Mapped[str] = mapped_column(String(64))
    priority: Mapped[int] = mapped_column(Integer, default=0)  # higher first
    status: Mapped[str] = mapped_column(String(16), default="queued")
    requested_by: Mapped[str] = mapped_column(String(256), default="")
    claimed_by: Mapped[str | None] = mapped_column(String(256))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")
    note: Mapped[str] = mapped_column(Text, default="")  # e.g. why it is still queued
    campaign_id: Mapped[int | None] = mapped_column(ForeignKey("campaigns.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
