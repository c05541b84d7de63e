"""`farm export` JSON round trip, malformed schedule files, and `farm winners`."""

from __future__ import annotations

import json

import pytest
from test_store_support import profile

from farm.cli.main import main
from farm.schedule import Schedule
from farm.store import (
    SCHEDULES_FORMAT,
    WinnerRecord,
    export_schedules,
    load_schedules_file,
    open_store,
    save_winner,
    upsert_topology,
)


def _winner(topo: str, kernel: str, problem: str, wg: int, speedup: float | None) -> WinnerRecord:
    median = 1234.5
    default = None if speedup is None else median * speedup
    schedule = Schedule.of(workgroup_size=wg, tile_m=4).key()
    return WinnerRecord(topo, kernel, problem, "src-9", schedule, median, default, speedup, None, "llvmpipe (LLVM 15)")


@pytest.fixture
def filled(tmp_path):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    store = open_store(url)
    topo = upsert_topology(store, profile())
    other = upsert_topology(store, profile("NVIDIA H200", device_id=9))
    stored = [_winner(topo, "gemm", "m=64,k=64,n=64", 128, 1.75), _winner(topo, "gemv", "m=37,k=129", 64, None)]
    for record in [*stored, _winner(other, "gemv", "m=37,k=129", 256, 3.0)]:
        save_winner(store, record)
    yield url, store, topo, stored
    store.engine.dispose()


def test_export_then_load_gives_back_the_stored_winners(filled, tmp_path):
    url, store, topo, stored = filled
    out = tmp_path / "ship" / "schedules.json"
    assert main(["export", "--topology", topo, "--out", str(out), "--db", url]) == 0
    document = json.loads(out.read_text())
    assert (document["format"], document["topology_hash"], document["device_name"]) == (
        SCHEDULES_FORMAT,
        topo,
        "llvmpipe (LLVM 15)",
    )
    assert document["winners"][0] == {
        "kernel": "gemm",
        "problem": "m=64,k=64,n=64",
        "schedule": {"workgroup_size": 128, "items_per_invocation": 1, "vector_width": 1, "tile_m": 4},
        "source_hash": "src-9",
        "median_ns": 1234.5,
        "speedup": 1.75,
    }
    loaded = load_schedules_file(out)
    fields = ("topology_hash", "kernel", "problem_key", "source_hash", "schedule_key", "median_ns", "speedup")
    assert [tuple(getattr(r, f) for f in fields) for r in loaded] == [
        tuple(getattr(r, f) for f in fields) for r in stored
    ]
    assert loaded[0].default_median_ns == pytest.approx(1234.5 * 1.75)
    assert loaded[1].default_median_ns is None and loaded[0].device_name == "llvmpipe (LLVM 15)"


def test_export_of_an_unknown_topology_names_the_known_ones(filled):
    _, store, topo, _ = filled
    with pytest.raises(ValueError, match=f"no winners stored for topology 'abc'.*{topo}"):
        export_schedules(store, "abc")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        (
            '{"format": "farm-schedules/0", "winners": []}',
            "expected format 'farm-schedules/1', found 'farm-schedules/0'",
        ),
        ('{"format": "farm-schedules/1", "topology_hash": "t", "winners": [3]}', r"winners\[0\] is int"),
        (
            '{"format": "farm-schedules/1", "topology_hash": "t", "winners": [{"kernel": "gemv"}]}',
            r"winners\[0\] lacks \['problem', 'schedule', 'source_hash', 'median_ns'\]",
        ),
        (
            '{"format": "farm-schedules/1", "topology_hash": "t", "winners": [{"kernel": "gemv", "problem": "m=4",'
            ' "schedule": {"workgroup_size": 64}, "source_hash": "s", "median_ns": -1}]}',
            r"winners\[0\]: median_ns must be a finite positive number, got -1",
        ),
    ],
)
def test_load_schedules_file_names_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_schedules_file(path)


def test_cli_winners_lists_stored_winners_with_stale_flag(filled, capsys):
    url, _, topo, _ = filled
    assert main(["winners", "--kernel", "gemv", "--topology", topo, "--db", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "kernel",
        "problem",
        "schedule",
        "median_us",
        "default_us",
        "speedup",
        "margin",
        "tie",
        "runner_up",
        "vs_vendor",
        "topology",
        "device",
        "stale",
    ]
    assert len(lines) == 3
    cells = lines[2].split()
    assert cells[:6] == [
        "gemv",
        "m=37,k=129",
        "workgroup_size=64,items_per_invocation=1,vector_width=1,tile_m=4",
        "1.23",
        "-",
        "-",
    ]
    assert cells[6:10] == ["\u2013"] * 4  # no decision nor vendor ratio recorded: shown as unknown
    assert cells[10] == topo[:12] and cells[-1] == "yes"  # src-9 is not gemv's current source


def test_cli_winners_on_an_empty_database_says_how_to_start(tmp_path, capsys):
    assert main(["winners", "--db", f"sqlite:///{tmp_path / 'empty.db'}"]) == 0
    assert "run `farm tune` first" in capsys.readouterr().out
