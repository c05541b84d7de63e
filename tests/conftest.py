"""Shared fixtures: one wgpu device per test session (lavapipe on CI), an isolated FARM_HOME,
and a Ray of the session's own.

Ray state on the machine can't reach the suite: the session gets its own Ray temp dir
(RAY_TMPDIR, so a local Ray's session files and the `ray_current_cluster` a bare
`ray.init()` would read live there, not in /tmp/ray) and RAY_ADDRESS is cleared (a test
that wants an address sets it). Subprocesses (`python -m farm ...`) inherit both.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from pg import pg_fresh_url, pg_own_server, pg_server, pg_url  # noqa: F401  (PostgreSQL fixtures: tests/pg.py)

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
# Short (Ray's unix socket paths under it must stay below ~100 characters); set at import,
# before any test module or fixture can start Ray.
RAY_TMPDIR = tempfile.mkdtemp(prefix="farm-ray-", dir="/tmp")
os.environ["RAY_TMPDIR"] = RAY_TMPDIR
os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture(scope="session", autouse=True)
def _own_ray_temp_dir():
    yield RAY_TMPDIR
    shutil.rmtree(RAY_TMPDIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_leaked_kernel_files(monkeypatch):
    """`--kernels-file` names its files in $FARM_KERNELS_FILES for child processes
    (farm.catalog.files.load): a test running `main([...])` in-process must not hand them
    to every later test's subprocesses and Ray heads (undone after each test)."""
    for name in ("FARM_KERNELS_FILES", "FARM_KERNELS_BUNDLE"):
        monkeypatch.setenv(name, "")  # records the value before (usually: none) for the undo
        monkeypatch.delenv(name)


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


class _AsGpu:
    """A device that reports itself as a GPU (profile.is_cpu False), everything else the real one's."""

    def __init__(self, inner):
        self._inner = inner
        self.profile = type("P", (), {"is_cpu": False})()

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture
def as_gpu():
    """Wrap a device so that code taking the GPU-only paths runs on it (lavapipe)."""
    return _AsGpu
