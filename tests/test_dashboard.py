"""The Streamlit dashboard over a real small campaign (`farm tune`) and a real tiny recurrent sweep:
every page through AppTest, `farm dashboard` in headless chromium, and the empty-database message."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from farm import store
from farm.dashboard import serve

APP = str(serve.app_path())
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> dict:
    """A database filled by `farm tune` (gemv, one small problem) and a two-case `farm sweep recurrent`."""
    from farm.recurrent.sweep import SweepCase, SweepConfig, run_sweep

    root = tmp_path_factory.mktemp("campaign")
    url = f"sqlite:///{root / 'farm.db'}"
    env = os.environ | {"FARM_HOME": str(root), "XDG_RUNTIME_DIR": "/tmp"}
    argv = [sys.executable, "-m", "farm", "tune", "gemv", "--sizes", "gemv:m=64,n=64", "--budget", "4", "--allow-cpu"]
    tuned = subprocess.run([*argv, "--db", url], env=env, capture_output=True, text=True, timeout=240)
    assert tuned.returncode == 0, tuned.stdout + tuned.stderr
    cases = tuple(SweepCase.parse(text) for text in ("tiny_e16:1,2,1,4,8,16", "tiny_e32:1,2,1,4,8,32"))
    sweep_dir = root / "sweep"
    run_sweep(
        SweepConfig(1, 1, 0, allow_cpu=True, db=url, output_dir=str(sweep_dir), cases=cases),
        fan_out=False,
    )
    return {"url": url, "root": root, "markdown": (sweep_dir / "recurrent_scaling.md").read_text()}


@pytest.fixture
def app(campaign, monkeypatch):
    monkeypatch.setenv("FARM_DATABASE_URL", campaign["url"])

    def open_page(page: str | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        if page is not None:
            at.switch_page(f"views/{page}.py")
            at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return open_page


def frames(at: AppTest) -> list:
    return [df.value for df in at.dataframe]


def test_overview_lists_the_topology_campaign_and_trial_counts(app):
    at = app()
    assert at.title[0].value == "Tuning farm"
    topologies, campaigns, counts = frames(at)
    assert "llvmpipe" in topologies["device"].iloc[0] and topologies["trials"].iloc[0] >= 4
    assert campaigns["status"].tolist() == ["done"] and campaigns["progress"].iloc[0] == 1.0
    assert campaigns["command"].iloc[0].startswith("farm tune")
    assert counts.set_index("status")["trials"]["ok"] >= 4


def test_winners_page_shows_the_tuned_gemv_row(app):
    at = app("winners")
    (winners,) = frames(at)
    row = winners.iloc[0]
    assert (row["kernel"], row["problem"], bool(row["stale"])) == ("gemv", "m=64,n=64", False)
    assert row["median_us"] > 0 and row["speedup"] >= 1.0 and "workgroup_size=" in row["schedule"]
    at.selectbox(key="winners_kernel").set_value("gemv").run()
    assert frames(at)[0]["kernel"].tolist() == ["gemv"]


def test_trials_page_paginates_and_charts_each_knob(app):
    at = app("trials")
    table = frames(at)[0]
    assert set(table["kernel"]) == {"gemv"} and len(table) >= 4
    assert any(c.value.endswith("trials, newest first") for c in at.caption)
    assert at.button(key="trials_older").disabled and at.button(key="trials_newer").disabled  # one page
    charts = at.get("vega_lite_chart")
    knob_captions = [c.value for c in at.caption if c.value.startswith("median µs vs")]
    assert "median µs vs workgroup_size" in knob_captions and len(charts) >= len(knob_captions)
    at.selectbox(key="trials_status").set_value("wrong_result").run()
    assert len(frames(at)[0]) == 0 and not at.exception


def test_sweeps_page_shows_the_markdown_artifacts_columns(app, campaign):
    at = app("sweeps")
    runs, strict, steps, cases = frames(at)
    assert runs["cases"].iloc[0] == 2
    header = next(line for line in campaign["markdown"].splitlines() if line.startswith("| case |"))
    assert list(cases.columns) == [cell.strip() for cell in header.strip("|").split("|")]
    assert cases["case"].tolist() == ["tiny_e16", "tiny_e32"] and set(cases["strict_pass"]) <= {"pass", "fail"}
    assert strict["case"].tolist() == ["tiny_e16", "tiny_e32"]
    assert steps["step"].tolist() == [0, 1, 2, 3]
    assert len(at.get("vega_lite_chart")) == 2  # speedup vs E, per-step error


def test_compare_page_lists_each_topologys_winner(app):
    at = app("compare")
    comparison, per_topology = frames(at)
    assert comparison["vs_fastest"].tolist() == [1.0] and "llvmpipe" in comparison["device"].iloc[0]
    assert per_topology["trials"].iloc[0] >= 4


def test_running_campaign_page_refreshes_itself(campaign, tmp_path, monkeypatch):
    copy = tmp_path / "running.db"
    shutil.copy(campaign["root"] / "farm.db", copy)
    writable = store.open_store(f"sqlite:///{copy}")
    store.start_campaign(writable, "farm tune --all", "model", None, 10, total=50)
    writable.engine.dispose()
    monkeypatch.setenv("FARM_DATABASE_URL", f"sqlite:///{copy}")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any("refreshes every 5 s" in c.value for c in at.caption)
    assert "running" in frames(at)[1]["status"].tolist()


@pytest.mark.parametrize("page", [None, "winners", "trials", "sweeps", "compare"])
def test_empty_database_shows_how_to_start(page, tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_DATABASE_URL", f"sqlite:///{tmp_path / 'none.db'}")
    at = AppTest.from_file(APP, default_timeout=60).run()
    if page is not None:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception
    assert "farm tune" in at.info[0].value


def test_dashboard_command_binds_loopback_with_the_db_in_its_environment():
    argv = serve.streamlit_argv(port=8600)
    assert argv[:5] == [sys.executable, "-m", "streamlit", "run", APP] and Path(APP).name == "app.py"
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert "--db" not in argv  # argv is readable by every user (/proc/PID/cmdline): the URL goes in the env
    assert serve.streamlit_env("sqlite:////x/farm.db", base={})["FARM_DATABASE_URL"] == "sqlite:////x/farm.db"
    with pytest.raises(ValueError, match="70000"):
        serve.streamlit_argv(port=70000)


def test_dashboard_command_says_in_one_line_when_it_cannot_serve_on_the_address(tmp_path):
    """A port in use and a bad host are each one `farm: error:` line and status 2, not
    Streamlit's own message or a socket.gaierror traceback."""
    env = {**os.environ, "FARM_HOME": str(tmp_path)}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        for args, want in ((["--port", str(taken)], f"cannot serve on 127.0.0.1:{taken}: in use by another process"),
                           (["--host", "999.1.1.1"], "--host '999.1.1.1': not an address of this machine")):
            run = subprocess.run([sys.executable, "-m", "farm", "dashboard", *args], env=env, capture_output=True,
                                 text=True, timeout=60)  # fmt: skip
            assert run.returncode == 2 and run.stderr.startswith(f"farm: error: {want}"), run.stderr
            assert run.stderr.count("\n") == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"farm dashboard exited with {proc.returncode}: {proc.stdout.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"farm dashboard not healthy on port {port} after {timeout_s}s")


@pytest.mark.browser
def test_farm_dashboard_serves_the_winners_table_to_chromium(campaign, tmp_path):
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = os.environ | {"XDG_RUNTIME_DIR": "/tmp"}
    argv = [sys.executable, "-m", "farm", "dashboard", "--port", str(port), "--db", campaign["url"]]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(port, proc)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"http://127.0.0.1:{port}/winners")
                page.get_by_role("heading", name="Winners").wait_for(timeout=60_000)
                table = page.locator('[data-testid="stDataFrame"] table')
                table.get_by_text("m=64,n=64").first.wait_for(state="attached", timeout=60_000)
                assert "gemv" in table.first.inner_html()
                nav = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
                assert nav == ["Overview", "Winners", "Trials", "Recurrent sweeps", "Compare topologies", "Queue"]
                shot = tmp_path / "winners.png"
                page.screenshot(path=str(shot), full_page=True)
            finally:
                browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
