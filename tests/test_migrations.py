"""Alembic migrations: round trip on both dialects, and the models match the newest revision.

Driven through Alembic's command API (pytest-alembic does not run under pytest 9).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect
from test_store_support import store_url  # noqa: F401  (fixture)

from farm.store.database import open_store
from farm.store.engine import create_store_engine
from farm.store.migrate import alembic_config, current, downgrade, head_revision, migrations_dir, upgrade
from farm.store.models import Base

FARM_TABLES = {
    "topologies",
    "campaigns",
    "trials",
    "winners",
    "sweep_runs",
    "sweep_cases",
    "sweep_steps",
    "tuning_requests",
    "trial_counts",
    "trial_failures",
}


def _tables(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_round_trip(store_url):  # noqa: F811
    config = alembic_config(store_url)
    command.upgrade(config, "head")
    assert _tables(store_url) == FARM_TABLES
    assert current(store_url) == head_revision()
    command.downgrade(config, "base")
    assert _tables(store_url) == set()
    assert current(store_url) is None
    command.upgrade(config, "head")
    assert _tables(store_url) == FARM_TABLES
    assert current(store_url) == head_revision()


def test_locked_upgrade_and_downgrade_helpers_round_trip(store_url):  # noqa: F811
    upgrade(store_url)
    downgrade(store_url, "base")
    assert _tables(store_url) == set()
    upgrade(store_url)
    assert _tables(store_url) == FARM_TABLES


def test_models_match_the_newest_migration(store_url):  # noqa: F811
    upgrade(store_url)
    engine = create_store_engine(store_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_migrations_have_one_head_and_are_found_through_the_package():
    import farm.migrations

    assert migrations_dir() == Path(farm.migrations.__file__).resolve().parent
    assert (migrations_dir() / "env.py").exists() and (migrations_dir() / "script.py.mako").exists()
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert scripts.get_heads() == [head_revision()]
    assert [s.revision for s in scripts.walk_revisions()][-1] == "0001_initial"


def test_offline_sql_renders_every_table(capsys):
    command.upgrade(alembic_config("postgresql+psycopg://u@h/db"), "head", sql=True)
    sql = capsys.readouterr().out
    for table in FARM_TABLES:
        assert f"CREATE TABLE {table}" in sql
    assert "uq_trials_topology_hash_kernel_source_hash_problem_schedule" in sql


def test_cli_db_commands_upgrade_report_and_downgrade(tmp_path, capsys):
    from farm.cli.main import main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["db", "upgrade", "--db", url]) == 0
    assert capsys.readouterr().out.split()[0] == head_revision()
    assert main(["db", "downgrade", "base", "--db", url]) == 0
    assert "no migrations applied" in capsys.readouterr().out
    assert _tables(url) == set()
    assert main(["db", "current", "--db", url]) == 0
    assert "no migrations applied" in capsys.readouterr().out


def test_cli_db_upgrade_rejects_an_unsupported_url(capsys):
    from farm.cli.main import main

    assert main(["db", "upgrade", "--db", "mysql://u@h/db"]) == 2
    assert "unsupported database 'mysql'" in capsys.readouterr().err


def test_migrations_leave_no_lock_file_whether_they_work_or_fail(tmp_path, capsys):
    from farm.cli.main import main

    db = tmp_path / "farm.db"
    url = f"sqlite:///{db}"
    assert main(["db", "upgrade", "--db", url]) == 0
    assert main(["db", "downgrade", "head+1", "--db", url]) != 0  # past the newest revision
    assert capsys.readouterr().err.startswith("farm: error:")
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(db.read_bytes()[:1000])
    assert main(["db", "upgrade", "--db", f"sqlite:///{truncated}"]) != 0
    assert capsys.readouterr().err.startswith("farm: error:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["farm.db", "truncated.db"]


def test_the_migration_lock_serializes_holders_though_each_removes_its_file(tmp_path):
    import threading
    import time

    from farm.store.migrate import _migration_lock

    url, inside, overlaps = f"sqlite:///{tmp_path / 'x.db'}", [], []

    def hold():
        with _migration_lock(url):
            inside.append(1)
            overlaps.append(len(inside))
            time.sleep(0.02)
            inside.pop()

    threads = [threading.Thread(target=hold) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [1] * 6 and not (tmp_path / "x.db.migrate-lock").exists()


def test_heartbeat_revision_adds_and_drops_its_column_and_keeps_the_campaigns(store_url):  # noqa: F811
    from datetime import UTC, datetime

    from sqlalchemy import select

    from farm.store.models import CampaignRow
    from farm.store.repo import campaign

    upgrade(store_url, "0001_initial")
    engine = create_store_engine(store_url)
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    values = {"started_at": started, "status": "running", "command": "farm tune", "strategy": "random"}
    values |= {"budget": None, "reps": 5, "host": "h", "total": 4, "done": 2, "failures": 0}
    try:
        with engine.begin() as conn:  # a campaign a driver of revision 0001 was running
            cid = conn.execute(CampaignRow.__table__.insert().values(values)).inserted_primary_key[0]
        upgrade(store_url, "0002_campaign_heartbeat")
        assert "heartbeat_at" in {c["name"] for c in inspect(engine).get_columns("campaigns")}
        store = open_store(store_url)
        row = campaign(store, cid)
        assert row["heartbeat_at"] is None and row["done"] == 2
        assert row["status"] == "interrupted"  # no heartbeat ever: its start is long past
        store.engine.dispose()
        downgrade(store_url, "0001_initial")
        assert "heartbeat_at" not in {c["name"] for c in inspect(engine).get_columns("campaigns")}
        with engine.connect() as conn:
            kept = conn.execute(select(CampaignRow.id, CampaignRow.status, CampaignRow.done)).all()
        assert [tuple(r) for r in kept] == [(cid, "running", 2)]
    finally:
        engine.dispose()


def _trial_indexes(url: str) -> set[str]:
    engine = create_store_engine(url)
    try:
        return {ix["name"] for ix in inspect(engine).get_indexes("trials")}
    finally:
        engine.dispose()


def test_revision_0003_adds_and_drops_the_trial_indexes(store_url):  # noqa: F811
    new = {"ix_trials_campaign_id_id", "ix_trials_kernel_problem_topology"}
    upgrade(store_url, "0003_trial_indexes")
    assert new <= _trial_indexes(store_url)
    downgrade(store_url, "0002_campaign_heartbeat")
    assert not new & _trial_indexes(store_url)
    assert "ix_trials_kernel_status" in _trial_indexes(store_url)
    upgrade(store_url)
    assert new <= _trial_indexes(store_url)
