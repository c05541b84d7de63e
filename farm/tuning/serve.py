"""`farm serve`: the drainer of the tuning queue (farm.store.queue), locally or as the
entrypoint of a `ray job submit`.

Each round claims up to `batch` requests for its topologies (and "any") under a lease; its
cost is bounded by what it claims, not by the queue's length. Unless `batch` is given, a
round claims enough to start every claimed request at once, TASKS_PER_HOME on each home of
PROBLEM_WORKERS workers (`claim_size`: two per 8 workers, at least CLAIM_LEAST), since a
campaign tunes that many problems at once and a request's search rounds are sequential: at
fleet scale more requests in flight, each on fewer workers, keep more of them busy. The
claimed requests are grouped per topology ("any" goes to the topology with the most
workers) and each group is one campaign (farm.tuning.campaign.Campaign, with
farm.tuning.tasks's config: the requested problems only) on that topology's workers, with
trials and winners stored as `farm tune` stores them. Where the campaign tunes problems in
parallel it claims more requests whenever a home is free and its planned problems have all
started, so the next requests start as the first ones end rather than after the slowest. A
request with a winner is done as its problem's task ends; one whose campaign raised or
found no certified schedule is retried (up to `max_attempts`), then failed with the reason.
A round also sweeps (leases that ran out are put back, or failed after their attempts; queued
requests for a topology none of this drainer's workers has are noted as such and left
queued) when the round before claimed nothing or SWEEP_S passed since the last sweep.

Only tuning failures count as attempts: the store's writes and reads ride out a database
restart (farm.store.retry); a campaign cut off by a longer outage gives its claims back
untried (the next round does, if the database is still away), and the drainer tries again
after `poll_s`. While a group is tuned its leases are renewed every third of the lease;
Ctrl-C gives the claims back untried. `once`: rounds until nothing is claimable, then
return.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from farm import catalog, store
from farm.schedule import Problem
from farm.store import WinnerRecord, queue
from farm.store.engine import describe_error
from farm.store.queue import ANY_TOPOLOGY, DEFAULT_LEASE_S, DEFAULT_MAX_ATTEMPTS
from farm.store.retry import is_transient
from farm.tuning.campaign import PROBLEM_WORKERS, TASKS_PER_HOME, Campaign
from farm.tuning.device_lock import device_locks
from farm.tuning.heartbeat import Heartbeat
from farm.tuning.problems import check_problem
from farm.tuning.report import format_workers
from farm.tuning.tasks import TuneConfig, plan
from farm.tuning.workers import WorkerPool

SHORT = 12
CLAIM_LEAST = 16  # requests a round claims at least, however few the workers
SWEEP_S = 5.0  # while every round claims, expired leases and unserved requests are looked for this often


@dataclass
class Tally:
    """What drain rounds did; `failed` counts requests that used their last attempt."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    expired: int = 0
    unserved: set[int] = field(default_factory=set)

    def add(self, other: Tally) -> None:
        for name in ("claimed", "done", "retried", "failed", "expired"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unserved |= other.unserved

    def line(self) -> str:
        waiting = f", {len(self.unserved)} left queued for topologies no worker here has" if self.unserved else ""
        return (f"serve: {self.claimed} claimed, {self.done} done, {self.retried} to retry, "
                f"{self.failed} failed{waiting}")  # fmt: skip


class TopologyView:
    """A pool that shows only one topology's workers: a Campaign on it tunes that topology alone."""

    def __init__(self, pool, topology: str):
        self._pool, self._topology = pool, topology

    def topologies(self) -> dict[str, list[str]]:
        return {self._topology: self._pool.topologies()[self._topology]}

    def __getattr__(self, name: str):
        return getattr(self._pool, name)


def drainer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Drainer:
    """Drains the queue onto `pool` (a WorkerPool, or anything with its campaign methods)."""

    def __init__(
        self,
        pool,
        db: store.Store,
        config: TuneConfig,
        out: Path,
        name: str | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        batch: int | None = None,
        stream: TextIO | None = None,
    ):
        if lease_s <= 0 or max_attempts < 1 or (batch is not None and batch < 1):
            raise ValueError(f"need lease > 0, max attempts >= 1, batch >= 1; got {lease_s}, {max_attempts}, {batch}")
        self.pool, self.db, self.config, self.out = pool, db, config, Path(out)
        self.name = name or drainer_name()
        self.lease_s, self.max_attempts, self.batch = lease_s, max_attempts, batch
        self.stream = stream or sys.stderr
        self._swept_at: float | None = None  # monotonic time of the last sweep
        self._claimed_last = 0
        self._unreleased: list[int] = []  # claims to give back once the database answers again

    def serve(self, once: bool = False, poll_s: float = 30.0, stop: threading.Event | None = None) -> Tally:
        """Drain rounds until stopped (`stop` set, Ctrl-C), waiting `poll_s` after a round that
        claimed nothing; with `once`, return after the first such round."""
        stop = stop or threading.Event()
        total = Tally()
        while True:
            try:
                tally = self.drain_once()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._say(f"serve: the database stayed unreachable ({describe_error(exc)}); "
                          f"next round in {poll_s:g} s")  # fmt: skip
                if stop.wait(poll_s):
                    return total
                continue
            total.add(tally)
            if tally.claimed:
                continue  # there may be more, or retries
            if once or stop.wait(poll_s):
                return total

    def drain_once(self) -> Tally:
        tally = Tally()
        if self._unreleased:  # given back untried before anything else is claimed
            queue.release(self.db, self.name, self._unreleased)
            self._unreleased = []
        topologies = self.pool.topologies()
        now = time.monotonic()
        if not self._claimed_last or self._swept_at is None or now - self._swept_at >= SWEEP_S:
            self._sweep(topologies, tally)
            self._swept_at = now
        size = self.claim_size(topologies)
        claimed = queue.claim(self.db, self.name, [*topologies, ANY_TOPOLOGY], self.lease_s, size)
        tally.claimed = self._claimed_last = len(claimed)
        busiest = _busiest(topologies)
        groups: dict[str, list[dict]] = {}
        for row in claimed:
            topology = busiest if row["topology_hash"] == ANY_TOPOLOGY else row["topology_hash"]
            groups.setdefault(topology, []).append(row)
        items = list(groups.items())
        for index, (topology, rows) in enumerate(items):
            try:
                self._drain_group(topology, rows, tally)
            except BaseException:
                self._give_back([r["id"] for _, later in items[index + 1 :] for r in later])
                raise
        return tally

    def claim_size(self, topologies: dict[str, list[str]]) -> int:
        """Requests a round claims: `batch` when given, else TASKS_PER_HOME per PROBLEM_WORKERS
        workers (at least CLAIM_LEAST), so the campaigns at a fleet's scale start every claimed
        request at once, each sharing a home of PROBLEM_WORKERS or more with one other."""
        if self.batch is not None:
            return self.batch
        return max(CLAIM_LEAST, sum(map(len, topologies.values())) // PROBLEM_WORKERS * TASKS_PER_HOME)

    def _give_back(self, ids: list[int]) -> None:
        """Release claims not tried (the round stopped before them, or the store failed them); while
        the database is unreachable they are kept for the next round to release."""
        if not ids:
            return
        try:
            queue.release(self.db, self.name, ids)
        except Exception as exc:  # noqa: BLE001 - the caller's error is the one to report
            if is_transient(exc):
                self._unreleased += ids  # the next round gives them back
            else:
                self._say(f"could not give back request(s) {', '.join(map(str, ids))} ({describe_error(exc)}): "
                          "their leases will run out")  # fmt: skip

    def _sweep(self, topologies: dict[str, list[str]], tally: Tally) -> None:
        """Put back (or fail) requests whose lease ran out; note the queued ones no worker here serves."""
        for row in queue.expire_leases(self.db, self.max_attempts):
            tally.expired += 1
            self._say(f"request {row['id']} ({row['kernel']} {row['problem']}): {row['last_error']}; {row['status']}")
        have = ", ".join(h[:SHORT] for h in sorted(topologies)) or "none"
        note = f"no worker of this topology at drainer {self.name} (its topologies: {have})"
        for row in queue.note_unserved(self.db, topologies, note):
            self._say(f"request {row['id']} ({row['kernel']} {row['problem']}) is for topology "
                      f"{row['topology_hash'][:SHORT]}, which no worker here has ({have}): left queued")  # fmt: skip
        tally.unserved = set(queue.unserved(self.db, topologies))

    def _drain_group(self, topology: str, rows: list[dict], tally: Tally) -> None:
        ids = [r["id"] for r in rows]  # grows as the campaign claims more (`_tune`)
        self._say(f"tuning request(s) {', '.join(map(str, ids))} on topology {topology[:SHORT]}")
        renew = Heartbeat(lambda: queue.renew(self.db, self.name, ids, self.lease_s), self.lease_s / 3).start()
        try:
            self._tune(topology, rows, tally, ids)
        except KeyboardInterrupt:
            queue.release(self.db, self.name, ids)
            self._say(f"interrupted: request(s) {', '.join(map(str, ids))} given back to the queue")
            raise
        finally:
            renew.stop()

    def _tune(self, topology: str, rows: list[dict], tally: Tally, held: list[int]) -> None:
        """One campaign on `topology` for the claimed `rows`; with problems in parallel it claims
        more requests as homes free (`held` grows by them) and settles each request as its
        task ends, the rest when the campaign ends."""
        profile = self.pool.profiles()[self.pool.topologies()[topology][0]]
        wanted: dict[int, tuple[str, str]] = {}  # request id -> (kernel, problem key), not settled yet
        ended: dict[tuple[str, str], WinnerRecord | None] = {}  # the tasks that ended, by key

        def admit(new_rows: list[dict]) -> dict[str, list[Problem]]:
            sizes: dict[str, list[Problem]] = {}
            for row in new_rows:
                try:
                    spec = catalog.get(row["kernel"])
                    problem = spec.problem(**Problem.from_key(row["problem"]).as_dict())
                    check_problem(spec, problem, profile)
                except ValueError as exc:  # an unknown kernel here, or a problem this adapter can't run
                    self._failed([row["id"]], f"{type(exc).__name__}: {exc}", tally)
                    continue
                key = (spec.name, problem.key())
                if key in ended:  # the same problem, tuned a moment ago in this campaign
                    self._settle([row["id"]], ended[key], campaign, tally)
                    continue
                planned = any(k == key for k in wanted.values())
                wanted[row["id"]] = key
                if not planned and problem not in sizes.setdefault(spec.name, []):
                    sizes[spec.name].append(problem)
            return {k: v for k, v in sizes.items() if v}

        campaign = None
        sizes = admit(rows)
        if not wanted:
            return
        any_here = topology == _busiest(self.pool.topologies())  # "any" requests go there

        def more(count: int) -> list:
            claimed = queue.claim(self.db, self.name, [topology, *([ANY_TOPOLOGY] if any_here else [])],
                                  self.lease_s, count)  # fmt: skip
            if not claimed:
                return []
            tally.claimed += len(claimed)
            held.extend(r["id"] for r in claimed)
            self._say(f"tuning request(s) {', '.join(str(r['id']) for r in claimed)} on topology "
                      f"{topology[:SHORT]} as homes free")  # fmt: skip
            extra = admit(claimed)
            return plan(replace(self.config, kernels=tuple(extra), sizes=extra), topology, profile) if extra else []

        def task_ended(task, winner) -> None:
            key = (task.kernel, task.problem.key())
            ended[key] = winner
            ids = [i for i, k in wanted.items() if k == key]
            self._settle(ids, winner, campaign, tally)
            for i in ids:  # only once settled: a store failure gives them back with the rest
                del wanted[i]

        config = replace(self.config, kernels=tuple(sizes), sizes=sizes)
        command = f"farm serve ({self.name}): request(s) {', '.join(map(str, wanted))}"
        view = TopologyView(self.pool, topology)
        campaign = Campaign(config, view, self.db, self.out, command, more=more, ended=task_ended)
        try:
            with device_locks(_reports(self.pool, view.topologies()[topology]), command, self.stream):
                winners = campaign.run()
        except Exception as exc:  # noqa: BLE001 - the attempt failed: retried, then failed with the reason
            if is_transient(exc):  # the store, not the tuning, failed: not an attempt
                self._say(f"request(s) {', '.join(map(str, wanted))} given back untried: the database was "
                          f"unreachable ({describe_error(exc)})")  # fmt: skip
                self._give_back(list(wanted))
                raise
            self._failed(list(wanted), f"{type(exc).__name__}: {exc}", tally)
            return
        won = {(w.kernel, w.problem_key): w for w in winners}
        by_key: dict[tuple[str, str], list[int]] = {}
        for request, key in wanted.items():
            by_key.setdefault(key, []).append(request)
        for key, ids in by_key.items():
            self._settle(ids, won.get(key), campaign, tally)

    def _settle(self, ids: list[int], winner, campaign, tally: Tally) -> None:
        """Requests `ids` done when their problem has a winner, else failed (or queued again)."""
        if not ids:
            return
        if winner is not None:
            tally.done += queue.complete(self.db, self.name, ids, campaign.campaign_id or None,
                                         f"tuned on {winner.topology_hash[:SHORT]}")  # fmt: skip
            return
        reason = f"no certified schedule, so no winner (campaign {campaign.campaign_id}: see its failed trials)"
        self._failed(ids, reason, tally)

    def _failed(self, ids: list[int], reason: str, tally: Tally) -> None:
        for request, status in sorted(queue.fail(self.db, self.name, ids, reason, self.max_attempts).items()):
            if status == "failed":
                tally.failed += 1
                self._say(f"request {request} failed after its last attempt: {reason}")
            else:
                tally.retried += 1
                self._say(f"request {request}: {reason}; queued again")

    def _say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def _busiest(topologies: dict[str, list[str]]) -> str | None:
    """The topology with the most workers (ties: the first by hash), where "any" requests go."""
    return max(sorted(topologies), key=lambda h: len(topologies[h]), default=None)


def _reports(pool, slots: list[str]) -> dict[str, dict]:
    reports: Callable[[], dict] | None = getattr(pool, "reports", None)
    return {slot: r for slot, r in reports().items() if slot in slots} if reports else {}


def serve(
    config: TuneConfig,
    db_url: str | None = None,
    ray_address: str | None = None,
    allow_cpu: bool = False,
    trial_timeout_s: float = 60.0,
    once: bool = False,
    poll_s: float = 30.0,
    gpus: int | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> Tally:
    """`farm serve`: the pool up, rounds until stopped (`once`: until nothing is claimable), pool down.
    With `once` and nothing queued or claimed, returns without starting Ray."""
    db = store.open_store(db_url)
    out = Path(config.out or store.farm_home() / "artifacts")
    counts = queue.status_counts(db)
    if once and not counts["queued"] and not counts["claimed"]:
        print("serve: the queue is empty", file=sys.stderr)
        return Tally()
    with WorkerPool(ray_address, allow_cpu=allow_cpu, trial_timeout_s=trial_timeout_s, gpus=gpus) as pool:
        print(format_workers(pool.reports()), file=sys.stderr)
        drainer = Drainer(pool, db, config, out, lease_s=lease_s, max_attempts=max_attempts)
        print(f"serve: drainer {drainer.name} on topologies "
              f"{', '.join(h[:SHORT] for h in sorted(pool.topologies()))}", file=sys.stderr)  # fmt: skip
        total = drainer.serve(once, poll_s)
    print(total.line(), file=sys.stderr)
    return total
