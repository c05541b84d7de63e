"""In a campaign the winner is chosen by farm.tuning.finalists over the rounds the
pool's re-measurement returns; a tie keeps the stored winner; the table and summary carry
the runner-up and margin. A fake pool (no Ray): plan() only needs the adapter's profile."""

from __future__ import annotations

import json

from farm import catalog, store
from farm.gpu import Timing
from farm.schedule import Problem, Status
from farm.trial import ErrorMetrics, TrialKey, TrialResult
from farm.tuning.campaign import Campaign
from farm.tuning.tasks import TuneConfig

CONFIG = TuneConfig(kernels=("gemv",), sizes={"gemv": [Problem.of(m=40, n=24)]}, budget=6, reps=2, rounds=3)


class RoundsPool:
    """Trials pass with a median from the schedule; `remeasure_rounds` gives `speed(key)` each round."""

    def __init__(self, profile, speed):
        self._profile, self.speed, self.asked = profile, speed, []

    def profiles(self):
        return {"w0": self._profile}

    def topologies(self):
        return {self._profile.topology_hash(): ["w0"]}

    def stream(self, jobs, topology=None, batch_size=None):
        for job in jobs:
            key = TrialKey(topology, job.kernel, catalog.get(job.kernel).source_hash(), job.problem, job.schedule)
            ns = 1000.0 + len(job.schedule.key())
            yield TrialResult(key, Status.OK, "", Timing(ns, ns, ns, ns, job.reps, "host"), ErrorMetrics(), "h", "w0")

    def remeasure_rounds(self, slot, kernel, problem, schedules, reps, rounds, seed, max_rounds, noise):
        self.asked.append(([s.key() for s in schedules], rounds, max_rounds, noise))
        return {s.key(): [self.speed(s.key())] * rounds for s in schedules}


def test_a_clear_winner_then_a_tie_that_keeps_it(device, tmp_path):
    db = store.open_store(f"sqlite:///{tmp_path}/farm.db")
    spec = catalog.get("gemv")
    first_pool = RoundsPool(device.profile, lambda key: 1000.0)
    (first,) = Campaign(CONFIG, first_pool, db, tmp_path / "a", "farm tune gemv").run()
    finalists, rounds, max_rounds, noise = first_pool.asked[0]
    assert (rounds, max_rounds, noise) == (3, CONFIG.max_rounds, CONFIG.noise)
    assert spec.default.key() in finalists and CONFIG.finalists <= len(finalists) <= CONFIG.finalists + 1
    assert isinstance(first, store.WinnerRecord) and first.tie and first.schedule_key == spec.default.key()
    (stored,) = store.winners(db, kernel="gemv")  # the decision is in SQL too (revision 0005)
    assert (stored.tie, stored.rounds, stored.runner_up, stored.margin) == (True, 3, first.runner_up, first.margin)
    assert stored.runner_up in finalists and stored.p20_ns == stored.p80_ns == 1000.0

    fast = next(k for k in finalists if k != spec.default.key())
    (second,) = Campaign(CONFIG, RoundsPool(device.profile, lambda k: 900.0 if k == fast else 1000.0), db,
                         tmp_path / "b", "farm tune gemv").run()  # fmt: skip
    assert (second.schedule_key, second.tie, second.runner_up) == (fast, False, spec.default.key())
    assert abs(second.margin - 1000 / 900 + 1) < 1e-9 and second.speedup > 1.1

    # all equal now: a tie, and the stored winner (not the default, not the fastest by noise) stays
    third_pool = RoundsPool(device.profile, lambda k: 1000.0 + (k == spec.default.key()) * 1e-3)
    (third,) = Campaign(CONFIG, third_pool, db, tmp_path / "c", "farm tune gemv").run()
    assert third.tie and third.schedule_key == fast and fast in third_pool.asked[0][0]
    assert store.winners(db, kernel="gemv")[0].schedule_key == fast
    summary = json.loads(next((tmp_path / "c" / "campaigns").glob("*/summary.json")).read_text())
    assert summary["winners"][0]["tie"] is True and summary["winners"][0]["runner_up"]
