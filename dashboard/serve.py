"""`farm dashboard`: run this package's Streamlit app, bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501


def app_path() -> Path:
    """The entry file, wherever the package lives (a checkout's dashboard/ or an installed farm/dashboard/)."""
    path = Path(str(resources.files("farm.dashboard") / "app.py"))
    if not path.is_file():
        raise FileNotFoundError(f"dashboard entry {path} is missing: reinstall farm (`pip install -e .`)")
    return path


def streamlit_argv(db: str | None = None, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> list[str]:
    """`python -m streamlit run app.py ...`: headless, no usage stats, the database URL after `--`."""
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    argv = [sys.executable, "-m", "streamlit", "run", str(app_path())]
    argv += ["--server.address", host, "--server.port", str(port), "--server.headless", "true"]
    argv += [
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
    ]
    return argv + (["--", "--db", db] if db else [])


def serve(db: str | None = None, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> None:
    """Replace this process with the Streamlit server (so signals reach it directly); never returns."""
    from sqlalchemy.engine import make_url

    from farm.store.engine import database_url

    argv = streamlit_argv(db, port, host)
    shown = make_url(database_url(db)).render_as_string(hide_password=True)
    print(f"farm dashboard on http://{host}:{port} reading {shown}", flush=True)
    os.execv(argv[0], argv)
