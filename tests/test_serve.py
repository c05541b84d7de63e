"""The drainer (farm.tuning.serve) on a fake mixed cluster, SQLite and PostgreSQL: each
topology's requests tuned on its own workers by a campaign, "any" on the busiest topology,
a topology no worker has left queued and said so, failures retried then failed with the
reason, a dead drainer's requests picked up after its lease; and `farm request` / `farm
serve --once` end to end on lavapipe."""

from __future__ import annotations

import io
import time
from dataclasses import replace

import pytest
from test_store_support import store_url  # noqa: F401  (fixture)

from farm import catalog
from farm.gpu import Timing
from farm.schedule import Problem, Status
from farm.store import open_store, trials, winners
from farm.store import queue as q
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.serve import Drainer
from farm.tuning.tasks import TuneConfig

CONFIG = TuneConfig(kernels=(), budget=2, reps=2, rounds=1)


class MixedPool:
    """Workers w0, w1 on this adapter's topology and w2 on another GPU's; every trial passes
    with a median from its schedule, unless `fail` says what to raise."""

    def __init__(self, profile, fail: Exception | None = None):
        other = replace(profile, device_name="Other GPU 9000", driver_description="other 1.0")
        self._profiles = {"w0": profile, "w1": profile, "w2": other}
        self.fail = fail
        self.streamed: dict[str, list[tuple[str, str]]] = {}

    def profiles(self):
        return dict(self._profiles)

    def topologies(self):
        groups: dict[str, list[str]] = {}
        for slot, p in self._profiles.items():
            groups.setdefault(p.topology_hash(), []).append(slot)
        return groups

    def stream(self, jobs, topology=None, batch_size=None):
        if self.fail is not None:
            raise self.fail
        for job in jobs:
            self.streamed.setdefault(topology, []).append((job.kernel, job.problem.key()))
            spec = catalog.get(job.kernel)
            key = TrialKey(topology, job.kernel, spec.source_hash(), job.problem, job.schedule)
            ns = 1000.0 + len(job.schedule.key())
            yield TrialResult(key, Status.OK, "", Timing(ns, ns, ns, ns, job.reps, "host"), ErrorMetrics(), "h", "w")

    def remeasure_rounds(self, slot, kernel, problem, schedules, reps, rounds, seed=0, max_rounds=None, noise=0.01):
        return {s.key(): [1000.0 + len(s.key())] for s in schedules}  # one round, the winner decided by key length


def _drainer(pool, db, tmp_path, **kwargs) -> tuple[Drainer, io.StringIO]:
    stream = io.StringIO()
    return Drainer(pool, db, CONFIG, tmp_path / "artifacts", name="test-drainer", stream=stream, **kwargs), stream


def test_each_topologys_requests_are_tuned_on_its_own_workers(store_url, device, tmp_path):  # noqa: F811
    pool = MixedPool(device.profile)
    here, there = device.profile.topology_hash(), pool.profiles()["w2"].topology_hash()
    db = open_store(store_url)
    src = catalog.get("gemv").source_hash()
    mine = q.enqueue(db, here, "gemv", "m=40,n=24", src, 0, "alice")[0]
    theirs = q.enqueue(db, there, "gemv", "m=48,n=24", src, 0, "bob")[0]
    anyone = q.enqueue(db, "any", "gemv", "m=56,n=24", src, 0, "carol")[0]
    nobody = q.enqueue(db, "f" * 64, "gemv", "m=64,n=24", src, 0, "dave")[0]
    drainer, stream = _drainer(pool, db, tmp_path)
    tally = drainer.serve(once=True)

    assert (tally.done, tally.failed, tally.unserved) == (3, 0, {nobody})
    assert {p for _, p in pool.streamed[here]} == {"m=40,n=24", "m=56,n=24"}  # "any": the topology with 2 workers
    assert {p for _, p in pool.streamed[there]} == {"m=48,n=24"}
    stored = {(w.topology_hash, w.problem_key) for w in winners(db, kernel="gemv")}
    assert stored == {(here, "m=40,n=24"), (there, "m=48,n=24"), (here, "m=56,n=24")}
    assert {r["topology_hash"] for r in trials(db, topology=there)} == {there}
    rows = {r["id"]: r for r in q.requests(db)}
    assert {i: rows[i]["status"] for i in rows} == {mine: "done", theirs: "done", anyone: "done", nobody: "queued"}
    assert rows[mine]["campaign_id"] and rows[mine]["campaign_id"] != rows[theirs]["campaign_id"]
    assert rows[nobody]["note"].startswith("no worker of this topology at drainer test-drainer")
    assert f"is for topology {'f' * 12}, which no worker here has" in stream.getvalue()
    # a second pass claims nothing and keeps saying nothing new
    again = drainer.drain_once()
    assert again.claimed == 0 and again.unserved == {nobody}
    db.engine.dispose()


def test_a_failing_request_is_retried_then_failed_with_the_reason(store_url, device, tmp_path):  # noqa: F811
    db = open_store(store_url)
    rid = q.enqueue(db, device.profile.topology_hash(), "gemv", "m=40,n=24", catalog.get("gemv").source_hash())[0]
    bad = q.enqueue(db, "any", "nosuchkernel", "m=1", "x")[0]
    drainer, stream = _drainer(MixedPool(device.profile, fail=RuntimeError("the GPU fell off")), db, tmp_path,
                               max_attempts=2)  # fmt: skip
    tally = drainer.serve(once=True)
    assert tally.failed == 2 and tally.retried == 2
    rows = {r["id"]: r for r in q.requests(db)}
    assert rows[rid]["status"] == "failed" and rows[rid]["attempts"] == 2
    assert rows[rid]["last_error"] == "RuntimeError: the GPU fell off"
    assert rows[bad]["status"] == "failed" and "unknown kernel 'nosuchkernel'" in rows[bad]["last_error"]
    assert f"request {rid} failed after its last attempt: RuntimeError: the GPU fell off" in stream.getvalue()
    db.engine.dispose()


def test_a_killed_drainers_requests_are_drained_once_its_lease_expires(store_url, device, tmp_path):  # noqa: F811
    db = open_store(store_url)
    here = device.profile.topology_hash()
    rid = q.enqueue(db, here, "gemv", "m=40,n=24", catalog.get("gemv").source_hash())[0]
    assert q.claim(db, "killed:1", [here], lease_s=0.3)  # then it dies: no renewals
    drainer, stream = _drainer(MixedPool(device.profile), db, tmp_path)
    assert drainer.drain_once().claimed == 0  # still leased
    time.sleep(0.5)
    tally = drainer.serve(once=True)
    assert tally.expired == 1 and tally.done == 1
    (row,) = q.requests(db)
    assert (row["id"], row["status"], row["attempts"], row["claimed_by"]) == (rid, "done", 2, "test-drainer")
    assert "lease of drainer killed:1 expired" in stream.getvalue()
    db.engine.dispose()


def test_leases_are_renewed_while_a_group_is_tuned(device, tmp_path):
    db = open_store(f"sqlite:///{tmp_path}/farm.db")
    here = device.profile.topology_hash()
    q.enqueue(db, here, "gemv", "m=40,n=24", catalog.get("gemv").source_hash())
    seen = []

    class SlowPool(MixedPool):
        def stream(self, jobs, topology=None, batch_size=None):
            time.sleep(0.5)  # longer than the lease: only renewals keep it
            seen.append(q.expire_leases(db))
            yield from super().stream(jobs, topology, batch_size)

    drainer, _ = _drainer(SlowPool(device.profile), db, tmp_path, lease_s=0.3)
    assert drainer.serve(once=True).done == 1
    assert seen and all(batch == [] for batch in seen)  # never expired under it
    db.engine.dispose()


@pytest.mark.parametrize("bad, message", [(dict(lease_s=0), "lease"), (dict(max_attempts=0), "max attempts")])
def test_drainer_settings_are_checked(device, tmp_path, bad, message):
    db = open_store(f"sqlite:///{tmp_path}/farm.db")
    with pytest.raises(ValueError, match=message):
        Drainer(MixedPool(device.profile), db, CONFIG, tmp_path, **bad)
    db.engine.dispose()


def test_problem_keys_match_what_the_campaign_stores():
    spec = catalog.get("gemm")
    assert spec.problem(**Problem.from_key("n=8,m=4,k=2").as_dict()).key() == Problem.of(m=4, k=2, n=8).key()


def test_a_round_claims_two_requests_per_eight_workers_unless_told(store_url, device, tmp_path):  # noqa: F811
    """At fleet scale every claimed request starts at once, two to a home of 8 workers; a small
    pool claims 16 (tuned one after another), and an explicit batch is kept."""
    db = open_store(store_url)
    drainer, _ = _drainer(MixedPool(device.profile), db, tmp_path)
    fleet = {"a" * 64: [f"w{i}" for i in range(600)], "b" * 64: [f"v{i}" for i in range(400)]}
    assert drainer.claim_size(fleet) == 250
    assert drainer.claim_size({"a" * 64: ["w0", "w1"]}) == 16
    told, _ = _drainer(MixedPool(device.profile), db, tmp_path, batch=3)
    assert told.claim_size(fleet) == 3
    src = catalog.get("gemv").source_hash()
    for m in range(40, 40 + 8 * 5, 8):
        q.enqueue(db, device.profile.topology_hash(), "gemv", f"m={m},n=24", src, 0, "alice")
    assert told.drain_once().claimed == 3
    db.engine.dispose()
