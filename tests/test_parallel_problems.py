"""A campaign on a topology with many workers tunes several problems at once (one TrialQueue
shared by their searches), records every trial once, and reports its winners and task totals
in plan order; the simulated GPUs are benchmarks/fleet.py's stubs over a real local Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from farm import catalog, store
from farm.tuning.campaign import PROBLEM_WORKERS, TASKS_PER_HOME, Campaign, _task_key
from farm.tuning.tasks import TuneConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import fleet  # noqa: E402


@pytest.fixture
def pool():
    made = fleet.fleet_pool(2 * PROBLEM_WORKERS, 0.003, fleet.simulated_profile())
    yield made
    made.shutdown()


def _homes_as_started(campaign: Campaign) -> list[tuple[str, tuple[str, ...]]]:
    """(problem key, home) of each task as it starts (it asks for its inputs then)."""
    homes, real = [], campaign._prefetch

    def recorded(tasks):
        for task in tasks or []:
            homes.append((task.problem.key(), tuple(campaign._homes[_task_key(task)])))
        real(tasks)

    campaign._prefetch = recorded
    return homes


def test_problems_run_side_by_side_and_every_trial_is_recorded_once(pool, tmp_path):
    spec = catalog.get("gemm")
    problems = [spec.problem(m=n, k=n, n=n) for n in (256, 512, 1024)]
    config = TuneConfig(kernels=("gemm",), sizes={"gemm": problems}, strategy="model", budget=24)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    campaign = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemm")
    winners = campaign.run()
    assert [w.problem_key for w in winners] == [p.key() for p in problems]
    assert [t["problem"] for t in campaign.tasks] == [p.key() for p in problems]
    rows = store.trials(db)
    assert len(rows) == len({(r["problem"], r["schedule"]) for r in rows})  # no trial twice
    for task in campaign.tasks:
        assert sum(r["problem"] == task["problem"] for r in rows) == task["trials"] + 1  # and the default
    row = store.campaign(db, campaign.campaign_id)
    assert row["status"] == "done" and row["done"] == len(rows)
    spans = {p.key(): [r["finished_at"] for r in rows if r["problem"] == p.key()] for p in problems}
    first, second = spans[problems[0].key()], spans[problems[1].key()]
    assert min(second) < max(first)  # the second problem's search began before the first's ended
    db.engine.dispose()


def test_two_problems_share_each_home_at_once(pool, tmp_path):
    """Two homes, four problems: all four start at once, two to a home, so one's round tail
    is the other's trials."""
    spec = catalog.get("gemm")
    problems = [spec.problem(m=n, k=n, n=n) for n in (256, 512, 1024, 2048)]
    config = TuneConfig(kernels=("gemm",), sizes={"gemm": problems}, strategy="model", budget=24)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    campaign = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemm")
    homes = _homes_as_started(campaign)
    campaign.run()
    rows = store.trials(db)
    db.engine.dispose()
    assert [key for key, _ in homes] == [p.key() for p in problems]  # each asked for once, at its start
    assert [names for _, names in homes[2:]] == [names for _, names in homes[:2]]  # the 3rd shares the 1st's home
    assert homes[0][1] != homes[1][1] and TASKS_PER_HOME == 2  # each home once before any twice
    first_ends = min(max(r["finished_at"] for r in rows if r["problem"] == p.key()) for p in problems[:2])
    assert all(min(r["finished_at"] for r in rows if r["problem"] == p.key()) < first_ends for p in problems[2:])


def test_fewer_problems_than_homes_get_wider_homes(tmp_path):
    """24 workers hold 3 homes of 8; 2 problems take 12 each, so their rounds are wider."""
    wide = fleet.fleet_pool(3 * PROBLEM_WORKERS, 0.003, fleet.simulated_profile())
    asked = []
    real = wide.prefetch

    def recorded(kernel, problem, seed=0, topology=None, slots=None):
        asked.append(tuple(slots))
        real(kernel, problem, seed, topology, slots)

    wide.prefetch = recorded
    spec = catalog.get("gemm")
    problems = [spec.problem(m=n, k=n, n=n) for n in (256, 512)]
    config = TuneConfig(kernels=("gemm",), sizes={"gemm": problems}, strategy="model", budget=16)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    try:
        campaign = Campaign(config, wide, db, tmp_path / "artifacts", "farm tune gemm")
        started = _homes_as_started(campaign)
        campaign.run()
    finally:
        db.engine.dispose()
        wide.shutdown()
    homes = [names for _, names in started]
    assert [len(names) for names in homes] == [12, 12] and not set(homes[0]) & set(homes[1])
    assert [set(n) for n in asked] == [set(n) for n in homes]  # no task queued for a place: no ring


def test_each_problem_asks_its_home_and_the_next_for_inputs_and_drops_them_where_they_went(tmp_path):
    """Three homes of 8 in a ring, four problems (more than the homes: tasks queue for places):
    a problem's inputs are made ahead on its home and the next (16 of 24 workers, not the
    fleet) and, once none is left to start, on a home another task freed; dropped there and
    wherever else its trials ran."""
    from farm.tuning.campaign import _shares

    ring = fleet.fleet_pool(3 * PROBLEM_WORKERS, 0.003, fleet.simulated_profile())
    calls = []
    for what in ("prefetch", "forget"):
        real = getattr(ring, what)

        def recorded(kernel, problem, seed=0, topology=None, slots=None, what=what, real=real):
            calls.append((what, problem.key(), None if slots is None else tuple(slots)))
            real(kernel, problem, seed, topology, slots)

        setattr(ring, what, recorded)
    spec = catalog.get("gemv")
    problems = [spec.problem(m=n, n=n) for n in (256, 512, 1024, 2048)]
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": problems}, strategy="model", budget=16)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    try:
        Campaign(config, ring, db, tmp_path / "artifacts", "farm tune gemv").run()
        ran = {p.key(): {r["worker_id"].split(".")[0] for r in store.trials(db) if r["problem"] == p.key()}
               for p in problems}  # fmt: skip
        shares = _shares(list(ring.topologies().values())[0], 3)
    finally:
        db.engine.dispose()
        ring.shutdown()
    for n, problem in enumerate(problems):  # the n-th to start takes the n-th place: home n % 3
        asked = [names for what, key, names in calls if key == problem.key() and what == "prefetch"]
        dropped = [names for what, key, names in calls if key == problem.key() and what == "forget"]
        assert len(dropped) == 1 and calls[::-1].index(("forget", problem.key(), dropped[0])) < min(
            calls[::-1].index(("prefetch", problem.key(), names)) for names in asked
        )  # no request for its inputs after they were dropped
        assert set(asked[0]) == set(shares[n % 3]) | set(shares[(n + 1) % 3])
        # later: a share left spare, lent to one still running (_lend_spare)
        assert all(len(names) == PROBLEM_WORKERS and not set(names) & set(asked[0]) for names in asked[1:])
        if n >= 2:  # six places, four tasks: the two places left at the start go to the latest two
            assert set(asked[1]) == set(shares[(n + 2) % 3])
        everywhere = set().union(*asked)
        assert everywhere <= set(dropped[0]) and ran[problem.key()] <= set(dropped[0])
        assert set(dropped[0]) <= everywhere | ran[problem.key()]  # and nowhere else


def test_a_queue_sends_a_problems_trials_home_first_and_names_the_workers_it_visited():
    from farm.tuning.job import Job
    from farm.tuning.workers import TrialQueue

    # trials of 50 ms: the two threads' start a few ms apart is a small part of a trial
    pool = fleet.fleet_pool(2 * PROBLEM_WORKERS, 0.05, fleet.simulated_profile())
    spec, names = catalog.get("gemv"), list(pool.topologies().values())[0]
    homes = {"a": names[: len(names) // 2], "b": names[len(names) // 2 :]}
    problems = {"a": spec.problem(m=256, n=256), "b": spec.problem(m=512, n=512)}
    queue = TrialQueue(pool)
    results: dict[str, list] = {}

    def run(name: str) -> None:
        jobs = [Job("gemv", problems[name], s, 0, 1, 2) for s in spec.schedules()[:64]]
        results[name] = list(queue.stream(jobs, homes[name]))

    import threading

    threads = [threading.Thread(target=run, args=(name,)) for name in homes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    queue.close()
    pool.shutdown()
    at_home = 0
    for name, home in homes.items():
        where = [r.worker_id.split(".")[0] for r in results[name]]
        assert len(where) == 64
        # a problem queued alone spreads over every idle worker (none idles while trials wait),
        # so the share at home depends on how far apart the two threads started
        assert sum(w in home for w in where) > len(where) // 4
        at_home += sum(w in home for w in where)
        assert queue.visited("gemv", problems[name]) == {w for w in where if w not in home}
    assert at_home > 64  # together: mostly at home


def test_a_round_goes_one_trial_a_worker_home_first_while_workers_idle(pool):
    """Idle workers take one trial each before any worker takes a second: a round of 8 for
    a home of 4 on 16 idle workers runs on its 4 home workers and 4 others, not two deep on
    four (a round waits for its slowest worker)."""
    from farm.tuning.job import Job
    from farm.tuning.workers import TrialQueue

    spec, names = catalog.get("gemv"), list(pool.topologies().values())[0]
    home, problem = names[4:8], spec.problem(m=256, n=256)
    queue = TrialQueue(pool)
    try:
        results = list(queue.stream([Job("gemv", problem, s, 0, 1, 2) for s in spec.schedules()[:8]], home))
    finally:
        queue.close()
    where = [r.worker_id.split(".")[0] for r in results]
    assert len(where) == 8 and len(set(where)) == 8
    assert set(home) <= set(where)
    assert queue.visited("gemv", problem) == set(where) - set(home)


def test_a_simulated_gpu_makes_the_inputs_it_lacks_before_its_trial():
    """fleet.py --inputs-s: a GPU's first trial of a problem waits for its inputs, a prefetch
    makes them ahead, and a forget drops them (the cost of a trial away from home)."""
    import time

    import ray

    from farm.tuning.job import Job

    made = fleet.fleet_pool(2, 0.0, fleet.simulated_profile(), inputs_s=1.0)
    try:
        spec = catalog.get("gemv")
        problem = spec.problem(m=256, n=256)
        held = [("gemv", problem.key(), 0)]
        made.prefetch("gemv", problem, slots=["w1"])
        started = time.monotonic()
        ray.get(made._slots["w0"].actor.evaluate.remote([Job("gemv", problem, spec.default, 0, 1, 2)]))
        assert time.monotonic() - started >= 0.95
        assert made.inputs_held("w0") == held and made.inputs_held("w1") == held
        # waited on: an async actor need not run a fire-and-forget call before the next one
        ray.get(made._slots["w0"].actor.forget.remote("gemv", problem, 0))
        assert made.inputs_held("w0") == [] and made.inputs_held("w1") == held
    finally:
        made.shutdown()


def test_a_drainer_claims_more_as_homes_free_and_settles_each_request_as_its_task_ends(pool, tmp_path):
    """Two homes, a claim of 2, 4 requests: the campaign claims the other two as homes free (one
    campaign, not two rounds each waiting for its slowest task), and a request is done when its
    own task ends, before the campaign does."""
    import io

    from farm.store import queue as q
    from farm.tuning.serve import Drainer

    spec = catalog.get("gemm")
    problems = [spec.problem(m=n, k=n, n=n) for n in (256, 512, 1024, 2048)]
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    ids = [q.enqueue(db, q.ANY_TOPOLOGY, "gemm", p.key(), spec.source_hash(), 0, "alice")[0] for p in problems]
    stream = io.StringIO()
    config = TuneConfig(kernels=(), strategy="model", budget=24)
    drainer = Drainer(pool, db, config, tmp_path / "artifacts", name="d", batch=2, stream=stream)
    tally = drainer.drain_once()
    assert (tally.claimed, tally.done, tally.failed, tally.retried) == (4, 4, 0, 0)
    rows = {r["id"]: r for r in q.requests(db)}
    assert {rows[i]["status"] for i in ids} == {"done"}
    (campaign_id,) = {rows[i]["campaign_id"] for i in ids}
    assert "as homes free" in stream.getvalue()
    ended = store.campaign(db, campaign_id)["finished_at"]
    assert min(rows[i]["finished_at"] for i in ids) < ended
    assert {w.problem_key for w in store.winners(db, kernel="gemm")} == {p.key() for p in problems}
    db.engine.dispose()


def test_a_visits_cost_is_learned_from_the_walls_of_trials_and_first_visits():
    from farm.tuning.workers import _VisitCost

    cost, a, b = _VisitCost(), ("gemm", "m=1", 0), ("gemm", "m=2", 0)
    assert cost.trials(a) == 0.0  # nothing seen: a visit is free, as it was before this was learned
    cost.learn(a, "visit", 1, 1.1)  # before the home timed a trial: kept until it has
    cost.learn(a, "trial", 2, 0.2)
    assert cost.trial_s[a] == pytest.approx(0.1) and cost.trials(a) == pytest.approx(10.0)
    assert cost.trials(b) == pytest.approx(10.0)  # a problem never visited takes the ratio seen
    cost.learn(b, "trial", 1, 0.5)
    cost.learn(b, "visit", 1, 0.5)  # made its inputs in no time
    assert cost.trials(b) == 0.0 and 0.0 < cost.ratio < 10.0
    cost.forget(a)
    assert cost.trials(a) == cost.ratio


def test_trials_stay_home_where_a_visit_costs_more_than_waiting_for_it():
    """A worker away from home makes a problem's inputs before its first trial there. Once the
    queue has seen that cost (here 5 trial-times), a short round waits for its home, and only
    a backlog deeper than twice the inputs' cost goes out."""
    from farm.tuning.job import Job
    from farm.tuning.workers import TrialQueue

    made = fleet.fleet_pool(16, 0.05, fleet.simulated_profile(), inputs_s=0.25)
    spec, names = catalog.get("gemv"), list(made.topologies().values())[0]
    home, schedules = names[:4], spec.schedules()
    problems = [spec.problem(m=256 * (i + 1), n=256) for i in range(3)]
    queue = TrialQueue(made)
    try:
        # first visits are free while nothing is known, and teach the cost
        list(queue.stream([Job("gemv", problems[0], s, 0, 1, 2) for s in schedules[:64]], home))
        assert queue.visited("gemv", problems[0]) and queue.cost.ratio > 2
        placed = dict(queue.placed)
        short = list(queue.stream([Job("gemv", problems[1], s, 0, 1, 2) for s in schedules[:16]], home))
        assert {r.worker_id.split(".")[0] for r in short} <= set(home)
        assert queue.visited("gemv", problems[1]) == set() and queue.placed["first visits"] == placed["first visits"]
        deep = list(queue.stream([Job("gemv", problems[2], s, 0, 1, 2) for s in schedules[:96]], home))
        assert len(deep) == 96 and queue.placed["first visits"] > placed["first visits"]
    finally:
        queue.close()
        made.shutdown()


def test_a_worker_away_takes_the_trials_of_a_problem_whose_inputs_it_holds_first():
    """Two tasks share a home's queue: a worker that ran one of them takes that one's next
    batch, from behind the other's, at no inputs' cost; a worker holding neither waits where
    the inputs would cost more than the home's backlog."""
    from types import SimpleNamespace

    from farm.tuning.job import Job
    from farm.tuning.workers import _Away, _Batch, _Pending, _Slot, _VisitCost

    spec = catalog.get("gemv")
    one, two = spec.problem(m=256, n=256), spec.problem(m=512, n=512)
    home = ("w0", "w1")
    slots = {name: _Slot(name) for name in ("w0", "w1", "w8", "w9")}
    for name in home:
        slots[name].fifo.append(_Batch([(0, Job("gemv", one, spec.default, 0, 1, 2))]))
    queued = [(one, spec.schedules()[1]), (two, spec.schedules()[2]), (one, spec.schedules()[3])]
    pending = _Pending(_Batch([(i, Job("gemv", p, s, 0, 1, 2))]) for i, (p, s) in enumerate(queued))
    cost = _VisitCost()
    cost.ratio = 5.0  # a visit costs five trial-times; the home is (3 queued + 2 in flight) / 2 = 2.5 deep
    key_two = ("gemv", two.key(), 0)
    trials = SimpleNamespace(by_name=slots, cost=cost, visited_by={"w9": {key_two}}, home_of={key_two: home},
                             lent_to={})  # fmt: skip
    away = _Away(trials, {home: pending})
    assert away.choose(slots["w8"]) == (None, None)
    assert away.choose(slots["w8"], held=True) == (None, None)
    assert away.choose(slots["w9"]) == (None, None)  # as a worker without the inputs
    chosen, queue_ = away.choose(slots["w9"], held=True)
    assert chosen == home and queue_[0].items[0][1].problem == two and queue_.trials == 3
    assert [b.items[0][1].problem for b in queue_] == [two, one, one]


def test_workers_lent_a_problem_take_its_trials_at_no_inputs_cost():
    """Workers asked to make a problem's inputs ahead (`lend`) take its trials as holders do,
    where a worker without them would wait: the visit is no first visit, and `visited` names
    them, so the campaign drops the inputs there."""
    from farm.tuning.job import Job
    from farm.tuning.workers import TrialQueue

    made = fleet.fleet_pool(8, 0.02, fleet.simulated_profile(), inputs_s=0.5)
    spec, names = catalog.get("gemv"), list(made.topologies().values())[0]
    home, lent = names[:4], names[4:]
    lone, shared = spec.problem(m=256, n=256), spec.problem(m=512, n=256)
    queue = TrialQueue(made)
    queue.cost.ratio = 5.0  # a first visit costs five trial-times: a round of 32 on a home of 4 stays home
    try:
        jobs = [Job("gemv", lone, s, 0, 1, 2) for s in spec.schedules()[:32]]
        assert {r.worker_id.split(".")[0] for r in queue.stream(jobs, home)} <= set(home)
        made.prefetch("gemv", shared, slots=home + lent)
        queue.lend("gemv", shared, 0, lent)
        jobs = [Job("gemv", shared, s, 0, 1, 2) for s in spec.schedules()[:32]]
        where = {r.worker_id.split(".")[0] for r in queue.stream(jobs, home)}
        assert where & set(lent) and queue.placed["first visits"] == 0
        assert queue.visited("gemv", shared) == set(lent) and queue.visited("gemv", lone) == set()
    finally:
        queue.close()
        made.shutdown()


def test_a_task_hands_its_share_of_the_home_on_once_its_search_is_over(pool, tmp_path):
    """Four places (two homes, two tasks each), five problems: the fifth starts as the first
    search ends, before any task has re-measured its finalists and ended."""
    spec = catalog.get("gemv")
    problems = [spec.problem(m=256 * (n + 1), n=256) for n in range(5)]
    config = TuneConfig(kernels=("gemv",), sizes={"gemv": problems}, strategy="model", budget=16)
    db = store.open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    events = []
    campaign = Campaign(config, pool, db, tmp_path / "artifacts", "farm tune gemv",
                        ended=lambda task, winner: events.append(("ended", task.problem.key())))  # fmt: skip
    started = _homes_as_started(campaign)
    real = campaign._prefetch

    def recorded(tasks):
        events.extend(("started", task.problem.key()) for task in tasks or [])
        real(tasks)

    campaign._prefetch = recorded
    try:
        winners = campaign.run()
    finally:
        db.engine.dispose()
    assert len(winners) == 5 and [key for key, _ in started] == [p.key() for p in problems]
    first_end = min(i for i, (what, _) in enumerate(events) if what == "ended")
    assert events.index(("started", problems[4].key())) < first_end
    assert started[4][1] in [names for _, names in started[:4]]  # on a share one of the first four held


def test_a_homes_backlog_is_counted_over_the_workers_holding_its_problems_inputs():
    """Six trials queued on a home of two are three trial-times for the home alone, and a
    visitor whose inputs cost half a trial-time (counted twice) goes; with two workers lent
    the problem they are 1.5 trial-times, and it waits."""
    from types import SimpleNamespace

    from farm.tuning.job import Job
    from farm.tuning.workers import _Away, _Batch, _Pending, _Slot, _VisitCost

    spec = catalog.get("gemv")
    problem, home = spec.problem(m=256, n=256), ("w0", "w1")
    slots = {name: _Slot(name) for name in ("w0", "w1", "w8")}
    pending = _Pending(_Batch([(i, Job("gemv", problem, s, 0, 1, 2))]) for i, s in enumerate(spec.schedules()[:6]))
    cost = _VisitCost()
    cost.ratio = 0.5
    trials = SimpleNamespace(by_name=slots, cost=cost, visited_by={}, home_of={}, lent_to={})
    away = _Away(trials, {home: pending})
    assert away.pressure(home) == 3.0 and away.choose(slots["w8"])[0] == home
    trials.lent_to[("gemv", problem.key(), 0)] = 2
    away = _Away(trials, {home: pending})
    assert away.pressure(home) == 1.5 and away.choose(slots["w8"]) == (None, None)


def test_an_idle_worker_holding_a_problems_inputs_takes_its_queued_trial_however_many_hold_them():
    """A home of two, each worker running a trial, one more queued, and two workers lent the
    problem: the backlog over its four holders is under one trial-time, yet the trial would
    wait behind a busy worker. The idle holder takes it; a busy one does not."""
    from types import SimpleNamespace

    from farm.tuning.job import Job
    from farm.tuning.workers import _Away, _Batch, _Pending, _Slot, _VisitCost

    spec = catalog.get("gemv")
    problem, home = spec.problem(m=256, n=256), ("w0", "w1")
    key = ("gemv", problem.key(), 0)
    slots = {name: _Slot(name) for name in ("w0", "w1", "w8", "w9")}
    for name in ("w0", "w1", "w9"):
        slots[name].fifo.append(_Batch([(0, Job("gemv", problem, spec.default, 0, 1, 2))]))
    pending = _Pending([_Batch([(1, Job("gemv", problem, spec.schedules()[1], 0, 1, 2))])])
    trials = SimpleNamespace(by_name=slots, cost=_VisitCost(), visited_by={"w8": {key}, "w9": {key}},
                             home_of={key: home}, lent_to={key: 2})  # fmt: skip
    away = _Away(trials, {home: pending})
    assert away.pressure(home) == 0.75
    assert away.choose(slots["w9"], held=True) == (None, None)  # busy: the home ends it as soon
    assert away.choose(slots["w8"], held=True) == (home, pending)


def test_once_no_task_is_left_to_start_a_freed_home_is_lent_to_the_latest_started_task_that_lacks_it(tmp_path):
    """Homes a, b, c in a ring; task 1 on b, tasks 2 and 3 on c. Shares freed once nothing is
    left to start go to the latest started task lacking their workers, up to SPARE_LENT each,
    never to a task dropping its inputs; a share no task lacks stays spare."""
    from collections import deque
    from types import SimpleNamespace

    from farm.tuning.campaign import SPARE_LENT

    asked, lent = [], []
    pool = SimpleNamespace(prefetch=lambda kernel, problem, seed, topology, slots: asked.append((problem, slots)),
                           forget=lambda *args, **kwargs: None)  # fmt: skip
    config = TuneConfig(kernels=("gemv",), sizes={}, strategy="model", budget=16)
    campaign = Campaign(config, pool, None, tmp_path, "farm tune gemv")
    campaign._queue = SimpleNamespace(lend=lambda kernel, problem, seed, names: lent.append((problem, names)),
                                      release=lambda *args: set())  # fmt: skip
    spec = catalog.get("gemv")
    a, b, c, d, e, f = (["a0", "a1"], ["b0", "b1"], ["c0", "c1"], ["d0", "d1"], ["e0", "e1"], ["f0", "f1"])
    tasks = [SimpleNamespace(topology="t", kernel="gemv", problem=spec.problem(m=256 * (n + 1), n=256))
             for n in range(4)]  # fmt: skip
    for task, home, beside in ((tasks[1], b, c), (tasks[2], c, a), (tasks[3], c, a)):
        campaign._homes[("t", "gemv", task.problem.key())] = home
        campaign._neighbours[("t", "gemv", task.problem.key())] = beside
    running, counts = {1: None, 2: None, 3: None}, {}
    one, two, three = (task.problem for task in tasks[1:])
    campaign._lend_spare(deque([d, e]), running, tasks, counts)
    assert asked == [(three, d), (three, e)]  # the latest started, up to SPARE_LENT
    campaign._lend_spare(deque([a, b]), running, tasks, counts)
    assert asked[2:] == [(one, a), (two, b)]  # a: only task 1 lacks it; b: task 3 has had its share
    campaign._workers("forget", tasks[2])
    campaign._lend_spare(deque([f, f]), running, tasks, counts)
    assert asked[4:] == [(one, f)] and lent == asked  # not to the one dropping; the second f stays spare
    assert max(counts.values()) == SPARE_LENT == 2


def test_a_worker_re_measuring_takes_no_trials_and_two_tasks_of_a_home_re_measure_side_by_side(pool):
    """A finalists' re-measurement holds its worker's GPU: the queue gives that worker no
    batch meanwhile (it would wait behind the re-measurement, and its round with it), and the
    two tasks of a home re-measure on two workers, not one after the other on the first."""
    from farm.tuning.job import Job
    from farm.tuning.pool_executor import PoolExecutor
    from farm.tuning.workers import TrialQueue

    spec, names = catalog.get("gemv"), list(pool.topologies().values())[0]
    home, problem = names[:4], spec.problem(m=256, n=256)
    topology = next(iter(pool.topologies()))
    queue = TrialQueue(pool)
    executor = PoolExecutor(pool, topology, pool.profiles(), queue, home)
    held, real = [], pool.remeasure_rounds

    def remeasure(slot, *args):
        held.append((slot, dict(queue._reserved)))
        return real(slot, *args)

    pool.remeasure_rounds = remeasure
    try:
        with queue.reserved(home) as first, queue.reserved(home) as second:
            assert (first, second) == (home[0], home[1])  # all idle: the home's order
            where = {r.worker_id.split(".")[0] for r in queue.stream(
                [Job("gemv", problem, s, 0, 1, 2) for s in spec.schedules()[:32]], home)}  # fmt: skip
            assert where and first not in where and second not in where
            samples = executor.remeasure_rounds("gemv", problem, spec.schedules()[:2], 2, 2, 0, 2, 0.01)
        assert held == [(home[2], {home[0]: 1, home[1]: 1, home[2]: 1})] and len(samples) == 2
        assert queue._reserved == {}
        where = [r.worker_id.split(".")[0] for r in queue.stream(
            [Job("gemv", problem, s, 0, 1, 2) for s in spec.schedules()[:16]], home)]  # fmt: skip
        assert home[0] in where and home[1] in where  # given back: idle again, each takes a trial
    finally:
        queue.close()
