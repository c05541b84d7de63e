"""The Streamlit dashboard over a real small campaign (`farm tune`) and a real tiny recurrent sweep:
every page through AppTest, `farm dashboard` in headless chromium, and the empty-database message."""

from __future__ import annotations

import os
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


def _copy_database(source, target) -> None:
    """A copy of a SQLite database with what its write-ahead log holds (a file copy would miss it)."""
    import sqlite3

    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


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


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def charts(at: AppTest) -> list:
    return list(at.get("vega_lite_chart"))


def test_overview_leads_with_headline_metrics_and_charts(app):
    at = app()
    assert at.title[0].value == "Tuning farm"
    shown = metrics(at)
    assert shown["Problems tuned"] == "1" and shown["Speedup vs default"].endswith("×")
    assert shown["Tuned vs vendor"] == "–" and shown["Stale · unknown"] == "0 · 0"
    assert any("none benchmarked" in c.value for c in at.caption)
    assert len(charts(at)) == 2  # speedup per kernel, trials by status (no vendor numbers: a hint instead)
    assert any("farm bench" in i.value for i in at.info)
    assert any(c.value.startswith("A topology is one adapter") for c in at.caption)
    topologies, campaigns, counts = frames(at)
    assert "llvmpipe" in topologies["device"].iloc[0] and topologies["trials"].iloc[0] >= 4
    assert campaigns["status"].tolist() == ["done"] and campaigns["progress"].iloc[0] == 1.0
    assert campaigns["budget"].tolist() == ["4"]  # --budget 4: under the CPU cap, as asked
    assert campaigns["command"].iloc[0].startswith("farm tune")
    assert counts.set_index("status")["trials"]["ok"] >= 4


def test_winners_page_shows_the_tuned_gemv_row_its_metrics_and_convergence(app):
    at = app("winners")
    winners, details = frames(at)
    row = winners.iloc[0]
    assert (row["kernel"], row["problem"], row["state"]) == ("gemv", "m=64,n=64", "current")
    assert row["median_us"] > 0 and row["speedup"] >= 1.0 and "workgroup_size=" in details["schedule_full"].iloc[0]
    assert metrics(at)["Problems tuned"] == "1"
    assert len(charts(at)) == 2  # speedup per problem, convergence
    assert any(c.value.startswith("line: the fastest certified time so far") for c in at.caption)
    assert any("**tie**" in c.value and "**unknown kernel**" in c.value for c in at.caption)
    at.selectbox(key="winners_kernel").set_value("gemv").run()
    assert frames(at)[0]["kernel"].tolist() == ["gemv"]
    assert len(at.selectbox(key="winners_convergence_gemv_None").options) == 1 and len(charts(at)) == 2


def test_a_user_kernel_the_dashboard_does_not_know_is_unknown_not_stale(campaign, tmp_path, monkeypatch):
    from dataclasses import replace

    from farm.store.winner_rows import save_winner, winners

    copy = tmp_path / "user.db"
    _copy_database(campaign["root"] / "farm.db", copy)
    writable = store.open_store(f"sqlite:///{copy}")
    (gemv,) = winners(writable)
    save_winner(writable, replace(gemv, kernel="my_kernel"))
    writable.engine.dispose()
    monkeypatch.setenv("FARM_DATABASE_URL", f"sqlite:///{copy}")
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("views/winners.py").run()
    assert not at.exception
    states = dict(zip(frames(at)[0]["kernel"], frames(at)[0]["state"], strict=True))
    assert states == {"gemv": "current", "my_kernel": "unknown kernel"}
    assert not at.warning  # nothing called stale
    assert any("my_kernel" in i.value and "--kernels-file" in i.value for i in at.info)
    assert metrics(at)["Stale · unknown"] == "0 · 1"


def test_trials_page_paginates_and_charts_one_knob_at_a_time(app):
    at = app("trials")
    table = frames(at)[0]
    assert set(table["kernel"]) == {"gemv"} and len(table) >= 4
    assert any(c.value.endswith("trials, newest first") for c in at.caption)
    assert at.button(key="trials_older").disabled and at.button(key="trials_newer").disabled  # one page
    knob = at.selectbox(key="trials_knob_gemv")
    assert "workgroup_size" in knob.options and len(charts(at)) == 1  # one knob, not one chart per knob
    knob.set_value("workgroup_size").run()
    assert len(charts(at)) == 1 and any(c.value.startswith("Each tick: one trial") for c in at.caption)
    second = at.selectbox(key="trials_knob2_gemv")
    second.set_value(next(o for o in second.options if o not in ("none", "workgroup_size"))).run()
    assert not at.exception and len(charts(at)) == 1
    assert any(c.value.startswith("Each cell: the fastest certified time") for c in at.caption)
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


def test_compare_page_says_when_one_topology_has_tuned_the_problem(app):
    at = app("compare")
    comparison, per_topology = frames(at)
    assert comparison["vs_fastest"].tolist() == [1.0] and "llvmpipe" in comparison["device"].iloc[0]
    assert per_topology["trials"].iloc[0] >= 4
    assert any(i.value.startswith("One topology has tuned gemv m=64,n=64") for i in at.info)
    assert charts(at) == []  # no one-bar chart


def test_running_campaign_page_refreshes_itself(campaign, tmp_path, monkeypatch):
    copy = tmp_path / "running.db"
    _copy_database(campaign["root"] / "farm.db", copy)
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
        for args, want in (
            (["--port", str(taken)], f"cannot serve on 127.0.0.1:{taken}: in use by another process"),
            (["--host", "999.1.1.1"], "--host '999.1.1.1': not an address of this machine"),
        ):
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


# (path, heading, headline metrics, charts at least) of every page; screenshots at both widths
PAGES = (
    ("", "Tuning farm", 5, 2),
    ("winners", "Winners", 5, 2),
    ("trials", "Trials", 0, 1),
    ("sweeps", "Recurrent sweeps", 0, 2),
    ("compare", "Compare topologies", 0, 0),
    ("queue", "Tuning queue", 4, 0),
)
WIDTHS = (1280, 1920)
# What a reader of Winners must see without scrolling sideways at the narrower width
WINNER_KEY_COLUMNS = {"kernel", "problem", "median", "speedup", "margin", "tie", "runner-up"}


def visible_headers(page) -> list[str]:
    """The dataframe's header cells the grid renders: it draws (and lists for screen readers) only
    the columns in view, so a column scrolled off to the right is missing here."""
    table = page.locator('[data-testid="stDataFrame"] table').first
    return [text.strip() for text in table.locator("th").all_inner_texts()]


@pytest.mark.browser
def test_farm_dashboard_renders_every_page_in_chromium_at_two_widths(campaign, tmp_path):
    """Every page in headless chromium at 1,280 and 1,920 px: its headline metrics and charts
    drawn, no exception, and on Winners the key columns in view at 1,280 px. The screenshots
    stay in the test's temp dir for a person to look at."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    env = os.environ | {"XDG_RUNTIME_DIR": "/tmp"}
    argv = [sys.executable, "-m", "farm", "dashboard", "--port", str(port), "--db", campaign["url"]]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    shots = []
    try:
        wait_healthy(port, proc)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            try:
                for width in WIDTHS:
                    page = browser.new_page(viewport={"width": width, "height": 1400})
                    for path, heading, n_metrics, n_charts in PAGES:
                        page.goto(f"http://127.0.0.1:{port}/{path}")
                        page.get_by_role("heading", name=heading).first.wait_for(timeout=60_000)
                        drawn = page.locator(
                            '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg'
                        )
                        for index in range(n_charts):
                            drawn.nth(index).wait_for(timeout=60_000)
                        if n_metrics:
                            page.locator('[data-testid="stMetric"]').nth(n_metrics - 1).wait_for(timeout=60_000)
                        if path in ("", "winners"):
                            table = page.locator('[data-testid="stDataFrame"] table').first
                            table.locator("th").first.wait_for(state="attached", timeout=60_000)
                        assert page.locator('[data-testid="stMetric"]').count() == n_metrics, (path, width)
                        assert page.locator('[data-testid="stException"]').count() == 0, (path, width)
                        if path == "winners":
                            assert "gemv" in page.locator('[data-testid="stDataFrame"] table').first.inner_html()
                            assert WINNER_KEY_COLUMNS <= set(visible_headers(page)), (width, visible_headers(page))
                            metrics = page.locator('[data-testid="stMetric"]').all_inner_texts()
                            assert any(m.startswith("Speedup vs default") and m.endswith("×") for m in metrics)
                        if path == "":
                            nav = page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
                            assert nav == ["Overview", "Winners", "Trials", "Recurrent sweeps", "Compare topologies",
                                           "Queue"]  # fmt: skip
                        shot = tmp_path / f"{path or 'overview'}_{width}.png"
                        page.screenshot(path=str(shot), full_page=True)
                        shots.append(shot)
                    page.close()
            finally:
                browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert len(shots) == len(PAGES) * len(WIDTHS)
    for shot in shots:
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000, shot
