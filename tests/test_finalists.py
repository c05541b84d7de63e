"""The final choice between close finalists (farm.tuning.finalists), pure functions
over paired per-round medians, and the winner a campaign records with its decision."""

from __future__ import annotations

import random

import pytest

from farm.schedule import Schedule
from farm.store import WinnerRecord
from farm.tuning.finalists import (
    compare,
    decide,
    measure_until_resolved,
    pending,
    prefer,
    sign_interval,
    simplicity,
)

A = Schedule.of(workgroup_size=64, vector_width=4).key()
B = Schedule.of(workgroup_size=128, vector_width=4).key()
C = Schedule.of(workgroup_size=256, vector_width=2).key()
DEFAULT = Schedule.of(workgroup_size=64)


def drifting(means: dict[str, float], rounds: int, jitter: float, seed: int = 0) -> dict[str, list[float]]:
    """Per-round medians: a shared per-round drift (which pairing cancels) times each
    schedule's own mean and a small independent jitter."""
    rng = random.Random(seed)
    out: dict[str, list[float]] = {k: [] for k in means}
    for _ in range(rounds):
        drift = rng.uniform(0.9, 1.1)
        for key, mean in means.items():
            out[key].append(mean * drift * rng.uniform(1 - jitter, 1 + jitter))
    return out


def test_sign_interval_uses_order_statistics_with_the_asked_coverage():
    assert sign_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0)  # n=5: min/max covers 93.75%
    values = list(range(1, 11))
    assert sign_interval(values) == (2, 9)  # n=10: k=2 covers 97.9%, k=3 only 89.1%
    assert sign_interval([7.0]) == (7.0, 7.0)
    with pytest.raises(ValueError):
        sign_interval([])


def test_a_clearly_slower_finalist_is_separated_despite_the_drift():
    samples = drifting({A: 100.0, B: 105.0}, rounds=5, jitter=0.002)
    c = compare(samples, B, A, noise=0.01)
    assert c.verdict == "slower" and 1.03 < c.ratio < 1.07
    decision = decide(samples, noise=0.01)
    assert (decision.winner, decision.tie, decision.runner_up) == (A, False, B)
    assert 0.03 < decision.margin < 0.07 and decision.margin_low <= decision.margin <= decision.margin_high


def test_a_tie_within_noise_is_a_tie_and_keeps_the_stored_then_default_then_simplest():
    samples = drifting({A: 100.0, B: 100.2, C: 100.1}, rounds=7, jitter=0.001)
    decision = decide(samples, noise=0.01, stored=C, default=DEFAULT)
    assert decision.tie and set(decision.tied) == {A, B, C} and decision.winner == C
    assert decide(samples, noise=0.01, stored=None, default=Schedule.from_key(B)).winner == B
    # no stored winner, default not among them: the simplest (fewest knobs off the default)
    assert decide(samples, noise=0.01, default=DEFAULT).winner == A
    # the choice never depends on which of the tied measured fastest: swap the timings
    swapped = {A: samples[B], B: samples[A], C: samples[C]}
    assert decide(swapped, noise=0.01, default=DEFAULT).winner == A


def test_simpler_means_fewer_knobs_off_the_default_then_the_canonical_key():
    assert [simplicity(Schedule.from_key(k), DEFAULT)[0] for k in (A, B, C)] == [1, 2, 2]
    assert prefer([C, B, A], default=DEFAULT) == A
    assert prefer([C, B], default=DEFAULT) == C  # both two knobs off: the smaller canonical key
    assert prefer([B, C], stored="elsewhere", default=None) == min(B, C)


def test_unresolved_finalists_get_more_rounds_until_separated_or_capped():
    truth = {A: 100.0, B: 101.8, C: 130.0}  # B is 1.8% slower: beyond noise 1%, close
    rng = random.Random(1)
    calls: list[list[str]] = []

    def measure_round(keys):
        calls.append(list(keys))
        drift = rng.uniform(0.95, 1.05)
        return {k: truth[k] * drift * rng.uniform(0.994, 1.006) for k in keys}

    samples = measure_until_resolved(measure_round, [A, B, C], rounds=3, max_rounds=12, noise=0.01)
    assert all(len(call) == 3 for call in calls[:3]) and calls[0] != calls[1]  # rotated order
    assert all(C not in call for call in calls[3:])  # clearly slower: no more rounds for it
    assert len(samples[A]) == len(calls) <= 12 and len(samples[C]) == 3
    assert pending({k: v for k, v in samples.items()}, 0.01) == [] or len(calls) == 12
    assert decide(samples, 0.01).winner == A


def test_the_cap_bounds_the_rounds_and_an_unresolved_close_pair_is_a_tie():
    count = iter(range(100))

    def measure_round(keys):  # B alternates 2.5% faster and 3.5% slower: never resolved, 0.5% apart
        b = 97.5 if next(count) % 2 else 103.5
        return {k: 100.0 if k == A else b for k in keys}

    samples = measure_until_resolved(measure_round, [A, B], rounds=2, max_rounds=6, noise=0.01)
    assert len(samples[A]) == len(samples[B]) == 6
    decision = decide(samples, 0.01, default=Schedule.from_key(B))
    assert decision.tie and decision.winner == B and decision.rounds == 6
    assert decide(samples, 0.002, default=Schedule.from_key(B)).winner == A  # 0.5% is beyond a 0.2% noise


def test_a_failed_finalist_is_dropped():
    def measure_round(keys):
        return {k: None if k == B else 100.0 for k in keys}

    samples = measure_until_resolved(measure_round, [A, B], rounds=2, max_rounds=4, noise=0.01)
    assert samples[B] is None and samples[A] == [100.0, 100.0]
    assert decide(samples, 0.01).winner == A and decide(samples, 0.01).runner_up is None
    with pytest.raises(ValueError):
        measure_until_resolved(measure_round, [A], rounds=3, max_rounds=2, noise=0.01)


def test_a_tuned_winner_shows_its_margin_and_spread_in_the_table_and_summary(tmp_path):
    from farm.store.parquet import write_campaign_summary
    from farm.tuning.report import format_winners_table

    decision = dict(p20_ns=1990.0, p80_ns=2030.0, rounds=7, runner_up=B, runner_up_ns=2010.0, margin=0.004)
    w = WinnerRecord("t", "gemv", "m=8,n=8", "s", A, 2000.0, 5000.0, 2.5, **decision, margin_low=-0.002,
                     margin_high=0.009, tie=True)  # fmt: skip
    row = format_winners_table([w]).splitlines()[2]
    assert "1.99-2.03" in row and "tie +0.4% [-0.2, +0.9] (7 rounds)" in row
    paths = write_campaign_summary(tmp_path, {"id": 5}, [w], {"ok": 3})
    import json

    summary = json.loads(paths["summary.json"].read_text())["winners"][0]
    assert (summary["runner_up"], summary["margin"], summary["tie"], summary["p80_ns"]) == (B, 0.004, True, 2030.0)
    assert "runner_up" in paths["winners.csv"].read_text().splitlines()[0]


def test_a_tie_is_reported_only_with_a_margin_within_the_noise():
    """A finalist timed in three rounds while the leader's first rounds were slow pairs at
    -10.7% against it, yet has the larger median: not a tie, and the report says so with the
    margin of that same pair. The winner stays the leader."""
    leader, short, far = DEFAULT.key(), B, C
    samples = {leader: [110.0, 110.0, 110.0, 95.0, 95.0, 95.0, 95.0], short: [98.2] * 3, far: [130.0, 131.0, 129.0]}
    decision = decide(samples, noise=0.01, default=DEFAULT)
    assert (decision.winner, decision.runner_up) == (leader, short) and decision.tied == (leader,)
    assert not decision.tie and decision.margin == pytest.approx(98.2 / 110 - 1)  # -10.7%
    # a real tie: the margin reported is the tied pair's, whichever of the two a preference picks
    close = drifting({A: 100.0, B: 100.4, C: 112.0}, rounds=7, jitter=0.001, seed=3)
    for chosen in (A, B):
        d = decide(close, noise=0.01, default=Schedule.from_key(chosen))
        assert d.winner == chosen and d.tie and {d.winner, d.runner_up} == {A, B}
        assert abs(d.margin) <= 0.01 and d.margin_low <= d.margin <= d.margin_high
    for d in (decide(drifting({A: 100.0, B: 100.3}, 5, 0.001, seed=s), 0.01) for s in range(20)):
        assert d.tie == (abs(d.margin) <= 0.01)


def test_a_finalist_that_left_the_rounds_never_returns():
    """Rounds stay paired: a finalist dropped as clearly slower is not timed again when the
    others' later rounds slow down and its median becomes the least, so each finalist's
    medians are a prefix of the rounds."""
    count = iter(range(100))
    calls: list[list[str]] = []

    def measure_round(keys):  # C alternates 2.5% faster and 3.5% slower than A: never resolved
        calls.append(list(keys))
        index = next(count)
        a = 200.0 if index >= 3 else 100.0  # from round 3 on, A and C run at half speed
        times = {A: a, B: 120.0, C: a * (0.975 if index % 2 else 1.035)}
        return {k: times[k] for k in keys}

    samples = measure_until_resolved(measure_round, [A, B, C], rounds=3, max_rounds=10, noise=0.01)
    assert all(B not in call for call in calls[3:]) and len(samples[B]) == 3
    assert len(samples[A]) == len(calls)
