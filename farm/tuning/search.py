"""Search strategies: plain functions over (space, evaluate, budget, rng).

`evaluate(batch of Schedule) -> list[TrialResult]` runs a batch (on however many workers)
and returns one result per schedule; failures come back as results with a non-ok status
and count as infinitely slow. The `Budget` is one object shared with the caller: a
strategy may not evaluate more schedules than it has left, and `spend` raises when asked
to. Every strategy returns all the results it evaluated, in evaluation order, and is
deterministic given `rng` and the results it gets back (which is what makes a resumed
campaign, replaying recorded results, follow the same path).

This is one idea in one module: the model search's seeds, rounds, stops and polish share
its models, its budget and its rules for "improving", and are read together.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from farm.schedule import Schedule
from farm.trial import TrialResult
from farm.tuning.surrogate import (
    knn_predict,
    knob_features,
    knob_values,
    log_targets,
    onehot_features,
    ranks,
    ridge_predict,
)

Evaluate = Callable[[list[Schedule]], list[TrialResult]]
HINT_COUNT = 8  # model_based's `hint`: the next best-ranked candidates after each batch
# model_based's final polish of the incumbent's neighbourhood (schedules of its knob names
# that differ in at most POLISH_RADIUS knobs): at most POLISH_ROUNDS rounds of POLISH_BATCH
# (or one per worker), the next only while the last beat the best: a few extra trials a
# problem cost seconds of a `farm tune --all`.
POLISH_ROUNDS, POLISH_BATCH, POLISH_RADIUS = 3, 4, 2
# A polish round that sweeps: every unmeasured schedule one knob from the incumbent, up to this
# many (gemm's schedules have 3-12 such neighbours in a space of 1275), or once they are all
# measured the best-ranked this many two knobs from it (fft's radix-16 incumbents have ~19).
POLISH_SWEEP = 12


class BudgetSpent(RuntimeError):
    """A strategy asked for more trials than the budget has left."""


@dataclass
class Budget:
    """At most `max_trials` schedules evaluated (None = no limit)."""

    max_trials: int | None = None
    spent: int = 0

    def __post_init__(self) -> None:
        if self.max_trials is not None and self.max_trials < 1:
            raise ValueError(f"budget must be >= 1 trials, got {self.max_trials}")

    @property
    def remaining(self) -> int:
        return sys.maxsize if self.max_trials is None else self.max_trials - self.spent

    def spend(self, count: int) -> None:
        if count > self.remaining:
            raise BudgetSpent(f"asked for {count} trials with {self.remaining} of {self.max_trials} left")
        self.spent += count


def _evaluate(batch: list[Schedule], evaluate: Evaluate, budget: Budget) -> list[TrialResult]:
    budget.spend(len(batch))
    results = evaluate(batch)
    if len(results) != len(batch):
        raise ValueError(f"evaluate returned {len(results)} results for {len(batch)} schedules")
    return results


def exhaustive(
    space: list[Schedule], evaluate: Evaluate, budget: Budget, rng: random.Random | None = None, workers: int = 1
):
    """Every schedule in space order (the first `budget.remaining` of them), as one batch
    (one batch keeps any number of `workers` busy)."""
    batch = space[: min(len(space), budget.remaining)]
    return _evaluate(batch, evaluate, budget) if batch else []


def random_search(space: list[Schedule], evaluate: Evaluate, budget: Budget, rng: random.Random, workers: int = 1):
    """A uniform sample without replacement of `budget.remaining` schedules, as one batch."""
    batch = rng.sample(space, min(len(space), budget.remaining))
    return _evaluate(batch, evaluate, budget) if batch else []


def model_based(
    space: list[Schedule],
    evaluate: Evaluate,
    budget: Budget,
    rng: random.Random,
    workers: int = 1,
    batch_size: int | None = None,
    explore: float = 0.25,
    noise: float | None = None,
    patience: int = 3,
    prior: list[TrialResult] | None = None,
    extend_after: int | None = None,
    hint: Callable[[list[Schedule]], None] | None = None,
    polish: int = 0,
    lead: list[Schedule] | None = None,
) -> list[TrialResult]:
    """Two cheap surrogates voting: k-nearest neighbours over log2 knob values (smooth
    trends) and a ridge regression over one-hot knob values (what each value is worth on
    its own, e.g. "vector_width 4 helps").

    A random quarter of the budget (at least 4) seeds the models; then each round predicts
    log(time) for every unevaluated schedule (failures count as slower than the slowest
    success, so the models learn the invalid regions), ranks candidates by the sum of the
    two models' ranks, takes the `batch_size` best (an `explore` share of each batch drawn
    at random from the rest), evaluates them, and refits. `batch_size` defaults to
    max(4, 2 x workers): small batches refit often (the better search), but every worker
    of the topology needs work in flight. On replayed gemm landscapes and on the synthetic
    gemm-shaped cost this beats the k-NN model alone.

    Warm start: `prior` results (trials stored by earlier campaigns for this problem) are
    known to the models from the start and take the place of as many random seeds; each
    counts against the budget (the budget caps the trials a problem has, whoever ran
    them), so a resumed campaign ends where the uninterrupted one would have.

    Adaptive stop (`noise` given: the relative difference that counts as measurement
    noise): before each model round, the most optimistic prediction (the lower of the two
    models' predictions, less their typical error on all the trials they proposed, a robust
    sigma of |measured - predicted|) is compared with the best time found; when it does not
    beat it by more than `noise` (nor the trials' own p20-p80 spread) for `patience`
    consecutive rounds, the search stops short of its budget: a flat landscape stops early,
    one whose models still see a better region keeps going. `budget` stays the cap.

    Extension (`extend_after` given, a count of trials like the budget's, stored ones
    included): the search plans `extend_after` trials (its random seeds are a quarter of
    those, and up to them it runs as it would with that budget), and spends the rest of the
    budget only while it is still improving: each further model round needs the last
    `patience` batches to have beaten the best before them by more than the noise (or the
    trials' spread). A large space whose search has not settled gets more trials; a settled
    one stops at `extend_after`.

    Lead (`lead` given: a campaign's winners of the kernel's other problems): schedules of
    the space measured in the first batch, before the seeds, and known to the models as the
    warm start's trials are (ahead of them, counted against the budget); measured with the
    seeds, not in a round of their own, as each round of a problem waits for its slowest trial.

    Hint (`hint` given): with each model batch, the HINT_COUNT best-ranked candidates it
    did not pick (the likely picks of the next round) go to `hint`, which a campaign uses
    to have its workers compile their pipelines ahead (TrialRunner.precompile): a batch
    otherwise starts with a compile its trial waits for, the GPU idle meanwhile.

    Polish (`polish` rounds, a campaign's POLISH_ROUNDS; 0: none): however the search ended
    (adaptive stop, `extend_after`, or its plan) and while the budget has trials left, up to
    `polish` rounds measure the best-ranked (same two models) unmeasured schedules within
    Hamming distance POLISH_RADIUS of the best one measured, half of them one knob from it
    (`polish_round`): max(POLISH_BATCH, workers) trials a round, a round only while the
    last beat the best by more than the noise (or the trials' spread, as `improving`), never
    past the cap (it may spend what an adaptive stop left). While one-knob neighbours of the
    best are unmeasured a round sweeps them all instead (up to POLISH_SWEEP; generic knobs the
    kernel's own fix, `derived_knobs`, don't count as knobs apart), and a sweep that finds
    nothing better is followed by a sweep of the two-knob neighbours (the POLISH_SWEEP
    best-ranked), the polish's last round unless it beats the best. Without it two
    campaigns can each settle in the first basin their models found and never measure the
    other's winner, a knob or two away; the sweeps make searches replayed on measured
    landscapes (benchmarks/search_replay.py) end within 1% of the best far more often, for
    a few more trials a problem, and recover from a misread neighbour. At most 3 x 12 = 36.
    `hint` gets each round's next-ranked neighbours.
    """
    total = min(len(space), budget.remaining)
    if total <= 0:
        return []
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    batch_size = batch_size or max(4, 2 * workers)
    planned = total if extend_after is None else max(1, min(total, extend_after))
    _, values = knob_values(space)  # once: both models' features come from it
    features, onehot = knob_features(space, values), onehot_features(space, values)
    index = {s.key(): i for i, s in enumerate(space)}
    known = [r for r in prior or [] if r.key.schedule.key() in index]
    prior_keys = {r.key.schedule.key() for r in known}
    leads = list(dict.fromkeys(index[s.key()] for s in lead or [] if s.key() in index and s.key() not in prior_keys))
    leads = leads[:total]  # as prior trials: the lead first, then the warm start's, within the cap
    known = known[: total - len(leads)]
    budget.spend(len(known))
    seen: list[int] = leads + [index[r.key.schedule.key()] for r in known]
    results: list[TrialResult] = []
    order = [i for i in range(len(space)) if i not in set(seen)]
    rng.shuffle(order)
    seed_count = max(0, min(planned, max(4, planned // 4)) - len(seen))
    picks = covering(order, space, seen, seed_count)
    first = _evaluate([space[i] for i in leads + picks], evaluate, budget)
    known = first[: len(leads)] + known  # as prior trials: ahead of the warm start's
    results += first[len(leads) :]
    seen += picks
    residuals: list[float] = []
    quiet = 0

    def run(batch: list[Schedule]) -> list[TrialResult]:
        return _evaluate(batch, evaluate, budget)

    while len(seen) < total:
        size = min(batch_size, (planned if len(seen) < planned else total) - len(seen))
        if len(seen) >= planned and not improving(known + results, patience * batch_size, noise or 0.0):
            break
        candidates, knn, ridge = _predict(features, onehot, seen, known + results)
        if noise is not None and residuals:
            quiet = 0 if _promising(known + results, knn, ridge, residuals, noise) else quiet + 1
            if quiet >= patience:
                break
        ranked = [int(c) for c in candidates[np.argsort(ranks(knn) + ranks(ridge), kind="stable")]]
        picks = _pick(ranked, size, explore, rng)
        if hint is not None:
            chosen = set(picks)
            hint([space[i] for i in [c for c in ranked if c not in chosen][:HINT_COUNT]])
        fresh = _evaluate([space[i] for i in picks], evaluate, budget)
        predicted = dict(zip(candidates.tolist(), (knn + ridge) / 2, strict=True))
        measured = [(i, r) for i, r in zip(picks, fresh, strict=True) if r.ok and r.median_ns]
        residuals += [math.log(r.median_ns) - predicted[i] for i, r in measured]
        results += fresh
        seen += picks
    size = max(POLISH_BATCH, workers)  # one trial per worker at least
    derived = derived_knobs(space) if polish else frozenset()
    for round_ in range(polish):
        room = min(total - len(seen), budget.remaining)  # the adaptive stop's trials too, never past the cap
        ahead = hint if round_ + 1 < polish and room > size else None
        sweep = min(max(POLISH_SWEEP, size), room)
        fresh, radius = polish_round(
            space, features, onehot, seen, known + results, min(size, room), ahead, run, derived, sweep
        )
        results += fresh
        if not fresh or (radius != 1 and not improving(known + results, len(fresh), noise or 0.0)):
            break  # a one-knob sweep that found nothing better is followed by a two-knob one
    return results


def polish_round(
    space: list[Schedule],
    features: np.ndarray,
    onehot: np.ndarray,
    seen: list[int],
    results: list[TrialResult],
    size: int,
    hint: Callable[[list[Schedule]], None] | None,
    run: Evaluate,
    derived: frozenset[str] = frozenset(),
    sweep: int = 0,
) -> tuple[list[TrialResult], bool]:
    """One round of model_based's polish: of the unmeasured schedules near the best ok one of
    `results` (in `seen` order; near: Hamming distance <= POLISH_RADIUS, the same knob
    names), ranked by the two models (the sum of their ranks), the best half of `size` (at
    least one) that change one knob, then the best of the rest; run, appended to `seen` and
    returned (none when there is none: no ok result, a measured-out neighbourhood, `size` 0).
    The one-knob share: on the synthetic gemm-shaped cost (extended search) the polish then
    left 21 of 40 seeds > 3% from the optimum where the models' ranking alone left 31; it
    finds a two-knob optimum as often (tests/test_search_polish.py). `derived` knobs
    (`derived_knobs`) are left out of the distance.

    Sweep (`sweep` > 0): while one-knob neighbours of the incumbent are unmeasured, the round
    measures all of them instead (up to `sweep`, best-ranked first): on replayed gemm
    landscapes (benchmarks/search_replay.py) most searches that ended > 1% from the best had
    stopped one knob from it, that neighbour ranked below the round's picks. Once they are
    all measured it sweeps the two-knob ones (the `sweep` best-ranked). Returns the round's
    results ([] when it had none to run) and the sweep's radius (1 or 2; 0: not a sweep)."""
    ok = [(r.median_ns, n) for n, r in enumerate(results) if r.ok and r.median_ns]
    if not ok or size <= 0:
        return [], False
    distance = distances(space, seen[min(ok)[1]], derived)
    taken = set(seen)
    near = [i for i in np.flatnonzero(distance <= POLISH_RADIUS).tolist() if i not in taken]
    if not near:
        return [], False
    targets = log_targets(results)
    knn = knn_predict(features[seen], targets, features[near])
    ridge = ridge_predict(onehot[seen], targets, onehot[near])
    ranked = [near[j] for j in np.argsort(ranks(knn) + ranks(ridge), kind="stable")]
    ones = [i for i in ranked if distance[i] == 1]
    radius = (1 if ones else 2) if sweep > 0 else 0
    if radius == 1:
        picks = ones[:sweep]
    elif radius == 2:  # every one-knob neighbour measured: sweep the two-knob ones
        picks = [i for i in ranked if distance[i] == 2][:sweep]
    else:
        picks = ones[: (size + 1) // 2]
        picks += [i for i in ranked if i not in picks][: size - len(picks)]
    chosen = set(picks)
    rest = [i for i in ranked if i not in chosen]
    if hint is not None and rest:  # the likely picks of a next round, compiled ahead
        hint([space[i] for i in rest[:HINT_COUNT]])
    fresh = run([space[i] for i in picks])
    seen += picks
    return fresh, radius


def distances(space: list[Schedule], centre: int, derived: frozenset[str] = frozenset()) -> np.ndarray:
    """How many knobs each schedule of `space` differs in from `space[centre]`, a knob one of
    them lacks counting as 0 (as in `knob_features`): recurrent's `prefetch=1` twin is one
    knob from its schedule without it. Forms with knobs of their own stay apart (stepwise and
    chunked recurrent differ in >= 4). `derived` knobs don't count."""
    names, values = knob_values(space)
    counted = [j for j, name in enumerate(names) if name not in derived]
    return (values[:, counted] != values[centre, counted]).sum(axis=1)


DERIVABLE = ("workgroup_size", "items_per_invocation")  # every kernel's generic knobs


def derived_knobs(space: list[Schedule]) -> frozenset[str]:
    """The generic knobs (DERIVABLE, in that order) whose value the space's other knobs fix:
    no two schedules agree on all the others and differ in it (a knob a schedule lacks
    counting as 0), each tested against the knobs not already found derived. gemm's
    workgroup_size is (tile_m/reg_m)·(tile_n/reg_n) and its items_per_invocation reg_m·reg_n,
    so a tile twice as tall at the same register tile is one knob away, not two; the polish
    measures such neighbours."""
    names = sorted({name for s in space for name in s.as_dict()})
    derived: set[str] = set()
    for name in (n for n in DERIVABLE if n in names):
        rest = [n for n in names if n != name and n not in derived]
        fixed: dict[tuple, int] = {}
        if all(fixed.setdefault(tuple(d.get(n, 0) for n in rest), d.get(name, 0)) == d.get(name, 0)
               for d in (s.as_dict() for s in space)):  # fmt: skip
            derived.add(name)
    return frozenset(derived)


def covering(order: list[int], space: list[Schedule], seen: list[int], count: int) -> list[int]:
    """`count` seeds from `order` (shuffled): first, in that order, one schedule of each
    family no seen schedule belongs to (a family: the schedules with the same knob names, as a
    kernel's second form with knobs of its own), then the rest of the order. Every family is
    then measured before the models predict, so two campaigns don't differ in whether
    their random seeds happened to sample one (recurrent's chunked form can be the faster
    family at one size). Covering every knob value instead was no better on replayed gemm
    landscapes."""
    families = {tuple(space[i].as_dict()) for i in seen}
    picks = []
    for i in order:
        family = tuple(space[i].as_dict())
        if family not in families and len(picks) < count:
            families.add(family)
            picks.append(i)
    chosen = set(picks)
    return picks + [i for i in order if i not in chosen][: count - len(picks)]


def _predict(features: np.ndarray, onehot: np.ndarray, seen: list[int], results: list[TrialResult]):
    """(unevaluated indices, k-NN log-time predictions, ridge log-time predictions)."""
    targets = log_targets(results)
    seen_set = set(seen)
    candidates = np.array([i for i in range(len(features)) if i not in seen_set])
    knn = knn_predict(features[seen], targets, features[candidates])
    ridge = ridge_predict(onehot[seen], targets, onehot[candidates])
    return candidates, knn, ridge


def _pick(ranked: list[int], size: int, explore: float, rng: random.Random) -> list[int]:
    """The `size` best of `ranked` (best first), an `explore` share of them drawn at random from the rest."""
    random_count = min(size - 1, int(round(size * explore))) if size > 1 else 0
    picks = ranked[: size - random_count]
    taken = set(picks)
    rest = [c for c in ranked if c not in taken]
    picks += rng.sample(rest, min(random_count, len(rest)))
    return picks


def _promising(
    results: list[TrialResult], knn: np.ndarray, ridge: np.ndarray, residuals: list[float], noise: float
) -> bool:
    """Whether the models' most optimistic candidate beats the best time by more than the noise."""
    best = min((math.log(r.median_ns) for r in results if r.ok and r.median_ns), default=math.inf)
    if not math.isfinite(best):
        return True
    sigma = 1.4826 * float(np.median(np.abs(residuals)))
    optimistic = float(np.min(np.minimum(knn, ridge))) - sigma
    return best - optimistic > math.log1p(max(noise, trial_noise(results)))


def improving(results: list[TrialResult], window: int, noise: float) -> bool:
    """Whether the last `window` results beat the best time before them by more than
    `noise` (or the trials' typical spread, `trial_noise`, when larger)."""
    times = [math.log(r.median_ns) if r.ok and r.median_ns else math.inf for r in results]
    if len(times) <= window:
        return True
    before, recent = min(times[:-window]), min(times[-window:])
    if math.isinf(recent):
        return False
    return before - recent > math.log1p(max(noise, trial_noise(results)))


def trial_noise(results: list[TrialResult]) -> float:
    """The trials' typical relative spread: the median of (p80 - p20) / median over ok trials."""
    spreads = [(r.timing.p80_ns - r.timing.p20_ns) / r.timing.median_ns for r in results if r.ok and r.median_ns]
    return float(np.median(spreads)) if spreads else 0.0


STRATEGIES: dict[str, Callable[..., list[TrialResult]]] = {
    "exhaustive": exhaustive,
    "random": random_search,
    "model": model_based,
}


def strategy(name: str) -> Callable[..., list[TrialResult]]:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; choose from {', '.join(STRATEGIES)}") from None
