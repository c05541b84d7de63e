"""Parquet at scale: few files per partition, and nothing SQL holds missing after a crash.

A campaign writes one file per (topology, kernel) at its end and compacts; a killed driver
loses only its Parquet buffer, which the next campaign's end (or `farm compact`) restores
from SQL without writing anything twice."""

from __future__ import annotations

import threading

from test_store_support import profile, store_url, trial  # noqa: F401  (store_url is a fixture)

from farm import store
from farm.store import compaction
from farm.store import parquet as artifacts
from farm.store.repo import TRIAL_KEY
from farm.tuning.recording import TrialRecorder


def parquet_keys(out) -> list[tuple]:
    frame = artifacts.read_trials(out)
    return list(zip(*(frame[c] for c in ("topology", "kernel", "source_hash", "problem", "schedule")), strict=True))


def sql_keys(db) -> set[tuple]:
    return {tuple(r[k] for k in TRIAL_KEY) for r in store.trials(db)}


def test_a_campaign_leaves_one_file_per_partition(store_url, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr("farm.tuning.recording.FLUSH_EVERY", 4)
    monkeypatch.setattr("farm.tuning.recording.PARQUET_ROWS", 10)  # two size-bound files, then compaction
    db = store.open_store(store_url)
    topo = store.upsert_topology(db, profile())
    out = tmp_path / "artifacts"
    recorder = TrialRecorder(db, store.start_campaign(db, "farm tune", "random", None, 7, 60), out)
    for wg in range(1, 41):
        recorder.add(trial(topo, wg, kernel="gemv" if wg % 2 else "gemm"))
    recorder.flush()
    assert len(compaction.partition_files(out, topo, "gemv")) == 2  # 20 rows: written at 10 and 20
    done = recorder.close()
    assert done == {"restored": 0, "compacted": 2}
    for kernel in ("gemv", "gemm"):
        assert len(compaction.partition_files(out, topo, kernel)) == 1
    keys = parquet_keys(out)
    assert len(keys) == len(set(keys)) == 40 and set(keys) == sql_keys(db)
    db.engine.dispose()


def test_a_killed_campaigns_trials_are_restored_from_sql_by_the_rerun(store_url, tmp_path):  # noqa: F811
    db = store.open_store(store_url)
    out = tmp_path / "artifacts"
    topo, killed = _killed_campaign(db, out, 29)
    assert not list(out.rglob("*.parquet"))
    rerun = TrialRecorder(db, store.start_campaign(db, "farm tune", "random", None, 7, 60), out)
    rerun.add(trial(topo, 100))
    assert rerun.close()["restored"] == 0  # the killed campaign still reads as live: left alone
    assert len(parquet_keys(out)) == 1
    store.finish_campaign(db, killed, "interrupted")  # its heartbeat went stale
    again = TrialRecorder(db, store.start_campaign(db, "farm tune", "random", None, 7, 60), out)
    again.add(trial(topo, 100))  # a replayed key: SQL skips it
    assert again.close() == {"restored": 29, "compacted": 1}
    keys = parquet_keys(out)
    assert len(keys) == len(set(keys)) == 30 and set(keys) == sql_keys(db)
    frame = artifacts.read_trials(out)
    assert sorted(set(frame["campaign_id"])) == sorted({killed, rerun.campaign_id})
    assert len(compaction.partition_files(out, topo, "gemv")) == 1
    db.engine.dispose()


def test_compaction_merges_small_files_and_drops_repeated_keys(tmp_path):
    topo = "t" * 64
    for wg in range(1, 13):
        artifacts.write_trials(tmp_path, wg // 4, [trial(topo, wg), trial(topo, wg, kernel="gemm")])
    artifacts.write_trials(tmp_path, 9, [trial(topo, 1, median_ns=5.0)])  # a key written twice
    assert len(compaction.partition_files(tmp_path, topo, "gemv")) == 13
    assert compaction.finish_artifacts(None, tmp_path, touched=compaction.partitions(tmp_path))["compacted"] == 2
    assert [len(compaction.partition_files(tmp_path, topo, k)) for k in ("gemm", "gemv")] == [1, 1]
    frame = artifacts.read_trials(tmp_path)
    assert len(frame) == 24 and len(set(parquet_keys(tmp_path))) == 24
    assert 5.0 not in set(frame["median_ns"])  # the first row of a key is kept
    assert compaction.compact_partition(tmp_path, topo, "gemv") is None  # already one file
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_campaign_end_leaves_sealed_files_and_farm_compact_merges_them(tmp_path, monkeypatch):
    monkeypatch.setattr(compaction, "SEAL_ROWS", 4)
    topo = "t" * 64
    artifacts.write_trials(tmp_path, 1, [trial(topo, wg) for wg in range(1, 6)])  # 5 rows: sealed
    artifacts.write_trials(tmp_path, 2, [trial(topo, wg) for wg in range(6, 8)])
    artifacts.write_trials(tmp_path, 3, [trial(topo, wg) for wg in range(8, 10)])
    sealed = [p for p in compaction.partition_files(tmp_path, topo, "gemv") if p.name.startswith("part-1-")]
    assert compaction.finish_artifacts(None, tmp_path, touched=[(topo, "gemv")])["compacted"] == 1
    files = compaction.partition_files(tmp_path, topo, "gemv")
    assert len(files) == 2 and sealed[0] in files  # the big file is not rewritten
    assert compaction.finish_artifacts(None, tmp_path, touched=[(topo, "gemv")])["compacted"] == 0
    assert compaction.finish_artifacts(None, tmp_path, touched=[(topo, "gemv")], full=True)["compacted"] == 1
    assert len(compaction.partition_files(tmp_path, topo, "gemv")) == 1 and len(set(parquet_keys(tmp_path))) == 9


def test_farm_compact_merges_and_restores(tmp_path, capsys):
    from farm.cli.main import main

    url = f"sqlite:///{tmp_path / 'farm.db'}"
    db = store.open_store(url)
    topo = store.upsert_topology(db, profile())
    out = tmp_path / "artifacts"
    store.record_trials(db, None, [trial(topo, wg) for wg in range(1, 6)])  # in SQL, never in Parquet
    for wg in range(6, 9):
        artifacts.write_trials(out, None, [trial(topo, wg)])
    store.record_trials(db, None, [trial(topo, wg) for wg in range(6, 9)])
    assert main(["compact", "--out", str(out), "--db", url]) == 0
    assert "1 partition(s) compacted, 5 trial(s) restored from SQL" in capsys.readouterr().out
    assert len(compaction.partition_files(out, topo, "gemv")) == 1 and set(parquet_keys(out)) == sql_keys(db)
    db.engine.dispose()



def test_a_campaign_end_reading_a_partition_while_another_compacts_it_loses_nothing(tmp_path, monkeypatch):
    """Two drainers on one machine share the artifacts directory: one campaign's end restores
    from SQL (reading the partition's files) while the other's compaction replaces them."""
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    out = tmp_path / "artifacts"
    topo, killed = _killed_campaign(db, out, 20)
    store.finish_campaign(db, killed, "interrupted")
    for wg in (1, 2):  # two small files of another campaign, for a compaction to merge and remove
        artifacts.write_trials(out, 99, [trial(topo, wg)])
    listing, other = compaction.partition_files, []

    def listed_then_compacted(*args):
        files = listing(*args)
        if not other and threading.current_thread() is threading.main_thread():
            other.append(threading.Thread(target=compaction.compact_partition, args=(out, topo, "gemv")))
            other[0].start()
            other[0].join(timeout=1.0)  # done at once, unless this reader holds the partition's lock
        return files

    monkeypatch.setattr(compaction, "partition_files", listed_then_compacted)
    assert compaction.restore_from_sql(db, out) == {(topo, "gemv"): 18}
    other[0].join()
    monkeypatch.setattr(compaction, "partition_files", listing)
    compaction.compact_partition(out, topo, "gemv")
    keys = parquet_keys(out)
    assert len(keys) == len(set(keys)) == 20 and set(keys) == sql_keys(db)
    db.engine.dispose()


def _killed_campaign(db, out, count: int) -> tuple[str, int]:
    """(topology, campaign id) of a campaign that recorded `count` trials in SQL and died
    before writing its Parquet buffer."""
    topo = store.upsert_topology(db, profile())
    killed = store.start_campaign(db, "farm tune", "random", None, 7, 60)
    recorder = TrialRecorder(db, killed, out)
    for wg in range(1, count + 1):
        recorder.add(trial(topo, wg))
    recorder.flush()  # in SQL; the Parquet buffer dies with the driver
    return topo, killed
