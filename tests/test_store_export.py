"""`farm export` JSON round trip (read back by the runtime's reader) and `farm winners`.

Malformed schedules files are tests/test_runtime_schedules.py's business: the one reader is
`farm.runtime.winners.read_schedules_file`.
"""

from __future__ import annotations

import json

import pytest
from test_store_support import profile

from farm.cli.main import main
from farm.runtime.winners import Candidate, read_schedules_file
from farm.schedule import Schedule
from farm.store import (
    SCHEDULES_FORMAT,
    WinnerRecord,
    export_schedules,
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


def test_export_then_read_schedules_file_gives_back_the_stored_winners(filled, tmp_path):
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
    # Candidate carries no timings: median and speedup survive in the file, not the reader.
    assert [(w["median_ns"], w["speedup"]) for w in document["winners"]] == [(r.median_ns, r.speedup) for r in stored]
    loaded = read_schedules_file(out)  # what ForgeRuntime(schedules=...) reads
    assert loaded == [Candidate.of(r) for r in stored]  # every Candidate field, in stored order
    fields = ("topology_hash", "kernel", "problem_key", "source_hash", "schedule_key", "device_name")
    gpu, key = "llvmpipe (LLVM 15)", Schedule.of(workgroup_size=128, tile_m=4).key()
    assert [tuple(getattr(c, f) for f in fields) for c in loaded] == [
        (topo, "gemm", "m=64,k=64,n=64", "src-9", key, gpu),
        (topo, "gemv", "m=37,k=129", "src-9", Schedule.of(workgroup_size=64, tile_m=4).key(), gpu),
    ]


def test_export_of_an_unknown_topology_names_the_known_ones(filled):
    _, store, topo, _ = filled
    with pytest.raises(ValueError, match=f"no winners stored for topology 'abc'.*{topo}"):
        export_schedules(store, "abc")


def test_cli_winners_lists_stored_winners_with_stale_flag(filled, capsys):
    url, _, topo, _ = filled
    assert main(["winners", "--kernel", "gemv", "--topology", topo, "--db", url, "--wide"]) == 0
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


def test_cli_winners_fits_100_columns_with_a_stale_note_and_json_has_every_field(filled, capsys):
    url, _, topo, stored = filled
    assert main(["winners", "--db", url, "--topology", topo]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[0] == f"topology {topo[:12]}: llvmpipe (LLVM 15)"
    assert lines[1].split() == ["kernel", "problem", "note", "median_us", "speedup", "margin", "schedule"]
    gemv = next(line.split() for line in lines[3:] if line.startswith("gemv"))
    assert gemv[:4] == ["gemv", "m=37,k=129", "stale", "1.23"]  # src-9 is not gemv's current source
    assert gemv[-1] == "tile_m=4"  # the knobs that differ from gemv's default
    assert lines[-1].startswith("schedule: knobs that differ from the default")
    assert main(["winners", "--db", url]) == 0  # two topologies: a column
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header == ["kernel", "problem", "note", "median_us", "speedup", "margin", "topology", "schedule"]
    assert main(["winners", "--db", url, "--topology", topo, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(stored) and {r["topology_hash"] for r in rows} == {topo}
    row = next(r for r in rows if r["kernel"] == "gemv")
    assert row["stale"] is True and row["knobs"]["tile_m"] == 4 and row["source_hash"] == "src-9"


def test_cli_winners_on_an_empty_database_says_how_to_start(tmp_path, capsys):
    assert main(["winners", "--db", f"sqlite:///{tmp_path / 'empty.db'}"]) == 0
    assert "run `farm tune` first" in capsys.readouterr().out
