"""`farm dashboard`: run this package's Streamlit app, bound to 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import errno
import os
import socket
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


def streamlit_argv(port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> list[str]:
    """`python -m streamlit run app.py ...`: headless, no usage stats. No database URL: it may
    hold a password and any user can read a process's argv; it goes in the environment."""
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    argv = [sys.executable, "-m", "streamlit", "run", str(app_path())]
    argv += ["--server.address", host, "--server.port", str(port), "--server.headless", "true"]
    return argv + [
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
        "--client.toolbarMode",
        "viewer",
    ]


def streamlit_env(db: str | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: `base` (default: this process's) with FARM_DATABASE_URL set to
    `database_url(db)`, which the app reads (farm.dashboard.connection.database_url)."""
    from farm.store.engine import database_url, normalize_url

    url = database_url(db)
    normalize_url(url)  # a malformed URL fails here, with its password masked, not in the browser
    return dict(os.environ if base is None else base) | {"FARM_DATABASE_URL": url}


def check_bind(host: str, port: int) -> None:
    """ValueError naming the address when Streamlit could not serve on it: a host that does
    not resolve, or a port another process holds (checked by binding it here for a moment,
    so the user sees one line, not Streamlit's exit or a socket traceback)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"--host {host!r}: not an address of this machine ({exc})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            reason = "in use by another process" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ValueError(f"cannot serve on {host}:{port}: {reason} (pick another --port or --host)") from None


def serve(db: str | None = None, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST) -> None:
    """Replace this process with the Streamlit server (so signals reach it directly); never returns."""
    from farm.store.engine import mask_url

    argv = streamlit_argv(port, host)
    env = streamlit_env(db)
    check_bind(host, port)
    print(f"farm dashboard on http://{host}:{port} reading {mask_url(env['FARM_DATABASE_URL'])}", flush=True)
    os.execve(argv[0], argv, env)
