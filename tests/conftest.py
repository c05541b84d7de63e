"""Shared fixtures: one wgpu device per test session (lavapipe on CI), an isolated FARM_HOME."""

from __future__ import annotations

import os

import pytest
from pg import pg_fresh_url, pg_server, pg_url  # noqa: F401  (PostgreSQL fixtures: tests/pg.py)

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


@pytest.fixture(scope="session")
def device():
    from farm.gpu import Device

    return Device()


@pytest.fixture
def farm_home(tmp_path, monkeypatch):
    home = tmp_path / "farm_home"
    home.mkdir()
    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.delenv("FARM_DATABASE_URL", raising=False)
    return home
