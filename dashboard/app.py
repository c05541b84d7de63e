"""Entry of the farm dashboard: only the navigation. Run it with `farm dashboard [--db URL]`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent

if importlib.util.find_spec("farm.dashboard") is None:
    # A checkout on PYTHONPATH rather than an install: let `farm.dashboard` resolve to this folder.
    import farm

    farm.__path__.append(str(HERE.parent))

st.set_page_config(page_title="farm", layout="wide")
st.navigation(
    [
        st.Page(HERE / "views" / "overview.py", title="Overview", default=True),
        st.Page(HERE / "views" / "winners.py", title="Winners"),
        st.Page(HERE / "views" / "trials.py", title="Trials"),
        st.Page(HERE / "views" / "sweeps.py", title="Recurrent sweeps"),
        st.Page(HERE / "views" / "compare.py", title="Compare topologies"),
        st.Page(HERE / "views" / "queue.py", title="Queue"),
    ]
).run()
