"""The dashboard over a campaign whose driver was killed: shown as interrupted, and no page
refreshes itself for it (a live campaign's pages re-run every few seconds; a dead one's would forever)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from streamlit.testing.v1 import AppTest
from test_store_support import profile, trial

from farm import store
from farm.dashboard import serve
from farm.store.models import CampaignRow, utcnow
from farm.store.repo import STALE_AFTER_S

APP = str(serve.app_path())


@pytest.fixture
def url(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    db = store.open_store(url)
    topo = store.upsert_topology(db, profile())
    killed = store.start_campaign(db, "farm tune gemv", "random", 4, 5, total=10)
    store.record_trials(db, killed, [trial(topo, wg) for wg in (32, 64)])
    store.update_campaign(db, killed, done=2, failures=0)
    with db.engine.begin() as conn:  # its driver died two minutes ago
        stale = utcnow() - timedelta(seconds=STALE_AFTER_S + 60)
        conn.execute(update(CampaignRow).where(CampaignRow.id == killed).values(heartbeat_at=stale))
    db.engine.dispose()
    monkeypatch.setenv("FARM_DATABASE_URL", url)
    return url


@pytest.mark.parametrize("page", [None, "winners", "trials", "compare"])
def test_a_killed_campaign_shows_interrupted_and_no_page_refreshes_for_it(url, page):
    at = AppTest.from_file(APP, default_timeout=60).run()
    if page is not None:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("refreshes every" in c.value for c in at.caption)
    if page is None:
        campaigns = at.dataframe[1].value
        assert campaigns["status"].tolist() == ["interrupted"] and campaigns["done"].tolist() == [2]
        assert any(c.value.startswith("interrupted: its driver stopped") for c in at.caption)
