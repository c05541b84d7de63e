"""The dashboard's one cached resource (the read-only store) and its page-level behaviours:
the how-to-start message instead of a traceback, and self-refresh while a campaign runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import streamlit as st

from farm.dashboard import data
from farm.store.database import Store
from farm.store.engine import database_url as resolve_url

REFRESH_S = 5.0


def database_url(argv: list[str] | None = None) -> str:
    """`--db URL` given after `--` to `streamlit run`, else `$FARM_DATABASE_URL`, else the farm default."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    known, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    return resolve_url(known.db)


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    return data.open_readonly(url)


def store() -> Store:
    """The read-only store; shows how to start and stops the page when there is nothing to show."""
    try:
        opened = _store(database_url())
        data.require_data(opened)
    except data.NoData as exc:
        st.info(str(exc))
        st.stop()
    return opened


def refreshing(store: Store, render: Callable[[], None]) -> None:
    """Render now; while a campaign is running, re-render every REFRESH_S seconds until it ends."""
    if not data.running_campaigns(store):
        render()
        return

    def live() -> None:
        if not data.running_campaigns(store):
            st.rerun(scope="app")  # the campaign ended: one full rerun drops the timer
        st.caption(f"A campaign is running: this view refreshes every {REFRESH_S:.0f} s.")
        render()

    st.fragment(live, run_every=REFRESH_S)()


def pick(label: str, options: dict, key: str) -> object | None:
    """A select box with an "All" entry; returns the chosen option's key or None for All."""
    choices = [None, *options]
    return st.selectbox(label, choices, format_func=lambda v: "All" if v is None else options[v], key=key)
