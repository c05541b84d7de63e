"""Every user error of the `farm` command is one line `farm: error: ...`, a non-zero exit, no
traceback and no password: bad flags, bad problem sizes (refused before
Ray starts), unusable paths and databases, unknown revisions, topologies and kernels. Also:
read-only commands create nothing, `farm certify` fails when it certified nothing, `farm
winners --topology` takes the prefix it prints, and the dashboard says one sentence for a
database it can't read."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from cli_cases import ray_started, run
from streamlit.testing.v1 import AppTest
from test_store_support import one_winner_db

from farm.dashboard import serve
from farm.tuning.problems import ANY_ADAPTER as ANY

PASSWORD = "Pw-s3cret-9f2"
UNREACHABLE_PG = f"postgresql+psycopg://farm:{PASSWORD}@127.0.0.1:1/farm"
APP = str(serve.app_path())


@pytest.fixture(autouse=True)
def own_ray_token(tmp_path, monkeypatch):
    """`farm tune` makes sure of the Ray token before a local Ray starts: keep it off ~/.ray."""
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "ray_auth_token"))


def assert_user_error(code: int, out: str, err: str, expected: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("farm: error:")]
    assert code != 0, (out, err)
    assert len(lines) == 1, err
    assert expected in lines[0], lines[0]
    assert "Traceback" not in out + err
    assert PASSWORD not in out + err
    return lines[0]


@pytest.fixture
def dbs(tmp_path) -> dict[str, str]:
    """SQLite files that are not farm databases: garbage bytes, another program's tables, a directory."""
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database\n" * 100)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    (tmp_path / "dir.db").mkdir()
    return {name: f"sqlite:///{tmp_path / name}.db" for name in ("corrupt", "foreign", "dir")}


TUNE = ["tune", "--allow-cpu"]
BAD_SIZES = [
    (["--sizes", "gemv:m=-5,n=4"], "every dimension must be >= 1, got m=-5"),
    (["--sizes", "gemv:m=0,n=0"], "every dimension must be >= 1, got m=0, n=0"),
    (["--sizes", "gemv:m=1000000,n=1000000"], "max-storage-buffer-binding-size"),
    (["--sizes", "fft:n=1024,batch=1000000000"], "max-storage-buffer-binding-size"),
    # one buffer over lavapipe's 128 MiB binding limit while the average over the bindings is under it
    (["--sizes", "topk:n=100000000,k=8"], "its buffer 'x' needs 381.47 MiB, over the 128.00 MiB a binding may hold"),
    (["--sizes", "ternary_gemv:m=32768,k=65536"], "its buffer 'w_packed' needs 512.00 MiB"),
    (["--sizes", "recurrent:B=1,H=8,VH=8,T=8192,L=64,E=768"], "its buffer 'value' needs 192.00 MiB"),
    (["--sizes", "recurrent:B=1,H=3,VH=2,T=4,L=8,E=8"], "value shape (1, 2, 4, 8) does not fit query (1, 3, 4, 8)"),
    (["--sizes", "recurrent:B=1,H=1,VH=4,T=4,L=8,E=8"], "'recurrent:B=1,H=1,VH=4,T=4,L=8,E=8'"),
    (["--sizes", "topk:n=1073741823,k=8"], "max-storage-buffer-binding-size"),
    (["--sizes", "ternary_gemv:m=1,k=536870912"], "its buffer 'x' needs 2.00 GiB"),
    (["--sizes", "recurrent:B=1,H=1,VH=1,T=33554432,L=1,E=2"], "max-storage-buffer-binding-size"),
    (["--sizes", ";;;"], "names no problem"),
    (["--sizes", ""], "names no problem"),
    (["gemv", "--sizes", "gemm:m=64,k=64,n=64"], "--sizes names gemm, not among the kernels to tune (gemv)"),
    (["--sizes", "topk:n=64,k=2000"], "no schedule of topk can run it"),
    (["--sizes", "ternary_gemv:m=0,k=64"], "every dimension must be >= 1"),
    (["--sizes", "gemv"], "is not KERNEL:dim=value"),
    (["--sizes", "gemv:m=2"], "gemv problem needs"),
    (["--sizes", "nosuch:m=2"], "unknown kernel 'nosuch'"),
    (["nosuch"], "unknown kernel 'nosuch'"),
]


@pytest.mark.parametrize("extra, expected", BAD_SIZES, ids=[" ".join(e) or "empty" for e, _ in BAD_SIZES])
def test_tune_refuses_bad_sizes_before_ray_starts(extra, expected, farm_home, capsys):
    assert_user_error(*run([*TUNE, *extra], capsys), expected)
    assert not ray_started()
    assert not (farm_home / "farm.db").exists()


BAD_FLAGS = [
    (["tune", "gemv", "--trial-timeout", "nan"], "expected a finite number > 0, got 'nan'"),
    (["tune", "gemv", "--trial-timeout", "-1"], "expected a finite number > 0"),
    (["tune", "gemv", "--trial-timeout", "inf"], "expected a finite number > 0"),
    (["tune", "gemv", "--reps", "0"], "expected a positive integer, got '0'"),
    (["tune", "gemv", "--warmup", "-1"], "expected an integer >= 0"),
    (["tune", "gemv", "--budget", "0"], "budget must be a positive integer or 'all'"),
    (["tune", "gemv", "--gpus", "0"], "expected a positive integer"),
    (["tune", "gemv", "--strategy", "best"], "invalid choice: 'best'"),
    (["sweep", "recurrent", "--warmup", "0"], "expected a positive integer, got '0'"),
    (["sweep", "recurrent", "--repetitions", "0"], "expected a positive integer"),
    (["sweep", "recurrent", "--extra-repetitions", "-1"], "expected an integer >= 0"),
    (["sweep", "recurrent", "--gpu-util-threshold", "nan"], "expected a finite number"),
    (["sweep", "recurrent", "--case", "x:1,2,1,0,8,12"], "every dimension must be >= 1"),
    (["sweep", "recurrent", "--allow-cpu", "--case", "big:64,64,64,65536,64,768"],
     "--case big: recurrent B=64,H=64,VH=64,T=65536,L=64,E=768: its buffer 'value' needs 768.00 GiB"),
    (["certify", "--schedules", "-1"], "expected an integer >= 0, got '-1'"),
    (["certify", "nosuch"], "unknown kernel 'nosuch'"),
    (["bench", "--reps", "0"], "expected a positive integer"),
    (["bench", "--kernels", "nosuch"], "unknown kernel 'nosuch'"),
    (["bench", "--sizes", "gemv:m=0,n=8"], "gemv m=0,n=8: every dimension must be >= 1, got m=0"),
    (["bench", "--sizes", "gemv"], "--sizes entry 'gemv' is not KERNEL:dim=value,..."),
    (["bench", "--kernels", "fft", "--sizes", "gemv:m=8,n=8"], "--sizes names gemv, not among --kernels (fft)"),
    (["cluster", "start", "--port", "-1"], "expected a port in 1..65535, got '-1'"),
    (["cluster", "start", "--dashboard-port", "70000"], "expected a port in 1..65535"),
    (["cluster", "start", "--num-cpus", "-2"], "expected an integer >= 0"),
    (["dashboard", "--port", "0"], "expected a port in 1..65535"),
    (["db", "sideways"], "invalid choice: 'sideways'"),
    ([], "the following arguments are required: command"),
    (["winners", "--kernel", "nosuch"], "unknown kernel 'nosuch'"),
]


@pytest.mark.parametrize("argv, expected", BAD_FLAGS, ids=[" ".join(a) or "nothing" for a, _ in BAD_FLAGS])
def test_bad_flags_are_one_line(argv, expected, farm_home, capsys):
    assert_user_error(*run(argv, capsys), expected)
    assert not ray_started()


def test_argparse_errors_say_which_command_and_where_help_is(capsys):
    line = assert_user_error(*run(["tune", "--reps", "x"], capsys), "tune: argument --reps")
    assert line.endswith("(see `farm tune --help`)")


BAD_DATABASES = [
    (["winners"], "corrupt", "file is not a database"),
    (["export", "--topology", "ab", "--out", "x.json"], "corrupt", "file is not a database"),
    (["db", "current"], "corrupt", "file is not a database"),
    (["db", "upgrade"], "corrupt", "file is not a database"),
    (["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"], "corrupt", "file is not a database"),
    (["winners"], "foreign", "is not a farm database: it holds tables (invoices)"),
    (["db", "upgrade"], "foreign", "is not a farm database"),
    (["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"], "foreign", "is not a farm database"),
    (["winners"], "dir", "is a directory, not a SQLite file"),
    (["db", "upgrade"], "dir", "is a directory, not a SQLite file"),
]


@pytest.mark.parametrize("argv, which, expected", BAD_DATABASES, ids=[f"{a[0]}-{w}" for a, w, _ in BAD_DATABASES])
def test_unusable_sqlite_files_are_one_line(argv, which, expected, dbs, farm_home, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert_user_error(*run([*argv, "--db", dbs[which]], capsys), expected)
    assert not ray_started()


NINE_DB_COMMANDS = [
    ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"],
    ["bench", "--kernels", "gemv", "--allow-cpu"],
    ["sweep", "recurrent", "--allow-cpu"],
    ["db", "upgrade"],
    ["db", "downgrade", "base"],
    ["db", "current"],
    ["winners"],
    ["export", "--topology", "ab", "--out", "x.json"],
]


@pytest.mark.parametrize("argv", NINE_DB_COMMANDS, ids=[" ".join(a[:2]) for a in NINE_DB_COMMANDS])
def test_unreachable_postgres_is_one_line_without_the_password(argv, farm_home, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = assert_user_error(*run([*argv, "--db", UNREACHABLE_PG], capsys), "Connection refused")
    assert "postgresql+psycopg://farm:***@127.0.0.1:1/farm" in line
    assert not ray_started()


def test_unreachable_postgres_from_the_environment_is_masked_too(farm_home, capsys, monkeypatch):
    monkeypatch.setenv("FARM_DATABASE_URL", UNREACHABLE_PG)
    assert_user_error(*run(["winners"], capsys), "farm:***@127.0.0.1:1")


def test_dashboard_refuses_a_bad_url_before_starting_streamlit(capsys, monkeypatch):
    def no_exec(*args):
        raise AssertionError("streamlit must not start")

    monkeypatch.setattr(os, "execve", no_exec)
    line = assert_user_error(
        *run(["dashboard", "--db", f"mysql://u:{PASSWORD}@h/db"], capsys), "unsupported database 'mysql'"
    )
    assert "mysql://u:***@h/db" in line


@pytest.mark.parametrize(
    "url, expected",
    [
        (f"mysql://u:{PASSWORD}@h/db", "unsupported database 'mysql' in 'mysql://u:***@h/db'"),
        (f"postgresql://u:{PASSWORD}@h:notaport/db", "not a database URL: 'postgresql://u:***@h:notaport/db'"),
        (f"postgresql://u@127.0.0.1:1/db?password={PASSWORD}", "postgresql+psycopg://u@127.0.0.1:1/db?password=***"),
        (f"nonsense u:{PASSWORD}@x", "not a database URL: 'nonsense u:***@x'"),
    ],
)
def test_url_errors_never_echo_the_password(url, expected, farm_home, capsys):
    for argv in (["db", "upgrade", "--db", url], ["winners", "--db", url]):
        line = assert_user_error(*run(argv, capsys), "")
        assert expected.replace("postgresql+psycopg", "postgresql") in line or expected in line, line


def test_bad_revisions_are_one_line(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    assert_user_error(*run(["db", "upgrade", "deadbeef", "--db", url], capsys), "Can't locate revision identified")
    assert run(["db", "upgrade", "--db", url], capsys)[0] == 0
    assert_user_error(*run(["db", "downgrade", "deadbeef", "--db", url], capsys), "Can't locate revision identified")
    assert_user_error(
        *run(["db", "downgrade", "base", "--db", f"sqlite:///{tmp_path / 'none.db'}"], capsys), "nothing to downgrade"
    )
    assert not (tmp_path / "none.db").exists()


def test_farm_home_that_is_a_file_is_one_line(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("FARM_HOME", str(home))
    monkeypatch.delenv("FARM_DATABASE_URL", raising=False)
    for argv in (["winners"], ["db", "current"], ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"]):
        assert_user_error(*run(argv, capsys), f"FARM_HOME {home} is a file, not a directory")
    assert not ray_started()


def test_paths_that_cannot_be_written_are_one_line(tmp_path, farm_home, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    db = f"sqlite:///{blocker / 'sub' / 'farm.db'}"
    assert_user_error(*run(["db", "upgrade", "--db", db], capsys), f"{blocker} is a file, not a directory")
    tune = ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu", "--out", str(blocker)]
    assert_user_error(*run(tune, capsys), f"tuning artifacts: {blocker} is a file, not a directory")
    assert_user_error(*run(["bench", "--out", str(blocker), "--allow-cpu"], capsys), "is a file, not a directory")
    assert not ray_started()


def test_export_out_under_a_file_is_one_line_and_a_missing_directory_is_made(tmp_path, capsys):
    url, topo = one_winner_db(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "x.json"
    assert_user_error(*run(["export", "--topology", topo, "--out", str(out), "--db", url], capsys), str(blocker))
    made = tmp_path / "new" / "dir" / "x.json"
    assert run(["export", "--topology", topo[:12], "--out", str(made), "--db", url], capsys)[0] == 0
    assert made.exists()


def test_winners_takes_the_printed_prefix_and_refuses_unknown_topologies(tmp_path, capsys):
    url, topo = one_winner_db(tmp_path)
    code, out, _ = run(["winners", "--db", url], capsys)
    assert code == 0 and topo[:12] in out and topo not in out
    for prefix in (topo[:12], topo[:4], topo):
        code, out, _ = run(["winners", "--topology", prefix, "--db", url], capsys)
        assert code == 0 and "gemv" in out, prefix
    assert_user_error(*run(["winners", "--topology", "zzzz", "--db", url], capsys), f"stored topologies: {topo[:12]}")
    assert_user_error(*run(["winners", "--kernel", "nosuch", "--db", url], capsys), "unknown kernel 'nosuch'")
    code, out, _ = run(["winners", "--kernel", "gemm", "--db", url], capsys)  # known kernel, nothing stored
    assert code == 0 and "no winners for kernel gemm (winners stored for: gemv)" in out


def test_read_only_commands_create_nothing(tmp_path, capsys):
    deep = tmp_path / "nonexistent" / "deep"
    url = f"sqlite:///{deep / 'farm.db'}"
    code, out, _ = run(["winners", "--db", url], capsys)
    assert code == 0 and "no winners stored yet" in out
    code, out, _ = run(["db", "current", "--db", url], capsys)
    assert code == 0 and "no database yet" in out
    assert_user_error(*run(["export", "--topology", "ab", "--out", str(tmp_path / "x.json"), "--db", url], capsys), "")
    assert not (tmp_path / "nonexistent").exists() and not (tmp_path / "x.json").exists()


def _wal_database(directory: Path) -> str:
    url, _ = one_winner_db(directory)
    assert not (directory / "farm.db-wal").exists()  # the last writer closed: SQLite removed its WAL
    return url


def test_reading_a_wal_database_creates_no_wal_or_shm(tmp_path, capsys):
    url = _wal_database(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["winners"], ["db", "current"]):
        assert run([*argv, "--db", url], capsys)[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _as_unprivileged(argv: list[str]) -> list[str]:
    """Run `argv` unable to write where its user has no permission: root loses the capability
    that lets it ignore file modes (capsh), others are already bound by them."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("capsh") is None:
        pytest.skip("running as root without capsh: can't drop CAP_DAC_OVERRIDE")
    import shlex

    return ["capsh", "--drop=cap_dac_override,cap_dac_read_search", "--", "-c", "exec " + shlex.join(argv)]


def _farm(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = _as_unprivileged([sys.executable, "-m", "farm", *argv])
    return subprocess.run(cmd, env=os.environ | env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_read_only_farm_home_reads_but_refuses_writes_in_one_line(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    _wal_database(home)
    before = sorted(p.name for p in home.iterdir())
    home.chmod(0o555)
    try:
        env = {"FARM_HOME": str(home), "XDG_RUNTIME_DIR": "/tmp", "FARM_DATABASE_URL": ""}
        read = _farm(["winners"], env)
        assert read.returncode == 0 and "gemv" in read.stdout, read.stderr
        tune = _farm(["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"], env)
        assert tune.returncode == 2, tune.stdout + tune.stderr
        assert tune.stderr.strip().splitlines()[-1] == f"farm: error: Permission denied: {home / 'artifacts'}"
        assert "Traceback" not in tune.stderr
        fresh = _farm(["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu", "--out", str(tmp_path / "a")], env)
        assert "farm: error: cannot create the database" not in fresh.stderr  # farm.db exists: opened, not created
        assert sorted(p.name for p in home.iterdir()) == before
    finally:
        home.chmod(0o755)


@pytest.mark.slow
def test_a_new_database_in_a_read_only_directory_is_one_line(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        done = _farm(["db", "upgrade", "--db", f"sqlite:///{ro / 'farm.db'}"], {"XDG_RUNTIME_DIR": "/tmp"})
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.strip() == f"farm: error: cannot create the database {ro / 'farm.db'}: {ro} is not writable"
    finally:
        ro.chmod(0o755)


def test_certify_fails_when_nothing_was_certified(monkeypatch, capsys):
    from farm.oracle import certify

    def all_invalid(kernels, schedules, seed, device=None):
        return [certify.CertifyRow("gemv", "m=1,n=1", "wg=64", "invalid_schedule", 0.0, 0.0, "too big")]

    monkeypatch.setattr(certify, "certify_kernels", all_invalid)
    code, _, err = run(["certify", "gemv"], capsys)
    assert code == 1 and "nothing was certified" in err
    ok = certify.CertifyRow("gemv", "m=1,n=1", "wg=64", "ok", 0.0, 0.0, "")
    assert certify.verdict([ok]) == "" and "failed certification" in certify.verdict(
        [ok, ok.__class__("gemv", "m=1,n=1", "wg=32", "wrong_result", 1.0, 1.0, "off")]
    )


@pytest.mark.parametrize("which", ["corrupt", "unreachable", "directory"])
def test_dashboard_says_one_sentence_for_a_database_it_cannot_read(which, tmp_path, monkeypatch):
    if which == "corrupt":
        path = tmp_path / "farm.db"
        path.write_bytes(b"garbage" * 200)
        url = f"sqlite:///{path}"
    elif which == "directory":
        (tmp_path / "farm.db").mkdir()
        url = f"sqlite:///{tmp_path / 'farm.db'}"
    else:
        url = UNREACHABLE_PG
    monkeypatch.setenv("FARM_DATABASE_URL", url)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert len(at.error) == 1
    sentence = at.error[0].value
    assert sentence.startswith("Can't read ") and sentence.endswith(".") and "\n" not in sentence
    assert PASSWORD not in sentence and ".venv" not in sentence and "Traceback" not in sentence


def test_bench_sizes_too_big_for_the_adapter_is_one_line_before_any_row(farm_home, capsys, tmp_path):
    """parse_sizes checks against what any adapter allows; this adapter may allow less."""
    argv = ["bench", "--kernels", "gemv", "--sizes", "gemv:m=6000,n=6000", "--allow-cpu", "--out", str(tmp_path)]
    line = assert_user_error(*run(argv, capsys), "6000")
    assert "max-storage-buffer-binding-size" in line and not (tmp_path / "bench.json").exists()


@pytest.mark.parametrize("kernel", ["topk", "ternary_gemv", "p64_project", "gemm", "gemv", "fft", "recurrent"])
def test_every_problem_the_upfront_check_passes_runs_its_kernels_own_code(kernel):
    """The upfront check (the kernel's `problem()` rules and `check_problem`) is complete for small
    odd sizes: what it accepts, the worker can generate, reference and launch without an error."""
    import random

    from farm import catalog
    from farm.tuning.problems import check_problem

    spec, rng, tried = catalog.get(kernel), random.Random(kernel), 0
    for _ in range(12):  # checking every schedule of gemm's space costs ~0.4 s a problem
        dims = {d: rng.choice((1, 2, 3, 5, 7, 8, 9, 16, 17, 33)) for d in spec.dims}
        try:
            problem = spec.problem(**dims)
            check_problem(spec, problem)
        except ValueError:
            continue
        inputs = spec.generate(problem, 0)
        schedule = next(s for s in [spec.default, *spec.schedules()] if not spec.invalid_reason(s, problem, ANY))
        spec.reference(problem, schedule, inputs)
        spec.launch(schedule, problem, inputs)
        tried += 1
    assert tried > 0


def test_the_upfront_check_stops_at_the_first_schedule_that_runs_and_names_the_default_s_reason(monkeypatch):
    """A drainer checks every request it claims: a problem the default schedule runs costs one
    check, not one per schedule of the space; one nothing runs still says why the default can't."""
    from farm import catalog
    from farm.tuning.problems import check_problem

    spec, asked = catalog.get("recurrent"), []
    real = spec.invalid_reason
    monkeypatch.setattr(spec, "invalid_reason", lambda s, p, a: asked.append(s) or real(s, p, a))
    check_problem(spec, spec.problem(B=1, H=8, VH=1, T=64, L=64, E=96))
    assert asked == [spec.default]
    topk = catalog.get("topk")
    with pytest.raises(ValueError, match=r"no schedule of topk can run it on any adapter \((.+)\)") as raised:
        check_problem(topk, topk.problem(n=64, k=2000))
    assert topk.invalid_reason(topk.default, topk.problem(n=64, k=2000), ANY) in str(raised.value)
