"""The dashboard's one cached resource (the read-only store) and its page-level behaviours:
the how-to-start message, or one sentence on why the database can't be read, instead of a
traceback, and self-refresh while a campaign runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from farm.dashboard import data
from farm.store.database import Store
from farm.store.engine import database_url as resolve_url
from farm.store.engine import describe_error, mask_url

REFRESH_S = 5.0
# What an unreachable server or an unreadable or corrupt file raises: pages show
# `unreadable(url, exc)` for these (and, when opening, a bad URL's ValueError).
UNREADABLE = (SQLAlchemyError, OSError)


def unreadable(url: str | None, exc: BaseException) -> str:
    """One sentence for a database the dashboard can't read (password masked)."""
    where = mask_url(url) if url else "the farm database"
    return f"Can't read {where}: {describe_error(exc)}."


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
    """The read-only store; shows how to start, or why the database can't be read, in one
    sentence and stops the page when there is nothing to show."""
    url = None
    try:
        url = database_url()
        opened = _store(url)
        data.require_data(opened)
    except data.NoData as exc:
        st.info(str(exc))
        st.stop()
    except (*UNREADABLE, ValueError) as exc:  # ValueError: a malformed or unsupported URL
        st.error(unreadable(url, exc))
        st.stop()
    return opened


def refreshing(store: Store, render: Callable[[], None]) -> None:
    """Render now; while a campaign is running, re-render every REFRESH_S seconds until it ends.
    A database that stops answering mid-page shows one sentence, not a traceback."""
    try:
        running = data.running_campaigns(store)
    except UNREADABLE as exc:
        st.error(unreadable(store.url, exc))
        st.stop()
    if not running:
        _guarded(store, render)
        return

    def live() -> None:
        if not data.running_campaigns(store):
            st.rerun(scope="app")  # the campaign ended: one full rerun drops the timer
        st.caption(f"A campaign is running: this view refreshes every {REFRESH_S:.0f} s.")
        _guarded(store, render)

    st.fragment(live, run_every=REFRESH_S)()


def pick(label: str, options: dict, key: str) -> object | None:
    """A select box with an "All" entry; returns the chosen option's key or None for All."""
    choices = [None, *options]
    return st.selectbox(label, choices, format_func=lambda v: "All" if v is None else options[v], key=key)


def _guarded(store: Store, render: Callable[[], None]) -> None:
    try:
        render()
    except UNREADABLE as exc:
        st.error(unreadable(store.url, exc))
