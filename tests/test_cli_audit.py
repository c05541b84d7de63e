"""Audit of the `farm` command's user errors (farm.cli.errors): paths that can't be used
(read-only, too long, a symlink loop, a file where a directory belongs), database drivers
that aren't installed, numbers too large for the database or C, repeated `--sizes`
dimensions, `farm.tune_kernel`'s sizes, and the messages of `winners --kernel` and of a
sweep on a CPU adapter. Each is one line `farm: error: ...`, exit 2, no traceback, no
password, nothing created; a farm bug (EIO, a RuntimeError of its own) keeps its traceback."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

import pytest
from cli_cases import ray_started, run
from test_store_support import one_winner_db

from farm.cli import errors
from farm.cli.main import build_parser, main
from farm.schedule import Problem

PASSWORD = "Pw-s3cret-9f2"
LONG = "n" * 300  # over NAME_MAX (255) of every Linux filesystem


@pytest.fixture(autouse=True)
def own_ray_token(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "ray_auth_token"))


def one_line(code: int, out: str, err: str, expected: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("farm: error:")]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and len(err.strip().splitlines()) == 1, err
    assert expected in lines[0], lines[0]
    assert "Traceback" not in out + err and PASSWORD not in out + err
    return lines[0]


# -- 1. paths: read-only filesystem, name too long, symlink loop ------------------------


@pytest.mark.parametrize(
    "exc, user",
    [
        (OSError(errno.EROFS, "Read-only file system", "/ro/w.json"), True),
        (OSError(errno.ENAMETOOLONG, "File name too long", "/tmp/" + LONG), True),
        (OSError(errno.ELOOP, "Too many levels of symbolic links", "/tmp/loop"), True),
        (RuntimeError("Symlink loop from '/tmp/loop'"), True),
        (PermissionError(errno.EACCES, "Permission denied", "/x"), True),
        (OSError(errno.EIO, "Input/output error", "/dev/sda"), False),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), False),
        (OSError(errno.ENOSPC, "No space left on device", "/x"), True),  # the user's disk, not a farm bug
        (RuntimeError("the farm's own invariant broke"), False),
    ],
)
def test_path_error_classifier(exc, user):
    assert errors.is_path_error(exc) is user


def test_read_only_and_loop_messages_name_the_path():
    assert errors.message(OSError(errno.EROFS, "Read-only file system", "/ro/w.json"), None) == (
        "Read-only file system: /ro/w.json"
    )
    loop = RuntimeError("Symlink loop from '/tmp/a loop'")
    assert errors.message(loop, None) == "Too many levels of symbolic links: /tmp/a loop"


def test_a_read_only_filesystem_is_one_line(tmp_path, farm_home, capsys, monkeypatch):
    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    out = tmp_path / "ro" / "artifacts"
    tune = ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu", "--out", str(out)]
    one_line(*run(tune, capsys), f"Read-only file system: {out}")
    assert not ray_started()


def test_names_too_long_are_one_line(tmp_path, farm_home, capsys):
    url, topo = one_winner_db(tmp_path)
    long_path = tmp_path / LONG
    one_line(*run(["export", "--topology", topo, "--out", str(long_path / "w.json"), "--db", url], capsys),
             f"File name too long: {long_path}")  # fmt: skip
    one_line(*run(["db", "upgrade", "--db", f"sqlite:///{long_path}.db"], capsys), "File name too long")
    tune = ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu", "--out", str(long_path)]
    one_line(*run(tune, capsys), f"File name too long: {long_path}")
    assert not ray_started() and not (farm_home / "farm.db").exists()


def test_a_kernels_file_that_is_a_symlink_loop_is_one_line(tmp_path, farm_home, capsys):
    loop = tmp_path / "loop.py"
    loop.symlink_to(loop)
    one_line(*run(["winners", "--kernels-file", str(loop)], capsys), f"Too many levels of symbolic links: {loop}")


@pytest.mark.parametrize("exc", [OSError(errno.EIO, "Input/output error"), RuntimeError("a farm bug")])
def test_other_os_and_runtime_errors_keep_their_traceback(exc, farm_home, monkeypatch):
    from farm.cli import database

    def broken(args):
        raise exc

    monkeypatch.setattr(database, "cmd_winners", broken)
    with pytest.raises(type(exc)):
        main(["winners"])


# -- 2. a file where a directory of --out belongs ----------------------------------------


def test_export_under_a_file_says_it_is_not_a_directory(tmp_path, capsys, monkeypatch):
    url, topo = one_winner_db(tmp_path)
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("")
    line = one_line(*run(["export", "--topology", topo, "--out", "afile/w.json", "--db", url], capsys),
                    "--out afile/w.json: afile is not a directory")  # fmt: skip
    assert "File exists" not in line
    assert Path("afile").read_text() == ""
    one_line(*run(["export", "--topology", topo, "--out", str(tmp_path), "--db", url], capsys), "is a directory")


def test_tune_out_under_a_file_names_the_file(tmp_path, farm_home, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    tune = ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu", "--out", str(blocker / "sub")]
    one_line(*run(tune, capsys), f"{blocker} is a file, not a directory")
    assert not ray_started()


# -- 3. a database driver that is not installed ------------------------------------------


@pytest.mark.parametrize(
    "driver, expected",
    [
        ("psycopg2", "needs the Python module 'psycopg2', which is not installed: `pip install psycopg2`"),
        ("pg8000", "needs the Python module 'pg8000', which is not installed"),
        ("asyncpg", "'postgresql+asyncpg' is an asyncio driver"),
        ("nosuchdriver", "unknown driver 'postgresql+nosuchdriver'"),
    ],
)
def test_a_driver_that_is_not_installed_is_one_line_without_the_password(driver, expected, farm_home, capsys):
    import importlib.util

    if driver in ("psycopg2", "pg8000") and importlib.util.find_spec(driver) is not None:
        pytest.skip(f"{driver} is installed here")
    url = f"postgresql+{driver}://u:{PASSWORD}@db.example/x"
    for argv in (["winners"], ["db", "upgrade"], ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"]):
        line = one_line(*run([*argv, "--db", url], capsys), expected)
        assert f"postgresql+{driver}://u:***@db.example/x" in line
    assert not ray_started()


# -- 4. numbers too large for the database or C -----------------------------------------

HUGE = [
    (["request", "gemv", "--sizes", "gemv:m=64,n=64", "--priority", "-99999999999999999999999"],
     "argument --priority: expected an integer in -2147483648..2147483647, got '-99999999999999999999999'"),
    (["request", "gemv", "--sizes", "gemv:m=64,n=64", "--priority", str(2**63)], "-2147483648..2147483647"),
    (["request", "gemv", "--sizes", "gemv:m=64,n=64", "--priority", "2147483648"], "-2147483648..2147483647"),
    (["tune", "gemv", "--budget", "99999999999999999999999"], "argument --budget: budget must be at most 1000000"),
    (["tune", "gemv", "--reps", "99999999999999999999"], "argument --reps: expected an integer in 1..1000000"),
    (["tune", "gemv", "--warmup", "99999999999999999999"], "argument --warmup: expected an integer in 0..1000000"),
    (["tune", "gemv", "--trial-timeout", "1e300"], "argument --trial-timeout: expected a finite number > 0, at most"),
    (["serve", "--budget", "99999999999999999999"], "argument --budget: budget must be at most 1000000"),
    (["serve", "--lease", "1e300"], "argument --lease: expected a finite number > 0, at most 1000000"),
    (["serve", "--trial-timeout", "1e300"], "argument --trial-timeout"),
    (["request", "--list", "--limit", "99999999999999999999"], "argument --limit: expected an integer in 1..1000000"),
    (["bench", "--reps", "99999999999999999999"], "argument --reps: expected an integer in 1..1000000"),
    (["sweep", "recurrent", "--repetitions", "99999999999999999999"], "argument --repetitions"),
]


@pytest.mark.parametrize("argv, expected", HUGE, ids=[" ".join(a[:1] + a[-2:-1]) for a, _ in HUGE])
def test_huge_numbers_are_refused_before_anything_is_created(argv, expected, farm_home, capsys):
    one_line(*run(argv, capsys), expected)
    assert not ray_started()
    assert not (farm_home / "farm.db").exists() and not (farm_home / "artifacts").exists()


def test_the_bounds_themselves_are_accepted():
    parse = build_parser().parse_args
    assert parse(["request", "gemv", "--priority", "2147483647"]).priority == 2**31 - 1
    assert parse(["request", "gemv", "--priority", "-2147483648"]).priority == -(2**31)
    args = parse(["tune", "gemv", "--budget", "1000000", "--reps", "1000000", "--trial-timeout", "1e6"])
    assert (args.budget, args.reps, args.trial_timeout) == (10**6, 10**6, 1e6)
    with pytest.raises(argparse.ArgumentTypeError, match=r"invalid int value: 'x'"):
        errors.priority("x")


# -- 5. --sizes: a dimension given twice, a problem given twice --------------------------


def test_sizes_refuse_a_repeated_dimension(farm_home, capsys):
    one_line(*run(["tune", "--allow-cpu", "--sizes", "gemm:m=64,m=32,k=64,n=64"], capsys),
             "--sizes entry 'gemm:m=64,m=32,k=64,n=64': dimension m is given twice (m=64, m=32)")  # fmt: skip
    assert not ray_started() and not (farm_home / "farm.db").exists()


def test_sizes_keep_a_repeated_problem_once_in_order():
    from farm.tuning.tasks import parse_sizes

    sizes = parse_sizes("gemv:m=8,n=8;gemv:m=4,n=4;gemv: m=8 , n=8;gemm:m=2,k=2,n=2")
    assert sizes == {"gemv": [Problem.of(m=8, n=8), Problem.of(m=4, n=4)], "gemm": [Problem.of(m=2, k=2, n=2)]}


# -- 6. farm.tune_kernel's sizes ---------------------------------------------------------

NO_DEVICE = object()  # every size error is raised before the device is used


@pytest.mark.parametrize(
    "sizes, expected",
    [
        (["m=0,n=64"], "tune_kernel('gemv'): size 'm=0,n=64': every dimension must be >= 1, got m=0"),
        (["m=4,n=abc"], "size 'm=4,n=abc': dimensions must be name=integer pairs, got 'n=abc'; gemv expects m="),
        ("m=4,n=abc", "size 'm=4,n=abc': dimensions must be name=integer pairs"),  # a str: one size
        ("m=8,n=8;m=0,n=8", "size 'm=0,n=8': every dimension must be >= 1"),  # ';' separates sizes
        (["m=4,m=5,n=4"], "dimension m is given twice (m=4, m=5)"),
        (["rows=4,cols=64"], "size 'rows=4,cols=64': gemv problem needs ('m', 'n')"),
        ([{"m": 4.5, "n": 8}], "dimension m must be an integer, got 4.5"),
        ([{"m": 0, "n": 8}], "size {'m': 0, 'n': 8}: every dimension must be >= 1"),
        ({"m": 0, "n": 8}, "every dimension must be >= 1"),  # one dict alone: one size
        ([Problem.of(m=4)], "size 'm=4': gemv problem needs ('m', 'n')"),
        ([7], "size 7: expected a dict {dim: value}, a Problem or a 'dim=value,...' string"),
        (5, "tune_kernel('gemv'): sizes must be a list of sizes"),
        (["m=1000000000,n=1000000000"], "size 'm=1000000000,n=1000000000': its buffer 'a' needs"),
    ],
)
def test_tune_kernel_size_errors_name_kernel_size_and_expectation(sizes, expected):
    from farm import tune_kernel

    with pytest.raises(ValueError) as info:
        tune_kernel("gemv", sizes=sizes, device=NO_DEVICE)
    assert expected in str(info.value)


def test_tune_kernel_takes_a_plain_string_as_one_size(device):
    from farm import tune_kernel

    tuned = tune_kernel("gemv", sizes="m=8,n=8", budget=1, reps=1, rounds=1, device=device)
    assert list(tuned.winners) == ["m=8,n=8"]
    twice = tune_kernel("gemv", sizes="m=8,n=8; m=8,n=8", budget=1, reps=1, rounds=1, device=device)
    assert list(twice.winners) == ["m=8,n=8"] and len(twice.trials) == len(tuned.trials)  # tuned once


# -- 9. messages: winners --kernel, a sweep on a CPU adapter -----------------------------


def test_winners_for_a_kernel_without_winners_says_so_and_lists_those_with(tmp_path, capsys):
    url, topo = one_winner_db(tmp_path)
    code, out, _ = run(["winners", "--kernel", "fft", "--db", url], capsys)
    assert code == 0 and "no winners for kernel fft" in out and "winners stored for: gemv" in out
    assert "no winners stored yet" not in out
    code, out, _ = run(["winners", "--kernel", "fft", "--topology", topo[:8], "--db", url], capsys)
    assert code == 0 and f"no winners for kernel fft on topology {topo[:12]}" in out
    code, out, _ = run(["winners", "--kernel", "gemv", "--db", url], capsys)
    assert code == 0 and "m=8,n=8" in out


def test_a_sweep_on_a_cpu_adapter_without_allow_cpu_is_refused_before_ray(farm_home, capsys, monkeypatch):
    from farm.cli.main import _adapter_profile

    profile = _adapter_profile(True)
    if profile is None or not profile.is_cpu:
        pytest.skip("this machine's adapter is not a CPU adapter")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    line = one_line(*run(["sweep", "recurrent", "--output-dir", str(farm_home / "out")], capsys), "--allow-cpu")
    assert "pass --allow-cpu to sweep" in line and "to tune" not in line
    assert not ray_started() and not (farm_home / "out").exists() and not (farm_home / "farm.db").exists()


def test_db_upgrade_to_an_unknown_revision_creates_nothing(tmp_path, capsys):
    """`farm db upgrade bogusrev` checks the revision first: no database directory, empty
    database or lock file is left behind."""
    target = tmp_path / "nd" / "x.db"
    code, out, err = run(["db", "upgrade", "bogusrev", "--db", f"sqlite:///{target}"], capsys)
    one_line(code, out, err, "migrations: Can't locate revision identified by 'bogusrev'")
    assert not (tmp_path / "nd").exists()


def test_relative_and_branch_revisions_are_left_to_alembic():
    """The pre-check lets through `head-1`, `base+1` and `x@head`, which Alembic resolves."""
    from alembic.util.exc import CommandError

    from farm.store.migrate import check_revision

    for revision in ("head", "base", "0001", "-1", "+1", "head-1", "base+1", "0003_x+1", "farm@head", "a:b"):
        check_revision(revision)
    with pytest.raises(CommandError, match="bogusrev"):
        check_revision("bogusrev")


def test_a_request_for_a_topology_prefix_without_a_database_creates_nothing(tmp_path, capsys):
    """`farm request ... --topology zzz --db NEW` finds no stored topology to match without
    creating the database."""
    target = tmp_path / "rq" / "x.db"
    for topology in ("zzz", "all", "41b7"):
        argv = ["request", "gemv", "--sizes", "gemv:m=64,n=64", "--topology", topology, "--db", f"sqlite:///{target}"]
        one_line(*run(argv, capsys), f"--topology {topology}: no topology is stored yet")
    assert not (tmp_path / "rq").exists()


def test_tune_on_a_cpu_only_machine_without_allow_cpu_makes_nothing(farm_home, capsys):
    """`farm tune` without --allow-cpu on a machine whose adapter is a CPU is refused before
    Ray starts, leaving no database or artifacts directory."""
    line = one_line(*run(["tune", "--sizes", "gemv:m=64,n=64"], capsys), "a CPU adapter whose timings")
    assert "pass --allow-cpu to tune" in line and not ray_started()
    assert not list(farm_home.iterdir()), sorted(p.name for p in farm_home.iterdir())
