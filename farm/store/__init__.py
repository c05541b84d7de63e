"""The farm's database: SQLAlchemy 2 models, Alembic migrations, repository functions.

Open with `open_store(url=None, read_only=False)`; every query is a function taking the
Store (see docs/architecture/store.md).
"""

from farm.store.database import ReadOnlyStoreError, Store, database_url, farm_home, open_existing, open_store
from farm.store.export import SCHEDULES_FORMAT, export_schedules, write_schedules_file
from farm.store.listing import format_winners, resolve_topology, winners_json
from farm.store.records import WinnerRecord
from farm.store.repo import (
    campaign,
    campaigns,
    count_trials,
    finish_campaign,
    record_trials,
    recorded_schedules,
    start_campaign,
    topologies,
    trial_status_counts,
    trials,
    update_campaign,
    upsert_topology,
)
from farm.store.sweeps import record_sweep, sweep_cases, sweep_steps, sweeps
from farm.store.winner_rows import save_vendor_ratio, save_winner, winners

__all__ = [
    "SCHEDULES_FORMAT",
    "ReadOnlyStoreError",
    "Store",
    "WinnerRecord",
    "campaign",
    "campaigns",
    "count_trials",
    "database_url",
    "export_schedules",
    "farm_home",
    "finish_campaign",
    "format_winners",
    "open_existing",
    "open_store",
    "record_sweep",
    "record_trials",
    "resolve_topology",
    "recorded_schedules",
    "save_vendor_ratio",
    "save_winner",
    "start_campaign",
    "sweep_cases",
    "sweep_steps",
    "sweeps",
    "topologies",
    "trial_status_counts",
    "trials",
    "update_campaign",
    "upsert_topology",
    "winners",
    "winners_json",
    "write_schedules_file",
]
