"""Hostile paths and environment values, applied across every command and flag that takes
them: each is one `farm: error:` line naming the value, a non-zero exit, no traceback, no Ray
started, and $FARM_HOME and the working directory exactly as they were (nothing created,
nothing half-written). The paths: a FIFO (reading or opening one for SQLite would block),
/dev/zero (reading would never end), /dev/full (writing fails), a symlink loop, a dangling
symlink, a directory where a file belongs, a file over the size the farm reads, and an
unreadable file (only when not root: root reads it anyway). Commands run in this process
(tests/cli_cases.py): each case costs milliseconds, not an interpreter start."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from cli_cases import ray_started, run
from test_store_support import one_winner_db

from farm import paths

PASSWORD = "Pw-s3cret-9f2"


@pytest.fixture(autouse=True)
def own_ray_token(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "ray_auth_token"))


def hostile_paths(root: Path, suffix: str = "") -> dict[str, str]:
    """Paths under `root` (and two devices) that no reader or writer of the farm may use as a
    file; `suffix` ends the names made here (".py" for $FARM_EXTRA_KERNELS)."""
    made = root / "hostile"
    made.mkdir(exist_ok=True)
    fifo = made / f"fifo{suffix}"
    if not fifo.exists():
        os.mkfifo(fifo)
    loop = made / f"loop{suffix}"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    dangling = made / f"dangling{suffix}"
    if not dangling.is_symlink():
        dangling.symlink_to(made / "nowhere")
    directory = made / f"directory{suffix}"
    directory.mkdir(exist_ok=True)
    huge = made / f"huge{suffix}"
    with huge.open("wb") as handle:
        handle.truncate(paths.MAX_TEXT_BYTES * 8)  # sparse: over every limit, no disk used
    found = {"fifo": fifo, "loop": loop, "dangling": dangling, "directory": directory, "huge": huge}
    if not suffix:
        found |= {"dev-zero": Path("/dev/zero"), "dev-full": Path("/dev/full")}
    if os.geteuid() != 0:
        unreadable = made / f"unreadable{suffix}"
        unreadable.write_text("x = 1\n")
        unreadable.chmod(0)
        found["unreadable"] = unreadable
    return {name: str(path) for name, path in found.items()}


def snapshot(*roots: Path) -> list[tuple[str, str, int]]:
    """Every entry under `roots` (links not followed): its path, kind and size."""
    entries = []
    for root in roots:
        for directory, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(directory) / name
                info = path.lstat()
                size = info.st_size if stat.S_ISREG(info.st_mode) else 0
                entries.append((str(path), stat.filemode(info.st_mode)[0], size))
    return sorted(entries)


@pytest.fixture
def place(tmp_path, farm_home, monkeypatch):
    """The working directory (its own, under tmp_path) and the hostile paths beside it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return {"cwd": cwd, "home": farm_home, "paths": hostile_paths(tmp_path)}


def assert_refused(argv: list[str], named: str, place: dict, capsys) -> str:
    before = snapshot(place["home"], place["cwd"])
    code, out, err = run(argv, capsys)
    lines = [line for line in err.splitlines() if line.startswith("farm: error:")]
    assert code != 0, (argv, out, err)
    assert len(lines) == 1, (argv, err)
    assert named in lines[0], (argv, lines[0])
    assert "Traceback" not in out + err and PASSWORD not in out + err
    assert not ray_started()
    assert snapshot(place["home"], place["cwd"]) == before, argv
    return lines[0]


KINDS = ["fifo", "loop", "dangling", "directory", "huge", "dev-zero", "dev-full", "unreadable"]
TUNE = ["tune", "gemv", "--sizes", "gemv:m=8,n=8", "--allow-cpu"]
# Commands reading `--kernels-file PATH` (the kernels file is loaded before the command runs).
KERNEL_FILE_COMMANDS = [
    ["winners"],
    ["export", "--topology", "ab", "--out", "x.json"],
    TUNE,
    ["certify", "gemv"],
    ["request", "--list"],
    ["serve", "--once", "--allow-cpu"],
    ["bench", "--kernels", "gemv", "--allow-cpu"],
    ["dashboard"],
]
# Commands opening `--db sqlite:///PATH`.
DB_COMMANDS = [
    ["winners"],
    ["export", "--topology", "ab", "--out", "x.json"],
    ["db", "current"],
    ["db", "upgrade"],
    ["db", "downgrade", "base"],
    ["request", "--list"],
    ["request", "gemv", "--sizes", "gemv:m=8,n=8"],
    TUNE,
    ["serve", "--once", "--allow-cpu"],
    ["compact", "--out", "."],
    ["sweep", "recurrent", "--allow-cpu"],
    ["bench", "--kernels", "gemv", "--allow-cpu"],
]
# Commands writing into the directory `FLAG PATH`.
DIR_COMMANDS = [
    [*TUNE, "--out"],
    ["bench", "--kernels", "gemv", "--allow-cpu", "--out"],
    ["sweep", "recurrent", "--allow-cpu", "--output-dir"],
]


def _kind(place: dict, kind: str) -> str:
    if kind not in place["paths"]:
        pytest.skip(f"{kind}: not a hostile path for this user (root reads any file)")
    return place["paths"][kind]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("argv", KERNEL_FILE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_hostile_kernels_file_is_one_line(argv, kind, place, capsys):
    path = _kind(place, kind)
    assert_refused([*argv, "--kernels-file", path], path, place, capsys)


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_kernels_file_in_the_environment_is_one_line(kind, place, capsys, monkeypatch):
    path = _kind(place, kind)
    monkeypatch.setenv("FARM_KERNELS_FILES", path)
    for argv in (["winners"], TUNE):
        assert_refused(argv, path, place, capsys)


@pytest.mark.parametrize("kind", ["fifo", "loop", "dangling", "directory", "huge", "unreadable"])
def test_a_hostile_extra_kernels_path_is_one_line(kind, place, capsys, monkeypatch, tmp_path):
    (tmp_path / "py").mkdir()
    py = hostile_paths(tmp_path / "py", ".py")
    if kind not in py:
        pytest.skip(f"{kind}: not a hostile path for this user")
    monkeypatch.setenv("FARM_EXTRA_KERNELS", py[kind])
    for argv in (["winners"], TUNE, ["adapters"]):
        assert_refused(argv, py[kind], place, capsys)


# A large file is left out: SQLite reads a database in pages, not whole.
@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("unreadable", "huge")])
@pytest.mark.parametrize("argv", DB_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_hostile_sqlite_path_is_one_line(argv, kind, place, capsys, monkeypatch):
    path = _kind(place, kind)
    assert_refused([*argv, "--db", f"sqlite:///{path}"], path, place, capsys)
    monkeypatch.setenv("FARM_DATABASE_URL", f"sqlite:///{path}")
    assert_refused(argv, path, place, capsys)


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("directory", "huge", "unreadable")])
def test_export_to_a_hostile_out_is_one_line(kind, place, capsys, tmp_path):
    path = _kind(place, kind)
    url, topo = one_winner_db(tmp_path)
    assert_refused(["export", "--topology", topo, "--out", path, "--db", url], path, place, capsys)


@pytest.mark.parametrize("kind", ["fifo", "loop", "dangling", "directory", "dev-zero", "dev-full"])
@pytest.mark.parametrize("flag", ["--artifact-md", "--artifact-csv", "--artifact-json", "--artifact-steps-csv"])
def test_a_hostile_sweep_artifact_is_refused_before_the_sweep(flag, kind, place, capsys):
    path = _kind(place, kind)
    assert_refused(["sweep", "recurrent", "--allow-cpu", flag, path], path, place, capsys)


@pytest.mark.parametrize("kind", ["fifo", "loop", "dangling", "huge", "dev-zero", "dev-full"])
@pytest.mark.parametrize("argv", DIR_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_hostile_output_directory_is_one_line(argv, kind, place, capsys):
    path = _kind(place, kind)
    assert_refused([*argv, path], path, place, capsys)


def test_a_failed_write_leaves_no_file_and_is_one_line(tmp_path, place, capsys, monkeypatch):
    """A full disk (ENOSPC) while the export is written: one line, and neither the file nor the
    temporary file beside it is left."""
    url, topo = one_winner_db(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(paths.os, "fsync", full)
    line = assert_refused(["export", "--topology", topo, "--out", "w.json", "--db", url], "w.json", place, capsys)
    assert "No space left on device" in line


def test_export_replaces_a_file_whole_and_keeps_the_usual_mode(tmp_path, capsys, monkeypatch):
    url, topo = one_winner_db(tmp_path)
    out = tmp_path / "w.json"
    out.write_text("old")
    assert run(["export", "--topology", topo, "--out", str(out), "--db", url], capsys)[0] == 0
    assert out.read_text().startswith("{") and stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".w.json")) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- environment values --------------------------------------------------------------------

RAY_ENV = [
    ("FARM_ADAPTER", "99"),
    ("FARM_ADAPTER", "no-such-gpu"),
    ("FARM_DEVICE_LOCK", "sometimes"),
    ("FARM_RAY_CONNECT_TIMEOUT_S", "soon"),
    ("FARM_RAY_CONNECT_TIMEOUT_S", "nan"),
    ("FARM_RAY_CONNECT_TIMEOUT_S", "inf"),
    ("FARM_RAY_CONNECT_TIMEOUT_S", "-1"),
    ("FARM_RAY_CONNECT_TIMEOUT_S", "1e999"),
    ("RAY_ADDRESS", "garbage"),
    ("RAY_ADDRESS", "host:99999"),
    ("RAY_ADDRESS", "host:0"),
    ("RAY_ADDRESS", "http://host:6379"),
    ("RAY_ADDRESS", ":6379"),
    ("RAY_ADDRESS", "a b:6379"),
]
CATALOG_ENV = [
    ("FARM_EXTRA_KERNELS", "no_such_module"),
    ("FARM_EXTRA_KERNELS", "no.such.module"),
    ("FARM_EXTRA_KERNELS", "farm.catalog.gemv,no_such_module"),
    ("FARM_EXTRA_KERNELS", "/no/such/file.py"),
    ("FARM_KERNELS_FILES", "/no/such/kernels.py"),
    ("FARM_DATABASE_URL", "mysql://u@h/db"),
    ("FARM_DATABASE_URL", "sqlite:////dev/zero"),
    ("FARM_DATABASE_URL", "not a url"),
    ("FARM_DB_RETRY_S", "soon"),
    ("FARM_DB_RETRY_S", "-1"),
    ("FARM_DB_RETRY_S", "inf"),
]
RAY_COMMANDS = [TUNE, ["serve", "--once", "--allow-cpu"]]


@pytest.mark.parametrize("name, value", RAY_ENV, ids=[f"{n}={v}" for n, v in RAY_ENV])
@pytest.mark.parametrize("argv", RAY_COMMANDS, ids=lambda a: a[0])
def test_a_bad_ray_setting_is_refused_before_anything_starts(argv, name, value, place, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    assert_refused(argv, value, place, capsys)


@pytest.mark.parametrize("address", ["host:99999", "garbage", "ray://:1", "tcp://h:1"])
@pytest.mark.parametrize("argv", RAY_COMMANDS, ids=lambda a: a[0])
def test_a_bad_ray_address_flag_is_refused_at_once(argv, address, place, capsys):
    assert_refused([*argv, "--ray-address", address], address, place, capsys)


@pytest.mark.parametrize("name, value", CATALOG_ENV, ids=[f"{n}={v}" for n, v in CATALOG_ENV])
@pytest.mark.parametrize("argv", [["winners"], ["request", "--list"], TUNE], ids=lambda a: a[0])
def test_a_bad_catalog_or_database_setting_is_one_line(argv, name, value, place, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    named = "/dev/zero" if value.startswith("sqlite") else value.split(",")[-1]
    assert_refused(argv, named, place, capsys)


@pytest.mark.parametrize("kind", ["fifo", "loop", "dangling", "dev-zero"])
def test_farm_home_that_is_not_a_directory_is_one_line(kind, place, capsys, monkeypatch):
    path = _kind(place, kind)
    monkeypatch.setenv("FARM_HOME", path)
    for argv in (["winners"], TUNE, ["db", "upgrade"]):
        assert_refused(argv, path, place, capsys)


# -- bad input that used to exit 0 ------------------------------------------------------------


def test_a_kernels_file_that_exits_is_an_error(place, capsys, tmp_path):
    for code in ("0", "None", "'bye'"):
        path = tmp_path / f"exits_{len(code)}.py"
        path.write_text(f"import sys\nsys.exit({code})\n")
        assert_refused(["winners", "--kernels-file", str(path)], f"{path} line 2: SystemExit", place, capsys)


def test_status_without_list_is_refused_before_a_request_is_queued(place, capsys):
    assert_refused(["request", "gemv", "--sizes", "gemv:m=8,n=8", "--status", "done"], "--status done", place, capsys)


def test_an_empty_revision_is_refused_and_creates_no_database(place, capsys):
    for argv in (["db", "upgrade", ""], ["db", "upgrade", " "], ["db", "downgrade", ""]):
        assert_refused(argv, "the revision is empty", place, capsys)
    assert not (place["home"] / "farm.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://farm:{PASSWORD[:3]}@{PASSWORD[3:]}@127.0.0.1:1/farm",
        f"postgresql://farm:{PASSWORD[:3]}@{PASSWORD[3:]}:x@127.0.0.1:1/farm",
        f"postgresql://farm:{PASSWORD[:6]}@{PASSWORD[6:]}@127.0.0.1:5432/farm?sslmode=disable",
    ],
)
def test_a_password_with_an_unescaped_at_is_never_echoed(url, place, capsys):
    for argv in (["winners"], ["db", "upgrade"], TUNE):
        line = assert_refused([*argv, "--db", url], "not a database URL", place, capsys)
        assert not any(piece in line for piece in (PASSWORD[:3] + "@", PASSWORD[3:], PASSWORD[6:]))
