"""Keyset paging over trials: each page costs the same however deep it is (no OFFSET)."""

from __future__ import annotations

from sqlalchemy import select

from farm.store.database import Store
from farm.store.models import TrialRow
from farm.store.repo import _trial_filters, fetch_rows


def trials_keyset(
    store: Store,
    limit: int,
    before: int | None = None,
    after: int | None = None,
    topology: str | None = None,
    kernel: str | None = None,
    status: str | None = None,
    campaign: int | None = None,
) -> list[dict]:
    """Up to `limit` trials matching the filters, newest (highest id) first: the newest ones,
    those with id < `before` (the next older page), or the oldest with id > `after` (the next
    newer page). Keyset paging: each page costs the same however deep it is (no OFFSET), on
    the primary key or ix_trials_campaign_id_id."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if before is not None and after is not None:
        raise ValueError("pass before or after, not both")
    stmt = _trial_filters(select(TrialRow.__table__), topology, kernel, status, campaign)
    if after is not None:
        rows = fetch_rows(store, stmt.where(TrialRow.id > after).order_by(TrialRow.id).limit(limit))
        return rows[::-1]
    if before is not None:
        stmt = stmt.where(TrialRow.id < before)
    return fetch_rows(store, stmt.order_by(TrialRow.id.desc()).limit(limit))
