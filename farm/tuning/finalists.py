"""The final choice between close finalists, as pure functions over paired round measurements.

A re-measurement (a trial runner's `remeasure_rounds`, farm.tuning.engine) times the finalists
interleaved, one median of `reps` dispatches per finalist per round; round i of two
finalists ran back to back, so their ratio cancels the drift both saw. For each finalist
against the leader (the least median over rounds) we take the per-round ratios
`other / leader` and a distribution-free interval for their median (the sign-test interval:
order statistics chosen by the binomial(n, 1/2) distribution, `sign_interval`). With an
equivalence margin `noise` (the ratio band 1 +- noise that counts as "the same speed"):

- *slower*: the whole interval lies above 1 + noise;
- *tie*: the whole interval lies inside [1 - noise, 1 + noise];
- *unresolved* otherwise: `pending` names these, and the re-measurement adds rounds for the
  leader and them until none is left or `max_rounds` is reached (a finalist that leaves
  never returns, so round i of two finalists stays a pair); at the cap an unresolved
  finalist is a tie when its median ratio is within the band, both ways, else not.

Fewer rounds than the sign test needs for CONFIDENCE (`sign_rounds`: 5 at 0.9) decide only
by a wide margin: the interval must clear the band by EARLY_MARGIN on the verdict's side
(slower: above 1 + noise + EARLY_MARGIN). So the re-measurement may start with 3 rounds
(TuneConfig.rounds): a finalist already clearly slower stops there (the default schedule,
always a finalist, is often several times the best and the costliest to time), the leader
and close ones go on to the sign test's 5 rounds and past them only until separated or tied.
Why an interval and not the best median: docs/decisions/004-finalists-interval.md.

The winner is the leader unless it ties with others: then `prefer` picks among the tied
(leader included) without looking at their times, so two campaigns whose finalists tie pick
the same schedule: the previously stored winner if it is among them, else the kernel's
default schedule, else the *simplest*: the fewest knobs that differ from the default
schedule, then the smallest canonical key (`Schedule.key()`, sorted JSON) as a deterministic
last resort. The winner (farm.tuning.engine.winner_record) is a WinnerRecord carrying the
decision: runner-up, margin and its interval, timing quantiles over rounds, rounds, tie. The
runner-up is the finalist the winner was judged against (the leader when a tie chose another;
else the closest tied one, or the closest other when none tied, by paired ratio) and the
margin is that pair's median paired ratio - 1: `tie` only with a margin within the band.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from farm.gpu import Timing
from farm.schedule import Schedule

CONFIDENCE = 0.9  # coverage of the sign-test interval on the median ratio
# Beyond the noise band, the margin a verdict needs while there are fewer paired rounds than
# the sign test needs for CONFIDENCE: many times the jitter of paired ratios, so a wrong
# "slower" after 3 rounds would need that many errors of 4%, all alike.
EARLY_MARGIN = 0.04

Rounds = dict[str, list[float]]  # schedule key -> one median per round, rounds in order (a prefix)


def sign_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval for the median of `values`: (v[k-1], v[n-k]) of the sorted
    values with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) <= k-1) is at least
    `confidence`; (min, max) when even that falls short (fewer than 5 values at 0.9)."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    k, cdf = 1, 0.0
    for j in range(1, n // 2 + 1):
        cdf_j = cdf + math.comb(n, j - 1) / 2**n  # P(X <= j-1)
        if 1 - 2 * cdf_j < confidence:
            break
        k, cdf = j, cdf_j
    return ordered[k - 1], ordered[n - k]


def sign_rounds(confidence: float = CONFIDENCE) -> int:
    """The fewest values whose sign-test interval (min, max) covers the median with
    `confidence`: 1 - 2 / 2**n >= confidence (5 at 0.9)."""
    n = 1
    while 1 - 2 / 2**n < confidence:
        n += 1
    return n


@dataclass(frozen=True)
class Comparison:
    """One finalist against the leader: paired ratios other/leader, their median and interval."""

    key: str
    ratio: float
    low: float
    high: float
    rounds: int
    verdict: str  # "slower", "tie" or "unresolved"


def ratios(samples: Rounds, key: str, leader: str) -> list[float]:
    """Per-round ratios samples[key] / samples[leader] over the rounds both ran."""
    return [a / b for a, b in zip(samples[key], samples[leader], strict=False) if a > 0 and b > 0]


def leader_of(samples: Rounds) -> str:
    """The finalist with the least median over its rounds (ties: the first in `samples`' order)."""
    measured = {k: v for k, v in samples.items() if v}
    if not measured:
        raise ValueError("no finalist was measured")
    return min(measured, key=lambda k: statistics.median(measured[k]))


def compare(samples: Rounds, key: str, leader: str, noise: float, confidence: float = CONFIDENCE) -> Comparison:
    paired = ratios(samples, key, leader)
    if not paired:
        return Comparison(key, math.inf, math.inf, math.inf, 0, "slower")
    ratio = statistics.median(paired)
    low, high = sign_interval(paired, confidence)
    early = EARLY_MARGIN if len(paired) < sign_rounds(confidence) else 0.0  # too few rounds: a wide margin only
    if low > 1 + noise + early:
        verdict = "slower"
    elif low >= 1 - noise + early and high <= 1 + noise - early:
        verdict = "tie"
    else:
        verdict = "unresolved"
    return Comparison(key, ratio, low, high, len(paired), verdict)


def pending(samples: Rounds, noise: float, confidence: float = CONFIDENCE) -> list[str]:
    """The finalists that more rounds would help separate: the leader and every unresolved
    one (empty when each is clearly slower or tied)."""
    leader = leader_of(samples)
    others = [k for k in samples if k != leader and samples[k]]
    open_ = [k for k in others if compare(samples, k, leader, noise, confidence).verdict == "unresolved"]
    return [leader, *open_] if open_ else []


def measure_until_resolved(
    measure_round: Callable[[list[str]], dict[str, float | None]],
    keys: list[str],
    rounds: int,
    max_rounds: int,
    noise: float,
    confidence: float = CONFIDENCE,
) -> dict[str, list[float] | None]:
    """Run `rounds` rounds over all `keys`, then rounds over `pending` ones only until none
    is left or `max_rounds` rounds ran. `measure_round(keys)` times each key once, in the
    given order (rotated one place each round, so no finalist always runs first), and
    returns key -> median, None for a failure; a failed finalist is dropped (None in the result)."""
    if rounds < 1 or max_rounds < rounds:
        raise ValueError(f"need 1 <= rounds <= max_rounds, got {rounds}, {max_rounds}")
    samples: dict[str, list[float]] = {k: [] for k in keys}
    failed: set[str] = set()
    active = list(keys)
    for index in range(max_rounds):
        if index >= rounds:
            # only finalists still measured: one that left never returns, so every list stays
            # a prefix of the rounds and round i of two finalists is a pair
            live = {k: samples[k] for k in active if k not in failed}
            active = pending(live, noise, confidence) if any(live.values()) else []
            if not active:
                break
        shift = index % max(len(active), 1)
        order = [k for k in active[shift:] + active[:shift] if k not in failed]
        for key, value in measure_round(order).items():
            if value is None:
                failed.add(key)
            else:
                samples[key].append(float(value))
    return {k: (samples[k] if samples[k] and k not in failed else None) for k in keys}


def simplicity(schedule: Schedule, default: Schedule | None) -> tuple[int, str]:
    """Sort key for "simpler": knobs differing from the default schedule, then the canonical key."""
    if default is None:
        return (0, schedule.key())
    mine, base = schedule.as_dict(), default.as_dict()
    differing = sum(1 for name in set(mine) | set(base) if mine.get(name) != base.get(name))
    return (differing, schedule.key())


def prefer(tied: Sequence[str], stored: str | None = None, default: Schedule | None = None) -> str:
    """Among tied schedule keys: the stored winner, else the default, else the simplest."""
    if stored in tied:
        return stored
    if default is not None and default.key() in tied:
        return default.key()
    return min(tied, key=lambda k: simplicity(Schedule.from_key(k), default))


@dataclass(frozen=True)
class Decision:
    winner: str
    leader: str
    tie: bool
    tied: tuple[str, ...]
    rounds: int
    timings: dict[str, Timing] = field(default_factory=dict)
    runner_up: str | None = None
    margin: float | None = None  # runner-up / winner - 1, median over paired rounds (within noise if tie)
    margin_low: float | None = None  # the interval of that margin
    margin_high: float | None = None


def decide(
    samples: dict[str, list[float] | None],
    noise: float,
    stored: str | None = None,
    default: Schedule | None = None,
    confidence: float = CONFIDENCE,
) -> Decision:
    """The winner of a finished re-measurement (see the module docstring)."""
    live: Rounds = {k: v for k, v in samples.items() if v}
    leader = leader_of(live)
    against = {k: compare(live, k, leader, noise, confidence) for k in live if k != leader}
    tied = [leader] + [k for k, c in against.items() if _ties(c, compare(live, leader, k, noise, confidence), noise)]
    winner = prefer(tied, stored, default) if len(tied) > 1 else leader
    timings = {k: t for k, t in interleaved_timings(live).items() if t is not None}
    decision = Decision(winner, leader, len(tied) > 1, tuple(sorted(tied)), max(len(v) for v in live.values()), timings)
    if not against:
        return decision
    # The runner-up is the finalist the winner was judged against, and the margin that pair's
    # paired statistic, so `tie` and `margin` tell one story: a winner chosen among the tied
    # faces the leader (or, being the leader, the closest tied one); else the closest other.
    if winner != leader:
        runner_up = leader
    else:
        partners = [k for k in tied if k != leader] or list(against)
        runner_up = min(partners, key=lambda k: against[k].ratio)
    c = compare(live, runner_up, winner, noise, confidence)
    return dataclasses.replace(
        decision, runner_up=runner_up, margin=c.ratio - 1, margin_low=c.low - 1, margin_high=c.high - 1
    )


def _ties(other: Comparison, back: Comparison, noise: float) -> bool:
    """Whether a finalist ties with the leader: a tie verdict, or unresolved when the rounds ran
    out, with the median ratio within the noise band both ways (other/leader and leader/other,
    so the margin reported for the pair, whichever wins, is within it too)."""
    if other.verdict not in ("tie", "unresolved"):
        return False
    return abs(other.ratio - 1) <= noise and abs(back.ratio - 1) <= noise


def interleaved_timings(samples: dict[str, list[float] | None]) -> dict[str, Timing | None]:
    """{schedule key: Timing over its per-round medians} (None for a schedule that failed)."""
    return {k: Timing.from_samples(v, "interleaved") if v else None for k, v in samples.items()}
